//! What each subcommand does with the parsed flags.
//!
//! Every command validates before it acts: the matrix is loaded and
//! checked in full, the selection resolved and the plan expanded before
//! anything would start. Output goes to the writers passed in, so tests
//! read it as text.

use crate::schedule::History;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::Error;
use crate::cli::{ArtifactsAction, Cli, Command};
use crate::exit::RunOutcome;
use crate::matrix::{self, Expectation, Matrix, NamedMatrix};
use crate::plan::{self, Plan, Selection};
use crate::report;

mod images;

/// What a command needs from the process environment, gathered once by `main`.
#[derive(Clone, Debug)]
pub struct Environment {
    /// Where the search for matrix.toml starts.
    pub cwd: PathBuf,
    /// `$REHEARSE_MATRIX_FILE`, the fallback when no matrix.toml is found.
    pub matrix_file_env: Option<PathBuf>,
}

impl Environment {
    /// The real process environment.
    pub fn from_process() -> Result<Self, Error> {
        Ok(Environment {
            cwd: std::env::current_dir().map_err(Error::CurrentDir)?,
            matrix_file_env: std::env::var_os(matrix::FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// Runs the command `cli` asks for.
pub fn execute(
    cli: &Cli,
    env: &Environment,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    match &cli.command {
        Some(Command::Completions { shell }) => {
            out.write_all(&crate::cli::completions(*shell))?;
            Ok(RunOutcome::AllMet)
        }
        Some(Command::Report { dir }) => report_command(cli, env, dir, out, err),
        Some(Command::Verify { dir }) => verify_command(cli, env, dir, out, err),
        Some(Command::Replay { plan }) => replay_command(cli, env, plan, out, err),
        Some(Command::Merge { dirs, out: to }) => {
            merge_command(cli, env, dirs, to.as_deref(), out, err)
        }
        Some(Command::List) => list(cli, env, out),
        Some(Command::Plan) => plan_command(cli, env, out),
        Some(Command::Artifacts { action }) => artifacts_command(env, action, out, err),
        Some(Command::Selftest) => selftest(cli, env, out, err),
        Some(Command::Mutate(options)) => mutate_command(cli, env, options, out, err),
        Some(Command::Doctor { registry }) => doctor(cli, env, registry.as_deref(), out),
        Some(Command::Run) | None => match cli.global.repeat {
            Some(n) => repeat(cli, env, n, out, err),
            None => run(cli, env, out, err),
        },
    }
}

/// `rehearse mutate`: the mutants of awa-runtime in scope (the release's
/// diff unless `--all`), sampled by `--sample N --seed S`; `--list` prints them.
fn mutate_command(
    cli: &Cli,
    env: &Environment,
    options: &crate::mutate::Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let (path, matrix) = load(cli, env)?;
    let repo = crate::artifacts::Repo::find(&[&env.cwd, &matrix_dir(env, &path)])?;
    // The clean cells of the selection (every cell without --matrix or
    // --cell): a defect cell expects a failure, so it cannot tell a
    // mutant from the seeded defect.
    let selected = if cli.global.matrix.is_none() && cli.global.cells.is_empty() {
        matrix.cells.iter().collect()
    } else {
        plan::select(&matrix, &selection(cli))?
    };
    let cells: Vec<String> = selected
        .iter()
        .filter(|c| c.expect == Expectation::Pass && !c.name.starts_with("defect-"))
        .map(|c| c.name.clone())
        .collect();
    if cells.is_empty() {
        return Err(Error::BadFlag {
            flag: "--cell",
            message: "the selection has no clean cell (one that expects a pass and is not a defect-* cell) to judge mutants with; select clean cells with --matrix or --cell".into(),
        });
    }
    check_bindirs(&cli.global.pg_bindirs)?;
    if let Some(url) = &cli.global.database_url {
        awa_runtime::redact::register_dsn(url);
        check_database_url(url)?;
    }
    let seed = cli.global.seed.unwrap_or(0);
    let mut generated = crate::mutate::generate_for(&repo, &matrix, options, Some(seed))?;
    let reports_root = cli
        .global
        .reports_dir
        .as_ref()
        .filter(|v| !v.as_os_str().is_empty())
        .map(|v| env.cwd.join(v))
        .unwrap_or_else(|| repo.reports());
    if let Some(p) = &options.partition {
        let last = crate::mutate::report::newest(&reports_root);
        generated.mutants = crate::mutate::share(
            std::mem::take(&mut generated.mutants),
            p,
            last.as_ref().map(|(_, r)| r),
        );
    }
    if options.list {
        if options.json {
            let json = serde_json::to_string_pretty(&generated.mutants).map_err(Error::Json)?;
            writeln!(out, "{json}")?;
        } else {
            out.write_all(
                crate::mutate::render_list(&generated.mutants, &generated.current).as_bytes(),
            )?;
        }
        return Ok(RunOutcome::AllMet);
    }
    check_reports_root(&reports_root)?;
    crate::mutate::session(
        crate::mutate::SessionArgs {
            repo,
            matrix_file: env.cwd.join(&path),
            matrix,
            cells,
            seed,
            generated,
            reports_root,
            sample: options.sample,
            backend: cli.global.backend.name().to_owned(),
            pg_bindirs: cli
                .global
                .pg_bindirs
                .iter()
                .map(|(_, d)| d.clone())
                .collect(),
            database_url: cli.global.database_url.clone(),
            quiet: cli.global.quiet,
            partition: options.partition.map(|p| p.to_string()),
            timeout: options.timeout,
            work_dir: options.work_dir.as_ref().map(|d| env.cwd.join(d)),
        },
        out,
        err,
    )
    .map_err(Error::from)
}

fn selection(cli: &Cli) -> Selection {
    Selection {
        matrix: cli.global.matrix.clone(),
        cells: cli.global.cells.clone(),
    }
}

fn load(cli: &Cli, env: &Environment) -> Result<(PathBuf, Matrix), Error> {
    let path = matrix::find(
        cli.global.matrix_file.as_deref(),
        &env.cwd,
        env.matrix_file_env.as_deref(),
    )?;
    let known = known(cli, env, &path)?;
    let matrix = matrix::load_against(&path, &known)?;
    Ok((path, matrix))
}

/// What the matrix at `matrix_file` is checked against: the release
/// manifest of the tree it is run from (none outside a tree) and the backend.
fn known(cli: &Cli, env: &Environment, matrix_file: &Path) -> Result<matrix::Known, Error> {
    let manifest = match crate::artifacts::Repo::find(&[&env.cwd, &matrix_dir(env, matrix_file)]) {
        Ok(repo) => {
            let dir = repo.artifacts();
            let manifest = awa_harness::release::load_manifest(&dir).map_err(|source| {
                crate::artifacts::ArtifactError::Release {
                    name: "(manifest)".into(),
                    source,
                }
            })?;
            Some(matrix::KnownManifest {
                path: dir.join("manifest.toml").display().to_string(),
                releases: manifest.releases.into_iter().map(|r| r.version).collect(),
            })
        }
        Err(crate::artifacts::ArtifactError::NoWorkspace { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let backend = cli.global.backend;
    Ok(matrix::Known {
        manifest,
        images: backend != crate::cli::Backend::Process,
        backend: backend.name(),
        from_registry: cli.global.from_registry.clone(),
    })
}

/// The directory of the matrix file, absolute.
fn matrix_dir(env: &Environment, matrix_file: &Path) -> PathBuf {
    matrix_file
        .parent()
        .map(|d| env.cwd.join(d))
        .unwrap_or_else(|| env.cwd.clone())
}

/// Loads, selects and expands; the replay names the matrix file only if it was given.
fn make_plan(cli: &Cli, env: &Environment) -> Result<Plan, Error> {
    Ok(make_plan_at(cli, env)?.2)
}

/// What a run planned from a matrix file needs: the file, the matrix
/// (for another try's plan), the plan, and the `--durations` report.
type Planned = (PathBuf, Matrix, Plan, Option<History>);

/// [`make_plan`], with the matrix file it read and the `--durations`
/// report (read once: it splits the shares and orders the run).
fn make_plan_at(cli: &Cli, env: &Environment) -> Result<Planned, Error> {
    let (path, matrix) = load(cli, env)?;
    let history = durations(cli, env)?;
    let seed = cli.global.seed.unwrap_or_else(plan::random_seed);
    let plan = plan_request(cli, &path, seed, history.as_ref()).expand(&matrix)?;
    Ok((path, matrix, plan, history))
}

/// What `run`, `plan` and `--repeat` ask of the plan for `seed`: the
/// flags as typed, the matrix file read from `path`, the `--durations`
/// times.
fn plan_request(cli: &Cli, path: &Path, seed: u64, history: Option<&History>) -> plan::Request {
    plan::Request {
        selection: selection(cli),
        seed,
        postgres: cli.global.postgres.clone(),
        partition: cli.global.partition,
        durations: cli
            .global
            .durations
            .clone()
            .zip(history)
            .map(|(file, h)| plan::Durations {
                file,
                cells: h.durations.clone(),
            }),
        matrix_path: Some(path.to_owned()),
        matrix_file: cli.global.matrix_file.clone(),
        replay_as: plan::ReplayAs::Selection,
        from_registry: cli.global.from_registry.clone(),
        stress: cli.global.stress,
    }
}

/// `--durations FILE`, read before anything starts (only with
/// `--partition duration:I/N`): the cell times the shares are balanced
/// by, and the history the share's schedule starts longest first by.
fn durations(cli: &Cli, env: &Environment) -> Result<Option<History>, Error> {
    let Some(file) = &cli.global.durations else {
        if let Some(p) = cli
            .global
            .partition
            .filter(|p| p.strategy == crate::partition::Strategy::Duration)
        {
            return Err(Error::BadFlag {
                flag: "--partition",
                message: format!(
                    "{p} balances the shares by the cell times of an earlier run, but no --durations REPORT.json gives them; add --durations (a report.json of the same cells), or split by hash:{}/{}",
                    p.index, p.count
                ),
            });
        }
        return Ok(None);
    };
    match cli.global.partition {
        Some(p) if p.strategy == crate::partition::Strategy::Duration => {}
        other => {
            return Err(Error::BadFlag {
                flag: "--durations",
                message: format!(
                    "{} is read only by --partition duration:I/N{}; drop --durations or use a duration partition",
                    file.display(),
                    other.map_or_else(String::new, |p| format!(", not {p}"))
                ),
            });
        }
    }
    let path = env.cwd.join(file);
    let report = crate::partition::read_durations(&path).map_err(|e| Error::BadFlag {
        flag: "--durations",
        message: e.message,
    })?;
    Ok(Some(History::of(&report, path)))
}

/// ` --stress cpu=2x` when the replay of a recorded plan has a load
/// beside it (flag or variable), so its replay line reproduces the
/// conditions (a plan from the matrix gets its line from `plan::Request`).
fn stress_words(cli: &Cli) -> String {
    cli.global
        .stress
        .map_or_else(String::new, |s| format!(" --stress {s}"))
}

fn plan_command(cli: &Cli, env: &Environment, out: &mut dyn Write) -> Result<RunOutcome, Error> {
    let plan = make_plan(cli, env)?;
    if cli.global.json {
        let json = serde_json::to_string_pretty(&plan).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
    } else {
        out.write_all(plan::render(&plan).as_bytes())?;
    }
    Ok(RunOutcome::AllMet)
}

/// `rehearse run` (and `rehearse --matrix NAME`): validate everything,
/// then hand the plan to the pipeline (artifacts, driver, reconcile, report).
fn run(
    cli: &Cli,
    env: &Environment,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let (matrix_file, matrix, plan, history) = make_plan_at(cli, env)?;
    let mut request = request(cli, env, &matrix_file, plan, history, false, err)?;
    request.matrix = Some(Arc::new(matrix));
    crate::pipeline::run(request, out, err)
}

/// `partition hash:2/2: 1 of the 3 selected cells`; an empty share says it runs nothing.
fn partition_line(p: &crate::partition::PartitionInfo, here: usize) -> String {
    let total = p.cells.len();
    if here == 0 {
        format!(
            "partition {}: none of the {} falls in this share; the run records an empty share (exit 0)",
            p.spec(),
            report::text::plural(total, "selected cell")
        )
    } else {
        format!(
            "partition {}: {here} of the {}",
            p.spec(),
            report::text::plural(total, "selected cell")
        )
    }
}

/// The driver's request for `plan`, after the checks every run makes.
fn request(
    cli: &Cli,
    env: &Environment,
    matrix_file: &Path,
    plan: Plan,
    history: Option<History>,
    selftest: bool,
    err: &mut dyn Write,
) -> Result<crate::pipeline::RunArgs, Error> {
    if let Some(url) = &cli.global.database_url {
        // Hidden from here on wherever it turns up, DSN around it or not.
        awa_runtime::redact::register_dsn(url);
        check_database_url(url)?;
    }
    if !cli.global.quiet {
        writeln!(err, "seed {} (replay: {})", plan.seed, plan.replay)?;
        let names: Vec<&str> = plan.cells.iter().map(|c| c.name.as_str()).collect();
        let listed = if names.is_empty() {
            String::new()
        } else {
            format!(": {}", names.join(", "))
        };
        writeln!(
            err,
            "matrix valid; planned {} {}{listed}",
            names.len(),
            if names.len() == 1 { "cell" } else { "cells" },
        )?;
        if let Some(p) = &plan.partition {
            writeln!(err, "{}", partition_line(p, names.len()))?;
        }
    }
    check_bindirs(&cli.global.pg_bindirs)?;
    if cli.global.database_url.is_some() {
        crate::pipeline::servers::one_server(&crate::servers::keys(&plan))?;
    }
    let repo = crate::artifacts::Repo::find(&[&env.cwd, &matrix_dir(env, matrix_file)])?;
    let reports_root = cli
        .global
        .reports_dir
        .as_ref()
        .filter(|v| !v.as_os_str().is_empty())
        .map(|v| env.cwd.join(v))
        .unwrap_or_else(|| repo.reports());
    check_reports_root(&reports_root)?;
    Ok(crate::pipeline::RunArgs {
        plan,
        repo,
        reports_root,
        database_url: cli.global.database_url.clone(),
        backend: cli.global.backend.into(),
        jobs: cli.global.jobs,
        keep: cli.global.keep,
        pg_bindirs: cli.global.pg_bindirs.clone(),
        quiet: cli.global.quiet,
        json: cli.global.json,
        format: cli.global.format.into(),
        color: cli.global.color.into(),
        command_line: plan::command_line(),
        selftest,
        pinned: None,
        stress: cli.global.stress,
        history,
        retries: cli.global.retries,
        matrix: None,
        workspace_binary: cli
            .global
            .workspace_binary
            .as_ref()
            .map(|b| env.cwd.join(b)),
        // Before anything of the run starts: what is busy now is other work.
        busy: crate::schedule::pressure::Busy::now(crate::schedule::cores()),
    })
}

/// `rehearse replay DIR/plan.json [--cell NAME]`: the recorded plan as it
/// is (never re-derived from the matrix file), on artifacts whose digests
/// must still be the recorded ones.
fn replay_command(
    cli: &Cli,
    env: &Environment,
    file: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let file = env.cwd.join(file);
    let recorded = crate::planfile::PlanFile::read(&file)?;
    let mut plan = recorded.plan.clone();
    if !cli.global.cells.is_empty() {
        let known: Vec<&str> = plan.cells.iter().map(|c| c.name.as_str()).collect();
        if let Some(unknown) = cli
            .global
            .cells
            .iter()
            .find(|c| !known.contains(&c.as_str()))
        {
            return Err(Error::BadFlag {
                flag: "--cell",
                message: format!(
                    "{} has no cell \"{unknown}\"{}; its cells: {}",
                    file.display(),
                    crate::matrix::did_you_mean(unknown, known.iter().copied()),
                    known.join(", ")
                ),
            });
        }
        plan.cells.retain(|c| cli.global.cells.contains(&c.name));
    }
    plan.replay = replay_of(&file, &cli.global.cells);
    plan.replay.push_str(&stress_words(cli));
    let mut request = request(cli, env, &file, plan, None, false, err)?;
    request.pinned = Some((file, recorded));
    crate::pipeline::run(request, out, err)
}

/// `rehearse merge DIR... [--out DIR]`: the shares' folders checked to be
/// one run, then joined and rendered; exits as a run over the whole selection.
fn merge_command(
    cli: &Cli,
    env: &Environment,
    dirs: &[PathBuf],
    to: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let bad = |e: crate::merge::MergeError| Error::BadFlag {
        flag: "DIR",
        message: e.0,
    };
    let dirs: Vec<PathBuf> = dirs.iter().map(|d| env.cwd.join(d)).collect();
    if dirs
        .iter()
        .any(|d| d.join(crate::mutate::report::MUTATE_JSON).is_file())
    {
        return merge_mutate(cli, env, &dirs, to, out, err);
    }
    let partials = crate::merge::read(&dirs).map_err(bad)?;
    let stamp = report::utc(std::time::SystemTime::now());
    let dir = match to {
        Some(dir) => env.cwd.join(dir),
        None => {
            let root = std::env::var_os(crate::driver::run::REPORTS_DIR_ENV)
                .filter(|v| !v.is_empty())
                .map(|v| env.cwd.join(v))
                .or_else(|| {
                    crate::artifacts::Repo::find(&[&env.cwd])
                        .ok()
                        .map(|r| r.reports())
                })
                .unwrap_or_else(|| env.cwd.join("reports"));
            let sha = partials
                .first()
                .map(|p| {
                    p.report
                        .run
                        .header
                        .git_commit
                        .chars()
                        .take(7)
                        .collect::<String>()
                })
                .unwrap_or_default();
            report::report_dir(&root, &format!("{}-merged", stamp.compact), &sha)
        }
    };
    if dirs.contains(&dir) {
        return Err(Error::BadFlag {
            flag: "--out",
            message: format!(
                "{} is one of the partial folders; name a new folder",
                dir.display()
            ),
        });
    }
    check_merge_out(&dir)?;
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let crate::merge::Merged {
        report: merged,
        plan,
    } = crate::merge::merge(&partials, &run_id).map_err(bad)?;
    let harness = |e: report::ReportError| Error::Harness(awa_runtime::error::chain(&e));
    report::write_all(&dir, &merged).map_err(harness)?;
    std::fs::write(dir.join(crate::planfile::PLAN_JSON), plan.to_json()).map_err(Error::Output)?;
    crate::merge::copy_files(&partials, &dir).map_err(Error::Output)?;
    let color = report::terminal::use_color(cli.global.color.into());
    let summary = if cli.global.quiet {
        report::terminal::quiet_summary(&merged, color)
    } else {
        report::terminal::summary_table(&merged, color)
    };
    out.write_all(summary.as_bytes())?;
    if !cli.global.quiet {
        writeln!(
            err,
            "merged {} into {}",
            report::text::plural(partials.len(), "partial run"),
            dir.display()
        )?;
    }
    Ok(merged.outcome())
}

/// `rehearse merge` of the shares of a `rehearse mutate --partition` run:
/// one mutate report whose score (and exit code) covers every share.
fn merge_mutate(
    cli: &Cli,
    env: &Environment,
    dirs: &[PathBuf],
    to: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    use crate::mutate::report as mreport;
    let bad = |message: String| Error::BadFlag {
        flag: "DIR",
        message,
    };
    let mut partials = Vec::new();
    for d in dirs {
        let file = d.join(mreport::MUTATE_JSON);
        if !file.is_file() {
            return Err(bad(format!(
                "{} has no {}: mutate shares merge only with mutate shares",
                d.display(),
                mreport::MUTATE_JSON
            )));
        }
        partials.push(mreport::read(&file).map_err(bad)?);
    }
    let merged = mreport::merge(partials).map_err(bad)?;
    let dir = match to {
        Some(dir) => env.cwd.join(dir),
        None => {
            let root = crate::artifacts::Repo::find(&[&env.cwd])
                .map(|r| r.reports())
                .unwrap_or_else(|_| env.cwd.join("reports"));
            let stamp = report::utc(std::time::SystemTime::now());
            root.join(format!("{}-mutate-merged", stamp.compact))
        }
    };
    if dirs.contains(&dir) {
        return Err(Error::BadFlag {
            flag: "--out",
            message: format!(
                "{} is one of the partial folders; name a new folder",
                dir.display()
            ),
        });
    }
    check_merge_out(&dir)?;
    std::fs::create_dir_all(&dir).map_err(Error::Output)?;
    mreport::write_all(&dir, &merged).map_err(Error::Output)?;
    writeln!(out, "{}", merged.headline())?;
    if !cli.global.quiet {
        writeln!(
            err,
            "merged {} into {}",
            report::text::plural(dirs.len(), "mutate share"),
            dir.display()
        )?;
    }
    Ok(if merged.met() {
        RunOutcome::AllMet
    } else {
        RunOutcome::CellFailed
    })
}

/// The merged run's folder must be new or empty: evidence already there
/// (another run's report, plan or logs) is never overwritten.
fn check_merge_out(dir: &Path) -> Result<(), Error> {
    let refuse = |why: String| Error::BadFlag {
        flag: "--out",
        message: format!("{} {why}; name a new folder", dir.display()),
    };
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(refuse("is a file, not a folder".into()));
    }
    let held: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| refuse(format!("cannot be read ({e})")))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let run = [
        report::REPORT_JSON,
        crate::planfile::PLAN_JSON,
        report::REPORT_MD,
        report::EVENTS_JSONL,
    ];
    let what = if held.iter().any(|f| run.contains(&f.as_str())) {
        "already holds a run"
    } else {
        "is not empty"
    };
    Err(refuse(format!(
        "{what} ({}), which merge will not overwrite",
        held.join(", ")
    )))
}

/// `rehearse replay FILE [--cell NAME]...`, quoted for a shell.
fn replay_of(file: &Path, cells: &[String]) -> String {
    let mut line = format!(
        "rehearse replay {}",
        plan::shell_quote(&file.display().to_string())
    );
    for cell in cells {
        line.push_str(" --cell ");
        line.push_str(&plan::shell_quote(cell));
    }
    line
}

/// `rehearse doctor`: what this machine has, against the majors the
/// default matrix (or `--postgres`) needs. A matrix that does not load is
/// reported, not fatal: the doctor still looks at the machine.
fn doctor(
    cli: &Cli,
    env: &Environment,
    registry: Option<&str>,
    out: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let repo = crate::artifacts::Repo::find(&[&env.cwd]).ok();
    let mut majors = cli.global.postgres.clone();
    let mut matrix_problem = None;
    match load(cli, env) {
        Ok((_, matrix)) if majors.is_empty() => majors = matrix.servers,
        Ok(_) => {}
        Err(e) => matrix_problem = Some(awa_runtime::error::chain(&e)),
    }
    let mut search = awa_harness::pgtemp::Search::from_env();
    search.env_dirs = cli.global.pg_bindirs.clone();
    let report = crate::doctor::examine(&crate::doctor::Ask {
        majors: &majors,
        search: &search,
        repo: repo.as_ref(),
        registry,
        matrix_problem,
    });
    out.write_all(report.render().as_bytes())?;
    Ok(if report.ready() {
        RunOutcome::AllMet
    } else {
        RunOutcome::Inconclusive
    })
}

/// `rehearse selftest`: the `defects` matrix beside the clean `smoke`
/// matrix, in one run, scored against the runtime's seeded defects.
fn selftest(
    cli: &Cli,
    env: &Environment,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    if cli.global.matrix.is_some() || !cli.global.cells.is_empty() || cli.global.repeat.is_some() {
        return Err(Error::BadFlag {
            flag: "selftest",
            message: format!(
                "selftest runs the {} and {} matrices as they are; it takes no --matrix, --cell or --repeat",
                crate::selftest::DEFECTS_MATRIX,
                crate::selftest::CLEAN_MATRIX
            ),
        });
    }
    let (path, matrix) = load(cli, env)?;
    let mut cells = Vec::new();
    for name in [
        crate::selftest::DEFECTS_MATRIX,
        crate::selftest::CLEAN_MATRIX,
    ] {
        let Some(named) = matrix.matrices.get(name) else {
            return Err(Error::BadFlag {
                flag: "selftest",
                message: format!(
                    "{} has no [matrix] {name}; selftest needs `{}` (the seeded-defect cells) and `{}` (clean cells)",
                    path.display(),
                    crate::selftest::DEFECTS_MATRIX,
                    crate::selftest::CLEAN_MATRIX
                ),
            });
        };
        cells.extend(
            named
                .cells
                .iter()
                .filter(|c| !cells.contains(*c))
                .cloned()
                .collect::<Vec<_>>(),
        );
    }
    let plan = plan::Request {
        selection: Selection {
            matrix: None,
            cells,
        },
        seed: cli.global.seed.unwrap_or_else(plan::random_seed),
        postgres: cli.global.postgres.clone(),
        matrix_path: Some(path.clone()),
        matrix_file: cli.global.matrix_file.clone(),
        replay_as: plan::ReplayAs::Selftest,
        // Selftest's replay line has never named --from-registry.
        from_registry: Vec::new(),
        stress: cli.global.stress,
        ..plan::Request::default()
    }
    .expand(&matrix)?;
    let mut request = request(cli, env, &path, plan, None, true, err)?;
    request.matrix = Some(Arc::new(matrix));
    crate::pipeline::run(request, out, err)
}

/// `--repeat N`: the selection N times with fresh seeds; per cell how
/// many runs met its expectation, and a replay command for every miss.
fn repeat(
    cli: &Cli,
    env: &Environment,
    n: u32,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let (path, matrix) = load(cli, env)?;
    let history = durations(cli, env)?;
    let base = cli.global.seed.unwrap_or_else(plan::random_seed);
    let seeds = crate::repeat::seeds(base, n);
    // Every plan is checked before the first run starts.
    let mut plans = Vec::new();
    for &seed in &seeds {
        plans.push(plan_request(cli, &path, seed, history.as_ref()).expand(&matrix)?);
    }
    writeln!(
        err,
        "repeat {n} {} from base seed {base}: seeds {}",
        if n == 1 { "run" } else { "runs" },
        seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    let file = cli
        .global
        .matrix_file
        .as_ref()
        .map(|f| f.display().to_string());
    let mut rates = crate::repeat::Rates::new(file);
    let matrix = Arc::new(matrix);
    let mut busy = None;
    for (i, plan) in plans.into_iter().enumerate() {
        writeln!(err, "run {}/{n} (seed {})", i + 1, plan.seed)?;
        let seed = plan.seed;
        let mut request = request(cli, env, &path, plan, history.clone(), false, err)?;
        request.matrix = Some(matrix.clone());
        // Read again, the machine's load would be the run before's: keep the first.
        match busy {
            Some(first) => request.busy = first,
            None => busy = Some(request.busy),
        }
        let finished = crate::pipeline::run_report(request, out, err)?;
        rates.add(seed, &finished.report, finished.dir);
        if finished.report.run.end.interrupted {
            writeln!(err, "interrupted: no further runs")?;
            break;
        }
    }
    out.write_all(rates.render(base).as_bytes())?;
    Ok(rates.outcome())
}

/// `rehearse artifacts build|publish|list|prune`: images outside a run.
fn artifacts_command(
    env: &Environment,
    action: &ArtifactsAction,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let repo = crate::artifacts::Repo::find(&[&env.cwd])?;
    match action {
        ArtifactsAction::Build => images::build(&repo, out, err),
        ArtifactsAction::Publish { registry } => images::publish(&repo, registry, out, err),
        ArtifactsAction::List { registry } => images::list(&repo, registry.as_deref(), out, err),
        ArtifactsAction::Prune { all, repository } => {
            images::prune(&repo, *all, repository.as_deref(), out, err)
        }
    }
}

/// The folder run folders go into must be a folder we can write: made
/// (when missing) and written to here, so a typo, a read-only folder or a
/// name too long costs no build.
fn check_reports_root(root: &Path) -> Result<(), Error> {
    let Some(existing) = root.ancestors().find(|a| a.exists()) else {
        return writable(root);
    };
    if existing.is_dir() {
        return writable(root);
    }
    Err(Error::BadFlag {
        flag: "--reports-dir",
        message: format!(
            "{} is a file, so run folders cannot go {}; name a folder (REHEARSE_REPORTS_DIR or --reports-dir; it is created when missing)",
            existing.display(),
            if existing == root {
                "in it"
            } else {
                "under it"
            }
        ),
    })
}

/// Every folder `--pg-bindir` (or its variables) lists must be a folder:
/// a typo in one of several is not silently skipped.
fn check_bindirs(dirs: &[(&'static str, PathBuf)]) -> Result<(), Error> {
    match dirs.iter().find(|(_, dir)| !dir.is_dir()) {
        None => Ok(()),
        Some((var, dir)) => Err(Error::BadFlag {
            flag: "--pg-bindir",
            message: format!(
                "{} (listed in --pg-bindir or ${var}) is not a folder{}; fix or drop it from the ':'-separated list",
                dir.display(),
                if dir.exists() {
                    ""
                } else {
                    " (it does not exist)"
                }
            ),
        }),
    }
}

/// `root` made when missing, and a file written in it; both undone, so a
/// run refused later leaves no folder behind (the run makes it again).
fn writable(root: &Path) -> Result<(), Error> {
    let made: Vec<&Path> = root.ancestors().take_while(|a| !a.exists()).collect();
    let result = try_write(root);
    for dir in made {
        let _ = std::fs::remove_dir(dir);
    }
    result
}

/// [`writable`]'s check, leaving what it made.
fn try_write(root: &Path) -> Result<(), Error> {
    let refused = |what: &str, e: std::io::Error| Error::BadFlag {
        flag: "--reports-dir",
        message: format!(
            "{} cannot {what} ({e}); name a folder this user can write (REHEARSE_REPORTS_DIR or --reports-dir)",
            root.display()
        ),
    };
    std::fs::create_dir_all(root).map_err(|e| refused("be made", e))?;
    let probe = root.join(format!(".rehearse-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| refused("be written to", e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn check_database_url(url: &str) -> Result<(), Error> {
    crate::driver::database::check_url(url).map_err(|message| Error::BadFlag {
        flag: "--database-url",
        message,
    })
}

/// `rehearse report DIR`: re-renders report.md, junit.xml and report.html
/// from DIR/report.json (which it leaves as it is), prints the summary,
/// and exits as the run did, so CI can gate on a re-rendered report.
fn report_command(
    cli: &Cli,
    env: &Environment,
    dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let dir = env.cwd.join(dir);
    // A missing, corrupt or too-new report.json is bad input (exit 2), named in the message.
    let run = report::read_json(&dir.join(report::REPORT_JSON)).map_err(|e| Error::BadFlag {
        flag: "DIR",
        message: awa_runtime::error::chain(&e),
    })?;
    // The plan.json beside it (every run writes one) must be the same run's.
    let plan_path = dir.join(crate::planfile::PLAN_JSON);
    if plan_path.exists() {
        let plan = crate::planfile::PlanFile::read(&plan_path)?;
        let problems = crate::evidence::against_plan(&run, &plan);
        if !problems.is_empty() {
            return Err(Error::BadFlag {
                flag: "DIR",
                message: format!(
                    "{} does not agree with {} beside it, so it is not rendered as this run's verdict: {}",
                    dir.join(report::REPORT_JSON).display(),
                    plan_path.display(),
                    problems.join("; ")
                ),
            });
        }
    }
    report::render_all(&dir, &run).map_err(|e| Error::Output(std::io::Error::other(e)))?;
    let color = report::terminal::use_color(cli.global.color.into());
    out.write_all(report::terminal::summary_table(&run, color).as_bytes())?;
    if !cli.global.quiet {
        writeln!(
            err,
            "rendered {}, {} and {} in {}",
            report::REPORT_MD,
            report::JUNIT_XML,
            report::REPORT_HTML,
            dir.display()
        )?;
    }
    Ok(run.outcome())
}

/// `rehearse verify DIR`: every problem on stdout, one a line; a
/// summary on stderr; exit 0 when everything holds, 1 when a history
/// disagrees with its verdict, 2 when DIR is not a run folder or its
/// files disagree.
fn verify_command(
    cli: &Cli,
    env: &Environment,
    dir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let dir = env.cwd.join(dir);
    let started = std::time::Instant::now();
    let verification = crate::verify::verify(&dir);
    for problem in &verification.problems {
        writeln!(out, "{problem}")?;
    }
    let summary = format!(
        "{} problem(s) in {}: {} cell histories ({} terminal records) judged again in {} ms",
        verification.problems.len(),
        dir.display(),
        verification.cells_checked,
        verification.terminal_records,
        started.elapsed().as_millis()
    );
    match verification.outcome() {
        crate::verify::Outcome::Holds => {
            if !cli.global.quiet {
                writeln!(err, "verified: {summary}")?;
            }
            Ok(RunOutcome::AllMet)
        }
        crate::verify::Outcome::Disagrees => {
            writeln!(err, "not verified: {summary}")?;
            Ok(RunOutcome::CellFailed)
        }
        crate::verify::Outcome::BadEvidence => Err(Error::BadFlag {
            flag: "DIR",
            message: format!("not verified, the run folder's evidence is not intact: {summary}"),
        }),
    }
}

/// `rehearse list --json`
#[derive(Serialize)]
struct Listing<'a> {
    file: String,
    cells: Vec<ListedCell<'a>>,
    matrices: &'a std::collections::BTreeMap<String, NamedMatrix>,
}

#[derive(Serialize)]
struct ListedCell<'a> {
    name: &'a str,
    about: &'a str,
    expect: Expectation,
    fresh_install: bool,
    steps: usize,
}

fn list(cli: &Cli, env: &Environment, out: &mut dyn Write) -> Result<RunOutcome, Error> {
    let (path, matrix) = load(cli, env)?;
    let selection = selection(cli);
    let cells = if selection.matrix.is_none() && selection.cells.is_empty() {
        matrix.cells.iter().collect()
    } else {
        plan::select(&matrix, &selection)?
    };
    if cli.global.json {
        let listing = Listing {
            file: path.display().to_string(),
            cells: cells
                .iter()
                .map(|c| ListedCell {
                    name: &c.name,
                    about: &c.about,
                    expect: c.expect,
                    fresh_install: c.fresh_install,
                    steps: c.steps.len(),
                })
                .collect(),
            matrices: &matrix.matrices,
        };
        let json = serde_json::to_string_pretty(&listing).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
        return Ok(RunOutcome::AllMet);
    }
    out.write_all(render_list(&path, &matrix, &cells).as_bytes())?;
    Ok(RunOutcome::AllMet)
}

fn render_list(path: &Path, matrix: &Matrix, cells: &[&matrix::Cell]) -> String {
    let mut text = format!("cells ({}) in {}:\n", cells.len(), path.display());
    let width = cells.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for cell in cells {
        let expect = match cell.expect {
            Expectation::Pass => String::new(),
            Expectation::Detect(rule) => format!(" [must detect {}]", rule.name()),
        };
        text.push_str(&format!("  {:width$}  {}{expect}\n", cell.name, cell.about));
    }
    text.push_str("named matrices:\n");
    let width = matrix.matrices.keys().map(String::len).max().unwrap_or(0);
    for (name, named) in &matrix.matrices {
        let what = if named.entries == ["*"] {
            format!("every cell ({})", named.cells.len())
        } else {
            named.cells.join(", ")
        };
        text.push_str(&format!("  {name:width$}  {what}\n"));
    }
    if matrix.matrices.is_empty() {
        text.push_str("  none\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const MATRIX: &str = include_str!("../../matrix.toml");

    /// How many cells the shipped matrix has (sections only ever grow).
    fn shipped_cells() -> usize {
        crate::matrix::parse("matrix.toml", MATRIX)
            .unwrap()
            .cells
            .len()
    }

    /// A scratch directory with the shipped matrix.toml, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("rehearse-test-{tag}-{}", std::process::id()));
            let nested = dir.join("a").join("b");
            std::fs::create_dir_all(&nested).unwrap();
            std::fs::write(dir.join("matrix.toml"), MATRIX).unwrap();
            Scratch(dir)
        }
    }

    impl Scratch {
        /// Makes the scratch directory look like a checkout: the real
        /// manifest, and an awa-runtime/Cargo.toml (never built here).
        fn make_tree(&self) {
            std::fs::create_dir_all(self.0.join("artifacts")).unwrap();
            std::fs::create_dir_all(self.0.join("awa-runtime")).unwrap();
            std::fs::write(
                self.0.join("artifacts").join("manifest.toml"),
                include_str!("../../artifacts/manifest.toml"),
            )
            .unwrap();
            std::fs::write(self.0.join("awa-runtime").join("Cargo.toml"), "").unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn exec(args: &[&str], env: &Environment) -> (Result<RunOutcome, Error>, String, String) {
        let cli =
            Cli::try_parse_from(std::iter::once("rehearse").chain(args.iter().copied())).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let result = execute(&cli, env, &mut out, &mut err);
        (
            result,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn finds_matrix_toml_by_walking_up() {
        let scratch = Scratch::new("walk");
        let env = Environment {
            cwd: scratch.0.join("a").join("b"),
            matrix_file_env: None,
        };
        let (result, out, _) = exec(&["list"], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        assert!(
            out.starts_with(&format!(
                "cells ({}) in {}:",
                shipped_cells(),
                scratch.0.join("matrix.toml").display()
            )),
            "{out}"
        );
        assert!(
            out.contains("  smoke    migrate-first, binary-first, fence\n"),
            "{out}"
        );
        assert!(
            out.contains(&format!("  full     every cell ({})\n", shipped_cells())),
            "{out}"
        );
    }

    #[test]
    fn falls_back_to_the_environment_variable() {
        let scratch = Scratch::new("env");
        let nowhere =
            std::env::temp_dir().join(format!("rehearse-test-none-{}", std::process::id()));
        std::fs::create_dir_all(&nowhere).unwrap();
        // A matrix.toml above the temp dir would (rightly) win over the variable.
        assert!(
            !nowhere.ancestors().any(|d| d.join("matrix.toml").is_file()),
            "a matrix.toml above {} breaks this test's premise",
            nowhere.display()
        );
        let file = scratch.0.join("matrix.toml");
        let env = Environment {
            cwd: nowhere.clone(),
            matrix_file_env: Some(file.clone()),
        };
        let (result, json, _) = exec(&["list", "--json"], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        let listing: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(listing["file"], file.display().to_string());
        assert_eq!(listing["cells"].as_array().unwrap().len(), shipped_cells());
        assert_eq!(listing["matrices"]["smoke"]["cells"][2], "fence");
        let env = Environment {
            cwd: nowhere.clone(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["list"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert!(
            error.to_string().starts_with("no matrix.toml found in "),
            "{error}"
        );
        std::fs::remove_dir_all(&nowhere).unwrap();
    }

    #[test]
    fn plan_prints_seed_replay_and_numbered_steps() {
        let scratch = Scratch::new("plan");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, out, _) = exec(&["plan", "--matrix", "smoke", "--seed", "7"], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        assert!(
            out.starts_with("plan: 3 cells, seed 7\nreplay: rehearse --matrix smoke --seed 7\n"),
            "{out}"
        );
        assert!(out.contains("\ncell migrate-first: "), "{out}");
        assert!(
            out.contains(
                "   1. fleet previous: 3 workers, 1 producer, first worker becomes leader\n"
            ),
            "{out}"
        );
        let (_, json, _) = exec(
            &["plan", "--matrix", "smoke", "--seed", "7", "--json"],
            &env,
        );
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["seed"], 7);
        assert_eq!(value["cells"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn the_replay_line_repeats_the_stress_before_the_share() {
        let scratch = Scratch::new("stress");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let cli = Cli::try_parse_from([
            "rehearse",
            "--matrix",
            "smoke",
            "--seed",
            "7",
            "--stress",
            "cpu=2x",
            "--partition",
            "hash:1/2",
        ])
        .unwrap();
        // `rehearse merge` cuts the line at --partition: the stress must come first.
        assert_eq!(
            make_plan(&cli, &env).unwrap().replay,
            "rehearse --matrix smoke --seed 7 --stress cpu=2x --partition hash:1/2"
        );
        let cli = Cli::try_parse_from(["rehearse", "--matrix", "smoke", "--seed", "7"]).unwrap();
        assert_eq!(
            make_plan(&cli, &env).unwrap().replay,
            "rehearse --matrix smoke --seed 7"
        );
    }

    #[test]
    fn explicit_matrix_file_appears_in_the_replay() {
        let scratch = Scratch::new("explicit");
        let file = scratch.0.join("matrix.toml");
        let env = Environment {
            cwd: std::env::temp_dir(),
            matrix_file_env: None,
        };
        let (result, out, _) = exec(
            &[
                "plan",
                "--matrix-file",
                file.to_str().unwrap(),
                "--cell",
                "fence",
                "--seed",
                "1",
            ],
            &env,
        );
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        let expected = format!(
            "replay: rehearse --matrix-file {} --cell fence --seed 1\n",
            file.display()
        );
        assert!(out.contains(&expected), "{out}");
    }

    #[test]
    fn unknown_cell_is_bad_input_listing_valid_names() {
        let scratch = Scratch::new("unknown");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["plan", "--cell", "fense"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let text = error.to_string();
        assert!(text.starts_with("unknown cell \"fense\" (did you mean \"fence\"?); cells: migrate-first, binary-first,"), "{text}");
    }

    #[test]
    fn selftest_takes_no_selection_and_needs_its_matrices() {
        let scratch = Scratch::new("selftest");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        // The selection flags are not flags of `selftest` at all.
        for args in [
            &["selftest", "--cell", "fence"][..],
            &["selftest", "--matrix", "smoke"],
            &["selftest", "--repeat", "2"],
        ] {
            let refused =
                Cli::try_parse_from(std::iter::once("rehearse").chain(args.iter().copied()))
                    .unwrap_err();
            assert_eq!(
                crate::exit::for_clap(&refused),
                crate::exit::BAD_INPUT,
                "{args:?}"
            );
        }
        let without = MATRIX.replace("defects = [\"defect-*\"]\n", "");
        std::fs::write(scratch.0.join("matrix.toml"), without).unwrap();
        let (result, _, _) = exec(&["selftest"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert!(
            error.to_string().contains("has no [matrix] defects"),
            "{error}"
        );
    }

    #[test]
    fn run_validates_before_anything_starts() {
        let scratch = Scratch::new("run");
        scratch.make_tree();
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        // Without a selection nothing is run, and the message says how to select.
        let (result, out, _) = exec(&["run"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert_eq!(
            error.to_string(),
            "nothing selected: pass --matrix NAME (one of: defects, full, nightly, paths, smoke) or --cell NAME"
        );
        assert!(out.is_empty());
        let refused = Cli::try_parse_from([
            "rehearse",
            "--matrix",
            "smoke",
            "--database-url",
            "mysql://x",
        ])
        .unwrap_err();
        assert_eq!(crate::exit::for_clap(&refused), crate::exit::BAD_INPUT);
        // (`--backend docker` without an engine: tests/docker.rs, which sets DOCKER_HOST.)
    }

    /// The report's text with ANSI colour removed (stdout may be a terminal under `cargo test`).
    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                chars.by_ref().find(char::is_ascii_alphabetic);
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn report_rerenders_from_report_json_and_prints_the_summary() {
        let scratch = Scratch::new("report");
        let dir = scratch.0.join("run");
        let mut written = crate::report::fixture::report();
        crate::report::write_all(&dir, &written).unwrap();
        let json_before = std::fs::read(dir.join("report.json")).unwrap();
        // Edit report.json by hand and drop report.md: the command must render from the JSON.
        written.cells[0].about = "edited after the run".into();
        std::fs::write(
            dir.join("report.json"),
            crate::report::to_json(&written).unwrap(),
        )
        .unwrap();
        std::fs::remove_file(dir.join("report.md")).unwrap();
        std::fs::remove_file(dir.join("junit.xml")).unwrap();
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, out, err) = exec(&["report", "run"], &env);
        // The fixture run has a failed cell, so the command exits as that run did.
        assert_eq!(result.unwrap(), RunOutcome::CellFailed);
        let out = strip_ansi(&out);
        assert!(
            out.contains("│ fence         │ pass                  │ fail         │"),
            "{out}"
        );
        assert!(
            out.contains("3 cells: 1 pass, 1 fail, 1 inconclusive in 2m28s\n"),
            "{out}"
        );
        assert!(
            out.ends_with("replay: rehearse --matrix smoke --seed 42\n"),
            "{out}"
        );
        assert_eq!(
            err.replace(&dir.display().to_string(), "[dir]"),
            "rendered report.md, junit.xml and report.html in [dir]\n"
        );
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert_eq!(md, crate::report::render_markdown(&written));
        assert!(md.contains("\nedited after the run\n"), "{md}");
        assert!(dir.join("junit.xml").is_file());
        assert_ne!(std::fs::read(dir.join("report.json")).unwrap(), json_before);
        assert_eq!(
            std::fs::read(dir.join("report.json")).unwrap(),
            crate::report::to_json(&written).unwrap().into_bytes(),
            "report.json is the input: left as it was"
        );
        // --quiet keeps the summary and drops the note.
        let (result, out, err) = exec(&["report", "run", "--quiet"], &env);
        assert_eq!(result.unwrap(), RunOutcome::CellFailed);
        assert!(strip_ansi(&out).contains("replay: "), "{out}");
        assert!(err.is_empty(), "{err}");
    }

    #[test]
    fn report_of_a_passing_run_exits_zero() {
        let scratch = Scratch::new("report-pass");
        let mut run = crate::report::fixture::report();
        run.cells.truncate(1);
        crate::report::write_all(&scratch.0, &run).unwrap();
        let env = Environment {
            cwd: std::env::temp_dir(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["report", scratch.0.to_str().unwrap()], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
    }

    #[test]
    fn report_with_a_missing_or_corrupt_report_json_is_bad_input_naming_the_file() {
        let scratch = Scratch::new("report-bad");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let file = scratch.0.join("report.json").display().to_string();
        let (result, out, _) = exec(&["report", "."], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let file_here = scratch
            .0
            .join(".")
            .join("report.json")
            .display()
            .to_string();
        assert_eq!(
            error.to_string(),
            format!(
                "invalid DIR: failed to read {file_here}: No such file or directory (os error 2)"
            )
        );
        assert!(out.is_empty());

        std::fs::write(
            scratch.0.join("report.json"),
            "{\"format_version\": \"1.0\", \"run\": [",
        )
        .unwrap();
        let (result, _, _) = exec(&["report", scratch.0.to_str().unwrap()], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("invalid DIR: {file} is not a valid report.json: ")),
            "{text}"
        );
        assert!(text.contains("line 1 column"), "{text}");
        assert!(
            !scratch.0.join("report.md").exists(),
            "nothing is written from a bad report"
        );

        let mut newer = serde_json::to_value(crate::report::fixture::report()).unwrap();
        newer["format_version"] = "2.1".into();
        std::fs::write(scratch.0.join("report.json"), newer.to_string()).unwrap();
        let (result, _, _) = exec(&["report", scratch.0.to_str().unwrap()], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert!(
            error.to_string().starts_with(&format!(
                "invalid DIR: {file} is report format 2.1, but this rehearse reads format {}",
                crate::report::model::FORMAT_VERSION
            )),
            "{error}"
        );
    }

    #[test]
    fn invalid_matrix_file_is_bad_input_with_located_errors() {
        let scratch = Scratch::new("invalid");
        std::fs::write(
            scratch.0.join("matrix.toml"),
            "[workload]\nrate_per_s = \"fast\"\n",
        )
        .unwrap();
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["list"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let text = error.to_string();
        let file = scratch.0.join("matrix.toml").display().to_string();
        assert!(text.starts_with("invalid matrix file ("), "{text}");
        assert!(
            text.contains(&format!(
                "\n{file}:2:14: workload: invalid type: string \"fast\", expected i64"
            )),
            "{text}"
        );
    }
}
