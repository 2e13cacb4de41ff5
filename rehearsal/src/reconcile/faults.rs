//! Faults must fire: a fault step without evidence that it did what it
//! declares leaves the cell unjudged.
//!
//! A kill that found its worker idle, a crash that landed after the
//! migration committed, a refusal for some other reason than the one the
//! step declares: the cell then did not rehearse what it is for, so its
//! verdict is `inconclusive` with the reason, never `pass` (nor `fail`:
//! the release was not put to the test).

use crate::observe::{FaultRecord, Observations};

/// Why the cell is inconclusive because of its faults, if it is.
pub fn unfired_faults(obs: &Observations) -> Option<String> {
    let missing: Vec<&FaultRecord> = obs.faults.iter().filter(|f| !f.fired).collect();
    let first = missing.first()?;
    let mut reason = format!(
        "a fault did not do what it declares: step {} ({}): {}",
        first.step, first.fault, first.evidence
    );
    if missing.len() > 1 {
        reason.push_str(&format!(" (and {} more)", missing.len() - 1));
    }
    Some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: usize, fired: bool, evidence: &str) -> FaultRecord {
        FaultRecord {
            step,
            fault: "kill worker of previous".into(),
            fired,
            evidence: evidence.into(),
        }
    }

    #[test]
    fn faults_with_evidence_leave_the_verdict_alone() {
        let obs = Observations {
            faults: vec![record(4, true, "interrupted 3 attempts in flight")],
            ..Default::default()
        };
        assert_eq!(unfired_faults(&obs), None);
        assert_eq!(unfired_faults(&Observations::default()), None);
    }

    #[test]
    fn a_fault_without_evidence_says_which_and_why() {
        let obs = Observations {
            faults: vec![
                record(4, true, "interrupted 3 attempts in flight"),
                record(
                    9,
                    false,
                    "SIGKILLed previous-worker-2 with no attempt in flight",
                ),
                record(11, false, "the crash landed after the migration committed"),
            ],
            ..Default::default()
        };
        assert_eq!(
            unfired_faults(&obs).unwrap(),
            "a fault did not do what it declares: step 9 (kill worker of previous): \
             SIGKILLed previous-worker-2 with no attempt in flight (and 1 more)"
        );
    }
}
