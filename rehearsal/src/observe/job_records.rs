//! What became of the workload's jobs as the fleet reported them: the
//! jobs accepted, the cron windows, and the attempts whose fate
//! reconciliation must weigh (disowned, unstopped, late results,
//! overruns nobody rescued).

use awa_runtime::workload::Mode;
use serde::{Deserialize, Serialize};

/// A job a producer reported `accepted` (printed only after commit), or
/// reported `uncertain` (its commit's fate unknown).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedJob {
    pub job_id: i64,
    /// The workload mode.
    pub mode: Mode,
    pub max_attempts: i32,
    /// Version of the producer that enqueued it.
    pub version: String,
    /// For a scheduled job, the `run_at` its producer wrote (Unix ms; the
    /// database stores it as given). Added in report format 1.16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<i64>,
}

/// A cron schedule and the window in which every fire time must have
/// produced exactly one job: fire times `t` with `from_ms < t <= to_ms`
/// (Unix ms) that are multiples of `every_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronWindow {
    pub name: String,
    pub every_ms: i64,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// An attempt its own run disowned: the worker reported its lease lost
/// or its close lost, never its close recorded, so no terminal record
/// naming this run lease is that run's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DisownedRun {
    pub job_id: i64,
    pub run_lease: i64,
}

/// A worker started a newer attempt (run lease) of a job while its
/// handler of an older one still ran: it had neither finished that
/// attempt nor reported its lease lost. The newer run lease proves the
/// older was rescued (or cancelled), so a runtime that stops the handlers
/// of lost leases (0.7 on) must have stopped it first; left running, it
/// holds one of the worker's concurrency slots for as long as it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnstoppedHandler {
    /// The worker (e.g. `current-worker-2`).
    pub process: String,
    pub job_id: i64,
    /// The older attempt, still running in the worker.
    pub attempt: i32,
    pub run_lease: i64,
    /// The newer run lease it started.
    pub next_run_lease: i64,
    /// When it started the newer one (ms since the cell started).
    pub at_ms: u64,
}

/// Results of rescued attempts that their workers reported anyway (a
/// worker frozen past its lease, come back): each must lose to the run
/// lease. Added in report format 1.14.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateResultCount {
    /// Reported while the job's next attempt was in flight elsewhere.
    pub during_rerun: u64,
    /// Reported once the next attempt had ended, or before it started.
    pub after_rerun: u64,
    /// The first reported during a rerun: `job 101 by defective_finish-worker-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
}

/// An `overrun_deadline` job whose first attempt its handler ran to
/// completion: a handler that gives up overrunning (the 0.6 releases'
/// after four deadlines) was not deadline-rescued in time. Reconciliation
/// decides whether a rescuer of this release was leading meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UnrescuedOverrun {
    pub job_id: i64,
    /// When the attempt started and ended (ms since the cell started).
    pub started_ms: u64,
    pub finished_ms: u64,
}
