//! What a step may touch: the cell's state (its seats, faults,
//! observations), its database and the driver's SQL on it, the plan, and
//! the fleet through a handle that starts, waits on and kills processes
//! and reads what they reported. A step is a function of a [`StepCtx`];
//! the cell lends one for each step and keeps the rest (the monitor, the
//! phases, the final drain, reconciliation) to itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::database::CellDb;
use super::env::{ProcessEnv, runtime_env};
use super::ledger::{Cancel, FleetView, Proc, Role, Shared};
use super::probe::Probe;
use super::state::CellState;
use super::{Abort, CellContext, Interrupted};
use crate::fleet::{Labels, ProcId, ReportSender, Spec};
use crate::plan::CellPlan;
use crate::stream::RunEvent;

/// How long a runtime may take to print `ready` (or refuse) after its start.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a one-shot command (migrate, flip, cron upsert) may run.
pub(super) const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the backlog may take to bank.
pub(super) const BACKLOG_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a process may take to stop after SIGTERM before SIGKILL:
/// the runtime's own grace plus room for its last statements.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// The same when rehearse itself is being interrupted.
pub(super) const STOP_TIMEOUT_INTERRUPTED: Duration = Duration::from_secs(3);

/// The folder of a cell's process logs, relative to the report folder.
pub(super) fn cell_dir(name: &str) -> String {
    format!("logs/{name}")
}

/// The fleet as a step reaches it: the run's backend and artifacts, the
/// cell's ledger and the sink its processes report to, the cell's clock.
pub(super) struct FleetHandle<'c> {
    pub ctx: &'c CellContext,
    pub shared: &'c Arc<Shared>,
    pub sink: &'c ReportSender,
    pub t0: Instant,
}

/// Everything one step may touch, borrowed from its cell for the step.
pub(super) struct StepCtx<'c> {
    /// Seats, armed faults, suspensions, observations, proved facts.
    pub state: &'c mut CellState,
    /// The driver's own SQL on the cell's database.
    pub probe: &'c mut Probe,
    /// The cell's database.
    pub db: &'c mut CellDb,
    /// The cell's plan (its timings, workload and steps).
    pub plan: &'c CellPlan,
    fleet: FleetHandle<'c>,
}

impl<'c> StepCtx<'c> {
    /// A step's view of a cell.
    pub fn new(
        fleet: FleetHandle<'c>,
        plan: &'c CellPlan,
        db: &'c mut CellDb,
        probe: &'c mut Probe,
        state: &'c mut CellState,
    ) -> Self {
        StepCtx {
            state,
            probe,
            db,
            plan,
            fleet,
        }
    }

    /// Milliseconds since the cell started.
    pub fn ms(&self) -> u64 {
        self.fleet.t0.elapsed().as_millis() as u64
    }

    /// The cancellation to use for waits.
    pub fn cancel(&self) -> Cancel {
        self.fleet.ctx.cancel.clone()
    }

    /// `--keep`: leave scratch databases behind.
    pub fn keep(&self) -> bool {
        self.fleet.ctx.keep
    }

    /// Schema version of the expand migration (see [`CellContext::expand_version`]).
    pub fn expand_version(&self) -> i32 {
        self.fleet.ctx.expand_version
    }

    /// Reads one process of the ledger.
    pub fn proc<T>(&self, id: ProcId, read: impl FnOnce(&Proc) -> T) -> T {
        read(&self.fleet.shared.lock().procs[id])
    }

    /// Reads the ledger as a whole.
    pub fn view<T>(&self, read: impl FnOnce(&FleetView) -> T) -> T {
        read(&self.fleet.shared.lock())
    }

