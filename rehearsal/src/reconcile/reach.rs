//! Reachability: whether a cell reached the interleavings it declares
//! (`reach = [...]` in matrix.toml), read from what it observed.
//!
//! A cell written for a race proves nothing when the race did not happen:
//! a flip "under a frozen leader" that ran after the leader was let go, a
//! "takeover" in which nobody took over. Such a run is inconclusive,
//! naming what was missing (and `--retries` tries it again with a new
//! seed); a reached interleaving is one of the cell's proved sentences.

use crate::matrix::{Reach, Until};
use awa_runtime::events::Event;

use crate::observe::{FenceLayer, Observations, duration};

/// One declared interleaving and what the run showed of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reached {
    /// The interleaving.
    pub reach: Reach,
    /// Whether the run reached it.
    pub reached: bool,
    /// The evidence, or what was seen instead.
    pub evidence: String,
}

/// Each of `wanted` judged against `obs`; `claimed_by` are the versions
/// whose workers started attempts.
pub fn reached(wanted: &[Reach], obs: &Observations, claimed_by: &[String]) -> Vec<Reached> {
    wanted
        .iter()
        .map(|&reach| {
            let (reached, evidence) = match reach {
                Reach::MixedClaims => mixed_claims(claimed_by),
                Reach::LeaderFrozenAcrossFlip => frozen_across_flip(obs),
                Reach::LeaderTakeover => takeover(obs),
                Reach::RescuedByCurrent => rescued_by_current(obs),
                Reach::LateResultDuringRerun => late_result_during_rerun(obs),
                Reach::FencedByResolver => fenced_by(FenceLayer::Resolver, obs),
                Reach::FencedByTrigger => fenced_by(FenceLayer::Trigger, obs),
                Reach::SlotZeroFree => slot_zero_free_at_flip(obs),
                Reach::PruneMetHeldPartition => prune_met_held_partition(obs),
            };
            Reached {
                reach,
                reached,
                evidence,
            }
        })
        .collect()
}

/// Why the cell is inconclusive for want of an interleaving, if it is.
pub fn unreached(wanted: &[Reach], obs: &Observations, claimed_by: &[String]) -> Option<String> {
    let missed: Vec<String> = reached(wanted, obs, claimed_by)
        .into_iter()
        .filter(|r| !r.reached)
        .map(|r| format!("{} ({})", r.reach.name(), r.evidence))
        .collect();
    (!missed.is_empty()).then(|| {
        format!(
            "the cell did not reach what it exists for: {}",
            missed.join("; ")
        )
    })
}

fn mixed_claims(claimed_by: &[String]) -> (bool, String) {
    match claimed_by {
        [] => (false, "no worker started an attempt".into()),
        [one] => (false, format!("only {one} workers started attempts")),
        many => (
            true,
            format!("workers of {} started attempts", many.join(" and ")),
        ),
    }
}

fn frozen_across_flip(obs: &Observations) -> (bool, String) {
    let leaders: Vec<_> = obs.suspensions.iter().filter(|s| s.leader).collect();
    for flip in &obs.flips {
        if let Some(s) = leaders
            .iter()
            .find(|s| s.from_ms <= flip.at_ms && s.to_ms.is_none_or(|to| flip.at_ms <= to))
        {
            let until = s.to_ms.map_or("the end".to_owned(), duration);
            return (
                true,
                format!(
                    "the flip at {} ran while {} ({}, the leader) was stopped, from {} to {until}",
                    duration(flip.at_ms),
                    s.process,
                    s.version,
                    duration(s.from_ms)
                ),
            );
        }
    }
    let seen = match (leaders.is_empty(), obs.flips.is_empty()) {
        (true, _) => "no leader was held stopped".to_owned(),
        (false, true) => "no flip ran".to_owned(),
        (false, false) => format!(
            "flips at {} and the leader stopped {}",
            list(obs.flips.iter().map(|f| duration(f.at_ms))),
            list(leaders.iter().map(|s| format!(
                "from {} to {}",
                duration(s.from_ms),
                s.to_ms.map_or("the end".to_owned(), duration)
            )))
        ),
    };
    (false, seen)
}

