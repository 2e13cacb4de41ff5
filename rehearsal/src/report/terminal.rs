//! What a person watching the terminal sees: one progress bar per
//! running cell while the run goes, and a summary table at the end.
//!
//! Bars go to stderr and only when it is a terminal; elsewhere (CI logs)
//! each cell's steps are printed as plain lines instead, and `--quiet`
//! prints neither. A bar uses the terminal's width (`COLUMNS` when the
//! terminal does not say): the cell name as wide as the longest of the
//! run, the step's description in full, the bar itself in what is left.
//! A finished cell's bar is replaced by one line (`[fence] fail in 6.3s:
//! ...`), so when the run ends no bar is left and the summary starts on a
//! line of its own. The summary is text returned as a `String`, coloured
//! only when asked, so it is tested like every other report; `--quiet`
//! prints [`quiet_summary`] instead: the failures and the verdict line.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use crate::observe::Verdict;
use crate::stream::RunEvent;
use crate::vocab::Color;

use super::model::{CellReport, RunReport, verdict_name};
use super::text::{
    by_server, duration, findings_summary, first_ids, found_in, no_cells, tally_line,
};
use crate::observe::thousands;
use crate::vocab::RunOutcome;

/// The table printed at the end of a run and by `rehearse report DIR`:
/// one row per cell, then the verdict line, each cell that missed its
/// expectation (why, its failed steps, its findings), and the replay
/// command. `color` paints verdicts with ANSI escapes.
pub fn summary_table(r: &RunReport, color: bool) -> String {
    let mut text = if r.cells.is_empty() {
        // A header over no rows reads as a table that failed to print.
        no_cells(r)
    } else {
        cell_table(r, color)
    };
    text.push('\n');
    if let Some(rows) = by_server(r) {
        let mut table = Builder::from_iter(rows).build();
        table
            .with(Style::rounded())
            .modify(Columns::new(1..), Alignment::right());
        text.push_str(&table.to_string());
        text.push('\n');
    }
    if let Some(line) = super::checklist::uncovered_line(r) {
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str(&verdict_line(r));
    text.push('\n');
    // Each cell that missed its expectation, with its failed steps and
    // findings: a CI log that holds only the terminal still says why.
    for c in r
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass || c.harness_error.is_some())
    {
        text.push_str(&failure(c, color));
    }
    text.push_str(&format!("replay: {}\n", r.run.header.replay));
    text
}

/// One row per cell under the header.
fn cell_table(r: &RunReport, color: bool) -> String {
    let mut builder = Builder::default();
    builder.push_record([
        "cell",
        "expectation",
        "verdict",
        "findings",
        "jobs",
        "elapsed",
    ]);
    for c in &r.cells {
        builder.push_record([
            c.name.clone(),
            c.expect.to_string(),
            paint(c.verdict, color),
            findings_summary(c),
            thousands(c.accepted),
            duration(c.elapsed_ms),
        ]);
    }
    let mut table = builder.build();
    table
        .with(Style::rounded())
        .modify(Columns::new(4..), Alignment::right());
    table.to_string()
}

/// The run's verdict in one line: `FAIL: 3 cells: 1 pass, 1 fail, 1 inconclusive in 2m28s`.
pub fn verdict_line(r: &RunReport) -> String {
    let word = match r.outcome() {
        RunOutcome::AllMet => "PASS",
        RunOutcome::CellFailed => "FAIL",
        RunOutcome::Inconclusive => "INCONCLUSIVE",
    };
    format!(
        "{word}: {} in {}",
        tally_line(r),
        duration(r.run.end.wall_ms)
    )
}

