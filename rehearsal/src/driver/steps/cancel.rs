//! `cancel`: an operator cancels running and available jobs with an
//! artifact's `awa job cancel`, one command a job, while the fleet runs.
//!
//! Each cancel is recorded with the command's answer (`was_live`): a job
//! an operator cancelled while it was live must end cancelled, whatever
//! its mode was designed for, and a cancel that was accepted but changed
//! nothing is a finding of reconciliation (`cancel_ignored`). The step
//! proves its effect: it counts only cancels that met a live job, and
//! says so as a fault record (unfired when too few did).

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
/// How long the step looks for a job in the state it is to cancel.
const PICK_PATIENCE: Duration = Duration::from_secs(5);
/// How many cancels the step may spend per job it is to cancel live: a
/// job picked running can end before the operator's command (a process,
/// a container) gets to it, and the step then picks another.
const TRIES_PER_JOB: usize = 3;

/// `cancel`: cancel `running` running jobs (sleep jobs first, which run
/// long enough for the cancel to land while they run) and `available`
/// ones (the newest, least likely to be claimed first) with the
/// artifact's binary, one command a job, each picked just before its
/// command runs. A cancel that finds its job already ended did not do
/// what the step declares, so the step picks another, up to
/// [`TRIES_PER_JOB`] cancels a job. Finding no job to pick within a few
/// seconds is a step failure; cancels that all found their jobs ended
/// leave the step's fault unfired (the cell is then inconclusive, never
/// judged on a cancel that never met a live job).
pub(super) async fn cancel_jobs(cx: &mut StepCtx<'_>, s: &CancelStep) -> Result<Done, Abort> {
    let version = cx.version_of(&s.artifact);
    let sleep = Some(Mode::Sleep.name());
    let mut lines = Vec::new();
    for (state, want, mode) in [
        ("running", s.running, sleep),
        ("available", s.available, None),
    ] {
        if want == 0 {
            continue;
        }
        let tally = cancel_live(cx, s, &version, (state, mode), want as usize, &mut lines).await?;
        tally.judge(cx, s, state, want as usize);
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
    Ok(if lines.is_empty() {
        Done::with(StepOutcome::Failed, detail)
    } else {
        Done::ok(detail)
    })
}

/// What the cancels of one state came to.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    /// Cancels the command answered live.
    landed: usize,
    /// Cancels that found their job already ended.
    ended: usize,
    /// Whether the step stopped for want of a job to pick.
    none_to_pick: bool,
}

impl Tally {
    /// A step failure when no job could be picked at all; otherwise the
    /// step's fault, fired when every job asked for was cancelled live.
    fn judge(&self, cx: &mut StepCtx<'_>, s: &CancelStep, state: &str, want: usize) {
        let tried = self.landed + self.ended;
        if tried == 0 {
            cx.state.fail(format!(
                "found none of {want} {state} jobs to cancel within {}s",
                PICK_PATIENCE.as_secs()
            ));
            return;
        }
        let fault = format!("cancel {want} {state} jobs as {}", s.artifact);
        cx.state
            .record_fault(fault, self.fired(want), self.evidence(state, want));
    }

    /// Whether every job asked for was cancelled while live.
    fn fired(&self, want: usize) -> bool {
        self.landed >= want
    }

    /// The fault's evidence in words.
    fn evidence(&self, state: &str, want: usize) -> String {
        let mut text = format!(
            "{} of {want} {state} jobs cancelled while live",
            self.landed
        );
        if self.ended > 0 {
            text.push_str(&format!(
                "; {} cancel(s) found their job already ended before the command got to it",
                self.ended
            ));
        }
        if self.landed < want {
            text.push_str(&if self.none_to_pick {
                format!(
                    "; no other {state} job to pick within {}s",
                    PICK_PATIENCE.as_secs()
                )
            } else {
                format!("; out of tries ({TRIES_PER_JOB} a job)")
            });
        }
        text
    }
}

