//! `assert`: check a named condition now.

use std::time::{Duration, Instant};

use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::check_result::{Held, unreadable};
use crate::matrix::{CURRENT, Check};
use crate::observe::StepOutcome;

/// How often `deadline_rescued` looks again while a rescue is late.
const RESCUE_POLL: Duration = Duration::from_millis(250);

/// `assert`: a named check, now. A failed check is a step failure.
pub(super) async fn assert(cx: &mut StepCtx<'_>, check: &Check) -> Result<Done, Abort> {
    let result = run_check(cx, check).await?;
    Ok(match result {
        Ok(what) => {
            cx.state.facts.asserts.push(format!(
                "step {} ({}): {check} held: {what}",
                cx.state.step_index, cx.state.step_name
            ));
            Done::ok(what)
        }
        Err(what) => {
            cx.state.fail(format!("assert {check}: {what}"));
            Done::with(StepOutcome::Failed, what)
        }
    })
}

/// The check's result: `Ok(what held)` or `Err(what did not)`; the
/// outer error when the harness could not look.
async fn run_check(cx: &mut StepCtx<'_>, check: &Check) -> Result<Held, Abort> {
    match check {
        Check::SchemaExpanded => schema_is_expanded(cx).await,
        Check::AuthorityColumns => authority_is(cx, "columns").await,
        Check::AuthorityLedger => authority_is(cx, "ledger").await,
        Check::FenceActive => fence_active(cx).await,
        Check::MixedFleetClaimed => Ok(mixed_fleet_claimed(cx)),
        Check::DeadlineRescuePending => deadline_rescue_pending(cx).await,
        Check::DeadlineRescued => deadline_rescued(cx).await,
        Check::RingsPrunedBack => super::settle::rings_pruned_back(cx).await,
        Check::SchemaMatchesFresh => super::schema_check::schema_matches_fresh(cx).await,
        Check::LeaderIs(artifact) => leader_is(cx, artifact).await,
    }
}

async fn schema_is_expanded(cx: &mut StepCtx<'_>) -> Result<Held, Abort> {
    let v = cx.probe.schema_version().await.map_err(unreadable)?;
    Ok(if v >= cx.expand_version() {
        Ok(format!("schema at v{v}"))
    } else {
        Err(format!(
            "schema at v{v}, below the expand migration (v{})",
            cx.expand_version()
        ))
    })
}

async fn authority_is(cx: &mut StepCtx<'_>, want: &str) -> Result<Held, Abort> {
    Ok(match cx.probe.authority().await.map_err(unreadable)? {
        Some(a) if a == want => Ok(format!("authority is {a}")),
        Some(a) => Err(format!("authority is {a}")),
        None => {
            Err("there is no ring_cursor_authority table (the expand migration has not run)".into())
        }
    })
}

async fn fence_active(cx: &mut StepCtx<'_>) -> Result<Held, Abort> {
    let Some(rings) = cx.probe.ring_columns().await.map_err(unreadable)? else {
        return Ok(Ok(
            "the ring cursor columns are gone (contracted): no old-style cursor write can land"
                .into(),
        ));
    };
    let live: Vec<String> = rings
        .iter()
        .filter(|(_, slot, generation)| (*slot, *generation) != (-1, -1))
        .map(|(ring, slot, generation)| {
            format!("{ring} ring at (slot {slot}, generation {generation})")
        })
        .collect();
    Ok(if live.is_empty() {
        Ok("the three ring singletons are poisoned (-1, -1)".into())
    } else {
        Err(format!("not poisoned: {}", live.join(", ")))
    })
}

fn mixed_fleet_claimed(cx: &StepCtx<'_>) -> Held {
    let versions: Vec<String> = cx.view(|l| l.claimed_by.iter().cloned().collect());
    if versions.len() >= 2 {
        Ok(format!(
            "workers of {} claimed jobs",
            versions.join(" and ")
        ))
    } else {
        Err(format!(
            "only workers of {} claimed jobs",
            if versions.is_empty() {
                "no version".into()
            } else {
                versions.join(", ")
            }
        ))
    }
}

/// How long past its deadline an attempt may go unrescued: two rescue
/// intervals and a second.
fn rescue_margin_ms(cx: &StepCtx<'_>) -> f64 {
    (cx.plan.timings.rescue_every.as_millis() * 2 + 1_000) as f64
}

