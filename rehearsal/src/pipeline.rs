//! `rehearse run`, wired: artifacts -> driver -> reconcile -> report.
//!
//! The artifacts are resolved and the report folder made here; the driver
//! then runs the cells on a thread of its own and tells this one what
//! happens through the event stream ([`crate::stream`]). Reconciliation
//! is wired into the driver here (`judging`): a cell's findings are read
//! from its database, and the driver sends each finished cell's verdict
//! right after it, so the stream arrives judged. Each event is recorded
//! in `events.jsonl`, shown on the terminal and collected into the report,
//! which is written when the stream ends (`readers`).
//!
//! This file runs the stages in order; each stage's setup has its own
//! file: the servers found (`servers`), the artifacts wanted and built
//! (`wanted`), the backend chosen and on docker its images made
//! (`backend`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::Error;
use crate::artifacts::Repo;
use crate::driver::run::RunRequest;
use crate::exit::RunOutcome;
use crate::plan::Plan;
use crate::report::{self, RunReport};
use crate::schedule::pressure::Busy;
use crate::schedule::{History, Machine, Schedule};
use crate::stress::{BusyLoad, Stress, StressInfo};
use crate::vocab::{Backend, Color, Format};

mod backend;
mod judging;
pub mod locate_servers;
mod readers;
mod wanted;

