//! `fence`: a binary started after the flip must refuse and change nothing.

use std::time::Duration;

use super::super::EXIT_REFUSED;
use super::super::ledger::Role;
use super::super::probe::{changed_lines, digest};
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use crate::observe::FenceRecord;
use crate::observe::StepOutcome;

/// How long a fenced binary may run before it is killed (it should refuse at once).
const FENCE_TIMEOUT: Duration = Duration::from_secs(20);

/// `fence`: one worker of the artifact started after the flip must
/// refuse before any write. The state an old binary could write is
/// dumped before and after (see `Probe::fence_state`); the worker gets
/// 20 s to exit before it is killed. Judged by reconciliation.
pub(super) async fn fence(cx: &mut StepCtx<'_>, artifact: &str) -> Result<Done, Abort> {
    let version = cx.version_of(artifact);
    let before =
        cx.probe.fence_state(&version).await.map_err(|e| {
            Abort::Harness(format!("could not read the state before the fence: {e}"))
        })?;
    let id = cx
        .spawn(artifact, Role::Fence, vec!["worker".into()], Vec::new())
        .await?;
    let exited = cx.await_done(id, FENCE_TIMEOUT, &cx.cancel()).await?;
    if !exited {
        cx.kill_proc(id, "fence").await?;
    }
    let after =
        cx.probe.fence_state(&version).await.map_err(|e| {
            Abort::Harness(format!("could not read the state after the fence: {e}"))
        })?;
    let (name, code, refused, why, stderr_tail) = cx.proc(id, |p| {
        (
            p.name.clone(),
            p.code(),
            p.refused.clone(),
            p.why_ended(),
            p.stderr_tail(5),
        )
    });
    cx.state.obs.fences.push(FenceRecord {
        artifact: artifact.to_owned(),
        version: version.clone(),
        exit_code: code,
        refused: refused.is_some(),
        state_before: digest(&before),
        state_after: digest(&after),
        stderr_tail,
    });
    let spawned = cx.proc(id, |p| p.spawned_ms);
    let took = match (&refused, code) {
        (Some(_), Some(EXIT_REFUSED)) => {
            cx.time_refusal("fence", id, spawned, StepOutcome::Refused, 0)
        }
        _ => None,
    };
    let took = took.map_or(String::new(), |t| format!(" ({t})"));
    let changed = changed_lines(&before, &after);
    let state = if changed.is_empty() {
        "state unchanged".to_owned()
    } else {
        format!("state CHANGED: {}", changed.join(" | "))
    };
    Ok(match (&refused, code) {
        (Some(reason), Some(EXIT_REFUSED)) if changed.is_empty() => Done::with(
            StepOutcome::Refused,
            format!("{name} ({version}) refused{took}: {reason}; {state}"),
        ),
        _ if !exited => Done::with(
            StepOutcome::Breached,
            format!(
                "{name} ({version}) was still running after {}s and was killed; {state}",
                FENCE_TIMEOUT.as_secs()
            ),
        ),
        _ => Done::with(
            StepOutcome::Breached,
            format!("{name} ({version}) {why}; {state}"),
        ),
    })
}
