//! `rehearse mutate`: the mutants in scope listed, or judged by the
//! selection's clean cells in a session of child runs.

use std::io::Write;

use super::preflight::{check_bindirs, check_database_url, check_reports_root};
use super::{Environment, load, matrix_dir, selection};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::matrix::Expectation;
use crate::plan;

/// `rehearse mutate`: the mutants of awa-runtime in scope (the release's
/// diff unless `--all`), sampled by `--sample N --seed S`; `--list` prints them.
pub(super) fn mutate_command(
    cli: &Cli,
    env: &Environment,
    options: &crate::mutate::Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let (path, matrix) = load(cli, env)?;
    let repo = crate::artifacts::Repo::find(&[&env.cwd, &matrix_dir(env, &path)])?;
    let cells = clean_cells(cli, &matrix)?;
    check_bindirs(&cli.global.pg_bindirs)?;
    if let Some(url) = &cli.global.database_url {
        awa_runtime::redact::register_dsn(url);
        check_database_url(url)?;
    }
    let seed = cli.global.seed.unwrap_or(0);
    let mut generated = crate::mutate::generate_for(&repo, &matrix, options, Some(seed))?;
    let reports_root = reports_root(cli, env, &repo);
    if let Some(p) = &options.partition {
        let last = crate::mutate::report::newest(&reports_root);
        generated.mutants = crate::mutate::share(
            std::mem::take(&mut generated.mutants),
            p,
            last.as_ref().map(|(_, r)| r),
        );
    }
    if options.list {
        return list(options, &generated, out);
    }
    check_reports_root(&reports_root)?;
    let args = crate::mutate::SessionArgs {
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
        jobs: cli.global.jobs,
        retries: cli.global.retries,
    };
    crate::mutate::session(args, out, err).map_err(Error::from)
}

/// The clean cells of the selection (every cell without --matrix or
/// --cell): a defect cell expects a failure, so it cannot tell a mutant
/// from the seeded defect. None is bad input.
fn clean_cells(cli: &Cli, matrix: &crate::matrix::Matrix) -> Result<Vec<String>, Error> {
    let selected = if cli.global.matrix.is_none() && cli.global.cells.is_empty() {
        matrix.cells.iter().collect()
    } else {
        plan::select(matrix, &selection(cli))?
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
    Ok(cells)
}

/// `--reports-dir` (relative to the working directory), else the
/// repository's reports folder.
fn reports_root(cli: &Cli, env: &Environment, repo: &crate::artifacts::Repo) -> std::path::PathBuf {
    cli.global
        .reports_dir
        .as_ref()
        .filter(|v| !v.as_os_str().is_empty())
        .map(|v| env.cwd.join(v))
        .unwrap_or_else(|| repo.reports())
}

/// `--list`: the mutants, one a line with their counts, or as JSON.
fn list(
    options: &crate::mutate::Options,
    generated: &crate::mutate::Generated,
    out: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    if options.json {
        let json = serde_json::to_string_pretty(&generated.mutants).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
    } else {
        out.write_all(
            crate::mutate::render_list(&generated.mutants, &generated.current).as_bytes(),
        )?;
    }
    Ok(RunOutcome::AllMet)
}