/// Cancels jobs in `state` (of `mode` first) one at a time, each picked
/// just before its command runs and never picked twice, until `want`
/// were cancelled live, the tries ran out, or none could be picked.
async fn cancel_live(
    cx: &mut StepCtx<'_>,
    s: &CancelStep,
    version: &str,
    (state, mode): (&'static str, Option<&str>),
    want: usize,
    lines: &mut Vec<String>,
) -> Result<Tally, Abort> {
    let mut tally = Tally::default();
    let mut tried: Vec<i64> = Vec::new();
    while tally.landed < want && tried.len() < want * TRIES_PER_JOB {
        let Some(job_id) = pick(cx, state, mode, &tried).await? else {
            tally.none_to_pick = true;
            break;
        };
        tried.push(job_id);
        let (line, was_live) = cancel_one(cx, s, version, job_id, state).await?;
        lines.push(line);
        match was_live {
            Some(true) => tally.landed += 1,
            Some(false) => tally.ended += 1,
            // No answer: a step failure of its own (see cancel_one).
            None => {}
        }
    }
    Ok(tally)
}

/// A job in `state` (of `mode` first, the newest) not in `tried`, looked
/// for again until one turns up or [`PICK_PATIENCE`] ran out.
async fn pick(
    cx: &mut StepCtx<'_>,
    state: &str,
    mode: Option<&str>,
    tried: &[i64],
) -> Result<Option<i64>, Abort> {
    let until = std::time::Instant::now() + PICK_PATIENCE;
    loop {
        let ids = cx
            .probe
            .cancel_candidates(state, mode, tried.len() as i64 + 1)
            .await
            .map_err(|e| Abort::Harness(format!("could not pick jobs to cancel: {e}")))?;
        if let Some(id) = ids.into_iter().find(|id| !tried.contains(id)) {
            return Ok(Some(id));
        }
        if std::time::Instant::now() >= until {
            return Ok(None);
        }
        cx.cancel().sleep(Duration::from_millis(100)).await?;
    }
}

/// Cancels job `job_id` with the artifact's binary, records what its
/// answer said, and words it with the answer (`None`: no answer, a step
/// failure).
async fn cancel_one(
    cx: &mut StepCtx<'_>,
    s: &CancelStep,
    version: &str,
    job_id: i64,
    state: &str,
) -> Result<(String, Option<bool>), Abort> {
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
    let line = match was_live {
        Some(true) => format!("job {job_id} ({state}) cancelled"),
        Some(false) => format!("job {job_id} ({state}) had already ended"),
        None => {
            cx.state.fail(format!(
                "{} printed no answer to cancelling job {job_id} ({})",
                end.name, end.why
            ));
            format!("job {job_id} ({state}): no answer")
        }
    };
    Ok((line, was_live))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancels_that_all_found_their_jobs_ended_leave_the_fault_unfired_and_say_why() {
        // The docker run that missed defect-cancel-ignores-running: three
        // running sleep jobs picked, each ended before its command ran.
        let missed = Tally {
            landed: 0,
            ended: 9,
            none_to_pick: false,
        };
        assert!(!missed.fired(3));
        assert_eq!(
            missed.evidence("running", 3),
            "0 of 3 running jobs cancelled while live; 9 cancel(s) found their job already \
             ended before the command got to it; out of tries (3 a job)"
        );
        let short = Tally {
            landed: 1,
            ended: 1,
            none_to_pick: true,
        };
        assert!(!short.fired(2));
        assert!(
            short
                .evidence("available", 2)
                .ends_with("; no other available job to pick within 5s"),
            "{}",
            short.evidence("available", 2)
        );
        // Every job asked for met live, after one that had ended: fired.
        let landed = Tally {
            landed: 3,
            ended: 1,
            none_to_pick: false,
        };
        assert!(landed.fired(3));
        assert_eq!(
            landed.evidence("running", 3),
            "3 of 3 running jobs cancelled while live; 1 cancel(s) found their job already \
             ended before the command got to it"
        );
    }
}
