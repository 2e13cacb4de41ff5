//! `rehearse doctor`: what this machine has for a rehearsal, asked with
//! the majors the matrix (or `--postgres`) needs.

use std::io::Write;

use super::{Environment, load};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;

/// `rehearse doctor`: what this machine has, against the majors the
/// default matrix (or `--postgres`) needs. A matrix that does not load is
/// reported, not fatal: the doctor still looks at the machine.
pub(super) fn doctor(
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
