//! `rehearse --repeat N`: the selection planned N times with seeds
//! derived from one, run one after another, and the flake rates.

use std::io::Write;
use std::sync::Arc;

use super::launch::request;
use super::planning::{durations, plan_request};
use super::{Environment, load};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::plan;

/// `--repeat N`: the selection N times with fresh seeds; per cell how
/// many runs met its expectation, and a replay command for every miss.
pub(super) fn repeat(
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
    let mut cut_short = false;
    for (i, plan) in plans.into_iter().enumerate() {
        // A signal between two runs (the report written, the next one's
        // artifacts not yet ready) ends the repeat as one during a run does.
        if crate::driver::run::signalled() {
            writeln!(
                err,
                "interrupted (Ctrl-C or SIGTERM between runs): no further runs; {i} of {n} ran"
            )?;
            cut_short = true;
            break;
        }
        writeln!(err, "run {}/{n} (seed {})", i + 1, plan.seed)?;
        let seed = plan.seed;
        let mut request = request(cli, env, &path, plan, history.clone(), false, err)?;
        request.matrix = Some(matrix.clone());
        // Read again, the machine's load would be the run before's: keep the first.
        match busy {
            Some(first) => request.busy = first,
            None => busy = Some(request.busy),
        }
        // The run's preparation (artifacts, images) may have taken the signal.
        if crate::driver::run::signalled() {
            writeln!(
                err,
                "interrupted (Ctrl-C or SIGTERM while run {} prepared): no further runs; {i} of {n} ran",
                i + 1
            )?;
            cut_short = true;
            break;
        }
        let finished = crate::pipeline::run_report(request, out, err)?;
        rates.add(seed, &finished.report, finished.dir);
        if finished.report.run.end.interrupted {
            writeln!(
                err,
                "interrupted: no further runs; {} of {n} ran, the last cut short",
                i + 1
            )?;
            cut_short = true;
            break;
        }
    }
    out.write_all(rates.render(base).as_bytes())?;
    // Fewer runs than asked are not a clean bill, however they went.
    Ok(match rates.outcome() {
        RunOutcome::AllMet if cut_short => RunOutcome::Inconclusive,
        outcome => outcome,
    })
}