    /// Waits until `check` of the ledger returns `Some`, for at most
    /// `timeout` (`Ok(None)` when it runs out).
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        check: impl FnMut(&FleetView) -> Option<T>,
    ) -> Result<Option<T>, Interrupted> {
        self.fleet
            .shared
            .wait_for(timeout, &self.cancel(), check)
            .await
    }

    /// The ledger, for the fleet's own operations (procs.rs).
    pub fn ledger(&self) -> &Shared {
        self.fleet.shared
    }

    /// Sends one of the cell's events.
    pub fn emit(&self, event: RunEvent) {
        self.fleet.ctx.events.send(event);
    }

    /// The version an artifact's binary reports.
    pub fn version_of(&self, artifact: &str) -> String {
        self.fleet
            .ctx
            .artifacts
            .get(artifact)
            .map_or_else(|| "unknown".to_owned(), |a| a.version.clone())
    }

    fn next_name(&mut self, artifact: &str, role: Role) -> String {
        let n = self
            .state
            .names
            .entry((artifact.to_owned(), role))
            .or_default();
        *n += 1;
        format!("{artifact}-{}-{n}", role.name())
    }

    /// Starts `awa ARGS` of `artifact` with the cell's environment plus `extra`.
    pub async fn spawn(
        &mut self,
        artifact: &str,
        role: Role,
        args: Vec<String>,
        extra: Vec<(String, String)>,
    ) -> Result<ProcId, Abort> {
        let ctx = self.fleet.ctx;
        let Some(resolved) = ctx.artifacts.get(artifact) else {
            return Err(Abort::Harness(format!(
                "artifact {artifact} was not resolved"
            )));
        };
        let name = self.next_name(artifact, role);
        let log = format!("{}/{name}.log", cell_dir(&self.plan.name));
        let report_dir = ctx.report_dir.display().to_string();
        let id = self.fleet.shared.lock().register(
            name.clone(),
            artifact,
            &resolved.version,
            role,
            log.clone(),
        );
        // A runtime of the release under test carries the cell's password,
        // each in turn in another shape of DSN (see `credential`).
        let under_test = crate::vocab::release::of_this_line(&resolved.version);
        let (database_url, watch) = self.db.dsn_for(under_test, role.is_runtime());
        let mut env = runtime_env(&ProcessEnv {
            database_url: &database_url,
            name: &name,
            timings: &self.plan.timings,
            auto_flip: role == Role::Worker && self.state.auto_flip_by.contains(artifact),
            failpoint: resolved.failpoint.as_deref(),
            report_dir: &report_dir,
        });
        // What the caller gives wins (a scratch database's URL, a pause).
        env.retain(|(key, _)| extra.iter().all(|(k, _)| k != key));
        env.extend(extra);
        let spec = Spec {
            id,
            name: name.clone(),
            runnable: crate::fleet::Runnable::of(resolved),
            labels: Labels {
                // A later try's processes have the same names: its
                // containers must not meet the earlier try's.
                cell: format!("{}{}", self.plan.name, super::try_tag(ctx.attempt, '-')),
                role: role.name().to_owned(),
                artifact: artifact.to_owned(),
                version: resolved.version.clone(),
            },
            args,
            env,
            log: ctx.report_dir.join(&log),
            watch,
        };
        let fleet = ctx.fleet.clone();
        match fleet.spawn(spec, self.fleet.sink.clone()).await {
            Ok(handle) => {
                self.fleet.shared.lock().procs[id].handle = Some(handle);
                self.emit(RunEvent::ProcessStarted {
                    cell: self.plan.name.clone(),
                    process: name,
                    role: role.name().to_owned(),
                    version: resolved.version.clone(),
                    at_ms: self.ms(),
                });
                Ok(id)
            }
            Err(e) => {
                let mut text = e.to_string();
                if let Some(cause) = std::error::Error::source(&e) {
                    text.push_str(&format!(": {cause}"));
                }
                Err(Abort::Harness(text))
            }
        }
    }

    /// Runs a one-shot command to its end (SIGKILL after `timeout`).
    pub async fn run_command(
        &mut self,
        artifact: &str,
        role: Role,
        args: Vec<String>,
        env: Vec<(String, String)>,
        timeout: Duration,
    ) -> Result<ProcId, Abort> {
        let id = self.spawn(artifact, role, args, env).await?;
        self.finish_command(id, timeout).await?;
        Ok(id)
    }

    /// Waits for a command started with [`StepCtx::spawn`]; kills it after `timeout`.
    pub async fn finish_command(&mut self, id: ProcId, timeout: Duration) -> Result<(), Abort> {
        let shared = self.fleet.shared;
        if !shared.await_done(id, timeout, &self.cancel()).await? {
            let name = self.proc(id, |p| p.name.clone());
            shared.kill_quietly(id).await;
            self.state.fail(format!(
                "{name} did not finish within {}s and was killed",
                timeout.as_secs()
            ));
        }
        Ok(())
    }

    /// Waits until `id` has ended and its output is read; false on timeout.
    pub async fn await_done(
        &self,
        id: ProcId,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<bool, Interrupted> {
        self.fleet.shared.await_done(id, timeout, cancel).await
    }

    /// SIGKILLs `id` as the harness's own doing (no finding) and waits for its end.
    pub async fn kill_quietly(&self, id: ProcId) {
        self.fleet.shared.kill_quietly(id).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_live_under_the_cell() {
        assert_eq!(cell_dir("migrate-first"), "logs/migrate-first");
    }
}
