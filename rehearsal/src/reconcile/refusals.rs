//! Refusals are prompt: a refusal the cell asked for (a migrate below
//! the floor, a flip while an N-1 runtime is fresh, a fenced binary) or
//! met by design (a binary-first start on the N-1 schema) is decided
//! before any write, from what the database already says, so it has no
//! reason to wait. A refusal that comes only after about the runtime's
//! patience for transient failures was retried as if the database might
//! change its mind: a permanent error taken for a transient one, a guard
//! that polls instead of answering. The cell's steps only check that the
//! refusal came; this rule checks when.
//!
//! The bound is a third of the patience every process of the cell is
//! given (`AWA_DB_PATIENCE`, pinned by the driver: [`DB_PATIENCE`]). A
//! refusal retried even once as transient takes the whole patience,
//! three times the bound; a prompt one takes a process start and a few
//! statements, well under a second on the process backend and a few
//! seconds for a container on a busy machine. A wait the command
//! declares before giving up (a blocked flip's lock timeout) is added to
//! the bound.
//!
//! [`DB_PATIENCE`]: crate::driver::env::DB_PATIENCE

use std::time::Duration;

use super::rules::phase_at;
use crate::matrix::FindingRule;
use crate::observe::{self, Finding, Observations, RefusalTiming, StepOutcome};

/// The longest a refusal may take, its declared wait left out: a third
/// of the processes' patience for transient database failures.
pub(super) fn bound_ms(patience: Duration) -> u64 {
    u64::try_from(patience.as_millis() / 3).unwrap_or(u64::MAX)
}

/// One `slow_refusal` finding for each refusal that took longer than
/// `bound_ms` (beyond the wait it declares).
pub(super) fn findings(obs: &Observations, bound_ms: u64) -> Vec<Finding> {
    obs.refusals
        .iter()
        .filter(|r| r.took_ms() > bound_ms)
        .map(|r| slow(obs, r, bound_ms))
        .collect()
}

fn slow(obs: &Observations, r: &RefusalTiming, bound_ms: u64) -> Finding {
    let declared = if r.declared_wait_ms > 0 {
        format!(
            " ({} of it the wait it declares)",
            observe::duration(r.declared_wait_ms)
        )
    } else {
        String::new()
    };
    let took = observe::duration(r.answered_ms.saturating_sub(r.requested_ms));
    let message = if r.outcome == StepOutcome::Failed {
        // A permanent database error met while running (a revoked privilege).
        format!(
            "step {} ({}): {} ({}) stopped on a permanent database error {took} after it met it, more than the {} a permanent error may take to surface (a third of the processes' patience for transient database failures): it was retried as if a reconnect could cure it",
            r.step,
            r.kind,
            r.process,
            r.version,
            observe::duration(bound_ms),
        )
    } else {
        format!(
            "step {} ({}): {} ({}) {} {} after it was asked{declared}, more than the {} a refusal decided before any write may take (a third of the processes' patience for transient database failures): it was retried or waited on before it answered",
            r.step,
            r.kind,
            r.process,
            r.version,
            r.outcome.word(),
            took,
            observe::duration(bound_ms),
        )
    };
    Finding {
        rule: FindingRule::SlowRefusal,
        phase: phase_at(obs, r.requested_ms)
            .unwrap_or(r.kind.as_str())
            .to_owned(),
        message,
        ids: Vec::new(),
        count: 1,
        at_ms: Some(r.answered_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(kind: &str, requested_ms: u64, answered_ms: u64, declared: u64) -> RefusalTiming {
        RefusalTiming {
            step: 5,
            kind: kind.into(),
            process: format!("current-{kind}-1"),
            version: "0.7.0".into(),
            outcome: if declared > 0 {
                StepOutcome::Blocked
            } else {
                StepOutcome::Refused
            },
            requested_ms,
            answered_ms,
            declared_wait_ms: declared,
        }
    }

    fn observed(refusals: Vec<RefusalTiming>) -> Observations {
        Observations {
            refusals,
            ..Observations::default()
        }
    }

    #[test]
    fn the_bound_is_a_third_of_the_patience_the_driver_pins() {
        assert_eq!(bound_ms(crate::driver::env::DB_PATIENCE), 10_000);
    }

    #[test]
    fn a_refusal_that_waited_out_the_patience_is_a_slow_refusal() {
        let bound = bound_ms(crate::driver::env::DB_PATIENCE);
        // A migrate refused 30.4 s after it started: a permanent error
        // retried for the whole patience before it gave up.
        let obs = observed(vec![refusal("migrate", 12_000, 42_400, 0)]);
        let found = findings(&obs, bound);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.rule, FindingRule::SlowRefusal);
        assert_eq!(f.phase, "migrate");
        assert_eq!(f.at_ms, Some(42_400));
        assert!(
            f.message.starts_with(
                "step 5 (migrate): current-migrate-1 (0.7.0) refused 30.4s after it was asked, more than the 10.0s"
            ),
            "{}",
            f.message
        );
    }

    #[test]
    fn prompt_refusals_and_a_blocked_flips_declared_wait_are_no_finding() {
        let bound = bound_ms(crate::driver::env::DB_PATIENCE);
        let obs = observed(vec![
            refusal("migrate", 12_000, 12_350, 0),
            refusal("fence", 30_000, 31_900, 0),
            // Blocked after its 5 s lock timeout and 400 ms more.
            refusal("flip", 20_000, 25_400, 5_000),
            // Just at the bound.
            refusal("fleet", 1_000, 11_000, 0),
        ]);
        assert_eq!(findings(&obs, bound), []);
    }

    #[test]
    fn a_permanent_error_retried_for_the_patience_is_found_and_a_prompt_one_is_not() {
        let bound = bound_ms(crate::driver::env::DB_PATIENCE);
        let revoked = |answered_ms| RefusalTiming {
            outcome: StepOutcome::Failed,
            process: "current-worker-3".into(),
            ..refusal("revoke", 20_000, answered_ms, 0)
        };
        assert_eq!(findings(&observed(vec![revoked(20_180)]), bound), []);
        let found = findings(&observed(vec![revoked(50_400)]), bound);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].message,
            "step 5 (revoke): current-worker-3 (0.7.0) stopped on a permanent database error 30.4s after it met it, more than the 10.0s a permanent error may take to surface (a third of the processes' patience for transient database failures): it was retried as if a reconnect could cure it"
        );
    }

    #[test]
    fn a_blocked_flip_slow_beyond_its_declared_wait_is_found() {
        let bound = bound_ms(crate::driver::env::DB_PATIENCE);
        let obs = observed(vec![refusal("flip", 20_000, 55_100, 5_000)]);
        let found = findings(&obs, bound);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].message.contains(
                "blocked 35.1s after it was asked (5.0s of it the wait it declares), more"
            ),
            "{}",
            found[0].message
        );
    }
}
