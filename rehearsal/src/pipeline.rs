//! `rehearse run`, wired: artifacts -> driver -> reconcile -> report.
//!
//! The artifacts are resolved and the report folder made here; the driver
//! then runs the cells on a thread of its own and tells this one what
//! happens through the event stream ([`crate::stream`]). Reconciliation
//! is wired into the driver here (`DatabaseReconcile`): a cell's findings
//! are read from its database, and the driver sends each finished cell's
//! verdict right after it, so the stream arrives judged. Each event is
//! recorded in `events.jsonl`, shown on the terminal and collected into
//! the report, which is written when the stream ends.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::Error;
use crate::artifacts::{self, Repo, Resolution};
use crate::driver::cell::{Reconcile, Retry};
use crate::driver::run::RunRequest;
use crate::exit::RunOutcome;
use crate::fleet::choice::Chosen;
use crate::fleet::{DockerFleet, Fleet, ProcessFleet};
use crate::matrix::{Artifact, ArtifactSource};
use crate::observe::{Finding, Observations, StepOutcome, Verdict};
use crate::plan::{CellPlan, Plan};
use crate::report::{self, Collector, RunReport, terminal::Terminal};
use crate::schedule::pressure::Busy;
use crate::schedule::{History, Machine, Schedule};
use crate::servers::Spec;
use crate::stream::{CellRun, RunEvent};
use crate::stress::{BusyLoad, Stress, StressInfo};
use crate::vocab::{Backend, Color, Format};
use awa_harness::pgtemp::Search;

pub mod servers;

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

/// Reconciliation over a cell's database, and the verdict on the finished
/// cell, as the driver asks for them; the terminal history it judged goes
/// into the run folder `dir` (`history/<cell>.json.gz`), for `rehearse verify`.
struct DatabaseReconcile {
    dir: PathBuf,
}

impl Reconcile for DatabaseReconcile {
    fn findings<'a>(
        &'a self,
        database_url: &'a str,
        plan: &'a CellPlan,
        observations: &'a Observations,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Finding>, String>> + Send + 'a>> {
        Box::pin(async move {
            let client = crate::pg::connect(database_url)
                .await
                .map_err(|e| format!("reconciliation could not connect: {e}"))?;
            let (findings, _, history) =
                crate::reconcile::reconcile_recorded(&client, plan, observations)
                    .await
                    .map_err(|e| awa_runtime::error::chain(&e))?;
            // The evidence is part of the verdict: a cell whose history
            // cannot be kept is not judged.
            let file = crate::reconcile::history::path(&self.dir, &plan.name);
            crate::reconcile::history::write(&file, &history)
                .map_err(|e| format!("could not record the terminal history: {e}"))?;
            Ok(findings)
        })
    }

    fn judged(&self, run: &CellRun) -> RunEvent {
        crate::reconcile::cell_judged(run)
    }
}

/// Another try for a cell the judgement leaves inconclusive for the
/// harness's own reasons, on a plan drawn again from the matrix with
/// the try's seed.
struct RetryInconclusive {
    matrix: Arc<crate::matrix::Matrix>,
    seed: u64,
    /// Tries in all: the first and `--retries` more.
    tries: u32,
}

impl Retry for RetryInconclusive {
    fn again(&self, judged: &RunEvent, attempt: u32) -> Option<String> {
        if attempt >= self.tries {
            return None;
        }
        match judged {
            RunEvent::CellJudged {
                verdict: Verdict::Inconclusive,
                harness_error,
                ..
            } => retryable(harness_error.as_deref()?),
            _ => None,
        }
    }

    fn replan(&self, plan: &CellPlan, attempt: u32) -> Option<(CellPlan, u64)> {
        let seed = crate::plan::retry_seed(self.seed, attempt);
        Some((crate::plan::replan(&self.matrix, plan, seed)?, seed))
    }
}

