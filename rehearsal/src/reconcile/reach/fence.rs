//! `fenced_by_resolver` and `fenced_by_trigger`: each fence layer alone
//! stopped a pre-flip runtime's old write.

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
}
