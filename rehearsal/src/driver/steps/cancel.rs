//! `cancel`: an operator cancels running and available jobs with an
//! artifact's `awa job cancel`, one command a job, while the fleet runs.
//!
//! Each cancel is recorded with the command's answer (`was_live`): a job
//! an operator cancelled while it was live must end cancelled, whatever
//! its mode was designed for, and a cancel that was accepted but changed
//! nothing is a finding of reconciliation (`cancel_ignored`).

use std::time::Duration;

use awa_runtime::events::Event;
use awa_runtime::workload::Mode;

use super::super::ledger::Role;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::CommandEnd;
use crate::matrix::CancelStep;
use crate::observe::{CancelRecord, StepOutcome};

/// How long one `awa job cancel` may take.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the step looks for jobs in the states it is to cancel.
const PICK_PATIENCE: Duration = Duration::from_secs(5);

/// `cancel`: pick `running` running jobs (sleep jobs first, which run
/// long enough for the cancel to land while they run) and `available`
/// ones (the newest, least likely to be claimed first), then cancel
/// each with the artifact's binary. Picking fewer than asked within a
/// few seconds is a step failure: the cell did not do what it says.
pub(super) async fn cancel_jobs(cx: &mut StepCtx<'_>, s: &CancelStep) -> Result<Done, Abort> {
    let version = cx.version_of(&s.artifact);
    let picked = pick(cx, s).await?;
    let mut lines = Vec::new();
    for &(job_id, state) in &picked {
        lines.push(cancel_one(cx, s, &version, job_id, state).await?);
    }
    let running = picked.iter().filter(|p| p.1 == "running").count();
    let available = picked.len() - running;
    if running < s.running as usize || available < s.available as usize {
        cx.state.fail(format!(
            "found {running} of {} running and {available} of {} available jobs to cancel within {}s",
            s.running,
            s.available,
            PICK_PATIENCE.as_secs()
        ));
    }
    let detail = format!(
        "{} ({version}) as an operator: {}",
        s.artifact,
        if lines.is_empty() {
            "nothing to cancel".to_owned()
        } else {
            lines.join(", ")
        }
    );
    Ok(if picked.is_empty() {
        Done::with(StepOutcome::Failed, detail)
    } else {
        Done::ok(detail)
    })
}

/// The jobs to cancel, (id, state): up to `running` running ones (sleep
/// jobs first) and `available` ones, looked for again until there are
/// enough or [`PICK_PATIENCE`] ran out.
async fn pick(cx: &mut StepCtx<'_>, s: &CancelStep) -> Result<Vec<(i64, &'static str)>, Abort> {
    let sleep = Some(Mode::Sleep.name());
    let mut picked: Vec<(i64, &'static str)> = Vec::new();
    let until = std::time::Instant::now() + PICK_PATIENCE;
    for (state, want, mode) in [
        ("running", s.running, sleep),
        ("available", s.available, None),
    ] {
        if want == 0 {
            continue;
        }
        loop {
            let ids = cx
                .probe
                .cancel_candidates(state, mode, i64::from(want))
                .await
                .map_err(|e| Abort::Harness(format!("could not pick jobs to cancel: {e}")))?;
            if ids.len() >= want as usize || std::time::Instant::now() >= until {
                picked.extend(ids.into_iter().map(|id| (id, state)));
                break;
            }
            cx.cancel().sleep(Duration::from_millis(100)).await?;
        }
    }
    Ok(picked)
}

/// Cancels job `job_id` with the artifact's binary, records what its
/// answer said, and words it; no answer is a step failure.
async fn cancel_one(
    cx: &mut StepCtx<'_>,
    s: &CancelStep,
    version: &str,
    job_id: i64,
    state: &str,
) -> Result<String, Abort> {
    let id = cx
        .run_command(
            &s.artifact,
            Role::Operator,
            vec!["job".into(), "cancel".into(), job_id.to_string()],
            Vec::new(),
            CANCEL_TIMEOUT,
        )
        .await?;
    let end = cx.proc(id, CommandEnd::of);
    let was_live = end.output.iter().find_map(|e| match e {
        Event::Cancelled(c) if c.job_id == job_id => Some(c.was_live),
        _ => None,
    });
    cx.state.obs.cancels.push(CancelRecord {
        job_id,
        state: state.to_owned(),
        artifact: s.artifact.clone(),
        version: version.to_owned(),
        was_live,
        at_ms: cx.ms(),
    });
    Ok(match was_live {
        Some(true) => format!("job {job_id} ({state}) cancelled"),
        Some(false) => format!("job {job_id} ({state}) had already ended"),
        None => {
            cx.state.fail(format!(
                "{} printed no answer to cancelling job {job_id} ({})",
                end.name, end.why
            ));
            format!("job {job_id} ({state}): no answer")
        }
    })
}