/// Whether a cell inconclusive for `why` is worth another try: not when
/// the run was interrupted or the cell could not start at all (no
/// database, a server without what the cell needs), which a new seed
/// does not change.
fn retryable(why: &str) -> Option<String> {
    const FINAL: [&str; 4] = [
        "interrupted",
        "could not create the cell's database",
        "pg_crash needs the throwaway PostgreSQL cluster",
        "interrupted before the cell started",
    ];
    (!FINAL.iter().any(|f| why.starts_with(f))).then(|| why.to_owned())
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
    let chosen = choose_backend(args.backend, args.quiet, err)?;
    let docker = chosen.engine.is_some();
    artifacts::check(&args.repo, &wanted_here(&args.plan, docker))?;
    let servers = locate_servers(&args, err)?;
    if docker {
        check_registries(&args, err)?;
    }
    let mut resolution = resolve(&args, docker, err)?;
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
    let dir = create_report_dir(&args.reports_root, &stamp.compact, resolution.git.short())?;
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fleet = make_fleet(&args, &chosen, &run_id, &dir, &mut resolution, err)?;
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
        retry: retry_inconclusive(&args),
        stress,
    };
    let report = drive(request, &args, &dir, out, err)?;
    // The driver has counted its children's CPU: the load's is not the run's.
    if let Some(load) = &mut load {
        load.stop();
    }
    write_report(&report, &dir, &args, out, err)?;
    Ok(Finished { report, dir })
}