async fn deadline_rescue_pending(cx: &mut StepCtx<'_>) -> Result<Held, Abort> {
    let rescue_margin = rescue_margin_ms(cx);
    let deadline_ms = cx.plan.timings.deadline.as_millis() as f64;
    let version = cx.version_of(CURRENT);
    let jobs = overrun_jobs(cx);
    let (n, ids) = cx
        .probe
        .deadline_pending(&jobs, &version, deadline_ms, rescue_margin)
        .await
        .map_err(unreadable)?;
    Ok(if n > 0 {
        Ok(format!(
            "{} claimed by {version} {} past their deadline by over {} and not rescued (first: {ids:?})",
            crate::observe::count(n.unsigned_abs(), "overrun_deadline attempt"),
            crate::observe::agree(n.unsigned_abs(), "is", "are"),
            crate::observe::duration(rescue_margin as u64)
        ))
    } else {
        Err(format!(
            "no overrun_deadline attempt claimed by {version} is overdue and unrescued ({} such jobs accepted)",
            jobs.len()
        ))
    })
}

/// Every overrun first attempt that was overdue once the N leader had
/// its margin is closed by a rescue. The set is fixed then; a rescue
/// running late on a loaded machine gets `takeover_wait` to
/// close it, a leader that never rescues fails after it.
async fn deadline_rescued(cx: &mut StepCtx<'_>) -> Result<Held, Abort> {
    let rescue_margin = rescue_margin_ms(cx);
    let deadline_ms = cx.plan.timings.deadline.as_millis() as f64;
    let jobs = overrun_jobs(cx);
    // Attempts that were overdue before the leader took over are due
    // from its takeover on: give a new leader the margin first.
    let since = cx.view(|l| l.current_leader().and_then(|id| l.procs[id].leader_at_ms));
    if let Some(since) = since {
        let due_at = since + rescue_margin as u64;
        let now = cx.ms();
        if now < due_at {
            cx.cancel()
                .sleep(Duration::from_millis(due_at - now))
                .await?;
        }
    }
    let now = cx.probe.server_epoch().await.map_err(unreadable)?;
    let before = now - (deadline_ms + rescue_margin) / 1_000.0;
    let patience = takeover_wait(cx);
    let start = Instant::now();
    let mut waited = false;
    let t = loop {
        let t = cx
            .probe
            .deadline_rescued(&jobs, before)
            .await
            .map_err(unreadable)?;
        if t.rescued == t.due || start.elapsed() >= patience {
            break t;
        }
        waited = true;
        cx.cancel().sleep(RESCUE_POLL).await?;
    };
    let late = if waited {
        let late = crate::observe::duration(start.elapsed().as_millis() as u64);
        format!("; the last {late} after the margin")
    } else {
        String::new()
    };
    Ok(if t.due > 0 && t.rescued == t.due {
        Ok(format!(
            "all {} overdue first attempts were rescued ({}{late})",
            t.due, t.outcomes
        ))
    } else if t.due == 0 {
        Err("no overrun_deadline first attempt is old enough to judge".into())
    } else {
        Err(format!(
            "{} of {} overdue first attempts were not rescued {} after the margin (first: {:?}; outcomes seen: {})",
            t.due - t.rescued,
            t.due,
            crate::observe::duration(patience.as_millis() as u64),
            t.not_rescued,
            t.outcomes
        ))
    })
}

/// How long a leader takeover (and the rescues it owes) may take:
/// two stale periods and 3 s, for a loaded machine.
fn takeover_wait(cx: &StepCtx<'_>) -> Duration {
    cx.plan.timings.stale_after.to_std() * 2 + Duration::from_secs(3)
}

async fn leader_is(cx: &mut StepCtx<'_>, artifact: &str) -> Result<Held, Abort> {
    let wait = takeover_wait(cx);
    let leader = cx.wait_for(wait, |l| l.current_leader()).await?;
    Ok(match leader {
        Some(id) => cx.proc(id, |p| {
            if p.artifact == artifact {
                Ok(format!("the leader is {} ({})", p.name, p.version))
            } else {
                Err(format!(
                    "the leader is {} ({} {})",
                    p.name, p.artifact, p.version
                ))
            }
        }),
        None => Err("no live process holds maintenance leadership".into()),
    })
}

fn overrun_jobs(cx: &StepCtx<'_>) -> Vec<i64> {
    cx.view(|l| {
        l.accepted
            .iter()
            .chain(&l.uncertain)
            .filter(|j| j.mode == awa_runtime::workload::Mode::OverrunDeadline)
            .map(|j| j.job_id)
            .collect()
    })
}