/// `--quiet`: each cell that did not meet its expectation (why, its
/// failed steps, its findings), the replay command when one did not,
/// and the verdict line last.
pub fn quiet_summary(r: &RunReport, color: bool) -> String {
    let mut text = String::new();
    let missed: Vec<&CellReport> = r
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .collect();
    for c in &missed {
        text.push_str(&failure(c, color));
    }
    if !missed.is_empty() {
        text.push_str(&format!("replay: {}\n", r.run.header.replay));
    }
    if let Some(line) = super::checklist::uncovered_line(r) {
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str(&verdict_line(r));
    text.push('\n');
    text
}

/// One cell that missed its expectation: a line for the cell, then one
/// for each failed step and each finding.
fn failure(c: &CellReport, color: bool) -> String {
    let why = c.harness_error.as_deref().unwrap_or(&c.verdict_reason);
    let mut text = format!("{} {}: {why}\n", c.name, paint(c.verdict, color));
    for step in &c.step_failures {
        text.push_str(&format!("  {step}\n"));
    }
    for f in &c.findings {
        let ids = first_ids(f);
        let ids = if ids.is_empty() {
            String::new()
        } else {
            format!(" (first: {ids})")
        };
        text.push_str(&format!(
            "  {} in {}: {}{ids}\n",
            f.rule.name(),
            found_in(f),
            f.message
        ));
    }
    text
}

/// A verdict word, coloured when `color`: green pass, bold red fail, yellow inconclusive.
fn paint(verdict: Verdict, color: bool) -> String {
    let word = verdict_name(verdict);
    if !color {
        return word.to_owned();
    }
    let code = match verdict {
        Verdict::Pass => "32",
        Verdict::Fail => "1;31",
        Verdict::Inconclusive => "33",
    };
    format!("\x1b[{code}m{word}\x1b[0m")
}

/// Whether to colour stdout, given `--color`: `always|never` as given;
/// with `auto` (the default) only on a terminal, and never when `NO_COLOR`
/// is set to anything non-empty (<https://no-color.org>) or `TERM` is `dumb`.
pub fn use_color(choice: Color) -> bool {
    match choice {
        Color::Always => return true,
        Color::Never => return false,
        Color::Auto => {}
    }
    color_wanted(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR"),
        std::env::var_os("TERM"),
    )
}

fn color_wanted(terminal: bool, no_color: Option<OsString>, term: Option<OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// Where plain progress lines go when there are no bars.
type Lines = Arc<Mutex<Box<dyn Write + Send>>>;

/// Progress of the whole run: bars on a terminal, lines elsewhere, nothing when quiet.
pub struct Progress {
    sink: ProgressOutput,
    /// The width cell names are padded to: the longest name of the run.
    name_width: AtomicUsize,
}

/// Where the run's progress goes.
enum ProgressOutput {
    Bars(MultiProgress),
    Lines(Lines),
    Silent,
}

impl Progress {
    /// Bars on stderr when it is a terminal, plain lines on stderr when
    /// it is not (a CI log), nothing at all when `quiet`.
    pub fn new(quiet: bool) -> Progress {
        let sink = if quiet {
            ProgressOutput::Silent
        } else if std::io::stderr().is_terminal() {
            let target = ProgressDrawTarget::term_like_with_hz(Box::new(Stderr::new()), 10);
            ProgressOutput::Bars(MultiProgress::with_draw_target(target))
        } else {
            ProgressOutput::Lines(Arc::new(Mutex::new(Box::new(std::io::stderr()))))
        };
        Progress::with_sink(sink)
    }

    fn with_sink(sink: ProgressOutput) -> Progress {
        Progress {
            sink,
            name_width: AtomicUsize::new(0),
        }
    }

    /// Plain progress lines into `out`, whatever it is (tests, a log file).
    pub fn lines(out: Box<dyn Write + Send>) -> Progress {
        Progress::with_sink(ProgressOutput::Lines(Arc::new(Mutex::new(out))))
    }

    /// The run's cells are known: names are padded to the longest, so bars line up.
    pub fn cells<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let widest = names.into_iter().map(|n| n.chars().count()).max();
        self.name_width
            .fetch_max(widest.unwrap_or(0), Ordering::Relaxed);
    }

    /// A bar for a cell that is starting, with `steps` steps.
    pub fn start_cell(&self, name: &str, steps: u64) -> CellBar {
        self.cells([name]);
        let name_width = self.name_width.load(Ordering::Relaxed);
        let sink = match &self.sink {
            ProgressOutput::Bars(multi) => {
                let bar = multi.add(ProgressBar::new(steps));
                bar.set_style(bar_style(Stderr::width(), name_width, "starting"));
                bar.set_prefix(name.to_owned());
                bar.set_message("starting");
                BarOutput::Bar(bar, multi.clone())
            }
            ProgressOutput::Lines(out) => {
                line(
                    out,
                    &format!("[{name}] started ({})", plural(steps, "step")),
                );
                BarOutput::Lines(Arc::clone(out))
            }
            ProgressOutput::Silent => BarOutput::Silent,
        };
        CellBar {
            name: name.to_owned(),
            name_width,
            steps,
            begun: AtomicU64::new(0),
            started: Instant::now(),
            sink,
        }
    }

    /// A note for the person watching (a warning goes to stderr directly, even when quiet),
    /// printed above the bars so it does not tear them.
    pub fn note(&self, text: &str) {
        match &self.sink {
            ProgressOutput::Bars(multi) => {
                let _ = multi.println(awa_runtime::redact::redact(text));
            }
            ProgressOutput::Lines(out) => line(out, text),
            ProgressOutput::Silent => {}
        }
    }
}

/// The terminal's reporter: the run's events as bars (or lines), and the
/// notes for the person watching.
pub struct Terminal {
    progress: Progress,
    bars: HashMap<String, CellBar>,
}

impl Terminal {
    /// Bars or lines on stderr as [`Progress::new`] decides.
    pub fn new(quiet: bool) -> Terminal {
        Terminal::with(Progress::new(quiet))
    }

    /// A reporter drawing with `progress`.
    pub fn with(progress: Progress) -> Terminal {
        Terminal {
            progress,
            bars: HashMap::new(),
        }
    }

    /// Shows one event. A note that is not progress goes above the bars
    /// when there are bars, else to `err`, even with `--quiet`.
    pub fn show(&mut self, event: &RunEvent, err: &mut dyn Write) -> std::io::Result<()> {
        match event {
            RunEvent::RunStarted(start) => {
                self.progress.cells(start.cells.iter().map(String::as_str));
            }
            RunEvent::CellStarted { cell, phases, .. } => {
                let bar = self.progress.start_cell(cell, *phases);
                self.bars.insert(cell.clone(), bar);
            }
            RunEvent::StepStarted { cell, what } => {
                if let Some(bar) = self.bars.get(cell) {
                    bar.step(what);
                }
            }
            RunEvent::CellRetried { cell, attempt, .. } => {
                if let Some(bar) = self.bars.get(cell) {
                    bar.try_again(attempt.attempt + 1);
                }
            }
            RunEvent::CellJudged {
                cell,
                verdict,
                reason,
                harness_error,
                ..
            } => {
                if let Some(bar) = self.bars.remove(cell) {
                    let why = harness_error.as_deref().unwrap_or(reason);
                    bar.finish(*verdict, why);
                }
            }
            RunEvent::RunFinished(_) => {
                // Cells cut short (Ctrl-C) leave no bar behind either.
                let mut left: Vec<(String, CellBar)> = self.bars.drain().collect();
                left.sort_by(|a, b| a.0.cmp(&b.0));
                for (_, bar) in left {
                    bar.stop("did not finish");
                }
            }
            RunEvent::Note(note) if note.always => {
                if matches!(self.progress.sink, ProgressOutput::Bars(_)) {
                    self.progress.note(&note.text);
                } else {
                    writeln!(err, "{}", note.text)?;
                }
            }
            RunEvent::Note(note) => self.progress.note(&note.text),
            _ => {}
        }
        Ok(())
    }
}

/// `1 step`, `12 steps`.
fn plural(n: u64, one: &str) -> String {
    super::text::plural(usize::try_from(n).unwrap_or(usize::MAX), one)
}

/// The widest a bar gets; the narrowest worth drawing.
const BAR_MAX: usize = 24;
const BAR_MIN: usize = 6;

/// Columns a bar line takes besides the cell name, the bar and the
/// message: `NAME [BAR] pp/ll eeee MSG` has a space after the name, the
/// brackets, a space, `pp/ll`, a space, four for the elapsed time, a space.
const BAR_FRAME: usize = 1 + 2 + 1 + 5 + 1 + 4 + 1;

/// The bar's width on a terminal `width` columns wide, for names padded
/// to `name` and a message of `message` characters: the message gets the
/// room it needs, the bar what is left (at most [`BAR_MAX`]); `None` when
/// that is under [`BAR_MIN`] and the counter alone must do.
fn bar_width(width: usize, name: usize, message: usize) -> Option<usize> {
    let spare = width.saturating_sub(name + BAR_FRAME + message);
    let bar = spare.min(BAR_MAX);
    (bar >= BAR_MIN).then_some(bar)
}

fn bar_style(width: u16, name: usize, message: &str) -> ProgressStyle {
    let template = match bar_width(usize::from(width), name, message.chars().count()) {
        Some(bar) => format!(
            "{{prefix:{name}}} [{{bar:{bar}}}] {{pos:>2}}/{{len:2}} {{elapsed:>4}} {{wide_msg}}"
        ),
        None => format!("{{prefix:{name}}} {{pos:>2}}/{{len:2}} {{elapsed:>4}} {{wide_msg}}"),
    };
    ProgressStyle::with_template(&template)
        .expect("the template is valid")
        .progress_chars("=> ")
}

/// Stderr as indicatif draws on it, with the width [`Stderr::width`] finds.
#[derive(Debug)]
struct Stderr(console::Term);

impl Stderr {
    fn new() -> Stderr {
        Stderr(console::Term::buffered_stderr())
    }

    /// The terminal's width: what the terminal says, else `COLUMNS`, else 80.
    fn width() -> u16 {
        width_from(
            console::Term::stderr().size_checked().map(|(_, w)| w),
            std::env::var("COLUMNS").ok().as_deref(),
        )
    }
}

fn width_from(terminal: Option<u16>, columns: Option<&str>) -> u16 {
    terminal
        .filter(|&w| w > 0)
        .or_else(|| {
            columns
                .and_then(|c| c.trim().parse::<u16>().ok())
                .filter(|&w| w > 0)
        })
        .unwrap_or(80)
}

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        Stderr::width()
    }
    fn height(&self) -> u16 {
        self.0.size_checked().map_or(24, |(h, _)| h)
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

fn line(out: &Lines, text: &str) {
    // A poisoned lock only means another thread panicked mid-line; keep printing.
    let text = awa_runtime::redact::redact(text);
    let mut out = out.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// One running cell's bar. Cheap to share: the driver may call it from the cell's task.
pub struct CellBar {
    name: String,
    name_width: usize,
    steps: u64,
    begun: AtomicU64,
    started: Instant,
    sink: BarOutput,
}

/// Where one cell's progress goes: its bar, or the run's lines.
enum BarOutput {
    Bar(ProgressBar, MultiProgress),
    Lines(Lines),
    Silent,
}

impl CellBar {
    /// The next step begins; `msg` says what it does (`roll to current one at a time`).
    pub fn step(&self, msg: &str) {
        let n = self.begun.fetch_add(1, Ordering::Relaxed) + 1;
        match &self.sink {
            BarOutput::Bar(bar, _) => {
                bar.set_style(bar_style(Stderr::width(), self.name_width, msg));
                bar.set_position(n.min(self.steps));
                bar.set_message(msg.to_owned());
            }
            BarOutput::Lines(out) => {
                line(out, &format!("[{}] {n}/{} {msg}", self.name, self.steps))
            }
            BarOutput::Silent => {}
        }
    }

    /// The cell runs again from its first step, as try `attempt`: the
    /// step count starts over (the note before it said why).
    pub fn try_again(&self, attempt: u32) {
        self.begun.store(0, Ordering::Relaxed);
        match &self.sink {
            BarOutput::Bar(bar, _) => {
                bar.set_position(0);
                bar.set_message(format!("try {attempt}"));
            }
            BarOutput::Lines(out) => line(
                out,
                &format!(
                    "[{}] try {attempt} ({})",
                    self.name,
                    plural(self.steps, "step")
                ),
            ),
            BarOutput::Silent => {}
        }
    }

    /// The cell has its verdict (and `why`, shown unless it passed): the
    /// bar gives way to one line that stays.
    pub fn finish(&self, verdict: Verdict, why: &str) {
        let word = verdict_name(verdict);
        let took = duration(self.started.elapsed().as_millis() as u64);
        let mut text = format!("[{}] {word} in {took}", self.name);
        if verdict != Verdict::Pass && !why.is_empty() {
            text.push_str(": ");
            text.push_str(why);
        }
        self.replace_with(&text);
    }

    /// The cell will not finish (the run was cut short).
    pub fn stop(&self, why: &str) {
        let step = self.begun.load(Ordering::Relaxed).min(self.steps);
        self.replace_with(&format!("[{}] {why} (at {step}/{})", self.name, self.steps));
    }

    fn replace_with(&self, text: &str) {
        match &self.sink {
            BarOutput::Bar(bar, multi) => {
                bar.finish_and_clear();
                multi.remove(bar);
                let _ = multi.println(awa_runtime::redact::redact(text));
            }
            BarOutput::Lines(out) => line(out, text),
            BarOutput::Silent => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;
    use crate::report::text::redact_durations;

    #[test]
    fn a_run_over_two_servers_adds_a_column_per_server() {
        let text = summary_table(&fixture::on_two_servers(), false);
        assert!(text.contains("@pg15"), "{text}");
        let header = text
            .lines()
            .find(|l| l.contains("pg15") && l.contains("pg18"))
            .unwrap_or_else(|| panic!("no server header in:\n{text}"));
        assert!(header.starts_with("│ cell"), "{header}");
        assert!(text.contains("│ total"), "{text}");
    }

    #[test]
    fn a_share_with_no_cells_says_so_instead_of_a_header_with_no_rows() {
        let mut r = fixture::report();
        r.cells.clear();
        r.run.header.partition = Some(crate::partition::PartitionInfo {
            strategy: crate::partition::Strategy::Hash,
            index: 7,
            count: 8,
            cells: vec!["one".into(), "two".into(), "three".into()],
            durations: None,
        });
        let text = summary_table(&r, false);
        assert!(!text.contains("│ cell"), "a table header:\n{text}");
        assert!(!text.contains('╭'), "a table:\n{text}");
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "share hash:7/8 has no cells: all 3 selected cells fell in the other 7 shares; nothing ran, and rehearse merge joins the 8 shares"
        );
        assert!(text.contains("PASS: 0 cells"), "{text}");
    }

    #[test]
    fn the_summary_without_colour_is_plain_text() {
        // The fixture's durations are fixed, so the table needs no redaction.
        let table = summary_table(&fixture::report(), false);
        assert!(!table.contains('\x1b'), "{table}");
        let expected = "\
╭───────────────┬───────────────────────┬──────────────┬──────────────────────────┬───────┬─────────╮
│ cell          │ expectation           │ verdict      │ findings                 │  jobs │ elapsed │
├───────────────┼───────────────────────┼──────────────┼──────────────────────────┼───────┼─────────┤
│ migrate-first │ pass                  │ pass         │ none                     │ 2,340 │   20.4s │
│ fence         │ pass                  │ fail         │ 2 (lost, fence_breached) │   410 │    6.3s │
│ defect-fence  │ detect fence_breached │ inconclusive │ none                     │     0 │    1.2s │
╰───────────────┴───────────────────────┴──────────────┴──────────────────────────┴───────┴─────────╯
ADR-041 §9: 1 of 2 items not covered by a passing cell of this run: hard kills with crash and heartbeat rescue asserted
FAIL: 3 cells: 1 pass, 1 fail, 1 inconclusive in 2m28s
fence fail: expected pass, got lost, fence_breached and 1 step failure
  step 12 (fence): previous-fence-1 exited 0; an N-1 binary must refuse after the flip
  lost in reconcile: 3 accepted jobs have no terminal record (first: 101, 102, 103)
  fence_breached in fence: N-1 binary wrote <script>alert(1)</script> | a ring row (first: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, ...)
defect-fence inconclusive: failed to start worker 1 of cell defect-fence: awa exited with code 127
replay: rehearse --matrix smoke --seed 42
";
        assert_eq!(table, expected, "\n{table}");
    }

    #[test]
    fn quiet_prints_the_failures_and_the_verdict_line_only() {
        let mut report = fixture::report();
        report.cells[1].findings[1].at_ms = Some(1_100);
        let quiet = quiet_summary(&report, false);
        let expected = "\
fence fail: expected pass, got lost, fence_breached and 1 step failure
  step 12 (fence): previous-fence-1 exited 0; an N-1 binary must refuse after the flip
  lost in reconcile: 3 accepted jobs have no terminal record (first: 101, 102, 103)
  fence_breached in fence at 1.1s: N-1 binary wrote <script>alert(1)</script> | a ring row (first: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, ...)
defect-fence inconclusive: failed to start worker 1 of cell defect-fence: awa exited with code 127
replay: rehearse --matrix smoke --seed 42
ADR-041 §9: 1 of 2 items not covered by a passing cell of this run: hard kills with crash and heartbeat rescue asserted
FAIL: 3 cells: 1 pass, 1 fail, 1 inconclusive in 2m28s
";
        assert_eq!(quiet, expected, "\n{quiet}");
        let mut passed = fixture::report();
        passed.cells.truncate(1);
        // Every item covered: nothing said of the checklist.
        passed.run.header.checklist.truncate(1);
        assert_eq!(
            quiet_summary(&passed, false),
            "PASS: 1 cell: 1 pass, 0 fail, 0 inconclusive in 2m28s\n"
        );
    }

    #[test]
    fn the_message_gets_the_room_and_the_bar_what_is_left() {
        // 120 columns, names of 24: a 52-character step leaves the bar its full 24.
        assert_eq!(bar_width(120, 24, 52), Some(BAR_MAX));
        // A long step shrinks the bar, never the step.
        assert_eq!(bar_width(120, 24, 70), Some(120 - 24 - BAR_FRAME - 70));
        // No room for a bar worth drawing: the counter alone.
        assert_eq!(bar_width(80, 24, 45), None);
        assert_eq!(bar_width(10, 24, 45), None);
        // What a 120-column terminal shows of the longest step the shipped matrix plans:
        // the whole of it, with the longest cell name of the full matrix.
        let step = "fleet previous: 3 workers, 1 producer, first worker becomes leader";
        let name = "defect-rotate-idle-on-current-slot";
        let bar = bar_width(120, name.len(), step.len()).unwrap_or(0);
        let used = name.len() + BAR_FRAME + bar + step.len();
        assert!(used <= 120, "{used}");
    }

    #[test]
    fn the_width_is_the_terminal_s_then_columns_then_80() {
        assert_eq!(width_from(Some(132), Some("100")), 132);
        assert_eq!(width_from(None, Some("120")), 120);
        assert_eq!(width_from(Some(0), Some(" 120 ")), 120);
        assert_eq!(width_from(None, Some("wide")), 80);
        assert_eq!(width_from(None, None), 80);
    }

    #[test]
    fn colour_paints_verdicts_without_breaking_alignment() {
        let plain = summary_table(&fixture::report(), false);
        let coloured = summary_table(&fixture::report(), true);
        assert!(coloured.contains("\x1b[32mpass\x1b[0m"));
        assert!(coloured.contains("\x1b[1;31mfail\x1b[0m"));
        assert!(coloured.contains("\x1b[33minconclusive\x1b[0m"));
        assert_eq!(strip_ansi(&coloured), plain);
    }

    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let os = |s: &str| Some(OsString::from(s));
        assert!(color_wanted(true, None, os("xterm-256color")));
        assert!(color_wanted(true, os(""), None));
        assert!(!color_wanted(false, None, os("xterm")));
        assert!(!color_wanted(true, os("1"), os("xterm")));
        assert!(!color_wanted(true, None, os("dumb")));
    }

    /// A writer tests can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn without_a_terminal_progress_is_plain_lines() {
        let out = Shared::default();
        let progress = Progress::lines(Box::new(out.clone()));
        let bar = progress.start_cell("fence", 3);
        bar.step("fleet previous: 2 workers");
        bar.step("flip manual");
        progress.note("postgres restarted");
        bar.finish(Verdict::Fail, "expected pass, got lost");
        let one = progress.start_cell("x", 1);
        one.finish(Verdict::Pass, "met");
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            redact_durations(&text),
            "[fence] started (3 steps)\n[fence] 1/3 fleet previous: 2 workers\n[fence] 2/3 flip manual\npostgres restarted\n[fence] fail in [duration]: expected pass, got lost\n[x] started (1 step)\n[x] pass in [duration]\n"
        );
    }

    #[test]
    fn a_cell_tried_again_counts_its_steps_from_one() {
        let out = Shared::default();
        let mut terminal = Terminal::with(Progress::lines(Box::new(out.clone())));
        let step = |what: &str| RunEvent::StepStarted {
            cell: "fence".into(),
            what: what.into(),
        };
        let events = [
            RunEvent::CellStarted {
                index: 0,
                cell: "fence".into(),
                phases: 2,
            },
            step("prepare the database"),
            step("flip manual"),
            RunEvent::CellRetried {
                index: 0,
                cell: "fence".into(),
                attempt: crate::stream::CellTry {
                    attempt: 1,
                    seed: Some(9),
                    why: "starved".into(),
                    elapsed_ms: 1,
                    logs: "logs/fence/try-1".into(),
                },
            },
            step("prepare the database"),
        ];
        let mut err = Vec::new();
        for event in &events {
            terminal.show(event, &mut err).unwrap();
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "[fence] started (2 steps)\n[fence] 1/2 prepare the database\n[fence] 2/2 flip manual\n[fence] try 2 (2 steps)\n[fence] 1/2 prepare the database\n"
        );
    }

    #[test]
    fn the_terminal_shows_the_stream_and_leaves_no_cell_running() {
        let out = Shared::default();
        let mut terminal = Terminal::with(Progress::lines(Box::new(out.clone())));
        let mut err = Vec::new();
        let run = fixture::report();
        let events = [
            RunEvent::CellStarted {
                index: 0,
                cell: "fence".into(),
                phases: 2,
            },
            RunEvent::StepStarted {
                cell: "fence".into(),
                what: "prepare the database".into(),
            },
            RunEvent::CellStarted {
                index: 1,
                cell: "defect-fence".into(),
                phases: 4,
            },
            RunEvent::CellJudged {
                index: 0,
                cell: "fence".into(),
                verdict: Verdict::Fail,
                detection: None,
                reason: "expected pass, got lost".into(),
                harness_error: None,
                reached: Vec::new(),
            },
            RunEvent::Note(crate::stream::Note::always(None, "interrupted")),
            RunEvent::RunFinished(crate::stream::RunEnd {
                finished_at: run.run.end.finished_at.clone(),
                wall_ms: 1,
                prepare_ms: 0,
                harness_cpu_ms: 0,
                children_cpu_ms: 0,
                container_cpu_ms: None,
                engine_cpu_ms: None,
                container_cpu_source: None,
                interrupted: true,
                held_back: None,
            }),
        ];
        for event in &events {
            terminal.show(event, &mut err).unwrap();
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            redact_durations(&text),
            "[fence] started (2 steps)\n[fence] 1/2 prepare the database\n[defect-fence] started (4 steps)\n[fence] fail in [duration]: expected pass, got lost\n[defect-fence] did not finish (at 0/4)\n"
        );
        assert_eq!(String::from_utf8(err).unwrap(), "interrupted\n");
    }

    #[test]
    fn progress_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Progress>();
        shared::<CellBar>();
    }

    #[test]
    fn quiet_progress_prints_nothing_and_bars_accept_every_call() {
        let quiet = Progress::new(true);
        let bar = quiet.start_cell("x", 2);
        bar.step("one");
        bar.finish(Verdict::Pass, "");
        quiet.note("nothing");
        // Bars drawn to a hidden target: the indicatif path runs without a terminal.
        let hidden = Progress::with_sink(ProgressOutput::Bars(MultiProgress::with_draw_target(
            ProgressDrawTarget::hidden(),
        )));
        hidden.cells(["y", "a-much-longer-name"]);
        let bar = hidden.start_cell("y", 1);
        bar.step("one");
        bar.step("more steps than planned");
        bar.finish(Verdict::Inconclusive, "no PostgreSQL");
        let stopped = hidden.start_cell("z", 3);
        stopped.stop("did not finish");
        hidden.note("a note");
    }
}