/// Before any build, on the docker backend: the registries the run pulls from answer.
fn check_registries(args: &RunArgs, err: &mut dyn Write) -> Result<(), Error> {
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    one_shot_runtime()?.block_on(crate::image::resolve::check_registries(
        &wanted(&args.plan),
        &mut progress,
    ))?;
    Ok(())
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

/// `--retries N` (with the matrix file the cells came from): an
/// inconclusive cell is tried again, up to N more times.
fn retry_inconclusive(args: &RunArgs) -> Option<Arc<dyn Retry>> {
    args.matrix
        .clone()
        .filter(|_| args.retries > 0)
        .map(|matrix| {
            Arc::new(RetryInconclusive {
                matrix,
                seed: args.plan.seed,
                tries: args.retries + 1,
            }) as Arc<dyn Retry>
        })
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

/// The backend that starts the processes. On docker, the artifacts are
/// made images first (and checked against `rehearse replay`'s pins); on
/// failure nothing is left behind: no containers, no empty report folder.
fn make_fleet(
    args: &RunArgs,
    chosen: &Chosen,
    run_id: &str,
    dir: &Path,
    resolution: &mut Resolution,
    err: &mut dyn Write,
) -> Result<Arc<dyn Fleet>, Error> {
    let Some(engine) = &chosen.engine else {
        return Ok(Arc::new(ProcessFleet));
    };
    let docker = DockerFleet::new(engine.clone(), run_id, args.keep);
    if let Err(e) = docker_stage(args, &docker, resolution, err) {
        // Nothing ran: no containers and no empty report folder left behind.
        let _ = std::fs::remove_dir_all(dir);
        return Err(e);
    }
    if let Some((file, pinned)) = &args.pinned
        && let Err(e) = pinned.check(file, resolution)
    {
        let _ = one_shot_runtime()?.block_on(docker.shutdown());
        let _ = std::fs::remove_dir_all(dir);
        return Err(e.into());
    }
    Ok(Arc::new(docker))
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
    let reconcile = Arc::new(DatabaseReconcile {
        dir: dir.to_owned(),
    });
    let driver =
        std::thread::spawn(move || crate::driver::run::execute(request, events, reconcile));
    let stream = (args.format == Format::Json).then_some(&mut *out);
    let collected = report_events(rx, dir, args.quiet, stream, err);
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

/// `--backend`, resolved: docker needs an engine that answers; auto takes
/// docker when one does. Says which and why.
fn choose_backend(backend: Backend, quiet: bool, err: &mut dyn Write) -> Result<Chosen, Error> {
    let chosen = one_shot_runtime()?.block_on(crate::fleet::choice::choose(backend))?;
    if !quiet || backend == Backend::Auto {
        writeln!(err, "{}", chosen.reason)?;
    }
    Ok(chosen)
}

fn one_shot_runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Harness(format!("could not start the async runtime: {e}")))
}

/// On docker: leftovers of crashed earlier runs removed (and counted),
/// then every artifact made an image (built, reused or pulled) and probed.
/// On failure, the probes' containers are removed too.
fn docker_stage(
    args: &RunArgs,
    docker: &DockerFleet,
    resolution: &mut Resolution,
    err: &mut dyn Write,
) -> Result<(), Error> {
    let runtime = one_shot_runtime()?;
    let prepared = runtime.block_on(docker.prepare())?;
    writeln!(
        err,
        "docker: removed {} of earlier runs{}",
        report::text::plural(prepared.removed.len(), "leftover container"),
        if prepared.removed.is_empty() {
            String::new()
        } else {
            format!(": {}", prepared.removed.join(", "))
        }
    )?;
    let wanted = wanted(&args.plan);
    let manifest = awa_harness::release::load_manifest(&args.repo.artifacts()).ok();
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    let made = runtime.block_on(crate::image::resolve::images_for_run(
        docker.engine(),
        &wanted,
        &mut resolution.artifacts,
        manifest.as_ref(),
        &resolution.git,
        docker.run_labels("", "probe"),
        &mut progress,
    ));
    if made.is_err() {
        let _ = runtime.block_on(docker.shutdown());
    }
    Ok(made?)
}

/// Every artifact the selected cells name.
fn wanted(plan: &Plan) -> BTreeMap<String, Artifact> {
    let mut wanted = BTreeMap::new();
    for cell in &plan.cells {
        for (name, artifact) in &cell.artifacts {
            wanted.insert(name.clone(), artifact.clone());
        }
    }
    wanted
}

/// The artifacts this stage builds: with an engine, image artifacts are
/// left to the docker stage.
fn wanted_here(plan: &Plan, docker: bool) -> BTreeMap<String, Artifact> {
    wanted(plan)
        .into_iter()
        .filter(|(_, a)| !docker || !matches!(a.source, ArtifactSource::Image(_)))
        .collect()
}

/// The PostgreSQL server of each major the cells are planned on, found
/// (or `--database-url` checked against them) before anything is built
/// or started: a missing major is bad input that says how to install it.
fn locate_servers(args: &RunArgs, err: &mut dyn Write) -> Result<Vec<Spec>, Error> {
    let keys = crate::servers::keys(&args.plan);
    let specs = match &args.database_url {
        Some(url) => {
            // Before any build: flags first, then the server itself (its
            // credentials, its database, its major).
            servers::one_server(&keys)?;
            let major = one_shot_runtime()?
                .block_on(crate::driver::database::server_major(url))
                .map_err(|e| database_refused(e.to_string()))?;
            servers::external(url, &keys, Some(major))?
        }
        None => {
            let mut search = Search::from_env();
            search.env_dirs = args.pg_bindirs.clone();
            servers::locate(&search, &keys)?
        }
    };
    if !args.quiet {
        for spec in &specs {
            if let Spec::Throwaway { major, install } = spec {
                let on = major.map_or_else(String::new, |m| format!("{m}: "));
                writeln!(
                    err,
                    "postgres {on}{} in {} (from {})",
                    install.version,
                    install.bindir.display(),
                    install.origin
                )?;
            }
        }
    }
    Ok(specs)
}

/// A `--database-url` the server refused: its credentials or its database
/// (SQLSTATE class 28, or 3D000) are bad input, anything else (no answer,
/// a server that went away) is the infrastructure. The codes are read in
/// the message because the runtime's connect error carries them as text.
fn database_refused(message: String) -> Error {
    const BAD_INPUT: [&str; 2] = ["(SQLSTATE 28", "(SQLSTATE 3D000)"];
    if BAD_INPUT.iter().any(|code| message.contains(code)) {
        Error::BadFlag {
            flag: "--database-url",
            message: format!(
                "{message}; check the user, password and database of --database-url (or REHEARSE_DATABASE_URL)"
            ),
        }
    } else {
        Error::Postgres(format!("{message}; check --database-url"))
    }
}

/// Artifacts: every source checked, then each binary built once; with an
/// engine, image artifacts are left to the docker stage.
fn resolve(args: &RunArgs, docker: bool, err: &mut dyn Write) -> Result<Resolution, Error> {
    let wanted = wanted_here(&args.plan, docker);
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    Ok(artifacts::resolve_with(
        &args.repo,
        &wanted,
        args.workspace_binary.as_deref(),
        &mut progress,
    )?)
}

/// A new report folder (`-2`, `-3`, ... when the name is taken).
fn create_report_dir(root: &Path, compact: &str, short_sha: &str) -> Result<PathBuf, Error> {
    let first = report::report_dir(root, compact, short_sha);
    let mut dir = first.clone();
    for n in 2.. {
        if !dir.exists() {
            break;
        }
        dir = PathBuf::from(format!("{}-{n}", first.display()));
    }
    std::fs::create_dir_all(&dir).map_err(Error::Output)?;
    Ok(dir)
}

/// Records, shows and collects the stream until it ends; with
/// `stream` (`--format json`), each recorded line is also written there
/// as it happens. A reader that goes away (`| head`) stops the stream,
/// not the run: its cells still finish and clean up.
fn report_events<'w>(
    mut rx: UnboundedReceiver<RunEvent>,
    dir: &Path,
    quiet: bool,
    mut stream: Option<&mut (dyn Write + 'w)>,
    err: &mut dyn Write,
) -> Result<Option<RunReport>, Error> {
    let mut terminal = Terminal::new(quiet);
    let mut collector = Collector::default();
    let mut recording = Vec::new();
    while let Some(event) = rx.blocking_recv() {
        let line = report::event_line(&event)
            .map_err(|e| Error::Harness(awa_runtime::error::chain(&e)))?;
        if let Some(out) = &mut stream
            && writeln!(out, "{line}").and_then(|()| out.flush()).is_err()
        {
            stream = None;
        }
        recording.push(line);
        terminal.show(&event, err)?;
        collector.add(&event);
    }
    let report = collector.finish();
    if report.is_some() {
        recording.push(String::new());
        std::fs::write(dir.join(report::EVENTS_JSONL), recording.join("\n"))
            .map_err(Error::Output)?;
    }
    Ok(report)
}

/// The report files, the summary, and the exit outcome. The summary (the
/// table, or with `--quiet` the failures and the verdict line) goes to
/// stdout, unless stdout carries report.json (`--json`) or the event
/// stream (`--format json`): then to stderr.
fn write_report(
    report: &RunReport,
    dir: &Path,
    args: &RunArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Error> {
    let harness = |e: report::ReportError| Error::Harness(awa_runtime::error::chain(&e));
    report::write_all(dir, report).map_err(harness)?;
    let machine = args.json || args.format == Format::Json;
    let color = report::terminal::use_color(args.color) && !machine;
    let summary = if args.quiet {
        report::terminal::quiet_summary(report, color)
    } else {
        report::terminal::summary_table(report, color)
    };
    if args.json {
        out.write_all(report::to_json(report).map_err(harness)?.as_bytes())?;
    }
    if machine {
        err.write_all(summary.as_bytes())?;
    } else {
        out.write_all(summary.as_bytes())?;
    }
    if args.quiet {
        // The failures are in the summary; the selftest score is its verdict.
        if let Some(score) = &report.selftest {
            writeln!(out, "{}", score.headline())?;
        }
        return Ok(());
    }
    for cell in report.cells.iter().filter(|c| c.verdict == Verdict::Fail) {
        for phase in cell
            .timeline
            .iter()
            .filter(|p| p.outcome == StepOutcome::Failed)
        {
            writeln!(
                err,
                "{}: step {} ({}) failed: {}",
                cell.name, phase.step, phase.name, phase.detail
            )?;
        }
    }
    if report.run.end.interrupted {
        writeln!(err, "interrupted: the report covers the cells that ran")?;
    }
    if let Some(score) = &report.selftest {
        for line in score.lines() {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(err, "report: {}", dir.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_refusing_the_credentials_or_database_is_bad_input_else_infrastructure() {
        let code = |m: &str| crate::exit::for_error(&database_refused(m.to_owned()));
        assert_eq!(
            code("password authentication failed for user \"u\" (SQLSTATE 28P01)"),
            crate::exit::BAD_INPUT
        );
        assert_eq!(
            code("database \"nope\" does not exist (SQLSTATE 3D000)"),
            crate::exit::BAD_INPUT
        );
        assert_eq!(
            code("could not connect to postgres://u:***@h:1/db: Connection refused (os error 111)"),
            crate::exit::INCONCLUSIVE
        );
        assert_eq!(
            code("the database system is starting up (SQLSTATE 57P03)"),
            crate::exit::INCONCLUSIVE
        );
    }
}
