//! Rotation liveness: while a ring holds rows, its cursor keeps moving.
//!
//! ADR-040 lets rotation stand still for two reasons only: the whole ring
//! is empty (idle skip), or the slot it would open next still holds rows
//! that prune may not truncate because they are live (a ready entry, an
//! open claim, a held lease). A ring that holds rows, whose next slot
//! holds nothing live, and whose cursor does not move for a full wrap
//! while a maintenance leader able to rotate it is fresh has stopped
//! rotating: left alone, its rows are never pruned, terminal outcomes are
//! never archived, and a ring that fills up strands work.
//!
//! The monitor's [`LivenessSample`]s are each one snapshot; a run of them
//! counts only while every sample is eligible, the database answered
//! every tick in between (a PostgreSQL crash breaks the run), samples are
//! no further apart than [`max_gap_ms`] and no session waits on a lock
//! rotation can be behind (rotation and prune legitimately wait behind a
//! flip, a migration or a held partition), nor while the harness's own
//! `lock_ring` hold keeps the ring's partitions (a `deadlock` hold's
//! waits end within a fifth of a second, between the monitor's looks,
//! and under `--stress` its prunes lost every try for 8 s), nor while only leaders of the
//! previous release lead with attempts of stale or gone runtimes still to
//! rescue: a 0.6 leader rescues before it rotates, one transaction per
//! attempt, and after a kill or a PostgreSQL crash on a loaded machine
//! that pass took 8 s under `--stress cpu=2x` (a pace no release can
//! change; a leader of this release gets no such allowance). A tick that
//! comes late on a loaded machine (the monitor's 250 ms stretched past a
//! second) does not break a run: the generation is the same at both ends,
//! so the ring did not rotate in between.
//!
//! A stall is judged against the load inside its own window. When the
//! machine was squeezed while the ring stood still (the harness's own
//! pulse half a rotation late: CPU rehearse did not get), a leader whose
//! heartbeat stays fresh can still get too little CPU, or too slow a
//! database, to rotate on time: on docker at five cells on two cores a
//! clean ring stood 8.2 s against an 8 s bound. Such a stall is a finding
//! only past [`SQUEEZED_STRETCH`] times the bound (a release that stops
//! rotation stands still until the cell ends); shorter, it is
//! [`doubted`], and the cell cannot pass on it. The kernel's CPU pressure
//! is named beside the lateness but decides nothing: it counts every
//! runnable task, a niced build's as much as the cell's, and at 98% with
//! builds beside the run a seeded rotation defect stood 17 s while the
//! cell's pulse and heartbeats ran under 50 ms late. Nor do late
//! heartbeats: a runtime's heartbeat also waits on its own locks, so a
//! release whose leader blocks would stall rotation and excuse the stall.
//!
//! A stall while only leaders of the previous release led is held to the
//! same stretch: a 0.6 leader's pass does its promotions, cron, rescues
//! (one transaction each) and prunes (each waiting up to 2 s for its
//! lock) before it rotates, so under load its passes ran 3.5 s apart with
//! its cron 12 s behind, and a clean ring stood 8.2 s and 11.4 s (docker,
//! six cells on two cores, the harness's pulse on time, no lock wait
//! the monitor can see from 0.6's unnamed sessions). A release that stops
//! the previous release rotating on the new schema stands still past the
//! stretch; a leader of this release gets no such allowance.

use std::collections::BTreeMap;

use super::rules::{RECONCILE, phase_at};
use crate::matrix::{FindingRule, Timings};
use crate::observe::{self, Finding, LivenessSample, Observations, TickLoad};

/// The shortest stall worth a finding, whatever the rotation cadence.
const MIN_STALL_MS: u64 = 5_000;
/// Slots per ring in every schema this rehearsal knows.
const SLOTS: u64 = 8;
/// How many times its bound a ring must stand still in a squeezed window
/// to be a finding: the clean stalls seen under load stood at most 4% past
/// the bound, a seeded rotation defect 2.2 times it.
pub(super) const SQUEEZED_STRETCH: u64 = 2;

/// How long a ring may stand still with rows and nothing live in its way:
/// one full wrap of rotations, at least [`MIN_STALL_MS`].
pub(super) fn stall_after_ms(timings: &Timings) -> u64 {
    (timings.rotate_every.as_millis() * SLOTS).max(MIN_STALL_MS)
}

