//! `kill`: SIGKILL a worker, the leader or a producer, now or armed.

use std::time::Duration;

use super::super::state::ArmedFault;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::fault_evidence::Inside;
use crate::fleet::ProcId;
use crate::matrix::{KillTarget, When};
use crate::observe::{KillRecord, StepOutcome};
use crate::plan::PlannedKill;

/// How long a kill `now` of a worker or the leader waits for its victim
/// to have an attempt in flight: a kill of an idle worker rescues nothing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// The same for a kill armed inside a migrate or flip, which must land
/// while that command is still in flight (a migration armed for a fault
/// pauses 750 ms inside its transaction; a flip waits at the held lock).
const BUSY_TIMEOUT_INSIDE: Duration = Duration::from_millis(300);
/// How long a frozen victim's output must stay still before it is judged:
/// lines it printed before it stopped are still on their way through a
/// pipe (or an engine's log stream).
const SETTLE_QUIET: Duration = Duration::from_millis(150);
/// The most a frozen victim is waited on for its output to settle.
const SETTLE_MAX: Duration = Duration::from_secs(2);

/// Whether `victim` has an attempt in flight (or has ended), as the
/// ledger has it.
fn busy(victim: ProcId) -> impl FnMut(&super::super::ledger::FleetView) -> Option<()> {
    move |l| {
        let p = &l.procs[victim];
        (!p.in_flight.is_empty() || !p.alive()).then_some(())
    }
}

/// `kill`: now, or armed to fire inside the next migrate or flip.
pub(super) async fn kill(cx: &mut StepCtx<'_>, k: &PlannedKill) -> Result<Done, Abort> {
    match k.when {
        When::Now => {
            let text = fire_kill(cx, k, None).await?;
            Ok(Done::ok(text))
        }
        when => {
            cx.state.armed.push((when, ArmedFault::Kill(k.clone())));
            Ok(Done::with(StepOutcome::Armed, format!("{k}")))
        }
    }
}

/// Chooses the victim (the leader when it fires; else the plan's pick
/// among live candidates in start order), waits for its trigger
/// (`after_started` started jobs, or the jitter) and, for a kill now of
/// a worker or the leader, for an attempt in flight; SIGKILLs it, and
/// records the evidence: the attempts it interrupted (`inside`: and
/// that the migrate or flip it was armed for was in flight).
pub(super) async fn fire_kill(
    cx: &mut StepCtx<'_>,
    k: &PlannedKill,
    inside: Option<&Inside>,
) -> Result<String, Abort> {
    let of = k.of.as_deref();
    let whose = of.map_or(String::new(), |a| format!(" of {a}"));
    let victim = cx.find_victim(k.target, of, k.pick).await?;
    let Some(victim) = victim else {
        let what = format!("no live {}{whose}", k.target.name());
        cx.state
            .fail(format!("kill {}: {what} to kill", k.target.name()));
        cx.state
            .record_fault(k.to_string(), false, format!("nothing was killed: {what}"));
        return Ok(format!("nothing to kill: {what}"));
    };
    let mut trigger = until_trigger(cx, k, victim).await?;
    if k.target != KillTarget::Producer {
        let patience = if inside.is_some() {
            BUSY_TIMEOUT_INSIDE
        } else {
            BUSY_TIMEOUT
        };
        trigger.push_str(&until_busy(cx, victim, patience).await?);
    }
    if !cx.proc(victim, |p| p.alive()) {
        let why = cx.proc(victim, |p| p.why_ended());
        let name = cx.proc(victim, |p| p.name.clone());
        cx.state.record_fault(
            k.to_string(),
            false,
            format!("{name} had already ended ({why}); nothing was killed"),
        );
        return Ok(format!("{name} had already ended ({why}); nothing to kill"));
    }
    let record = cx.kill_proc(victim, k.target.name()).await?;
    let (fired, evidence) = kill_evidence(k.target, &record, cx.state.load_on, inside);
    cx.state.record_fault(k.to_string(), fired, evidence);
    if let Some(seat) = cx.state.seat_of(victim) {
        cx.state.seats[seat].dead = true;
        cx.state.seats[seat].proc = None;
    }
    let started = cx.proc(victim, |p| p.started);
    let mut text = format!(
        "SIGKILLed {} ({}{}){trigger}",
        record.process,
        record.version,
        if k.target == KillTarget::Leader {
            ", the leader"
        } else {
            ""
        },
    );
    if k.target != KillTarget::Producer {
        text.push_str(&format!(
            ": {started} jobs started, {} in flight",
            record.in_flight.len()
        ));
    }
    cx.state.obs.kills.push(record);
    Ok(text)
}

