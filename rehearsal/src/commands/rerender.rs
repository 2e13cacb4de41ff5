//! `rehearse report DIR`: a run's reports rendered again from its
//! report.json, checked against the plan.json beside it.

use std::io::Write;
use std::path::Path;

use super::Environment;
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::report;

/// `rehearse report DIR`: re-renders report.md, junit.xml and report.html
/// from DIR/report.json (which it leaves as it is), prints the summary,
/// and exits as the run did, so CI can gate on a re-rendered report.
pub(super) fn report_command(
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
