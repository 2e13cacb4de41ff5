//! A mutate session: the mutants run through the clean cells as child
//! runs (`--jobs` at once), the report written, and the exit by the score.

use std::path::Path;

use super::{Counts, Generated, report, runner, stop};

/// Why a session stopped before its report: the library's `Error` wraps
/// it (as `Output` and `Harness`, so a closed pipe stays quiet).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Writing the report folder, stdout or stderr failed.
    #[error("failed to write output")]
    Output(#[from] std::io::Error),
    /// The harness failed outside any mutant (the rehearse binary, a child run).
    #[error("{0}")]
    Harness(String),
}

/// A mutant's budget for a cell: this many times the cell's clean time...
pub const TIMEOUT_FACTOR: u32 = 3;

/// ...plus this, for the run's start (cluster, artifacts, fleet).
pub const TIMEOUT_FLOOR: std::time::Duration = std::time::Duration::from_secs(60);

/// What a mutate run needs, checked by the command.
#[derive(Debug)]
pub struct SessionArgs {
    /// The repository.
    pub repo: crate::artifacts::Repo,
    /// The matrix file (absolute).
    pub matrix_file: std::path::PathBuf,
    /// The matrix.
    pub matrix: crate::matrix::Matrix,
    /// The clean cells selected, in matrix order.
    pub cells: Vec<String>,
    /// The seed of the sample and of every cell.
    pub seed: u64,
    /// The mutants.
    pub generated: Generated,
    /// Where the run's folder goes.
    pub reports_root: std::path::PathBuf,
    /// `--sample N`.
    pub sample: Option<usize>,
    /// `--backend`'s word.
    pub backend: String,
    /// `--pg-bindir` directories.
    pub pg_bindirs: Vec<std::path::PathBuf>,
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--quiet`.
    pub quiet: bool,
    /// `--partition`, as given.
    pub partition: Option<String>,
    /// `--timeout`.
    pub timeout: Option<std::time::Duration>,
    /// `--work-dir`.
    pub work_dir: Option<std::path::PathBuf>,
    /// `--jobs`: cells at once.
    pub jobs: crate::schedule::Jobs,
    /// `--retries`, for each cell's child run.
    pub retries: u32,
}

/// Cells at once for a mutate run of `cells` clean cells: `--jobs N`, or
/// `auto` as a run with no history packs (the shipped `[schedule]`
/// estimate and the machine's load at the start): each child runs one
/// cell, so a run's own history of these cells does not apply.
fn jobs(
    jobs: crate::schedule::Jobs,
    cells: usize,
    matrix: &crate::matrix::Matrix,
    backend: &str,
) -> crate::schedule::Pick {
    use crate::schedule::{AutoInput, Basis, Jobs, Pick, auto_jobs, cores, pressure::Busy};
    match jobs {
        Jobs::Fixed(n) => Pick {
            jobs: n,
            why: format!("jobs {n}"),
        },
        Jobs::Auto => {
            let cores = cores();
            auto_jobs(&AutoInput {
                cores,
                cells,
                estimate: matrix.schedule.cores_per_cell_on(backend),
                basis: Basis::Nothing,
                busy: Busy::now(cores),
                backend,
            })
        }
    }
}

/// Runs the mutants and writes the report: exit 0 when the score meets
/// `[mutate] min_score`, 1 when not, 3 when SIGINT or SIGTERM stopped the
/// run (its child runs stopped first, the report kept what finished).
pub fn session(
    args: SessionArgs,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> Result<crate::vocab::RunOutcome, SessionError> {
    let last = report::newest(&args.reports_root);
    let order = report::kill_order(&args.cells, last.as_ref().map(|(_, r)| r));
    let stamp = crate::report::utc(std::time::SystemTime::now());
    let base =
        crate::report::report_dir(&args.reports_root, &stamp.compact, args.repo.git().short());
    let dir = std::path::PathBuf::from(format!("{}-mutate", base.display()));
    std::fs::create_dir_all(&dir).map_err(SessionError::Output)?;
    let pick = jobs(args.jobs, args.cells.len(), &args.matrix, &args.backend);
    let runner = runner(&args, &dir, pick.jobs)?;
    let header = header(&args, stamp.rfc3339.clone());
    let g = &args.generated;
    announce(g, &order, &pick.why, &dir, err)?;
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    let finished = runner::session(
        &runner,
        &g.current,
        &g.mutants,
        &order,
        header,
        &mut progress,
    )
    .map_err(|e| SessionError::Harness(awa_runtime::error::chain(&e)))?;
    writeln!(out, "{}", finished.headline())?;
    writeln!(out, "report: {}", dir.join(report::MUTATE_MD).display())?;
    Ok(finished.outcome())
}

/// The runner of the session's child runs, writing into `dir`, `jobs`
/// cells at once; each child is this same rehearse binary.
fn runner(args: &SessionArgs, dir: &Path, jobs: u32) -> Result<runner::Runner, SessionError> {
    let rehearse = std::env::current_exe().map_err(|e| {
        SessionError::Harness(format!(
            "could not find the rehearse binary to run cells with: {e}"
        ))
    })?;
    Ok(runner::Runner {
        root: args.repo.root.clone(),
        work_dir: args
            .work_dir
            .clone()
            .unwrap_or_else(|| args.repo.root.join("target").join("mutate")),
        matrix_file: args.matrix_file.clone(),
        seed: args.seed,
        backend: args.backend.clone(),
        pg_bindirs: args.pg_bindirs.clone(),
        database_url: args.database_url.clone(),
        dir: dir.to_owned(),
        timeout_factor: TIMEOUT_FACTOR,
        timeout_floor: TIMEOUT_FLOOR,
        timeout: args.timeout,
        rehearse,
        jobs,
        retries: args.retries,
        // From here on a signal stops the child runs before rehearse exits.
        stop: stop::Stop::on_signals().map_err(|e| {
            SessionError::Harness(format!("could not watch for SIGINT and SIGTERM: {e}"))
        })?,
    })
}

/// The report's header, before any mutant ran.
fn header(args: &SessionArgs, started_at: String) -> report::MutateReport {
    let g = &args.generated;
    report::MutateReport {
        format_version: report::FORMAT_VERSION.to_owned(),
        started_at,
        seed: args.seed,
        scope: g.scope.clone(),
        sample: args.sample,
        partition: args.partition.clone(),
        in_scope: g.in_scope,
        clean: Vec::new(),
        min_score: args.matrix.mutate.min_score,
        equivalent: args.matrix.mutate.equivalent.clone(),
        mutants: Vec::new(),
        interrupted: false,
    }
}

/// The session's first line: the mutants, the cells in the order they
/// run, why so many at once, and where the report goes.
fn announce(
    g: &Generated,
    order: &[String],
    why: &str,
    dir: &Path,
    err: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let c = Counts::of(&g.mutants);
    writeln!(
        err,
        "mutate: {} mutants ({} SQL, {} Rust; {} in scope, {}), cells in order: {}; {}; report in {}",
        g.mutants.len(),
        c.sql,
        c.rust,
        g.in_scope.sql + g.in_scope.rust,
        g.scope,
        order.join(", "),
        why,
        dir.display()
    )
}
