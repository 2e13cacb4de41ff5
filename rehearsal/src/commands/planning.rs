//! `rehearse plan`, and the plan every run starts from: the matrix
//! loaded, the selection resolved and expanded with the seed, the
//! `--durations` report read once.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Environment, load, selection};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::matrix::Matrix;
use crate::plan::{self, Plan};
use crate::schedule::History;

/// Loads, selects and expands; the replay names the matrix file only if it was given.
pub(super) fn make_plan(cli: &Cli, env: &Environment) -> Result<Plan, Error> {
    Ok(make_plan_at(cli, env)?.2)
}

/// What a run planned from a matrix file needs: the file, the matrix
/// (for another try's plan), the plan, and the `--durations` report.
pub(super) type Planned = (PathBuf, Matrix, Plan, Option<History>);

/// [`make_plan`], with the matrix file it read and the `--durations`
/// report (read once: it splits the shares and orders the run).
pub(super) fn make_plan_at(cli: &Cli, env: &Environment) -> Result<Planned, Error> {
    let (path, matrix) = load(cli, env)?;
    let history = durations(cli, env)?;
    let seed = cli.global.seed.unwrap_or_else(plan::random_seed);
    let plan = plan_request(cli, &path, seed, history.as_ref()).expand(&matrix)?;
    Ok((path, matrix, plan, history))
}

/// What `run`, `plan` and `--repeat` ask of the plan for `seed`: the
/// flags as typed, the matrix file read from `path`, the `--durations`
/// times.
pub(super) fn plan_request(
    cli: &Cli,
    path: &Path,
    seed: u64,
    history: Option<&History>,
) -> plan::Request {
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
pub(super) fn durations(cli: &Cli, env: &Environment) -> Result<Option<History>, Error> {
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

pub(super) fn plan_command(
    cli: &Cli,
    env: &Environment,
    out: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let plan = make_plan(cli, env)?;
    if cli.global.json {
        let json = serde_json::to_string_pretty(&plan).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
    } else {
        out.write_all(plan::render(&plan).as_bytes())?;
    }
    Ok(RunOutcome::AllMet)
}
