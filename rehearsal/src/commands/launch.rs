//! `rehearse run` (and `rehearse --matrix NAME`): the checks every run
//! makes, then the plan handed to the pipeline. `replay`, `selftest` and
//! `--repeat` start their runs through [`request`] too.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::planning::make_plan_at;
use super::preflight::{check_bindirs, check_database_url, check_reports_root};
use super::{Environment, matrix_dir};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::plan::{self, Plan};
use crate::report;
use crate::schedule::History;

/// `rehearse run` (and `rehearse --matrix NAME`): validate everything,
/// then hand the plan to the pipeline (artifacts, driver, reconcile, report).
pub(super) fn run(
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
pub(super) fn request(
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
        crate::pipeline::locate_servers::one_server(&crate::servers::keys(&plan))?;
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
