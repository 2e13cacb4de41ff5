//! `rehearse replay DIR/plan.json [--cell NAME]`: a recorded plan run
//! again as it is, with the replay line it will print.

use std::io::Write;
use std::path::Path;

use super::Environment;
use super::launch::request;
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::plan;

/// ` --stress cpu=2x` when the replay of a recorded plan has a load
/// beside it (flag or variable), so its replay line reproduces the
/// conditions (a plan from the matrix gets its line from `plan::Request`).
fn stress_words(cli: &Cli) -> String {
    cli.global
        .stress
        .map_or_else(String::new, |s| format!(" --stress {s}"))
}

/// `rehearse replay DIR/plan.json [--cell NAME]`: the recorded plan as it
/// is (never re-derived from the matrix file), on artifacts whose digests
/// must still be the recorded ones.
pub(super) fn replay_command(
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
