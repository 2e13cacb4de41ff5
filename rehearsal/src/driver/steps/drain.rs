//! `drain`: stop the fleet gracefully once all work has finished.

use std::time::{Duration, Instant};

use super::super::ledger::Role;
use super::super::step_ctx::STOP_TIMEOUT;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use crate::matrix::{CURRENT, Duration as MatrixDuration};
use crate::observe::{IdleWindow, StepOutcome};

/// How long the cron jobs of a final mop-up may take.
const MOPUP_TIMEOUT: Duration = Duration::from_secs(20);

/// `drain`: load off, wait until no job is live (`awa.jobs` is empty:
/// every accepted and fired job terminal), then SIGTERM every worker.
/// `timeout` bounds a wait without progress, not the whole drain: a
/// loaded machine drains a deep queue slowly, and jobs that are still
/// being worked through are not stuck (the cell's budget bounds the
/// rest).
/// Cron jobs the leader fires while the fleet stops are finished by one
/// maintenance-free worker (it cannot fire more); any other job left
/// live is for reconciliation to report as stuck.
pub(in crate::driver) async fn drain(
    cx: &mut StepCtx<'_>,
    timeout: MatrixDuration,
) -> Result<Done, Abort> {
    let mut parts = Vec::new();
    if cx.state.load_on {
        parts.push(super::load::load_off(cx).await?.detail);
    }
    let (live, waited) = wait_for_queue(cx, timeout).await?;
    parts.push(waited);
    if live.0 == 0 {
        parts.extend(idle_tail(cx).await?);
    }
    // Runtimes that died while the queue drained (a crash, a fence)
    // are judged before the fleet is stopped on purpose.
    parts.extend(cx.check_unexpected_exits().await?);
    let last_artifact = cx
        .state
        .seats
        .iter()
        .rev()
        .find(|s| s.role == Role::Worker && !s.dead)
        .map(|s| s.artifact.clone());
    parts.extend(stop_workers(cx).await?);
    let (left, not_cron) = cx.probe.live_jobs().await.unwrap_or(live);
    if left > 0 && not_cron == 0 {
        let artifact = last_artifact.unwrap_or_else(|| CURRENT.to_owned());
        parts.push(mop_up(cx, &artifact, left).await?);
    }
    let (left, _) = cx.probe.live_jobs().await.unwrap_or((left, not_cron));
    Ok(if left == 0 {
        Done::ok(parts.join("; "))
    } else {
        Done::with(
            StepOutcome::TimedOut,
            format!(
                "{}; {} left",
                parts.join("; "),
                crate::observe::count(left.unsigned_abs(), "live job")
            ),
        )
    })
}

/// How long a drained fleet is held idle before it is stopped: the window
/// in which reconciliation judges whether a periodic loop of the runtime
/// ran away (`runaway_loop`). Each backend reports its transactions about
/// once a second, so the first second is left to settle and the rest
/// holds three or more reports of every runtime's connections.
pub(in crate::driver) const IDLE_TAIL: Duration = Duration::from_secs(4);

/// Holds the drained fleet idle for [`IDLE_TAIL`] (while a worker lives
/// to be watched) and records the window; says so.
async fn idle_tail(cx: &mut StepCtx<'_>) -> Result<Option<String>, Abort> {
    if cx.live(Role::Worker, None).is_empty() {
        return Ok(None);
    }
    let from_ms = cx.ms();
    cx.cancel().sleep(IDLE_TAIL).await?;
    let to_ms = cx.ms();
    cx.state.obs.idle.push(IdleWindow {
        step: cx.state.step_index,
        from_ms,
        to_ms,
    });
    Ok(Some(format!(
        "the fleet held idle for {}",
        crate::observe::duration(to_ms - from_ms)
    )))
}

/// Waits until no job is live or their count stopped going down for
/// `timeout`; returns the last (live, not cron) count and what the wait
/// came to, in words.
async fn wait_for_queue(
    cx: &mut StepCtx<'_>,
    timeout: MatrixDuration,
) -> Result<((i64, i64), String), Abort> {
    let start = Instant::now();
    let mut live = (0, 0);
    let mut progress = Progress::new(start);
    loop {
        live = cx.probe.live_jobs().await.unwrap_or(live);
        if live.0 == 0 && start.elapsed() > Duration::from_millis(100) {
            break;
        }
        if progress.stalled(live.0, Instant::now(), timeout.to_std()) {
            break;
        }
        cx.cancel().sleep(Duration::from_millis(250)).await?;
    }
    let waited = crate::observe::duration(start.elapsed().as_millis() as u64);
    if live.0 == 0 {
        Ok((live, format!("no live job after {waited}")))
    } else {
        let n = live.0.unsigned_abs();
        let mut text = format!(
            "{} still live after {waited}, the count no lower for the last {timeout}",
            crate::observe::count(n, "job")
        );
        // As they stood when the drain gave up: stopping the fleet
        // changes them (a leader's last rescue re-queues overruns), and
        // reconciliation reads only that end state.
        if let Ok((running, available, scheduled, oldest_ms)) = cx.probe.live_jobs_waiting().await {
            text.push_str(&format!(
                " ({})",
                live_by_state(running, available, scheduled, oldest_ms)
            ));
        }
        Ok((live, text))
    }
}

