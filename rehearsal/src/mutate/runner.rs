//! Running the mutants: one work copy, one build each, cells until one fails.
//!
//! The workspace is copied once into `target/mutate/work` (kept in step
//! with the workspace on every run; `--work-dir` puts it elsewhere, so two
//! mutate runs need not share one) and built into `target/mutate/target`
//! with incremental compilation, so a mutant costs a rebuild of
//! awa-runtime alone. Each mutant is written into the copy, built, and
//! restored; a build that fails makes it *unviable*.
//!
//! Each cell runs as `rehearse run --cell NAME --workspace-binary BIN`, a
//! child process of this binary: the run pipeline itself (artifacts with
//! the mutant's build as `current`, the driver, reconciliation, the
//! report folder), nothing duplicated. `--jobs` of them run at once
//! ([`child::run_all`]); a child that overruns its budget (a multiple of
//! the cell's time on the clean build) is stopped: the mutant is a
//! *timeout*. The cells first run against the unmutated build (the clean
//! run): a cell that does not pass there cannot judge a mutant and is
//! left out. Then, per mutant, the cells start in the order most likely
//! to kill (most kills in the last mutate report first) until one fails:
//! *killed*, by that cell and the rule its report names, and the cells
//! still running beside it are stopped. A cell that comes out
//! inconclusive (after its `--retries`) does not kill. A mutant every
//! cell passes *survived*.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::child::{self, ms};
pub use super::child::{CellOutcome, CellVerdict, Job};
use super::results::{CleanCell, MutantResult, Status};
pub use super::run_error::RunError;
use super::run_error::copy_err;
use super::stop::Stop;
use super::work_copy::{sync_dir, sync_file};
use super::{Mutant, Tree};

/// What the runner needs from the command line.
#[derive(Clone, Debug)]
pub struct Runner {
    /// The repository the work copy is made from.
    pub root: PathBuf,
    /// Where the work copy (`work/`) and its target directory (`target/`)
    /// are kept (`--work-dir`, default `target/mutate` of the repository).
    pub work_dir: PathBuf,
    /// The matrix file the cells come from.
    pub matrix_file: PathBuf,
    /// The seed every cell runs with.
    pub seed: u64,
    /// `--backend` as its flag value.
    pub backend: String,
    /// `--pg-bindir` directories, passed on.
    pub pg_bindirs: Vec<PathBuf>,
    /// `--database-url`, passed on through the environment.
    pub database_url: Option<String>,
    /// The mutate run's folder.
    pub dir: PathBuf,
    /// A mutant's budget for a cell: this many times the clean run's time...
    pub timeout_factor: u32,
    /// ...plus this, for the run's start.
    pub timeout_floor: Duration,
    /// `--timeout`: the budget instead.
    pub timeout: Option<Duration>,
    /// The `rehearse` binary the cells run with.
    pub rehearse: PathBuf,
    /// Cells run at once (each a child run of one cell).
    pub jobs: u32,
    /// `--retries` for each child: an inconclusive try is tried again
    /// with a new seed, so a race not reached does not spare a mutant.
    pub retries: u32,
    /// Raised by SIGINT or SIGTERM: builds and child runs are stopped.
    pub stop: Stop,
}

impl Runner {
    /// The work copy's root.
    pub fn work(&self) -> PathBuf {
        self.work_dir.join("work")
    }

    /// The target directory the work copy builds into.
    fn target(&self) -> PathBuf {
        self.work_dir.join("target")
    }

    /// The binary a build of the work copy makes.
    pub fn binary(&self) -> PathBuf {
        self.target().join("release").join("awa")
    }

    /// The work copy made equal to the workspace: its manifests, lock file,
    /// and the crates' sources (files that differ are rewritten, so the
    /// build stays incremental).
    pub fn sync(&self) -> Result<(), RunError> {
        let work = self.work();
        for file in ["Cargo.toml", "Cargo.lock"] {
            sync_file(&self.root.join(file), &work.join(file))?;
        }
        for krate in ["awa-runtime", "awa-harness", "rehearsal"] {
            sync_dir(&self.root.join(krate), &work.join(krate))?;
        }
        Ok(())
    }

