//! A whole run: PostgreSQL, the signal handler, the cells (`--jobs` at a
//! time, longest first: see [`crate::schedule`]), each reporting through
//! the run's event stream.
//!
//! Ctrl-C (SIGINT) or SIGTERM to rehearse interrupts the run: every cell
//! that is running stops its processes (SIGTERM, then SIGKILL after 3 s),
//! is reported as inconclusive, and no further cell starts; the cluster is
//! stopped and the stream ends, so the report of what ran is written. Children die with
//! rehearse even if it is SIGKILLed (see `fleet::process`).
//!
//! This file holds the run's request, its start and end, and its CPU
//! time; inside `run/`: `servers` (PostgreSQL opened and stopped),
//! `header` (what `run_started` records), `signals` (Ctrl-C, SIGTERM) and
//! `cells` (the cells started as the schedule admits them, each tried
//! until it is final).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use nix::sys::resource::UsageWho;
use tokio::sync::watch;

use super::CellContext;
use super::cell::{Reconcile, Retry};
use super::database::Server;
use super::ledger::Cancel;
use crate::artifacts::Resolution;
use crate::fleet::Fleet;
use crate::plan::Plan;
use crate::stream::{Events, HeldBack, Note, RunEnd, RunEvent};

mod cells;
mod header;
mod servers;
mod signals;

use cells::run_each_cell;
pub use header::migration_checksums;
use header::run_start;
use servers::{open_servers, stop_server};
pub use signals::signalled;
use signals::watch_signals;

/// Why a run could not run at all: the library's `Error` wraps it (as
/// `Harness` and `Postgres`, so a caller sees the same kinds as before).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The harness failed outside any cell (the async runtime).
    #[error("{0}")]
    Harness(String),
    /// No PostgreSQL to run against: a throwaway cluster that would not
    /// start, a `--database-url` that does not answer.
    #[error("no PostgreSQL to run the cells against: {0}")]
    Postgres(String),
}

/// Overrides where report folders are created (default: `<repo>/reports`).
pub const REPORTS_DIR_ENV: &str = "REHEARSE_REPORTS_DIR";

/// What `rehearse run` was asked to do, validated, with its artifacts
/// resolved and its report folder made.
pub struct RunRequest {
    /// The expanded plan.
    pub plan: Plan,
    /// The artifacts, each binary built or unpacked.
    pub resolution: Resolution,
    /// The run's report folder (process logs go under it).
    pub report_dir: PathBuf,
    /// The report folder's name.
    pub run_id: String,
    /// When the run began, RFC 3339 in UTC.
    pub started_at: String,
    /// When the run began, for its wall time (artifacts included).
    pub wall: Instant,
    /// The PostgreSQL servers the cells are planned on, found before anything started.
    pub servers: Vec<crate::servers::Spec>,
    /// The backend that starts processes, and its name for the report.
    pub fleet: Arc<dyn Fleet>,
    /// `process` or `docker`, as resolved.
    pub backend: String,
    /// Why that backend (printed, and in the report).
    pub backend_reason: String,
    /// The Docker engine's version and address, on the docker backend.
    pub engine: Option<String>,
    /// How many cells at once, in which order.
    pub schedule: crate::schedule::Schedule,
    /// `--keep`.
    pub keep: bool,
    /// The command line, for the record (secrets redacted).
    pub command_line: String,
    /// `rehearse selftest`: score the run against the runtime's seeded defects.
    pub selftest: bool,
    /// Whether and how an inconclusive cell is tried again (`None`: never).
    pub retry: Option<Arc<dyn Retry>>,
    /// `--stress`: the busy processes running beside the cells, for the report.
    pub stress: Option<crate::stress::StressInfo>,
}

