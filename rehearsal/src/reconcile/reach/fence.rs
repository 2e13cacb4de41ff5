//! `fenced_by_resolver` and `fenced_by_trigger`: each fence layer alone
//! stopped a pre-flip runtime's old write; `old_rotation_after_flip`: a
//! pre-flip leader's rotation ran against the flipped cursor at all.

use super::list;
use crate::observe::{FenceLayer, Observations, duration};

/// A pre-flip runtime (not a `fence` step's probe, which starts after
/// the flip) that died of `layer`'s refusal once a flip had run: that
/// layer, and no other, stood between its old write and the data.
/// Whether the write really changed nothing is for the fence rules
/// (late attempts, poisoned columns) to judge.
pub(super) fn fenced_by(layer: FenceLayer, obs: &Observations) -> (bool, String) {
    let Some(first_flip) = obs.flips.iter().map(|f| f.at_ms).min() else {
        return (false, "no flip ran".into());
    };
    let stopped: Vec<(&str, &str, FenceLayer)> = obs
        .processes
        .iter()
        .filter(|p| {
            p.role != "fence"
                && !p.killed
                && !crate::reconcile::release_line::flip_aware(&p.version)
        })
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

/// A pre-flip leader's rotation met the flipped cursor: the cursor
/// trigger stopped a pre-flip runtime, or a ring's columns left the
/// poison (-1, -1) under `ledger` authority after the flip. The second is
/// what a missing trigger lets through, so a detect cell for it reaches
/// its window exactly when the defect can show; a 0.6 rotator advances
/// only into a free next slot (slot 0, after -1), and while work waits
/// there it never tries, whatever the fence.
pub(super) fn old_rotation_after_flip(obs: &Observations) -> (bool, String) {
    let Some(first_flip) = obs.flips.iter().map(|f| f.at_ms).min() else {
        return (false, "no flip ran".into());
    };
    let (fenced, seen) = fenced_by(FenceLayer::Trigger, obs);
    if fenced {
        return (true, seen);
    }
    // The slot, not the generation: an old advance always moves the slot
    // to 0 or more, while a flip that poisons only the slot (a seeded
    // defect of its own) leaves the generation where it was.
    let ledger = || {
        obs.rings
            .iter()
            .filter(move |s| s.at_ms > first_flip && s.authority == "ledger")
    };
    // Columns a contract dropped cannot move: no old rotation reached them.
    let moved = ledger().find_map(|s| Some((s, s.column_slot.filter(|&slot| slot != -1)?)));
    if let Some((s, slot)) = moved {
        return (
            true,
            format!(
                "the {} ring's poisoned columns moved to (slot {slot}, generation {}) at {}, after the flip at {}",
                s.ring,
                s.column_generation.unwrap_or(-1),
                duration(s.at_ms),
                duration(first_flip)
            ),
        );
    }
    let watched = ledger().map(|s| s.at_ms).max();
    (
        false,
        match watched {
            Some(last) => format!(
                "no pre-flip rotation met the flipped cursor: {seen}, and every ring's cursor slot stayed poisoned from the flip at {} to the last sample at {}",
                duration(first_flip),
                duration(last)
            ),
            None => format!(
                "no ring was sampled under ledger authority after the flip at {}",
                duration(first_flip)
            ),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{flip, one, process};
    use crate::matrix::Reach;
    use crate::observe::Observations;

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
    fn an_old_rotation_is_reached_by_the_trigger_or_by_columns_that_left_the_poison() {
        use crate::observe::RingSample;
        let sample = |at_ms: u64, authority: &str, slot: i32, generation: i64| RingSample {
            at_ms,
            ring: "queue".into(),
            authority: authority.into(),
            column_slot: Some(slot),
            column_generation: Some(generation),
            ledger_generation: Some(2),
            ledger_slot: Some(2),
            ledger_rows: 3,
            ledger_gaps: 0,
        };
        let mut obs = Observations {
            rings: vec![
                sample(1_000, "columns", 2, 2),
                sample(6_000, "ledger", -1, -1),
            ],
            ..Observations::default()
        };
        let r = one(Reach::OldRotationAfterFlip, &obs, &[]);
        assert_eq!((r.reached, r.evidence.as_str()), (false, "no flip ran"));
        // The missed run of the stressed selftest: the columns stayed poisoned.
        obs.flips = vec![flip(5_700)];
        obs.rings.push(sample(73_000, "ledger", -1, -1));
        let r = one(Reach::OldRotationAfterFlip, &obs, &[]);
        assert!(!r.reached, "{r:?}");
        assert_eq!(
            r.evidence,
            "no pre-flip rotation met the flipped cursor: no pre-flip runtime met the fence, and every ring's cursor slot stayed poisoned from the flip at 5.7s to the last sample at 1m13s"
        );
        // Columns that moved before the flip, under columns authority after
        // it (a flip that did not commit), or only in their generation (a
        // flip that poisoned only the slot) prove nothing.
        for moved in [
            sample(5_000, "columns", 3, 3),
            sample(6_200, "columns", 3, 3),
            sample(6_400, "ledger", -1, 3),
        ] {
            obs.rings.push(moved);
            assert!(!one(Reach::OldRotationAfterFlip, &obs, &[]).reached);
        }
        // Moved off the poison after the flip: the old rotator ran.
        obs.rings.push(sample(9_800, "ledger", 0, 0));
        let r = one(Reach::OldRotationAfterFlip, &obs, &[]);
        assert!(r.reached, "{r:?}");
        assert!(
            r.evidence.starts_with(
                "the queue ring's poisoned columns moved to (slot 0, generation 0) at 9.8s"
            ),
            "{}",
            r.evidence
        );
        // Or the trigger stopped a pre-flip runtime (the clean build).
        obs.rings.pop();
        let mut old = process("previous-worker-1", "previous", "0.6.2", Some(1_000));
        old.exit_code = Some(1);
        old.error = Some("awa: advancing the queue ring cursor: ring cursor authority is ledger: old-style cursor write to awa.queue_ring_state rejected (SQLSTATE 55000)".into());
        obs.processes = vec![old];
        let r = one(Reach::OldRotationAfterFlip, &obs, &[]);
        assert!(r.reached, "{r:?}");
        assert!(
            r.evidence.contains("stopped by the cursor trigger"),
            "{}",
            r.evidence
        );
        // Nothing sampled after the flip: not reached, and it says so.
        let blind = Observations {
            flips: vec![flip(5_700)],
            ..Observations::default()
        };
        let r = one(Reach::OldRotationAfterFlip, &blind, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "no ring was sampled under ledger authority after the flip at 5.7s"
            )
        );
    }
}
