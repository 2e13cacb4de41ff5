//! `suspend` and `resume`: stop a process without killing it (SIGSTOP, or
//! the engine's pause) and later let it go on (or kill it). While it is
//! stopped its heartbeat goes stale and its work is rescued; its
//! connections, locks and (for a 0.6 leader) leadership stay with it.
//! When it comes back it tries to finish what it held: the run-lease
//! guard must make those late results lose, and after a flip the fence
//! must stop it before it claims or enqueues anything.

use std::time::{Duration, Instant};

use super::super::effect::Effect;
use super::super::probe::IdleSession;
use super::super::state::Suspension;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use crate::fleet::{Handle, ProcId};
use crate::matrix::{KillTarget, ResumeSignal, ResumeStep, SuspendAt};
use crate::observe::{StepOutcome, SuspensionRecord};
use crate::plan::PlannedSuspend;

/// How long a suspension may take to catch its process at the right moment.
const CATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// What a suspend or resume proof may take beyond `stale_after` (the
/// heartbeat's own tolerance) before the step gives up: the database's
/// answers and the process's first beat are late on a loaded machine.
pub(in crate::driver) const PROOF_SLACK: Duration = Duration::from_secs(3);

/// `suspend`: chooses the process (the leader when the step runs, else
/// the plan's pick among live candidates), stops it, and with `for`
/// lets it go on that much later while the next steps run.
pub(super) async fn suspend(cx: &mut StepCtx<'_>, s: &PlannedSuspend) -> Result<Done, Abort> {
    let of = s.of.as_deref();
    let whose = of.map_or(String::new(), |a| format!(" of {a}"));
    let victim = cx.find_victim(s.target, of, s.pick).await?;
    let Some(victim) = victim else {
        let what = format!("no live {}{whose}", s.target.name());
        cx.state
            .fail(format!("suspend {}: {what} to suspend", s.target.name()));
        return Ok(Done::with(
            StepOutcome::Failed,
            format!("nothing to suspend: {what}"),
        ));
    };
    let (handle, name, version, in_flight, started, instance_id) = cx.proc(victim, |p| {
        (
            p.handle.clone(),
            p.name.clone(),
            p.version.clone(),
            p.in_flight().len(),
            p.started,
            p.instance_id.clone(),
        )
    });
    let Some(handle) = handle else {
        return Err(Abort::Harness(format!(
            "suspend: {name} has no handle to signal"
        )));
    };
    // Not catching the moment the step names is the harness missing
    // its interleaving, not the product failing: inconclusive.
    let caught = stop_at(cx, &handle, &name, instance_id.as_deref(), s.at)
        .await?
        .map_err(|missed| {
            Abort::Harness(format!("suspend {}: {name}: {missed}", s.target.name()))
        })?;
    // The suspension runs from here: proving it takes time the
    // process spends stopped, and `for` counts it.
    let (stopped_at, at_ms) = (Instant::now(), cx.ms());
    let bound = cx.plan.timings.stale_after.to_std() + PROOF_SLACK;
    let proof = super::super::effect::prove(cx, victim, Effect::Stopped, None, bound).await?;
    record(cx, s, victim, &name, &version, at_ms);
    let leader = if s.target == KillTarget::Leader {
        ", the leader"
    } else {
        ""
    };
    let mut text = format!("SIGSTOPped {name} ({version}{leader}){caught} ({proof})");
    if s.target != KillTarget::Producer {
        text.push_str(&format!(
            " with {in_flight} attempts in flight ({started} started)"
        ));
    }
    text.push_str(&resume_later(cx, s, handle, stopped_at));
    cx.state.facts.notes.push(text.clone());
    Ok(Done::ok(text))
}

/// The suspension in the cell's state (for a resume step or the
/// wind-down) and in its observations (for the rules that read it).
fn record(
    cx: &mut StepCtx<'_>,
    s: &PlannedSuspend,
    victim: ProcId,
    name: &str,
    version: &str,
    at_ms: u64,
) {
    cx.state.suspended.push(Suspension {
        target: s.target,
        of: s.of.clone(),
        id: victim,
        at_ms,
        timed: s.duration.is_some(),
    });
    let leading = cx.view(|l| l.current_leader()) == Some(victim);
    cx.state.obs.suspensions.push(SuspensionRecord {
        process: name.to_owned(),
        version: version.to_owned(),
        leader: leading,
        from_ms: at_ms,
        to_ms: s.duration.map(|d| at_ms + d.as_millis()),
    });
}

/// With `for`, lets the process go on that long after `stopped_at`
/// (interrupted or not, it must not stay stopped); says when.
fn resume_later(
    cx: &StepCtx<'_>,
    s: &PlannedSuspend,
    handle: Handle,
    stopped_at: Instant,
) -> String {
    match s.duration {
        Some(d) => {
            let cancel = cx.cancel();
            tokio::spawn(async move {
                // Interrupted or not, it must not stay stopped.
                let _ = cancel
                    .sleep(d.to_std().saturating_sub(stopped_at.elapsed()))
                    .await;
                handle.resume();
            });
            format!("; SIGCONT in {d}")
        }
        None => "; stopped until a resume step".to_owned(),
    }
}