fn takeover(obs: &Observations) -> (bool, String) {
    // (victim, when) of every kill or suspension of the leader.
    let faults: Vec<(&str, u64)> = obs
        .kills
        .iter()
        .filter(|k| k.role == "leader")
        .map(|k| (k.process.as_str(), k.at_ms))
        .chain(
            obs.suspensions
                .iter()
                .filter(|s| s.leader)
                .map(|s| (s.process.as_str(), s.from_ms)),
        )
        .collect();
    if faults.is_empty() {
        return (false, "no leader was killed or suspended".into());
    }
    for (victim, at) in &faults {
        if let Some(p) = obs
            .processes
            .iter()
            .find(|p| p.name != *victim && p.leader_at_ms.is_some_and(|t| t > *at))
        {
            return (
                true,
                format!(
                    "{} ({}) led from {}, after {victim} was stopped at {}",
                    p.name,
                    p.version,
                    duration(p.leader_at_ms.unwrap_or_default()),
                    duration(*at)
                ),
            );
        }
    }
    (
        false,
        format!(
            "no other runtime reported leadership after {}",
            list(
                faults
                    .iter()
                    .map(|(v, at)| format!("{v} at {}", duration(*at)))
            )
        ),
    )
}

fn rescued_by_current(obs: &Observations) -> (bool, String) {
    let mut current: Vec<&str> = obs
        .processes
        .iter()
        .filter(|p| p.artifact == crate::matrix::CURRENT)
        .map(|p| p.version.as_str())
        .collect();
    current.sort_unstable();
    current.dedup();
    let counts = obs.census.last().map(|c| &c.by_version);
    let rescued: u64 = current
        .iter()
        .filter_map(|v| counts?.get(*v)?.get("rescued"))
        .sum();
    if rescued > 0 {
        (
            true,
            format!(
                "runtimes of current ({}) rescued {rescued} attempts",
                current.join(", ")
            ),
        )
    } else {
        (
            false,
            format!(
                "no runtime of current ({}) rescued an attempt",
                if current.is_empty() {
                    "none ran".to_owned()
                } else {
                    current.join(", ")
                }
            ),
        )
    }
}

fn late_result_during_rerun(obs: &Observations) -> (bool, String) {
    let late = &obs.late_results;
    match (&late.first, late.during_rerun) {
        (Some(first), n) if n > 0 => (
            true,
            format!(
                "{n} results of rescued attempts came back while the job ran again elsewhere (first: {first})"
            ),
        ),
        _ => (
            false,
            format!(
                "no result of a rescued attempt came back while the job ran again ({} came back after the rerun had ended)",
                late.after_rerun
            ),
        ),
    }
}

/// A pre-flip runtime (not a `fence` step's probe, which starts after
/// the flip) that died of `layer`'s refusal once a flip had run: that
/// layer, and no other, stood between its old write and the data.
/// Whether the write really changed nothing is for the fence rules
/// (late attempts, poisoned columns) to judge.
/// A hold until `until` whose condition held before it ran out.
fn until_held(until: Until, obs: &Observations) -> (bool, String) {
    let holds: Vec<_> = obs.untils.iter().filter(|u| u.until == until).collect();
    if let Some(h) = holds.iter().find(|h| h.held) {
        return (
            true,
            format!("{until} held at {} (step {})", duration(h.at_ms), h.step),
        );
    }
    let seen = if holds.is_empty() {
        format!("no hold until {until} ran")
    } else {
        format!(
            "the hold until {until} ran out at {} without it",
            list(holds.iter().map(|h| duration(h.at_ms)))
        )
    };
    (false, seen)
}