/// Two samples further apart than this break a run: half the stall
/// bound, so that a run of a stall's length rests on at least three
/// looks, however late the ticks came.
pub(super) fn max_gap_ms(stall_after_ms: u64) -> u64 {
    stall_after_ms / 2
}

/// A run of eligible samples of one ring at one generation.
#[derive(Clone, Copy, Debug)]
struct Run {
    from_ms: u64,
    to_ms: u64,
    generation: i64,
    slot: i32,
    /// The worst of each load figure over the run's samples.
    load: TickLoad,
    /// Every sample's fresh leaders were the previous release's.
    n1_led: bool,
}

impl Run {
    fn length(&self) -> u64 {
        self.to_ms - self.from_ms
    }

    fn add(&mut self, s: &LivenessSample) {
        self.to_ms = s.at_ms;
        self.n1_led &= n1_led(s);
        self.load.pulse_late_ms = self.load.pulse_late_ms.max(s.load.pulse_late_ms);
        self.load.beat_late_ms = self.load.beat_late_ms.max(s.load.beat_late_ms);
        self.load.cpu_pressure_pct = self.load.cpu_pressure_pct.max(s.load.cpu_pressure_pct);
    }

    /// Whether the machine was squeezed while the ring stood still: the
    /// harness's pulse half a rotation late.
    fn squeezed(&self, stall_after_ms: u64) -> bool {
        self.load.pulse_late_ms >= stall_after_ms / (2 * SLOTS)
    }

    /// A stall long enough to judge: past the bound on a machine that kept
    /// up under a leader of this release, past [`SQUEEZED_STRETCH`] times
    /// it in a squeezed window or while only the previous release led.
    fn judged(&self, stall_after_ms: u64) -> bool {
        let stretched = self.squeezed(stall_after_ms) || self.n1_led;
        !stretched || self.length() >= stall_after_ms * SQUEEZED_STRETCH
    }

    /// Why a stall short of the stretch was not judged, as a clause.
    fn unjudged_because(&self, stall_after_ms: u64) -> String {
        if self.squeezed(stall_after_ms) {
            format!("while the machine was squeezed ({})", self.load_text())
        } else {
            "while only the previous release's leader led (its pass rescues one attempt a \
             transaction and prunes before it rotates, at a pace no release can change)"
                .to_owned()
        }
    }

    /// `CPU pressure up to 98%, the harness's pulse up to 1.2s late`.
    fn load_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.load.cpu_pressure_pct {
            parts.push(format!("CPU pressure up to {p}%"));
        }
        if self.load.pulse_late_ms > 0 {
            parts.push(format!(
                "the harness's pulse up to {} late",
                observe::duration(self.load.pulse_late_ms)
            ));
        }
        if self.load.beat_late_ms > 0 {
            parts.push(format!(
                "heartbeats up to {} late",
                observe::duration(self.load.beat_late_ms)
            ));
        }
        parts.join(", ")
    }
}

/// Each ring's longest stall of either kind, and how many of that kind.
#[derive(Debug, Default)]
struct Stalls {
    /// Stalls long enough to judge (see [`Run::judged`]).
    judged: BTreeMap<String, (Run, u64)>,
    /// Stalls past the bound, in a squeezed window, short of the stretch.
    doubted: BTreeMap<String, (Run, u64)>,
}

/// Each ring a `lock_ring` hold of the harness kept locked, and when (ms
/// since the cell started, from the hold step's start to the hold's end):
/// rotation and prune of it wait behind the harness by design.
fn held_by_harness(obs: &Observations) -> Vec<(&'static str, u64, u64)> {
    obs.partition_holds
        .iter()
        .filter_map(|h| {
            let from = obs.phases.iter().find(|p| p.step == h.step)?.start_ms;
            Some((h.ring.ring().name(), from, h.at_ms))
        })
        .collect()
}

/// Whether a maintenance leader that can rotate under `authority` is fresh.
fn can_rotate(s: &LivenessSample) -> bool {
    if s.authority == "ledger" {
        s.flip_aware_leaders > 0
    } else {
        s.leaders > 0
    }
}

