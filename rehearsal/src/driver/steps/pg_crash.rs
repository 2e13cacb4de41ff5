//! `pg_crash`: crash PostgreSQL and let it recover, now or armed.

use super::super::state::ArmedFault;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use crate::matrix::When;
use crate::observe::StepOutcome;
use crate::stream::{Fault, RunEvent};

/// `pg_crash`: now, or armed for the next migrate or flip.
pub(super) async fn pg_crash(cx: &mut StepCtx<'_>, when: When) -> Result<Done, Abort> {
    if when != When::Now {
        cx.state.armed.push((when, ArmedFault::Crash));
        let next = if when == When::DuringMigrate {
            "migrate"
        } else {
            "flip"
        };
        return Ok(Done::with(
            StepOutcome::Armed,
            format!("PostgreSQL crash armed for the next {next}"),
        ));
    }
    let text = crash(cx, "").await?;
    cx.state.record_fault("pg_crash now", true, text.clone());
    Ok(Done::ok(text))
}

pub(super) async fn crash(cx: &mut StepCtx<'_>, during: &str) -> Result<String, Abort> {
    let ms = cx
        .db
        .crash_and_restart()
        .await
        .map_err(|e| Abort::Harness(e.to_string()))?;
    cx.emit(RunEvent::FaultInjected {
        cell: cx.plan.name.clone(),
        fault: Fault::PgCrash {
            at_ms: cx.ms(),
            recovery_ms: ms,
        },
    });
    cx.state.facts.crashes.push(format!(
        "step {} ({}): the fleet survived a PostgreSQL crash{during}",
        cx.state.step_index, cx.state.step_name
    ));
    Ok(format!(
        "PostgreSQL crashed (SIGKILL to every server process){during} and was back after crash recovery in {ms} ms"
    ))
}
