//! Reconciliation's place in the event stream: each finished cell is
//! judged as it arrives, and the verdict follows it in the stream.

use crate::stream::RunEvent;

/// The verdict on `event`, when it is a finished cell: the
/// [`RunEvent::CellJudged`] that follows it.
pub fn judged(event: &RunEvent) -> Option<RunEvent> {
    let RunEvent::CellFinished(run) = event else {
        return None;
    };
    let step_failures: Vec<String> = run
        .observations
        .step_failures
        .iter()
        .map(ToString::to_string)
        .collect();
    // Findings stay in the report, but a fault that did not fire leaves
    // the cell unjudged.
    let harness_error = run
        .harness_error
        .clone()
        .or_else(|| super::unfired_faults(&run.observations));
    let judgement = super::judge(
        &run.plan.expect,
        &run.findings,
        &step_failures,
        harness_error.as_deref(),
    );
    Some(RunEvent::CellJudged {
        index: run.index,
        cell: run.plan.name.clone(),
        verdict: judgement.verdict,
        detection: judgement.detection,
        reason: judgement.reason,
        harness_error,
    })
}