/// Slot 0 free when it matters: at the flip, not only when the hold saw
/// it. A flip takes a moment to start after the hold lets it go (most of
/// a second in a container), and a ring that entered slot 0 meanwhile
/// fills it again: the flip's own report of each ring's cursor is the
/// evidence, since a ring whose cursor is at slot 0 writes there.
fn slot_zero_free_at_flip(obs: &Observations) -> (bool, String) {
    let (held, evidence) = until_held(Until::SlotZeroFree, obs);
    let Some(hold) = obs
        .untils
        .iter()
        .find(|u| u.until == Until::SlotZeroFree && u.held)
    else {
        return (held, evidence);
    };
    let Some(flip) = obs.flips.iter().find(|f| f.at_ms >= hold.at_ms) else {
        return (false, format!("{evidence}, but no flip ran after it"));
    };
    let rings: Vec<&awa_runtime::store::authority::RingFlip> = flip
        .output
        .iter()
        .filter_map(|e| match e {
            Event::Flipped(f) => Some(f.rings.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    if rings.is_empty() {
        return (
            false,
            format!(
                "{evidence}, but the flip at {} reported no ring",
                duration(flip.at_ms)
            ),
        );
    }
    let at_zero: Vec<&str> = rings
        .iter()
        .filter(|r| r.columns_slot == 0)
        .map(|r| r.ring.as_str())
        .collect();
    if at_zero.is_empty() {
        return (
            true,
            format!(
                "{evidence}, and the flip at {} found every ring past slot 0 ({})",
                duration(flip.at_ms),
                list(
                    rings
                        .iter()
                        .map(|r| format!("{} in slot {}", r.ring, r.columns_slot))
                )
            ),
        );
    }
    (
        false,
        format!(
            "{evidence}, but by the flip at {} the {} ring had entered slot 0 again",
            duration(flip.at_ms),
            list(at_zero.iter().map(|r| (*r).to_owned()))
        ),
    )
}

/// A `lock_ring` hold that saw a prune's lock request wait on its
/// partitions and give up while they were still held.
fn prune_met_held_partition(obs: &Observations) -> (bool, String) {
    let holds = &obs.partition_holds;
    if let Some(h) = holds.iter().find(|h| h.gave_up > 0) {
        return (
            true,
            format!(
                "{} of {} waiting on the {} ring's held partitions (step {}) gave up while they were held, the first at {}",
                h.gave_up,
                crate::observe::count(u64::from(h.waits), "prune lock request"),
                h.ring,
                h.step,
                h.first_gave_up_ms
                    .map_or("an unknown time".to_owned(), duration)
            ),
        );
    }
    let seen = if holds.is_empty() {
        "no hold with lock_ring ran".to_owned()
    } else {
        format!(
            "no prune lock request gave up on the held partitions ({})",
            list(holds.iter().map(|h| format!(
                "the {} ring held {} in step {}, {} waited and got it once let go",
                h.ring,
                crate::observe::count(u64::from(h.holds), "time"),
                h.step,
                crate::observe::count(u64::from(h.waits), "prune lock request"),
            )))
        )
    };
    (false, seen)
}

fn fenced_by(layer: FenceLayer, obs: &Observations) -> (bool, String) {
    let Some(first_flip) = obs.flips.iter().map(|f| f.at_ms).min() else {
        return (false, "no flip ran".into());
    };
    let stopped: Vec<(&str, &str, FenceLayer)> = obs
        .processes
        .iter()
        .filter(|p| p.role != "fence" && !p.killed && !super::runtimes::flip_aware(&p.version))
        .filter_map(|p| {
            let error = p.error.as_deref()?;
            Some((p.name.as_str(), error, FenceLayer::refusing(error)?))
        })
        .collect();
    if let Some((name, error, _)) = stopped.iter().find(|s| s.2 == layer) {
        return (
            true,
            format!(
                "{name} was stopped by {} after the flip at {}: {error}",
                layer.name(),
                duration(first_flip)
            ),
        );
    }
    let seen = if stopped.is_empty() {
        "no pre-flip runtime met the fence".to_owned()
    } else {
        format!(
            "pre-flip runtimes were stopped by other layers: {}",
            list(
                stopped
                    .iter()
                    .map(|(n, _, l)| format!("{n} by {}", l.name()))
            )
        )
    };
    (false, seen)
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{FlipMode, Outcome};
    use crate::observe::{CensusSample, FlipRecord, KillRecord, SuspensionRecord};

    fn flip(at_ms: u64) -> FlipRecord {
        FlipRecord {
            holder_ages: Vec::new(),
            mode: FlipMode::Manual,
            expected: Outcome::Ok,
            exit_code: Some(0),
            at_ms,
            output: vec![],
        }
    }

    fn suspended(leader: bool, from_ms: u64, to_ms: Option<u64>) -> SuspensionRecord {
        SuspensionRecord {
            process: "previous-worker-1".into(),
            version: "0.6.2".into(),
            leader,
            from_ms,
            to_ms,
        }
    }

    use crate::report::fixture::worker_process as process;

    fn one(reach: Reach, obs: &Observations, claimed_by: &[String]) -> Reached {
        reached(&[reach], obs, claimed_by).remove(0)
    }

    #[test]
    fn a_late_result_counts_only_while_the_job_ran_again() {
        let mut obs = Observations::default();
        obs.late_results.after_rerun = 27;
        let r = one(Reach::LateResultDuringRerun, &obs, &[]);
        assert!(!r.reached);
        assert_eq!(
            r.evidence,
            "no result of a rescued attempt came back while the job ran again (27 came back after the rerun had ended)"
        );
        obs.late_results.during_rerun = 3;
        obs.late_results.first = Some("job 101 by defective_finish-worker-1".into());
        assert!(one(Reach::LateResultDuringRerun, &obs, &[]).reached);
    }

    #[test]
    fn slot_zero_free_is_reached_only_by_a_hold_whose_condition_held() {
        use crate::observe::UntilRecord;
        let mut obs = Observations::default();
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (false, "no hold until slot_zero_free ran")
        );
        obs.untils.push(UntilRecord {
            step: 5,
            until: Until::SlotZeroFree,
            held: false,
            at_ms: 21_000,
        });
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "the hold until slot_zero_free ran out at 21.0s without it"
            )
        );
        obs.untils[0].held = true;
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "slot_zero_free held at 21.0s (step 5), but no flip ran after it"
            )
        );
    }

    #[test]
    fn a_held_partition_is_met_only_by_a_prune_that_gave_up_while_it_was_held() {
        use crate::matrix::HeldRing;
        use crate::observe::PartitionHold;
        let mut obs = Observations::default();
        let r = one(Reach::PruneMetHeldPartition, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (false, "no hold with lock_ring ran")
        );
        // Prunes came, but each waited out the hold and got the lock.
        obs.partition_holds.push(PartitionHold {
            step: 3,
            ring: HeldRing::Queue,
            holds: 4,
            waits: 2,
            gave_up: 0,
            first_gave_up_ms: None,
            at_ms: 12_000,
        });
        let r = one(Reach::PruneMetHeldPartition, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "no prune lock request gave up on the held partitions (the queue ring held 4 times in step 3, 2 prune lock requests waited and got it once let go)"
            )
        );
        obs.partition_holds[0].waits = 5;
        obs.partition_holds[0].gave_up = 3;
        obs.partition_holds[0].first_gave_up_ms = Some(4_250);
        let r = one(Reach::PruneMetHeldPartition, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                true,
                "3 of 5 prune lock requests waiting on the queue ring's held partitions (step 3) gave up while they were held, the first at 4.2s"
            )
        );
    }

    fn flipped_at(at_ms: u64, slots: &[(&str, i32)]) -> FlipRecord {
        let rings = slots
            .iter()
            .map(|&(ring, slot)| awa_runtime::store::authority::RingFlip {
                ring: ring.into(),
                columns_slot: slot,
                columns_generation: 8,
                ledger_slot: slot,
                ledger_generation: 8,
                backfilled: 0,
            })
            .collect();
        FlipRecord {
            holder_ages: Vec::new(),
            output: vec![Event::Flipped(awa_runtime::events::Flipped {
                rings,
                ..Default::default()
            })],
            ..flip(at_ms)
        }
    }

    #[test]
    fn slot_zero_free_counts_only_when_the_flip_found_no_ring_in_slot_0() {
        use crate::observe::UntilRecord;
        let mut obs = Observations::default();
        obs.untils.push(UntilRecord {
            step: 5,
            until: Until::SlotZeroFree,
            held: true,
            at_ms: 21_000,
        });
        // The flip took long enough to start that the claim ring went round
        // into slot 0 again: the stale rotation's window was gone.
        obs.flips = vec![flipped_at(
            21_000,
            &[("queue", 5), ("claim", 0), ("lease", 6)],
        )];
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "slot_zero_free held at 21.0s (step 5), but by the flip at 21.0s the claim ring had entered slot 0 again"
            )
        );
        obs.flips = vec![flip(21_000)];
        assert!(!one(Reach::SlotZeroFree, &obs, &[]).reached);
        // A flip before the hold is not the one the hold let go.
        obs.flips = vec![
            flipped_at(3_000, &[("queue", 5)]),
            flipped_at(21_000, &[("queue", 5), ("claim", 3), ("lease", 6)]),
        ];
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert!(r.reached, "{r:?}");
        assert_eq!(
            r.evidence,
            "slot_zero_free held at 21.0s (step 5), and the flip at 21.0s found every ring past slot 0 (queue in slot 5, claim in slot 3, lease in slot 6)"
        );
    }

    #[test]
    fn a_fence_layer_is_reached_only_by_a_pre_flip_runtime_it_stopped() {
        const RESOLVER: &str = "awa: claiming jobs: ring cursor authority is ledger: the legacy cursor resolver awa.ring_cursor(claim) is fenced (SQLSTATE 55000)";
        const TRIGGER: &str = "awa: advancing the queue ring cursor: ring cursor authority is ledger: old-style cursor write to awa.queue_ring_state rejected (SQLSTATE 55000)";
        let mut old = process("previous-worker-1", "previous", "0.6.2", Some(1_000));
        old.exit_code = Some(1);
        old.error = Some(TRIGGER.into());
        let mut obs = Observations {
            processes: vec![old],
            ..Observations::default()
        };
        let r = one(Reach::FencedByTrigger, &obs, &[]);
        assert_eq!((r.reached, r.evidence.as_str()), (false, "no flip ran"));
        obs.flips = vec![flip(4_000)];
        let r = one(Reach::FencedByTrigger, &obs, &[]);
        assert!(r.reached, "{r:?}");
        assert!(
            r.evidence.starts_with(
                "previous-worker-1 was stopped by the cursor trigger after the flip at 4.0s"
            ),
            "{}",
            r.evidence
        );
        let r = one(Reach::FencedByResolver, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "pre-flip runtimes were stopped by other layers: previous-worker-1 by the cursor trigger"
            )
        );
        obs.processes[0].error = Some(RESOLVER.into());
        assert!(one(Reach::FencedByResolver, &obs, &[]).reached);
        // A flip-aware runtime, a fence probe or a killed process proves no layer.
        obs.processes[0].version = "0.7.0".into();
        assert!(!one(Reach::FencedByResolver, &obs, &[]).reached);
        obs.processes[0].version = "0.6.2".into();
        obs.processes[0].role = "fence".into();
        assert!(!one(Reach::FencedByResolver, &obs, &[]).reached);
    }

    #[test]
    fn mixed_claims_needs_two_versions() {
        let obs = Observations::default();
        assert!(!one(Reach::MixedClaims, &obs, &["0.7.0".into()]).reached);
        assert!(one(Reach::MixedClaims, &obs, &["0.6.2".into(), "0.7.0".into()]).reached);
    }

    #[test]
    fn a_flip_after_the_leader_was_let_go_is_not_a_flip_under_a_frozen_leader() {
        let mut obs = Observations {
            flips: vec![flip(12_000)],
            suspensions: vec![suspended(true, 5_000, Some(9_000))],
            ..Observations::default()
        };
        let r = one(Reach::LeaderFrozenAcrossFlip, &obs, &[]);
        assert!(!r.reached);
        assert_eq!(
            r.evidence,
            "flips at 12.0s and the leader stopped from 5.0s to 9.0s"
        );
        obs.suspensions = vec![suspended(true, 5_000, Some(14_000))];
        let r = one(Reach::LeaderFrozenAcrossFlip, &obs, &[]);
        assert!(r.reached, "{r:?}");
        // A stopped worker that did not lead does not count.
        obs.suspensions = vec![suspended(false, 5_000, None)];
        assert!(!one(Reach::LeaderFrozenAcrossFlip, &obs, &[]).reached);
        assert_eq!(
            unreached(&[Reach::LeaderFrozenAcrossFlip], &obs, &[]).as_deref(),
            Some(
                "the cell did not reach what it exists for: leader_frozen_across_flip (no leader was held stopped)"
            )
        );
    }

    #[test]
    fn a_takeover_is_another_runtime_leading_after_the_leader_was_stopped() {
        let mut obs = Observations {
            kills: vec![KillRecord {
                process: "previous-worker-1".into(),
                version: "0.6.2".into(),
                role: "leader".into(),
                at_ms: 6_000,
                in_flight: vec![],
            }],
            processes: vec![
                process("previous-worker-1", "previous", "0.6.2", Some(1_000)),
                process("current-worker-1", "current", "0.7.0", Some(2_000)),
            ],
            ..Observations::default()
        };
        assert!(!one(Reach::LeaderTakeover, &obs, &[]).reached);
        obs.processes[1].leader_at_ms = Some(8_000);
        assert!(one(Reach::LeaderTakeover, &obs, &[]).reached);
        assert!(!one(Reach::LeaderTakeover, &Observations::default(), &[]).reached);
    }

    #[test]
    fn rescued_by_current_reads_the_rescues_of_currents_versions() {
        let mut obs = Observations {
            processes: vec![
                process("previous-worker-1", "previous", "0.6.2", None),
                process("current-worker-1", "current", "0.7.0", None),
            ],
            census: vec![CensusSample {
                at_ms: 10_000,
                by_version: [("0.6.2".to_owned(), [("rescued".to_owned(), 5)].into())].into(),
                fresh_runtimes: Default::default(),
                delta_rows: 0,
                lock_waits: 0,
            }],
            ..Observations::default()
        };
        assert!(!one(Reach::RescuedByCurrent, &obs, &[]).reached);
        obs.census[0]
            .by_version
            .insert("0.7.0".into(), [("rescued".to_owned(), 2)].into());
        let r = one(Reach::RescuedByCurrent, &obs, &[]);
        assert!(r.reached);
        assert_eq!(r.evidence, "runtimes of current (0.7.0) rescued 2 attempts");
        assert_eq!(unreached(&[Reach::RescuedByCurrent], &obs, &[]), None);
    }
}