/// Waits for the kill's trigger: `after_started` jobs started by the
/// victim (or its end, or the drain timeout), else its jitter; says
/// which, for the step's detail.
async fn until_trigger(
    cx: &mut StepCtx<'_>,
    k: &PlannedKill,
    victim: ProcId,
) -> Result<String, Abort> {
    if k.after_started > 0 {
        let n = k.after_started;
        let timeout = cx.plan.timings.drain_timeout.to_std();
        let reached = cx
            .wait_for(timeout, |l| {
                let p = &l.procs[victim];
                (p.started >= n || !p.alive()).then_some(())
            })
            .await?;
        let started = cx.proc(victim, |p| p.started);
        Ok(if reached.is_some() && started >= n {
            format!(" after it started {started} jobs")
        } else {
            format!(
                " after waiting {}s with {started} of {n} jobs started",
                timeout.as_secs()
            )
        })
    } else if let Some(jitter) = k.jitter {
        cx.cancel().sleep(jitter.to_std()).await?;
        Ok(format!(" after {jitter} jitter"))
    } else {
        Ok(String::new())
    }
}

/// Waits up to `patience` for `victim` to have an attempt in flight,
/// and leaves it frozen there (suspended, its output read to the
/// moment it stopped); returns a note when it had to wait. The ledger
/// follows the process through its output, which lags: a worker it
/// shows busy may already have finished that attempt, and SIGKILLed
/// then it rescues nothing. So the victim is frozen first and judged
/// on what it had printed by then: busy, it stays frozen for the kill
/// (SIGKILL ends a stopped process, and an engine kills a paused
/// container); idle after all, it runs on and is watched again.
async fn until_busy(
    cx: &mut StepCtx<'_>,
    victim: ProcId,
    patience: Duration,
) -> Result<String, Abort> {
    // A process a suspend step stopped prints nothing more: judge it as it is.
    let frozen_already = cx.state.suspended.iter().any(|s| s.id == victim);
    let start = std::time::Instant::now();
    let mut thawed: u64 = 0;
    loop {
        let left = patience.saturating_sub(start.elapsed());
        let seen = cx.wait_for(left, busy(victim)).await?;
        if seen.is_none() {
            return Ok(format!(", idle for all of {}s", patience.as_secs_f64()));
        }
        let seen_at = start.elapsed();
        let handle = cx.proc(victim, |p| p.alive().then(|| p.handle.clone()).flatten());
        let Some(handle) = handle.filter(|_| !frozen_already) else {
            return Ok(String::new());
        };
        // Judging a victim that did not freeze would be judging the past.
        handle.suspended().await.map_err(|e| {
            Abort::Harness(format!(
                "kill: could not freeze its victim to judge it busy: {e}"
            ))
        })?;
        if let Err(stopped) = settle(cx, victim).await {
            handle.resume();
            return Err(stopped);
        }
        if cx.view(busy(victim)).is_some() {
            let ms = seen_at.as_millis();
            return Ok(match thawed {
                0 if ms == 0 => String::new(),
                0 => format!(", once it had an attempt in flight ({ms} ms later)"),
                n => format!(
                    ", once it had an attempt in flight ({ms} ms later; idle when frozen {})",
                    crate::observe::count(n, "time")
                ),
            });
        }
        handle.resume();
        thawed += 1;
    }
}

/// Waits until a frozen `victim`'s output has caught up: no attempt
/// started or finished for [`SETTLE_QUIET`], at most [`SETTLE_MAX`].
async fn settle(cx: &mut StepCtx<'_>, victim: ProcId) -> Result<(), Abort> {
    let tally = |p: &super::super::ledger::Proc| (p.started, p.finished);
    let until = std::time::Instant::now() + SETTLE_MAX;
    let mut last = cx.proc(victim, tally);
    while std::time::Instant::now() < until {
        cx.cancel().sleep(SETTLE_QUIET).await?;
        let now = cx.proc(victim, tally);
        if now == last {
            break;
        }
        last = now;
    }
    Ok(())
}