/// Runs every cell of the plan, sending the run's events to `events`
/// (from `run_started` to `run_finished`); `reconcile` reads each cell's
/// findings from its database and judges each finished cell. Fails only when nothing could run (no
/// PostgreSQL, no async runtime).
pub fn execute(
    req: RunRequest,
    events: Events,
    reconcile: Arc<dyn Reconcile>,
) -> Result<(), RunError> {
    // The CPU figures count from here: what came before (the artifacts'
    // builds) is the preparation, timed apart.
    let prepare_ms = req.wall.elapsed().as_millis() as u64;
    let harness_before = cpu_ms(UsageWho::RUSAGE_SELF);
    let children_before = cpu_ms(UsageWho::RUSAGE_CHILDREN);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Harness(format!("could not start the async runtime: {e}")))?;
    let ran = runtime.block_on(run_cells(&req, &events, reconcile));
    // Everything of this run goes, whatever happened (a failed cell, Ctrl-C).
    let shutdown = runtime.block_on(req.fleet.shutdown());
    // Stopping the cluster reaps it, so its CPU time counts below.
    let ran = ran.map(|mut ran| {
        for server in std::mem::take(&mut ran.servers) {
            ran.notes.extend(stop_server(server, req.keep));
        }
        ran
    });
    drop(runtime);
    let ran = ran?;
    match shutdown {
        Ok(done) if !done.kept.is_empty() => events.send(RunEvent::Note(Note::always(
            None,
            format!(
                "kept {} of this run (--keep): {}",
                crate::observe::count(done.kept.len() as u64, "container"),
                done.kept.join(", ")
            ),
        ))),
        Ok(done) if !done.removed.is_empty() => events.send(RunEvent::Note(Note::always(
            None,
            format!(
                "removed {} of this run at shutdown: {}",
                crate::observe::count(done.removed.len() as u64, "container"),
                done.removed.join(", ")
            ),
        ))),
        Ok(_) => {}
        Err(e) => events.send(RunEvent::Note(Note::always(
            None,
            format!("shutdown: {}", awa_runtime::error::chain(&e)),
        ))),
    }
    for note in ran.notes {
        events.send(RunEvent::Note(Note::always(None, note)));
    }
    if let Some(held) = ran
        .held_back
        .filter(|h| h.times > 0 || h.grew_to.is_some() || h.shrank_to.is_some())
    {
        events.send(RunEvent::Note(Note::always(
            None,
            format!("jobs auto {}", held.describe()),
        )));
    }
    let containers = req.fleet.container_cpu();
    events.send(RunEvent::RunFinished(RunEnd {
        finished_at: crate::stamp::utc(SystemTime::now()).rfc3339,
        wall_ms: req.wall.elapsed().as_millis() as u64,
        prepare_ms,
        harness_cpu_ms: cpu_ms(UsageWho::RUSAGE_SELF).saturating_sub(harness_before),
        children_cpu_ms: cpu_ms(UsageWho::RUSAGE_CHILDREN).saturating_sub(children_before)
            + containers.map_or(0, |c| c.ms + c.engine_ms.unwrap_or(0)),
        container_cpu_ms: containers.map(|c| c.ms),
        container_cpu_source: containers.map(|c| c.source),
        engine_cpu_ms: containers.and_then(|c| c.engine_ms),
        interrupted: ran.interrupted,
        held_back: ran.held_back,
    }));
    Ok(())
}

/// What the asynchronous part of a run produced.
struct Ran {
    interrupted: bool,
    servers: Vec<Server>,
    notes: Vec<String>,
    held_back: Option<HeldBack>,
}

async fn run_cells(
    req: &RunRequest,
    events: &Events,
    reconcile: Arc<dyn Reconcile>,
) -> Result<Ran, RunError> {
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancel = Cancel::new(cancel_rx);
    let signals = watch_signals(cancel_tx, events.clone());
    let (servers, infos) = match open_servers(&req.servers).await {
        Ok(opened) => opened,
        Err(e) => {
            signals.abort();
            return Err(e);
        }
    };
    events.send(RunEvent::RunStarted(run_start(req, infos)));
    let Some(first) = servers.values().next().cloned() else {
        return Err(RunError::Postgres("no server was planned".into()));
    };
    let ctx = CellContext {
        fleet: req.fleet.clone(),
        artifacts: Arc::new(req.resolution.artifacts.clone()),
        report_dir: req.report_dir.clone(),
        run_id: req.run_id.clone(),
        server: first,
        keep: req.keep,
        cancel: cancel.clone(),
        expand_version: req.resolution.expand_version,
        events: events.clone(),
        attempt: 1,
        starving: Arc::default(),
    };
    let (notes, held_back) = run_each_cell(req, &ctx, &servers, reconcile).await;
    signals.abort();
    drop(ctx);
    Ok(Ran {
        interrupted: cancel.is_set(),
        servers: servers.into_values().collect(),
        notes,
        held_back,
    })
}

/// User plus system CPU time of `who` (`RUSAGE_SELF`, `RUSAGE_CHILDREN`), in ms.
fn cpu_ms(who: UsageWho) -> u64 {
    let Ok(usage) = nix::sys::resource::getrusage(who) else {
        return 0;
    };
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000 + t.tv_usec() as u64 / 1_000;
    ms(usage.user_time()) + ms(usage.system_time())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_measured() {
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed().as_millis() < 30 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ms(UsageWho::RUSAGE_SELF) > 0);
    }
}
