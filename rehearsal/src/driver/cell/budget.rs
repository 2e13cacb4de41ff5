//! A cell's time budget (`[timings] budget`, or the cell's own).
//!
//! The run gives each cell a [`Cancel`](super::super::Cancel) that also fires
//! when the budget runs out, so every wait of every step ends the way an
//! interruption does: the step stops, the cell winds down (every process
//! stopped, nothing left running), and it is inconclusive. Unlike an
//! interruption it says what it was waiting for, read from the fleet's
//! ledger and the cell's database at that moment (a drain's running jobs
//! and oldest claim, a hold's progress, a flip's authority, lock waits).

use std::time::Duration;

use super::super::probe::ProbeError;
use super::super::waited::secs;
use super::LiveCell;
use crate::matrix::{FlipMode, Step};
use crate::observe::count;

/// How long each look into the database may take when the budget ran
/// out (the server may be the reason).
const LOOK_TIMEOUT: Duration = Duration::from_secs(3);

impl LiveCell<'_> {
    /// The cell's budget ran out (and the run itself is not being interrupted).
    pub(in crate::driver) fn over_budget(&self) -> bool {
        let cancel = &self.ctx.cancel;
        cancel.overran() && !cancel.run_interrupted()
    }

    /// What the phase that ran out of budget was waiting for, in one
    /// line: `drain: 37 jobs still running, oldest claim 41 s`.
    pub(in crate::driver) async fn waiting_for(&mut self) -> String {
        let since = self.state.obs.phases.last().map_or(0, |p| p.end_ms);
        let running = secs(self.ms().saturating_sub(since) as f64);
        let step = self
            .state
            .step_index
            .checked_sub(1)
            .and_then(|i| self.plan.steps.get(i));
        let mut what = match (self.state.step_name, step) {
            ("setup", _) => format!(
                "setup: {} of the backlog banked after {running}",
                count(self.view(|l| l.accepted.len()) as u64, "job")
            ),
            ("drain", _) => self.drain_waiting(&running).await,
            (_, Some(Step::Hold(h))) => format!("hold {}: {running} of it held", h.duration),
            (_, Some(Step::Flip(f))) => {
                let authority = look(self.probe.authority()).await.flatten();
                let mode = match f.mode {
                    FlipMode::Auto => "auto-flip by ",
                    _ => "flip by ",
                };
                format!(
                    "flip: waiting {running} for the {mode}{}; authority {}",
                    f.by,
                    authority.as_deref().unwrap_or("unknown")
                )
            }
            (_, Some(Step::Migrate(m))) => {
                format!(
                    "migrate: awa migrate of {} still running after {running}",
                    m.artifact
                )
            }
            (name, _) => {
                let in_flight: usize = self
                    .shared
                    .lock()
                    .procs
                    .iter()
                    .map(|p| p.in_flight.len())
                    .sum();
                format!(
                    "{name}: still running after {running}, {} in flight",
                    count(in_flight as u64, "job")
                )
            }
        };
        what.push_str(&self.blocking().await);
        what
    }

    /// A drain's wait: live jobs by state and the oldest open claim.
    async fn drain_waiting(&mut self, running: &str) -> String {
        match look(self.probe.live_jobs_waiting()).await {
            Some((0, 0, 0, _)) => format!("drain: no live job left after {running}"),
            Some((running_jobs, available, scheduled, oldest_ms)) => {
                let mut text = format!(
                    "drain: {} still running",
                    count(running_jobs.unsigned_abs(), "job")
                );
                if running_jobs > 0 {
                    text.push_str(&format!(", oldest claim {}", secs(oldest_ms)));
                }
                if available > 0 {
                    text.push_str(&format!(", {available} available"));
                }
                if scheduled > 0 {
                    text.push_str(&format!(", {scheduled} scheduled"));
                }
                text.push_str(&format!(", after {running} of draining"));
                text
            }
            None => format!("drain: still waiting after {running} (the database did not answer)"),
        }
    }

    /// `; 2 sessions waiting on a lock for up to 12 s; 1 idle in a
    /// transaction`, or nothing when no session is held up.
    async fn blocking(&mut self) -> String {
        let mut text = String::new();
        if let Some((waiting, longest_ms)) = look(self.probe.lock_waits()).await
            && waiting > 0
        {
            text.push_str(&format!(
                "; {} waiting on a lock for up to {}",
                count(waiting.unsigned_abs(), "session"),
                secs(longest_ms)
            ));
        }
        if let Some(idle) = look(self.probe.idle_in_transaction()).await
            && !idle.is_empty()
        {
            text.push_str(&format!(
                "; {} idle in a transaction (a stopped process?)",
                count(idle.len() as u64, "session")
            ));
        }
        text
    }
}

/// A look into the database, bounded; `None` when it failed or took too long.
async fn look<T>(query: impl Future<Output = Result<T, ProbeError>>) -> Option<T> {
    tokio::time::timeout(LOOK_TIMEOUT, query).await.ok()?.ok()
}