/// Whether a kill did what it declares, and the evidence: a worker or
/// leader kill interrupts attempts in flight; a producer kill stops a
/// producer while load is on; an armed kill lands while its migrate or
/// flip is in flight.
fn kill_evidence(
    target: KillTarget,
    record: &KillRecord,
    load_on: bool,
    inside: Option<&Inside>,
) -> (bool, String) {
    let (mut fired, mut evidence) = if target == KillTarget::Producer {
        if load_on {
            (
                true,
                format!(
                    "{} was producing (load on) when it was SIGKILLed",
                    record.process
                ),
            )
        } else {
            (
                false,
                format!(
                    "{} was SIGKILLed with load off: it was not producing",
                    record.process
                ),
            )
        }
    } else if record.in_flight.is_empty() {
        (
            false,
            format!(
                "{} was SIGKILLed with no attempt in flight: not a kill of a busy worker, so there was nothing to rescue",
                record.process
            ),
        )
    } else {
        let ids: Vec<String> = record
            .in_flight
            .iter()
            .take(5)
            .map(|f| f.job_id.to_string())
            .collect();
        let more = record.in_flight.len().saturating_sub(ids.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        (
            true,
            format!(
                "{} was SIGKILLed with {} in flight (jobs {}{more})",
                record.process,
                crate::observe::count(record.in_flight.len() as u64, "attempt"),
                ids.join(", ")
            ),
        )
    };
    if let Some(inside) = inside {
        if inside.seen {
            evidence.push_str(&format!(", inside the {} ({})", inside.what, inside.note));
        } else {
            fired = false;
            evidence = format!(
                "{evidence}, but not inside the {}: {}",
                inside.what, inside.note
            );
        }
    }
    (fired, evidence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::InFlight;

    fn record(in_flight: usize) -> KillRecord {
        KillRecord {
            process: "previous-worker-2".into(),
            version: "0.6.2".into(),
            role: "worker".into(),
            at_ms: 1_000,
            in_flight: (0..in_flight as i64)
                .map(|i| InFlight {
                    job_id: 100 + i,
                    attempt: 1,
                    run_lease: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn a_kill_of_a_busy_worker_lists_what_it_interrupted() {
        let (fired, evidence) = kill_evidence(KillTarget::Worker, &record(7), true, None);
        assert!(fired);
        assert_eq!(
            evidence,
            "previous-worker-2 was SIGKILLed with 7 attempts in flight (jobs 100, 101, 102, 103, 104 and 2 more)"
        );
    }

    #[test]
    fn a_kill_of_an_idle_worker_did_not_fire() {
        let (fired, evidence) = kill_evidence(KillTarget::Leader, &record(0), true, None);
        assert!(!fired);
        assert!(
            evidence.contains("no attempt in flight: not a kill of a busy worker"),
            "{evidence}"
        );
    }

    #[test]
    fn a_producer_kill_needs_load_on() {
        assert!(kill_evidence(KillTarget::Producer, &record(0), true, None).0);
        assert!(!kill_evidence(KillTarget::Producer, &record(0), false, None).0);
    }

    #[test]
    fn an_armed_kill_must_land_inside_its_command() {
        let inside = |seen| Inside {
            what: "migration",
            seen,
            note: if seen {
                "it held its advisory lock".into()
            } else {
                "the migration ended before the fault could fire".into()
            },
        };
        let (fired, evidence) =
            kill_evidence(KillTarget::Worker, &record(2), true, Some(&inside(true)));
        assert!(fired, "{evidence}");
        assert!(
            evidence.ends_with(", inside the migration (it held its advisory lock)"),
            "{evidence}"
        );
        let (fired, evidence) =
            kill_evidence(KillTarget::Worker, &record(2), true, Some(&inside(false)));
        assert!(!fired);
        assert!(
            evidence.ends_with(
                "but not inside the migration: the migration ended before the fault could fire"
            ),
            "{evidence}"
        );
    }
}
