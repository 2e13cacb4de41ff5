//! `rehearse verify DIR`: a run folder judged again offline, every
//! problem printed.

use std::io::Write;
use std::path::Path;

use super::Environment;
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;

/// `rehearse verify DIR`: every problem on stdout, one a line; a
/// summary on stderr; exit 0 when everything holds, 1 when a history
/// disagrees with its verdict, 2 when DIR is not a run folder or its
/// files disagree.
pub(super) fn verify_command(
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