/// Stops the process at a moment that matches `at`: stop it, look at
/// the database twice 30 ms apart (a session of a stopped client stays
/// idle in the same transaction), and if the moment is wrong let it go
/// and try again a little later, for up to [`CATCH_TIMEOUT`]. Returns
/// how it was caught, or what it waited for in vain. Only sessions that
/// can be the process's own count (by `instance_id` in their
/// `application_name`, or, for a runtime that names none, sessions
/// that name nothing): under CPU pressure another runtime's session
/// can sit idle in a transaction holding a ring lock for 30 ms too.
// The inner Strings are sentences for the step's text and the abort's reason, not errors.
async fn stop_at(
    cx: &mut StepCtx<'_>,
    handle: &Handle,
    name: &str,
    instance_id: Option<&str>,
    at: SuspendAt,
) -> Result<Result<String, String>, Abort> {
    let names_sessions = match instance_id {
        Some(id) => cx.probe.names_sessions(id).await.unwrap_or(false),
        None => false,
    };
    let stop = || async {
        handle
            .suspended()
            .await
            .map_err(|e| Abort::Harness(format!("suspend: could not stop {name}: {e}")))
    };
    stop().await?;
    if at == SuspendAt::Any {
        return Ok(Ok(String::new()));
    }
    let deadline = Instant::now() + CATCH_TIMEOUT;
    let mut tries = 0u64;
    loop {
        tries += 1;
        cx.cancel().sleep(Duration::from_millis(40)).await?;
        let first = cx.probe.idle_in_transaction().await;
        cx.cancel().sleep(Duration::from_millis(30)).await?;
        let second = cx.probe.idle_in_transaction().await;
        if let (Ok(first), Ok(second)) = (first, second) {
            let own = |s: &&IdleSession| s.of(instance_id, names_sessions);
            let stuck: Vec<&IdleSession> = second
                .iter()
                .filter(own)
                .filter(|s| first.contains(s))
                .collect();
            match at {
                SuspendAt::BetweenTransactions if !second.iter().any(|s| own(&s)) => {
                    return Ok(Ok(format!(" between transactions (try {tries})")));
                }
                SuspendAt::HoldingRingLocks => {
                    if let Some(IdleSession { pid, .. }) = stuck.iter().find(|s| s.ring_locks) {
                        return Ok(Ok(format!(
                            " inside a transaction holding a ring singleton's row lock (backend pid {pid}, try {tries})"
                        )));
                    }
                }
                _ => {}
            }
        }
        handle.resume();
        if Instant::now() >= deadline {
            return Ok(Err(format!(
                "waited {}s ({tries} tries) to catch it {}, in vain",
                CATCH_TIMEOUT.as_secs(),
                at.name()
            )));
        }
        // Land the next stop somewhere else in its loop.
        cx.cancel()
            .sleep(Duration::from_millis(5 + (tries * 7) % 31))
            .await?;
        stop().await?;
    }
}

/// `resume`: the latest open suspension with the same target and `of`
/// goes on (SIGCONT) or is killed (SIGKILL, its seat is gone).
pub(super) async fn resume(cx: &mut StepCtx<'_>, s: &ResumeStep) -> Result<Done, Abort> {
    let found = cx
        .state
        .suspended
        .iter()
        .rposition(|x| !x.timed && x.target == s.target && x.of == s.of);
    let Some(found) = found else {
        cx.state.fail(format!(
            "resume {}: no process is suspended by an earlier suspend step without `for`",
            s.target.name()
        ));
        return Ok(Done::with(StepOutcome::Failed, "nothing to resume"));
    };
    let susp = cx.state.suspended.remove(found);
    let stopped_ms = cx.ms().saturating_sub(susp.at_ms);
    let let_go_ms = cx.ms();
    let name_of = cx.proc(susp.id, |p| p.name.clone());
    if let Some(record) = cx
        .state
        .obs
        .suspensions
        .iter_mut()
        .rev()
        .find(|r| r.process == name_of && r.to_ms.is_none())
    {
        record.to_ms = Some(let_go_ms);
    }
    let (handle, name, version, alive) = cx.proc(susp.id, |p| {
        (
            p.handle.clone(),
            p.name.clone(),
            p.version.clone(),
            p.alive(),
        )
    });
    if !alive {
        let why = cx.proc(susp.id, |p| p.why_ended());
        return Ok(Done::ok(format!(
            "{name} had already ended while suspended ({why})"
        )));
    }
    let text = match s.signal {
        ResumeSignal::Cont => {
            let Some(handle) = handle else {
                return Err(Abort::Harness(format!(
                    "resume: {name} has no handle to signal"
                )));
            };
            let instance_id = cx.proc(susp.id, |p| p.instance_id.clone());
            let before = super::super::effect::look(cx, susp.id, instance_id.as_deref())
                .await
                .ok();
            handle
                .resumed()
                .await
                .map_err(|e| Abort::Harness(format!("resume: could not let {name} go on: {e}")))?;
            let bound = cx.plan.timings.stale_after.to_std() + PROOF_SLACK;
            let proof =
                super::super::effect::prove(cx, susp.id, Effect::Running, before, bound).await?;
            format!("SIGCONTed {name} ({version}) after {stopped_ms} ms stopped ({proof})")
        }
        ResumeSignal::Kill => {
            let record = cx.kill_proc(susp.id, s.target.name()).await?;
            if let Some(seat) = cx.state.seat_of(susp.id) {
                cx.state.seats[seat].dead = true;
                cx.state.seats[seat].proc = None;
            }
            let text = format!(
                "SIGKILLed {name} ({version}) after {stopped_ms} ms stopped, with {} attempts in flight",
                record.in_flight.len()
            );
            cx.state.obs.kills.push(record);
            text
        }
    };
    cx.state.facts.notes.push(text.clone());
    Ok(Done::ok(text))
}
