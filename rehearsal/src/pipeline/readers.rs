//! The run's readers on this thread: the event stream recorded
//! (`events.jsonl`), shown on the terminal and collected into the report;
//! the report folder, the report files and the summary written at the end.

use std::io::Write;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc::UnboundedReceiver;

use super::RunArgs;
use crate::Error;
use crate::observe::{StepOutcome, Verdict};
use crate::report::{self, Collector, RunReport, terminal::Terminal};
use crate::stream::RunEvent;
use crate::vocab::Format;

/// A new report folder (`-2`, `-3`, ... when the name is taken).
pub(super) fn create_report_dir(
    root: &Path,
    compact: &str,
    short_sha: &str,
) -> Result<PathBuf, Error> {
    let first = report::report_dir(root, compact, short_sha);
    let mut dir = first.clone();
    for n in 2.. {
        if !dir.exists() {
            break;
        }
        dir = PathBuf::from(format!("{}-{n}", first.display()));
    }
    std::fs::create_dir_all(&dir).map_err(Error::Output)?;
    Ok(dir)
}

/// Records, shows and collects the stream until it ends; with
/// `stream` (`--format json`), each recorded line is also written there
/// as it happens. A reader that goes away (`| head`) stops the stream,
/// not the run: its cells still finish and clean up.
pub(super) fn report_events<'w>(
    mut rx: UnboundedReceiver<RunEvent>,
    dir: &Path,
    quiet: bool,
    mut stream: Option<&mut (dyn Write + 'w)>,
    err: &mut dyn Write,
) -> Result<Option<RunReport>, Error> {
    let mut terminal = Terminal::new(quiet);
    let mut collector = Collector::default();
    let mut recording = Vec::new();
    while let Some(event) = rx.blocking_recv() {
        let line = report::event_line(&event)
            .map_err(|e| Error::Harness(awa_runtime::error::chain(&e)))?;
        if let Some(out) = &mut stream
            && writeln!(out, "{line}").and_then(|()| out.flush()).is_err()
        {
            stream = None;
        }
        recording.push(line);
        terminal.show(&event, err)?;
        collector.add(&event);
    }
    let report = collector.finish();
    if report.is_some() {
        recording.push(String::new());
        std::fs::write(dir.join(report::EVENTS_JSONL), recording.join("\n"))
            .map_err(Error::Output)?;
    }
    Ok(report)
}

/// The report files, the summary, and the exit outcome. The summary (the
/// table, or with `--quiet` the failures and the verdict line) goes to
/// stdout, unless stdout carries report.json (`--json`) or the event
/// stream (`--format json`): then to stderr.
pub(super) fn write_report(
    report: &RunReport,
    dir: &Path,
    args: &RunArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Error> {
    let harness = |e: report::ReportError| Error::Harness(awa_runtime::error::chain(&e));
    report::write_all(dir, report).map_err(harness)?;
    let machine = args.json || args.format == Format::Json;
    let color = report::terminal::use_color(args.color) && !machine;
    let summary = if args.quiet {
        report::terminal::quiet_summary(report, color)
    } else {
        report::terminal::summary_table(report, color)
    };
    if args.json {
        out.write_all(report::to_json(report).map_err(harness)?.as_bytes())?;
    }
    if machine {
        err.write_all(summary.as_bytes())?;
    } else {
        out.write_all(summary.as_bytes())?;
    }
    if args.quiet {
        // The failures are in the summary; the selftest score is its verdict.
        if let Some(score) = &report.selftest {
            writeln!(out, "{}", score.headline())?;
        }
        return Ok(());
    }
    for cell in report.cells.iter().filter(|c| c.verdict == Verdict::Fail) {
        for phase in cell
            .timeline
            .iter()
            .filter(|p| p.outcome == StepOutcome::Failed)
        {
            writeln!(
                err,
                "{}: step {} ({}) failed: {}",
                cell.name, phase.step, phase.name, phase.detail
            )?;
        }
    }
    if report.run.end.interrupted {
        writeln!(err, "interrupted: the report covers the cells that ran")?;
    }
    if let Some(score) = &report.selftest {
        for line in score.lines() {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(err, "report: {}", dir.display())?;
    Ok(())
}