    /// Builds the work copy: the binary, or `Err` with the compiler's
    /// first error (the mutant is unviable). The build runs in a process
    /// group of its own, so a stop ends cargo and every compiler it
    /// started: the outer `Err`.
    pub fn build(&self) -> Result<Result<PathBuf, String>, RunError> {
        use std::os::unix::process::CommandExt;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let log_path = self.work_dir.join("build.log");
        let log = std::fs::File::create(&log_path).map_err(copy_err(&log_path))?;
        let mut cmd = Command::new(&cargo);
        cmd.args([
            "build",
            "--release",
            "-p",
            "awa-runtime",
            "--bin",
            "awa",
            "--target-dir",
        ])
        .arg(self.target())
        .current_dir(self.work())
        // One crate changes per mutant: incremental rebuilds it in part.
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "true")
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0);
        let status = match cmd.spawn() {
            Ok(build) => wait_group(build, &self.stop)?,
            Err(e) => {
                return Ok(Err(format!(
                    "could not run {}: {e}",
                    Path::new(&cargo).display()
                )));
            }
        };
        if status.success() {
            return Ok(Ok(self.binary()));
        }
        let stderr = std::fs::read_to_string(&log_path).unwrap_or_default();
        let first = stderr
            .lines()
            .skip_while(|l| !l.starts_with("error"))
            .take(6)
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Err(if first.is_empty() {
            format!("cargo exited with {status}")
        } else {
            first
        }))
    }

    /// Writes `mutant` into the work copy (`Some`), or restores the file
    /// it changed (`None` restores `file` from `current`).
    pub fn write(
        &self,
        current: &Tree,
        file: &str,
        mutant: Option<&Mutant>,
    ) -> Result<(), RunError> {
        let text = current.files.get(file).map_or("", String::as_str);
        let path = self.work().join("awa-runtime").join(file);
        let body = match mutant {
            Some(m) => m.apply(text),
            None => text.to_owned(),
        };
        std::fs::write(&path, body).map_err(copy_err(&path))
    }

    /// The child `rehearse run` of one cell against `binary`, its
    /// report folder under `under`.
    pub fn command(&self, cell: &str, binary: &Path, under: &Path) -> Result<Command, RunError> {
        let mut cmd = Command::new(&self.rehearse);
        cmd.arg("--matrix-file")
            .arg(&self.matrix_file)
            .arg("--quiet")
            .args(["run", "--cell", cell, "--seed", &self.seed.to_string()])
            .args(["--backend", &self.backend, "--jobs", "1"])
            .args(["--retries", &self.retries.to_string()])
            .arg("--reports-dir")
            .arg(under)
            .arg("--workspace-binary")
            .arg(binary);
        if !self.pg_bindirs.is_empty() {
            let joined = std::env::join_paths(&self.pg_bindirs).map_err(|e| RunError::Cell {
                cell: cell.to_owned(),
                detail: e.to_string(),
            })?;
            cmd.env(awa_harness::pgtemp::BINDIR_ENV, joined);
        }
        if let Some(url) = &self.database_url {
            cmd.env(crate::vocab::choice::DATABASE_URL_ENV, url);
        }
        Ok(cmd)
    }

    /// Runs `jobs` against `binary`, [`Runner::jobs`] at once, until one
    /// outcome `settles` the build (see [`child::run_all`]).
    pub fn cells(
        &self,
        binary: &Path,
        jobs: &[Job],
        settles: &dyn Fn(&CellOutcome) -> bool,
        seen: &mut dyn FnMut(&CellOutcome),
    ) -> Result<Vec<CellOutcome>, RunError> {
        let command = |job: &Job| self.command(&job.cell, binary, &job.under);
        child::run_all(
            jobs, self.jobs, &self.dir, &command, settles, seen, &self.stop,
        )
    }
}

/// How long a stopped build has to end before its process group is
/// SIGKILLed (cargo and the compilers stop at once on SIGTERM).
const BUILD_GRACE: Duration = Duration::from_secs(10);