/// What `rehearse run` was asked to do, validated.
#[derive(Clone, Debug)]
pub struct RunArgs {
    /// The expanded plan.
    pub plan: Plan,
    /// The repository (artifacts, builds).
    pub repo: Repo,
    /// Where the run's report folder is created.
    pub reports_root: PathBuf,
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--backend`.
    pub backend: Backend,
    /// `--jobs`.
    pub jobs: crate::schedule::Jobs,
    /// `--keep`.
    pub keep: bool,
    /// `--pg-bindir`/`$REHEARSE_PG_BINDIR`, `$AWA_PG_BINDIR`: searched first.
    pub pg_bindirs: Vec<(&'static str, PathBuf)>,
    /// `--quiet`.
    pub quiet: bool,
    /// `--json`: report.json on stdout.
    pub json: bool,
    /// `--format`: `json` streams the events on stdout as they happen.
    pub format: Format,
    /// `--color`: whether the summary on stdout is coloured.
    pub color: Color,
    /// The command line, for the record (secrets redacted).
    pub command_line: String,
    /// `rehearse selftest`: score the run against the runtime's seeded defects.
    pub selftest: bool,
    /// `rehearse replay`: the plan.json whose artifact digests the run must match.
    pub pinned: Option<(PathBuf, crate::planfile::PlanFile)>,
    /// `--stress`: busy processes beside the cells.
    pub stress: Option<crate::stress::Stress>,
    /// `--durations FILE`, as read: the history the schedule orders and
    /// sizes the run by, instead of the newest under `reports_root` (a
    /// share of a `--partition duration` run starts its cells longest
    /// first by the same times that split it).
    pub history: Option<History>,
    /// `--retries`: how many more tries an inconclusive cell gets.
    pub retries: u32,
    /// The matrix the plan was expanded from, for another try's plan
    /// (`None`: a replay, which runs the recorded plan and never retries).
    pub matrix: Option<Arc<crate::matrix::Matrix>>,
    /// `--workspace-binary`: the awa binary taken as the workspace build
    /// instead of building one (`rehearse mutate` passes a mutant's).
    pub workspace_binary: Option<PathBuf>,
    /// Other work on the machine before the run started anything (so
    /// none of it is the run's own): `--jobs auto` packs fewer cells.
    pub busy: Option<Busy>,
}

/// A finished run: its report and the folder it was written to.
#[derive(Clone, Debug)]
pub struct Finished {
    /// What `report.json` holds.
    pub report: RunReport,
    /// The run's report folder.
    pub dir: PathBuf,
}

/// Runs every cell of the plan and writes the report.
pub fn run(args: RunArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<RunOutcome, Error> {
    Ok(run_report(args, out, err)?.report.outcome())
}

/// [`run`], handing back the report and where it was written.
pub fn run_report(
    args: RunArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Finished, Error> {
    let wall = Instant::now();
    let stamp = report::utc(SystemTime::now());
    let chosen = backend::choose_backend(args.backend, args.quiet, err)?;
    let docker = chosen.engine.is_some();
    crate::artifacts::check(&args.repo, &wanted::wanted_here(&args.plan, docker))?;
    let servers = locate_servers::for_run(&args, err)?;
    if docker {
        backend::check_registries(&args, err)?;
    }
    let mut resolution = wanted::resolve(&args, docker, err)?;
    if let Some((file, pinned)) = &args.pinned
        && !docker
    {
        // Before the report folder and any server: a changed artifact starts nothing.
        pinned.check(file, &resolution)?;
    }
    // Read before this run's folder exists, so the history is an earlier run.
    let history = match &args.history {
        Some(history) => history.clone(),
        None => History::best_for(&args.reports_root, &args.plan.cells, chosen.backend()),
    };
    // Before the schedule: every cell runs beside the load. The machine's
    // load was read when the command started, before this run's own.
    // Dropped (killed and reaped) on every way out.
    let (mut load, stress) = start_stress(args.stress, args.quiet, err)?;
    let machine = Machine::here(chosen.backend(), args.busy);
    let schedule = Schedule::new(&args.plan, args.jobs, &history, &machine);
    let dir =
        readers::create_report_dir(&args.reports_root, &stamp.compact, resolution.git.short())?;
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fleet = backend::make_fleet(&args, &chosen, &run_id, &dir, &mut resolution, err)?;
    let plan_file = crate::planfile::PlanFile::of(&args.plan, &resolution);
    std::fs::write(dir.join(crate::planfile::PLAN_JSON), plan_file.to_json())
        .map_err(Error::Output)?;
    if !args.quiet {
        announce(&args, &run_id, &dir, &schedule, err)?;
    }
    let request = RunRequest {
        plan: args.plan.clone(),
        resolution,
        report_dir: dir.clone(),
        run_id,
        started_at: stamp.rfc3339,
        wall,
        servers,
        backend: fleet.backend().to_owned(),
        fleet,
        backend_reason: chosen.reason,
        engine: chosen.engine.as_ref().map(|e| e.describe()),
        schedule,
        keep: args.keep,
        command_line: args.command_line.clone(),
        selftest: args.selftest,
        retry: judging::retry_inconclusive(&args),
        stress,
    };
    let report = drive(request, &args, &dir, out, err)?;
    // The driver has counted its children's CPU: the load's is not the run's.
    if let Some(load) = &mut load {
        load.stop();
    }
    readers::write_report(&report, &dir, &args, out, err)?;
    Ok(Finished { report, dir })
}

/// The run's first lines: its id, how many cells, where the report goes,
/// and the schedule.
fn announce(
    args: &RunArgs,
    run_id: &str,
    dir: &Path,
    schedule: &Schedule,
    err: &mut dyn Write,
) -> Result<(), Error> {
    writeln!(
        err,
        "run {run_id}: {}, report in {}",
        report::text::plural(args.plan.cells.len(), "cell"),
        dir.display()
    )?;
    writeln!(err, "{}", schedule.describe)?;
    Ok(())
}

/// `--stress`: its busy processes started (and said, unless quiet), with
/// what the report records of them.
fn start_stress(
    stress: Option<Stress>,
    quiet: bool,
    err: &mut dyn Write,
) -> Result<(Option<BusyLoad>, Option<StressInfo>), Error> {
    let Some(stress) = stress else {
        return Ok((None, None));
    };
    let info = stress.info(crate::schedule::cores());
    let load = BusyLoad::start(info.processes).map_err(|e| {
        Error::Harness(format!(
            "could not start the busy processes of --stress {stress}: {e}"
        ))
    })?;
    if !quiet {
        writeln!(err, "stress: {}", info.describe())?;
    }
    Ok((Some(load), Some(info)))
}

/// The driver on a thread of its own, its events reported on this one
/// as they come; the report the stream folds into.
fn drive(
    request: RunRequest,
    args: &RunArgs,
    dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunReport, Error> {
    let (events, rx) = crate::stream::channel();
    let reconcile = Arc::new(judging::DatabaseReconcile {
        dir: dir.to_owned(),
    });
    let driver =
        std::thread::spawn(move || crate::driver::run::execute(request, events, reconcile));
    let stream = (args.format == Format::Json).then_some(&mut *out);
    let collected = readers::report_events(rx, dir, args.quiet, stream, err);
    let ran = driver.join().unwrap_or_else(|_| {
        Err(crate::driver::run::RunError::Harness(
            "the driver's thread panicked".into(),
        ))
    });
    if let Err(e) = ran {
        // Nothing ran: leave no empty report folder behind.
        let _ = std::fs::remove_dir(dir);
        return Err(e.into());
    }
    collected?
        .ok_or_else(|| Error::Harness("the run's event stream ended before the run did".into()))
}

fn one_shot_runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Harness(format!("could not start the async runtime: {e}")))
}