/// Whether the only fresh leaders are the previous release's and they
/// have a rescue pass of stale attempts to work through first.
fn n1_rescuing(s: &LivenessSample) -> bool {
    n1_led(s) && s.rescue_pending > 0
}

/// Whether the only fresh leaders are the previous release's.
fn n1_led(s: &LivenessSample) -> bool {
    s.flip_aware_leaders == 0
}

/// The longest stall of each ring longer than `stall_after_ms`, and how
/// many such stalls there were, judged or doubted by the load in each.
fn stalls(obs: &Observations, stall_after_ms: u64) -> Stalls {
    let held = held_by_harness(obs);
    let mut ordered: Vec<&LivenessSample> = obs.liveness.iter().collect();
    ordered.sort_by_key(|s| s.at_ms);
    let rings: Vec<&str> = {
        let mut names: Vec<&str> = ordered
            .iter()
            .flat_map(|s| s.rings.iter().map(|r| r.ring.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    };
    let mut out = Stalls::default();
    for ring in rings {
        let mut worst: [Option<(Run, u64)>; 2] = [None, None];
        let mut close = |run: Option<Run>| {
            if let Some(run) = run.filter(|r| r.length() >= stall_after_ms) {
                let kind = usize::from(!run.judged(stall_after_ms));
                let (best, n) = worst[kind].get_or_insert((run, 0));
                *n += 1;
                if run.length() > best.length() {
                    *best = run;
                }
            }
        };
        let mut run: Option<Run> = None;
        let mut prev_ms: Option<u64> = None;
        for s in &ordered {
            let gap_ok = !s.after_outage
                && prev_ms.is_none_or(|p| s.at_ms - p <= max_gap_ms(stall_after_ms));
            prev_ms = Some(s.at_ms);
            let here = s.rings.iter().find(|r| r.ring == ring);
            let eligible = here.filter(|r| {
                gap_ok
                    && r.busy
                    && !r.next_live
                    && can_rotate(s)
                    && s.lock_waits == 0
                    && !n1_rescuing(s)
                    && !held
                        .iter()
                        .any(|&(r, from, to)| r == ring && (from..=to).contains(&s.at_ms))
            });
            match (run.as_mut(), eligible) {
                (Some(current), Some(r)) if current.generation == r.generation => {
                    current.add(s);
                }
                (_, eligible) => {
                    close(run.take());
                    run = eligible.map(|r| Run {
                        from_ms: s.at_ms,
                        to_ms: s.at_ms,
                        generation: r.generation,
                        slot: r.slot,
                        load: s.load,
                        n1_led: n1_led(s),
                    });
                }
            }
        }
        close(run);
        let [judged, doubted] = worst;
        if let Some(found) = judged {
            out.judged.insert(ring.to_owned(), found);
        }
        if let Some(found) = doubted {
            out.doubted.insert(ring.to_owned(), found);
        }
    }
    out
}

/// Why the cell cannot pass on its rings: the longest stall past the
/// bound that a squeezed window leaves unjudged, with the load in it;
/// `None` when every stall (if any) was judged.
pub fn doubted(obs: &Observations, stall_after_ms: u64) -> Option<String> {
    let (ring, (run, _)) = stalls(obs, stall_after_ms)
        .doubted
        .into_iter()
        .max_by_key(|(_, (run, _))| run.length())?;
    Some(format!(
        "the {ring} ring stood at generation {} for {} (from {} to {}), past its {} bound, {}: a stall \
         under {} in such a window may be the load's, so rotation was not judged",
        run.generation,
        observe::duration(run.length()),
        observe::duration(run.from_ms),
        observe::duration(run.to_ms),
        observe::duration(stall_after_ms),
        run.unjudged_because(stall_after_ms),
        observe::duration(stall_after_ms * SQUEEZED_STRETCH),
    ))
}

/// One `ring_stalled` finding per ring that stood still too long, and
/// one per ring a `rings_pruned_back` check found holding old rows.
pub(super) fn findings(obs: &Observations, stall_after_ms: u64) -> Vec<Finding> {
    let mut out = stalled(obs, stall_after_ms);
    out.extend(not_pruned_back(obs));
    out
}

/// Rings that kept rows written before the workload was done.
fn not_pruned_back(obs: &Observations) -> Vec<Finding> {
    obs.pruned_back
        .iter()
        .flat_map(|p| p.rings.iter().map(move |r| (p, r)))
        .filter(|(_, r)| r.rows_left > 0)
        .map(|(p, r)| Finding {
            rule: FindingRule::RingStalled,
            phase: phase_at(obs, p.from_ms).unwrap_or(RECONCILE).to_owned(),
            message: format!(
                "the {} ring did not rotate and prune back once the work was done: {} of generation {} or older \
                 {} left {} after the workload's last job, with {} (a ring gets a wrap of rotations and a few more, \
                 and may stand still for {} between two){}",
                r.ring,
                observe::count(r.rows_left.unsigned_abs(), "row"),
                r.through_generation,
                observe::agree(r.rows_left.unsigned_abs(), "was", "were"),
                observe::duration(p.waited_ms),
                r.progress(),
                observe::duration(p.bound_ms),
                r.left_rows(),
            ),
            ids: vec![r.through_generation],
            count: r.rows_left.unsigned_abs(),
            // Seen when the check stopped waiting for the ring to prune back.
            at_ms: Some(p.from_ms + p.waited_ms),
        })
        .collect()
}

/// Rings that held rows but stood still for a wrap.
fn stalled(obs: &Observations, stall_after_ms: u64) -> Vec<Finding> {
    stalls(obs, stall_after_ms)
        .judged
        .into_iter()
        .map(|(ring, (run, n))| Finding {
            rule: FindingRule::RingStalled,
            phase: phase_at(obs, run.from_ms).unwrap_or(RECONCILE).to_owned(),
            message: format!(
                "the {ring} ring held rows but stood at generation {} (slot {}) for {}, from {} to {}, \
                 while the slot after it held nothing live and a maintenance leader able to rotate it was fresh: \
                 rotation stopped advancing ({} of over {})",
                run.generation,
                run.slot,
                observe::duration(run.length()),
                observe::duration(run.from_ms),
                observe::duration(run.to_ms),
                observe::count(n, "such stall"),
                observe::duration(stall_after_ms),
            ),
            ids: vec![run.generation],
            count: n,
            at_ms: Some(run.from_ms),
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::observe::RingLiveness;

    /// A sample of the claim ring alone.
    pub(in crate::reconcile) fn at(
        at_ms: u64,
        generation: i64,
        busy: bool,
        next_live: bool,
    ) -> LivenessSample {
        LivenessSample {
            at_ms,
            authority: "ledger".into(),
            leaders: 1,
            flip_aware_leaders: 1,
            lock_waits: 0,
            after_outage: false,
            rescue_pending: 0,
            load: TickLoad::default(),
            rings: vec![RingLiveness {
                ring: "claim".into(),
                slot: (generation % 8) as i32,
                generation,
                busy,
                next_live,
            }],
        }
    }

    fn obs(liveness: Vec<LivenessSample>) -> Observations {
        Observations {
            liveness,
            ..Default::default()
        }
    }

    /// Samples every 250 ms from `from_ms` to `to_ms`.
    fn ticks(from_ms: u64, to_ms: u64) -> impl Iterator<Item = u64> {
        (from_ms..=to_ms).step_by(250)
    }

    #[test]
    fn a_ring_that_rotates_every_second_is_live() {
        let samples = ticks(0, 30_000)
            .map(|t| at(t, (t / 1_000) as i64, true, false))
            .collect();
        assert_eq!(findings(&obs(samples), 8_000), []);
    }

    #[test]
    fn a_stall_while_the_harness_held_the_ring_is_not_judged() {
        // The claim ring stands at generation 5 from 5 s to 17 s.
        let stood = || {
            obs(ticks(0, 17_000)
                .map(|t| at(t, (t / 1_000).min(5) as i64, true, false))
                .collect())
        };
        assert_eq!(findings(&stood(), 8_000).len(), 1, "the baseline is found");
        // A lock_ring hold of the claim ring from step 3 at 4 s to 16 s:
        // what is left of the stall outside it is under the bound.
        let with_hold = |ring: crate::matrix::HeldRing| {
            let mut o = stood();
            o.phases = vec![crate::observe::Phase {
                step: 3,
                name: "hold".into(),
                detail: String::new(),
                start_ms: 4_000,
                end_ms: 16_000,
                outcome: crate::observe::StepOutcome::Ok,
            }];
            o.partition_holds = vec![crate::observe::PartitionHold {
                at_ms: 16_000,
                ..crate::observe::PartitionHold::new(3, ring)
            }];
            o
        };
        let held = with_hold(crate::matrix::HeldRing::Claim);
        assert_eq!(findings(&held, 8_000), []);
        assert_eq!(doubted(&held, 8_000), None);
        // A hold of another ring excuses nothing of this one.
        assert_eq!(
            findings(&with_hold(crate::matrix::HeldRing::Lease), 8_000).len(),
            1
        );
    }

    #[test]
    fn a_ring_that_holds_rows_and_stops_rotating_is_stalled() {
        // Rotates for 5 s, then stands at generation 5 for 12 s.
        let samples = ticks(0, 17_000)
            .map(|t| at(t, (t / 1_000).min(5) as i64, true, false))
            .collect();
        let found = findings(&obs(samples), 8_000);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, FindingRule::RingStalled);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[5][..], 1));
        // Seen from the first sample that stood still.
        assert_eq!(found[0].at_ms, Some(5_000));
        assert!(
            found[0].message.starts_with(
                "the claim ring held rows but stood at generation 5 (slot 5) for 12.0s, from 5.0s to 17.0s"
            ),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn standing_still_for_a_reason_is_not_a_stall() {
        let still = |f: &dyn Fn(&mut LivenessSample)| {
            let samples: Vec<LivenessSample> = ticks(0, 20_000)
                .map(|t| {
                    let mut s = at(t, 3, true, false);
                    f(&mut s);
                    s
                })
                .collect();
            findings(&obs(samples), 8_000)
        };
        // The baseline does stall, so each case below tests its reason.
        assert_eq!(still(&|_| {}).len(), 1);
        // Idle: nothing to rotate.
        assert_eq!(still(&|s| s.rings[0].busy = false), []);
        // Live work in the next slot: rotation must wait for it.
        assert_eq!(still(&|s| s.rings[0].next_live = true), []);
        // No fresh leader (a leaderless gap, a suspended leader).
        assert_eq!(
            still(&|s| {
                s.leaders = 0;
                s.flip_aware_leaders = 0;
            }),
            []
        );
        // Under ledger authority only a flip-aware leader can rotate (an
        // N-1 leader across a forced flip meets the fence).
        assert_eq!(still(&|s| s.flip_aware_leaders = 0), []);
        assert_eq!(
            still(&|s| {
                s.authority = "columns".into();
                s.leaders = 0;
            }),
            []
        );
        // A session waits on a lock: rotation may be waiting behind it.
        assert_eq!(still(&|s| s.lock_waits = 1), []);
        // Only a 0.6 leader leads, with stale attempts to rescue first
        // (its rescue pass runs before it rotates, one transaction each).
        assert_eq!(
            still(&|s| {
                s.authority = "columns".into();
                s.flip_aware_leaders = 0;
                s.rescue_pending = 64;
            }),
            []
        );
        // A leader of this release gets no such allowance.
        assert_eq!(still(&|s| s.rescue_pending = 64).len(), 1);
        // Under columns authority any fresh leader rotates.
        assert_eq!(
            still(&|s| {
                s.authority = "columns".into();
                s.flip_aware_leaders = 0;
            })
            .len(),
            1
        );
    }

    #[test]
    fn a_short_stall_while_only_the_previous_release_led_is_doubted() {
        // The claim ring stands at generation 3 from 0 to `still_ms` under
        // columns authority, a leader of the previous release (`n1`) or
        // of this one leading.
        let stand = |still_ms: u64, n1: bool| {
            let samples = ticks(0, still_ms)
                .map(|t| LivenessSample {
                    authority: "columns".into(),
                    flip_aware_leaders: u64::from(!n1),
                    ..at(t, 3, true, false)
                })
                .collect();
            let o = obs(samples);
            (findings(&o, 8_000), doubted(&o, 8_000))
        };
        let (found, doubt) = stand(11_500, true);
        assert_eq!(found, vec![]);
        assert!(
            doubt.as_deref().is_some_and(|d| d.starts_with(
                "the claim ring stood at generation 3 for 11.5s (from 0ms to 11.5s), past its 8.0s bound, \
                 while only the previous release's leader led"
            )),
            "{doubt:?}"
        );
        // A leader of this release: judged at the bound.
        let (found, doubt) = stand(8_250, false);
        assert_eq!((found.len(), doubt), (1, None));
        // Past twice the bound the previous release's stall is found too.
        let (found, doubt) = stand(16_000, true);
        assert_eq!((found.len(), doubt), (1, None));
        // One sample led by this release judges the whole run.
        let samples = ticks(0, 11_500)
            .map(|t| LivenessSample {
                authority: "columns".into(),
                flip_aware_leaders: u64::from(t == 6_000),
                ..at(t, 3, true, false)
            })
            .collect();
        assert_eq!(findings(&obs(samples), 8_000).len(), 1);
    }

    #[test]
    fn a_gap_in_the_samples_or_a_short_pause_breaks_the_run() {
        // 6 s still, 2 s in which the database did not answer (a crash),
        // 6 s still: no run of 8 s.
        let crashed = |t: u64| {
            let mut s = at(t, 4, true, false);
            s.after_outage = t == 8_000;
            s
        };
        let samples: Vec<_> = ticks(0, 6_000).chain(ticks(8_000, 14_000)).collect();
        assert_eq!(
            findings(&obs(samples.iter().map(|&t| crashed(t)).collect()), 8_000),
            []
        );
        // The same samples with every tick answered: the ring stood still throughout.
        let answered = samples.iter().map(|&t| at(t, 4, true, false)).collect();
        assert_eq!(findings(&obs(answered), 8_000).len(), 1);
        // 6 s, then no look for more than half the bound, then 6 s: broken.
        let unseen = ticks(0, 6_000)
            .chain(ticks(10_250, 16_250))
            .map(|t| at(t, 4, true, false))
            .collect();
        assert_eq!(findings(&obs(unseen), 8_000), []);
        // Two stalls; the longest is reported, both are counted.
        let samples = ticks(0, 9_000)
            .map(|t| at(t, 1, true, false))
            .chain(ticks(9_250, 20_000).map(|t| at(t, 2, true, false)))
            .collect();
        let found = findings(&obs(samples), 8_000);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[2][..], 2));
    }

    #[test]
    fn a_short_stall_in_a_squeezed_window_is_doubted_and_a_long_one_found() {
        // The claim ring stands at generation 3 from 0 to `still_ms`, with
        // `load` on every sample.
        let stand = |still_ms: u64, load: TickLoad| {
            let samples = ticks(0, still_ms)
                .map(|t| LivenessSample {
                    load,
                    ..at(t, 3, true, false)
                })
                .collect();
            let o = obs(samples);
            (findings(&o, 8_000), doubted(&o, 8_000))
        };
        let pulse = TickLoad {
            pulse_late_ms: 1_200,
            ..TickLoad::default()
        };
        let beats = TickLoad {
            beat_late_ms: 600,
            ..TickLoad::default()
        };
        let pressure = TickLoad {
            cpu_pressure_pct: Some(98),
            ..TickLoad::default()
        };
        // A machine that kept up: 8.25 s is a finding, nothing doubted.
        let (found, doubt) = stand(8_250, TickLoad::default());
        assert_eq!((found.len(), doubt), (1, None));
        // Busy below the bar: still judged. The kernel's pressure alone
        // decides nothing (a niced build beside the run raises it), nor do
        // late heartbeats (a leader blocked on a lock delays its own).
        let busy = TickLoad {
            pulse_late_ms: 400,
            beat_late_ms: 400,
            cpu_pressure_pct: Some(99),
        };
        assert_eq!(stand(8_250, busy).0.len(), 1);
        assert_eq!(stand(8_250, pressure).0.len(), 1);
        assert_eq!(stand(8_250, beats).0.len(), 1);
        // Squeezed by the harness's pulse: doubted, not found.
        let (found, doubt) = stand(8_250, pulse);
        assert_eq!((found, doubt.is_some()), (vec![], true));
        let (_, doubt) = stand(8_250, pulse);
        assert_eq!(
            doubt.as_deref(),
            Some(
                "the claim ring stood at generation 3 for 8.2s (from 0ms to 8.2s), past its 8.0s bound, \
                 while the machine was squeezed (the harness's pulse up to 1.2s late): a stall under 16.0s \
                 in such a window may be the load's, so rotation was not judged"
            )
        );
        // Past twice the bound, squeezed or not, it is a finding.
        let (found, doubt) = stand(16_000, pulse);
        assert_eq!((found.len(), doubt), (1, None));
        // The load anywhere inside the run counts: one late tick in the
        // middle squeezes the whole window.
        let samples = ticks(0, 8_250)
            .map(|t| LivenessSample {
                load: if t == 4_000 {
                    pulse
                } else {
                    TickLoad::default()
                },
                ..at(t, 3, true, false)
            })
            .collect();
        let o = obs(samples);
        assert_eq!(
            (findings(&o, 8_000), doubted(&o, 8_000).is_some()),
            (vec![], true)
        );
    }

    #[test]
    fn late_ticks_on_a_loaded_machine_still_show_a_stall() {
        // The monitor's ticks come 1,250 ms apart (six cells on two cores)
        // while the ring stands at generation 0 for 18 s.
        let samples = (0..15u64)
            .map(|i| at(800 + i * 1_250, 0, true, false))
            .collect();
        let found = findings(&obs(samples), 8_000);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].ids, [0]);
    }

    #[test]
    fn rows_left_after_the_work_is_done_are_a_stall() {
        use crate::observe::{PrunedBack, RingPrunedBack};
        let check = |claim_left: i64| Observations {
            pruned_back: vec![PrunedBack {
                step: 9,
                from_ms: 30_000,
                waited_ms: 12_000,
                bound_ms: 12_000,
                rings: ["queue", "claim", "lease"]
                    .map(|ring| RingPrunedBack {
                        ring: ring.into(),
                        through_generation: 41,
                        rows_left: if ring == "claim" { claim_left } else { 0 },
                        generation: 44,
                        still_ms: 12_000,
                        left: Vec::new(),
                    })
                    .to_vec(),
            }],
            ..Default::default()
        };
        assert_eq!(findings(&check(0), 8_000), []);
        let found = findings(&check(120), 8_000);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].rule, found[0].ids.as_slice(), found[0].count),
            (FindingRule::RingStalled, &[41][..], 120)
        );
        // Seen when the check gave up waiting: 30 s plus the 12 s it waited.
        assert_eq!(found[0].at_ms, Some(42_000));
        assert!(
            found[0].message.starts_with(
                "the claim ring did not rotate and prune back once the work was done: 120 rows of generation 41 or older"
            ),
            "{}",
            found[0].message
        );
        assert!(
            found[0]
                .message
                .contains("with 3 rotations past it, then stood still for 12.0s"),
            "{}",
            found[0].message
        );

        // The rows the check read are named.
        let mut named = check(120);
        named.pruned_back[0].rings[1].left = vec![crate::observe::LeftRow {
            table: "claim_receipts".into(),
            job_id: 8_245,
            run_lease: Some(2),
            slot: 3,
            generation: 40,
            holder: Some("current-worker-1".into()),
            heartbeat_age_ms: None,
            job: None,
        }];
        let found = findings(&named, 8_000);
        assert!(
            found[0].message.ends_with(
                "between two); the oldest as the check ended: job 8245 run 2 in claim_receipts slot 3 \
                 (generation 40), held by current-worker-1; the job has left awa.jobs"
            ),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn the_threshold_is_a_wrap_of_rotations_and_at_least_five_seconds() {
        use crate::matrix::Duration;
        let mut t = Timings {
            heartbeat: Duration::from_millis(200),
            stale_after: Duration::from_millis(1_500),
            rescue_every: Duration::from_millis(250),
            rotate_every: Duration::from_millis(1_000),
            deadline: Duration::from_millis(1_000),
            drain_timeout: Duration::from_secs(60),
            budget: crate::matrix::DEFAULT_BUDGET,
        };
        assert_eq!(stall_after_ms(&t), 8_000);
        t.rotate_every = Duration::from_millis(100);
        assert_eq!(stall_after_ms(&t), 5_000);
    }
}