/// Stops every live worker and empties the seats (the drain is done with
/// them); says how many it stopped and anything the stop noted.
async fn stop_workers(cx: &mut StepCtx<'_>) -> Result<Vec<String>, Abort> {
    let mut parts = Vec::new();
    let workers = cx.live(Role::Worker, None);
    parts.push(format!(
        "stopped {}",
        crate::observe::count(workers.len() as u64, "worker")
    ));
    parts.extend(cx.stop(&workers, STOP_TIMEOUT, &cx.cancel()).await?);
    for seat in &mut cx.state.seats {
        seat.proc = None;
        if seat.role == Role::Worker {
            seat.parked = false;
        }
    }
    cx.state.drained = true;
    Ok(parts)
}

async fn mop_up(cx: &mut StepCtx<'_>, artifact: &str, left: i64) -> Result<String, Abort> {
    let env = vec![("AWA_NO_MAINTENANCE".to_owned(), "true".to_owned())];
    let id = cx
        .spawn(artifact, Role::Mopup, vec!["worker".into()], env)
        .await?;
    let start = Instant::now();
    while start.elapsed() < MOPUP_TIMEOUT {
        if cx.probe.live_jobs().await.is_ok_and(|(n, _)| n == 0) || !cx.proc(id, |p| p.alive()) {
            break;
        }
        cx.cancel().sleep(Duration::from_millis(100)).await?;
    }
    let mut text = cx.stop(&[id], STOP_TIMEOUT, &cx.cancel()).await?;
    let name = cx.proc(id, |p| p.name.clone());
    let n = left.unsigned_abs();
    text.insert(
        0,
        format!(
            "{} fired while the fleet stopped {} run by {name} (no maintenance)",
            crate::observe::count(n, "cron job"),
            crate::observe::agree(n, "was", "were")
        ),
    );
    Ok(text.join("; "))
}

/// `99 running, oldest claim 64 s` / `1,689 available`: the live jobs of
/// a drain that gave up, by state. Running jobs wait on their workers or
/// on rescue; available ones on a claimer; scheduled ones on promotion.
fn live_by_state(running: i64, available: i64, scheduled: i64, oldest_ms: f64) -> String {
    let mut parts = Vec::new();
    if running > 0 {
        parts.push(format!(
            "{} running, oldest claim {}",
            crate::observe::thousands(running.unsigned_abs()),
            super::super::waited::secs(oldest_ms)
        ));
    }
    for (n, state) in [(available, "available"), (scheduled, "scheduled")] {
        if n > 0 {
            parts.push(format!(
                "{} {state}",
                crate::observe::thousands(n.unsigned_abs())
            ));
        }
    }
    if parts.is_empty() {
        "none left by then".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Whether a drain still makes progress: the live count reached a new
/// low within the last `timeout`. A cron job the leader fires meanwhile
/// raises the count for a moment; only a new low counts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Progress {
    lowest: Option<i64>,
    since: Instant,
}

impl Progress {
    pub(super) fn new(start: Instant) -> Progress {
        Progress {
            lowest: None,
            since: start,
        }
    }

    /// Takes the live count read `now`; true once no new low came for `timeout`.
    pub(super) fn stalled(&mut self, live: i64, now: Instant, timeout: Duration) -> bool {
        if self.lowest.is_none_or(|low| live < low) {
            self.lowest = Some(live);
            self.since = now;
        }
        now.duration_since(self.since) >= timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(10);

    #[test]
    fn a_drain_that_keeps_finishing_jobs_is_not_stalled() {
        let t0 = Instant::now();
        let mut p = Progress::new(t0);
        // 1,000 jobs falling by 10 every 5 s: 100 s, ten times the timeout.
        for i in 0..20 {
            let now = t0 + Duration::from_secs(5 * i);
            assert!(!p.stalled(1_000 - 10 * i as i64, now, T), "stalled at {i}");
        }
    }

    #[test]
    fn a_count_that_stops_falling_stalls_after_the_timeout() {
        let t0 = Instant::now();
        let mut p = Progress::new(t0);
        assert!(!p.stalled(100, t0, T));
        assert!(!p.stalled(40, t0 + Duration::from_secs(3), T));
        // A cron fire lifts it, a finish brings it back: no new low.
        assert!(!p.stalled(41, t0 + Duration::from_secs(6), T));
        assert!(!p.stalled(40, t0 + Duration::from_secs(12), T));
        assert!(p.stalled(40, t0 + Duration::from_secs(13), T));
    }

    #[test]
    fn a_drain_that_gave_up_says_in_what_state_its_jobs_waited() {
        // n1-leader-suspended-across-flip under load: overruns a 0.6.2
        // leader never deadline-rescues, still running when the drain gave up.
        assert_eq!(
            live_by_state(99, 0, 0, 64_200.0),
            "99 running, oldest claim 64 s"
        );
        assert_eq!(
            live_by_state(3, 1_689, 2, 900.0),
            "3 running, oldest claim 0.9 s, 1,689 available, 2 scheduled"
        );
        assert_eq!(live_by_state(0, 0, 0, 0.0), "none left by then");
    }

    #[test]
    fn a_count_that_never_falls_stalls_a_timeout_after_the_first_reading() {
        let t0 = Instant::now();
        let mut p = Progress::new(t0);
        assert!(!p.stalled(7, t0 + Duration::from_secs(9), T));
        assert!(p.stalled(7, t0 + Duration::from_secs(19), T));
    }
}