/// Waits for `build`, leader of its own process group; when `stop` is
/// asked for, SIGTERM to the whole group (SIGKILL after [`BUILD_GRACE`]),
/// and [`RunError::Interrupted`] once it is gone.
pub fn wait_group(
    mut build: std::process::Child,
    stop: &Stop,
) -> Result<std::process::ExitStatus, RunError> {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let group = i32::try_from(build.id()).map(Pid::from_raw).ok();
    let signal = |s: Signal| {
        if let Some(g) = group {
            let _ = killpg(g, s);
        }
    };
    let mut kill_at = None;
    loop {
        match build.try_wait() {
            Ok(Some(status)) => {
                if kill_at.is_some() {
                    // The group's other members (compilers) go with it.
                    signal(Signal::SIGKILL);
                    stop.check()?;
                }
                return Ok(status);
            }
            Ok(None) => {}
            Err(e) => {
                signal(Signal::SIGKILL);
                let _ = build.wait();
                return Err(RunError::CleanBuild(format!("waiting for cargo: {e}")));
            }
        }
        match kill_at {
            None if stop.requested().is_some() => {
                signal(Signal::SIGTERM);
                kill_at = Some(Instant::now() + BUILD_GRACE);
            }
            Some(at) if Instant::now() >= at => {
                signal(Signal::SIGKILL);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A mutant's budget for a cell that took `clean_ms` on the unmutated
/// build (the cell's own time, not the clean run's artifact builds):
/// `timeout_factor` times it, plus `timeout_floor` for the run's start,
/// for each try the child may make (`--retries` + 1), so a mutant that
/// makes a cell inconclusive try after try is a survivor, not a timeout.
pub fn budget(runner: &Runner, clean_ms: u64) -> Duration {
    if let Some(fixed) = runner.timeout {
        return fixed;
    }
    (Duration::from_millis(clean_ms) * runner.timeout_factor + runner.timeout_floor)
        * (runner.retries + 1)
}

/// What a mutant's outcome in one cell makes of it, if that settles it:
/// a failure kills it; a timeout is its own class (not a kill); a run that
/// stopped before any cell refused the build, which is a kill.
pub fn settled_by(outcome: &CellOutcome, budget_s: u64) -> Option<Status> {
    let rule = || outcome.rule.clone().unwrap_or_default();
    match outcome.verdict {
        CellVerdict::Fail => Some(Status::Killed {
            cell: outcome.cell.clone(),
            rule: rule(),
        }),
        CellVerdict::Timeout => Some(Status::Timeout {
            cell: outcome.cell.clone(),
            budget_s,
        }),
        CellVerdict::Error => Some(Status::Killed {
            cell: "-".into(),
            rule: format!("the run refused the build: {}", rule()),
        }),
        CellVerdict::Pass | CellVerdict::Inconclusive | CellVerdict::Stopped => None,
    }
}

/// Runs one mutant: write, build, then its cells ([`Runner::jobs`] at
/// once, in `order`) until one settles it.
pub fn run_mutant(
    runner: &Runner,
    current: &Tree,
    mutant: &Mutant,
    order: &[(String, u64)],
    progress: &mut dyn FnMut(String),
) -> Result<MutantResult, RunError> {
    let started = Instant::now();
    let text = current.files.get(&mutant.file).map_or("", String::as_str);
    let diff = mutant.diff(text);
    runner.write(current, &mutant.file, Some(mutant))?;
    let built = runner.build();
    runner.write(current, &mutant.file, None)?;
    let built = built?;
    let build_ms = ms(started.elapsed());
    let (status, cells) = match built {
        Err(error) => (Status::Unviable { error }, Vec::new()),
        Ok(binary) => {
            let jobs: Vec<Job> = order
                .iter()
                .map(|(cell, clean_ms)| Job {
                    cell: cell.clone(),
                    under: runner.dir.join(&mutant.id).join(cell),
                    budget: Some(budget(runner, *clean_ms)),
                })
                .collect();
            let budget_of = |cell: &str| {
                jobs.iter()
                    .find(|j| j.cell == cell)
                    .and_then(|j| j.budget)
                    .map_or(0, |b| b.as_secs())
            };
            let settles = |o: &CellOutcome| settled_by(o, budget_of(&o.cell)).is_some();
            let mut seen = |o: &CellOutcome| {
                progress(format!(
                    "  {} {}: {} ({} s)",
                    mutant.id,
                    o.cell,
                    o.verdict,
                    o.elapsed_ms / 1000
                ));
            };
            let cells = runner.cells(&binary, &jobs, &settles, &mut seen)?;
            let status = cells
                .iter()
                .find_map(|o| settled_by(o, budget_of(&o.cell)))
                .unwrap_or(Status::Survived);
            (status, cells)
        }
    };
    Ok(MutantResult {
        mutant: mutant.clone(),
        diff,
        status,
        cells,
        build_ms,
        elapsed_ms: ms(started.elapsed()),
    })
}

/// The whole mutate run: the work copy synced, the clean build and its
/// run of every cell, then each mutant; `report` (its header filled in)
/// gets the results and is rewritten into the run's folder after each
/// mutant, so a run stopped any way keeps what it measured. On SIGINT or
/// SIGTERM ([`Runner::stop`]) what runs is stopped and waited for, the
/// mutant under way is left out, and the report is written marked
/// interrupted.
pub fn session(
    runner: &Runner,
    current: &Tree,
    mutants: &[Mutant],
    cells: &[String],
    mut report: super::report::MutateReport,
    progress: &mut dyn FnMut(String),
) -> Result<super::report::MutateReport, RunError> {
    match measure(runner, current, mutants, cells, &mut report, progress) {
        Ok(()) => Ok(report),
        Err(RunError::Interrupted { signal }) => {
            report.interrupted = true;
            write_report(runner, &report)?;
            progress(format!(
                "mutate: interrupted by {signal}: every child run stopped; the report covers the {} mutants that finished",
                report.mutants.len()
            ));
            Ok(report)
        }
        Err(e) => Err(e),
    }
}

/// `report` written into the run's folder.
fn write_report(runner: &Runner, report: &super::report::MutateReport) -> Result<(), RunError> {
    super::report::write_all(&runner.dir, report).map_err(copy_err(&runner.dir))
}

/// The steps of [`session`], each result put into `report` as it comes.
fn measure(
    runner: &Runner,
    current: &Tree,
    mutants: &[Mutant],
    cells: &[String],
    report: &mut super::report::MutateReport,
    progress: &mut dyn FnMut(String),
) -> Result<(), RunError> {
    progress(format!("mutate: work copy {}", runner.work().display()));
    runner.sync()?;
    runner.stop.check()?;
    progress("mutate: clean build (cargo build --release in the work copy) ...".into());
    let binary = runner.build()?.map_err(RunError::CleanBuild)?;
    let jobs: Vec<Job> = cells
        .iter()
        .map(|cell| Job {
            cell: cell.clone(),
            under: runner.dir.join("clean").join(cell),
            budget: None,
        })
        .collect();
    let mut seen = |o: &CellOutcome| {
        progress(format!(
            "mutate: clean {}: {} ({} s)",
            o.cell,
            o.verdict,
            o.elapsed_ms / 1000
        ));
    };
    let mut clean = runner.cells(&binary, &jobs, &|_| false, &mut seen)?;
    // Back into the kill order the cells were given in.
    clean.sort_by_key(|o| cells.iter().position(|c| *c == o.cell));
    let mut order = Vec::new();
    for outcome in clean {
        let usable = outcome.verdict == CellVerdict::Pass;
        if usable {
            order.push((outcome.cell.clone(), outcome.cell_ms));
        }
        report.clean.push(CleanCell { outcome, usable });
    }
    write_report(runner, report)?;
    for (n, mutant) in mutants.iter().enumerate() {
        runner.stop.check()?;
        progress(format!(
            "mutate: [{}/{}] {} {}:{} {}",
            n + 1,
            mutants.len(),
            mutant.id,
            mutant.file,
            mutant.line,
            mutant.operator
        ));
        let result = run_mutant(runner, current, mutant, &order, progress)?;
        progress(format!(
            "mutate: {} {} in {:.1} s",
            mutant.id,
            result.status.word(),
            result.elapsed_ms as f64 / 1000.0
        ));
        report.mutants.push(result);
        write_report(runner, report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::report::{self, MutateReport};

    /// A fresh folder for one test, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("rehearse-run-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_stopped_build_takes_its_whole_process_group_with_it() {
        use std::os::unix::process::CommandExt;
        let scratch = Scratch::new("group");
        // A leader with two of its own children, as cargo with its compilers.
        let build = Command::new("sh")
            .args([
                "-c",
                "sleep 30 & echo $! > pids; sleep 30 & echo $! >> pids; wait",
            ])
            .current_dir(&scratch.0)
            .process_group(0)
            .spawn()
            .unwrap();
        let stop = Stop::new();
        let asks = stop.clone();
        let asker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            asks.request();
        });
        let started = Instant::now();
        let err = wait_group(build, &stop).unwrap_err();
        asker.join().unwrap();
        assert!(matches!(err, RunError::Interrupted { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        // The leader's children are gone too, not orphaned (a zombie
        // waiting for whoever adopted it has ended).
        let pids = std::fs::read_to_string(scratch.0.join("pids")).unwrap();
        assert_eq!(pids.lines().count(), 2, "{pids}");
        let running = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.lines().any(running) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !pids.lines().any(running),
            "a process of the group outlived the stop"
        );
    }

    #[test]
    fn a_build_not_stopped_gives_its_exit_status() {
        use std::os::unix::process::CommandExt;
        let build = Command::new("sh")
            .args(["-c", "exit 3"])
            .process_group(0)
            .spawn()
            .unwrap();
        let status = wait_group(build, &Stop::new()).unwrap();
        assert_eq!(status.code(), Some(3));
    }

    #[test]
    fn an_interrupted_session_writes_what_it_has_marked_interrupted() {
        let scratch = Scratch::new("session");
        let root = scratch.0.join("repo");
        for dir in ["awa-runtime", "awa-harness", "rehearsal"] {
            std::fs::create_dir_all(root.join(dir).join("src")).unwrap();
        }
        std::fs::write(root.join("Cargo.toml"), "[workspace]\n").unwrap();
        std::fs::write(root.join("Cargo.lock"), "").unwrap();
        let dir = scratch.0.join("reports");
        std::fs::create_dir_all(&dir).unwrap();
        let stop = Stop::new();
        let runner = Runner {
            root,
            work_dir: scratch.0.join("work"),
            matrix_file: scratch.0.join("matrix.toml"),
            seed: 1,
            backend: "process".into(),
            pg_bindirs: Vec::new(),
            database_url: None,
            dir: dir.clone(),
            timeout_factor: 3,
            timeout_floor: Duration::from_secs(60),
            timeout: None,
            rehearse: PathBuf::from("rehearse"),
            jobs: 1,
            retries: 0,
            stop: stop.clone(),
        };
        let header = MutateReport {
            format_version: report::FORMAT_VERSION.into(),
            started_at: "2026-12-06T10:00:00Z".into(),
            seed: 1,
            scope: "all".into(),
            sample: None,
            partition: None,
            in_scope: super::super::Counts::default(),
            clean: Vec::new(),
            min_score: None,
            equivalent: Default::default(),
            mutants: Vec::new(),
            interrupted: false,
        };
        // The signal comes while the work copy is synced: no build starts.
        stop.request();
        let mut lines = Vec::new();
        let done = session(
            &runner,
            &Tree::default(),
            &[],
            &["fence".to_owned()],
            header,
            &mut |l| lines.push(l),
        )
        .unwrap();
        assert!(done.interrupted);
        assert_eq!(done.outcome(), crate::vocab::RunOutcome::Inconclusive);
        let written = report::read(&dir.join(report::MUTATE_JSON)).unwrap();
        assert!(written.interrupted);
        assert!(
            std::fs::read_to_string(dir.join(report::MUTATE_MD))
                .unwrap()
                .contains("interrupted")
        );
        assert!(
            !lines.iter().any(|l| l.contains("clean build")),
            "{lines:?}"
        );
        assert!(
            lines.last().unwrap().contains("interrupted by SIGTERM"),
            "{lines:?}"
        );
    }
}
