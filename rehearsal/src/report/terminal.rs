//! What a person watching the terminal sees: one progress bar per
//! running cell while the run goes, and a summary table at the end.
//!
//! Bars go to stderr and only when it is a terminal; elsewhere (CI logs)
//! each cell's steps are printed as plain lines instead, and `--quiet`
//! prints neither. The summary is text returned as a `String`, coloured
//! only when asked, so it is tested like every other report.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use crate::observe::Verdict;
use crate::stream::RunEvent;

use super::model::{RunReport, verdict_name};
use super::text::{duration, findings_summary, tally_line};

/// The table printed at the end of a run and by `rehearse report DIR`:
/// one row per cell, then the tally, the reasons for inconclusive cells,
/// and the replay command. `color` paints verdicts with ANSI escapes.
pub fn summary_table(r: &RunReport, color: bool) -> String {
    let mut builder = Builder::default();
    builder.push_record(["cell", "expect", "verdict", "findings", "elapsed"]);
    for c in &r.cells {
        builder.push_record([
            c.name.clone(),
            c.expect.to_string(),
            paint(c.verdict, color),
            findings_summary(c),
            duration(c.elapsed_ms),
        ]);
    }
    let mut table = builder.build();
    table
        .with(Style::rounded())
        .modify(Columns::last(), Alignment::right());
    let mut text = table.to_string();
    text.push('\n');
    text.push_str(&format!(
        "{} in {}\n",
        tally_line(r),
        duration(r.run.wall_ms)
    ));
    for c in &r.cells {
        if let Some(error) = &c.harness_error {
            text.push_str(&format!(
                "{} {}: {error}\n",
                c.name,
                paint(c.verdict, color)
            ));
        }
    }
    text.push_str(&format!("replay: {}\n", r.run.replay));
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

/// `--color`, set once by the command before anything is printed.
static COLOR: std::sync::OnceLock<crate::cli::Color> = std::sync::OnceLock::new();

/// Records `--color` for [`use_color`]; later calls keep the first choice.
pub fn set_color(choice: crate::cli::Color) {
    let _ = COLOR.set(choice);
}

/// Whether to colour stdout: `--color always|never` as given; with
/// `auto` (the default) only on a terminal, and never when `NO_COLOR`
/// is set to anything non-empty (<https://no-color.org>) or `TERM` is `dumb`.
pub fn use_color() -> bool {
    match COLOR.get() {
        Some(crate::cli::Color::Always) => return true,
        Some(crate::cli::Color::Never) => return false,
        Some(crate::cli::Color::Auto) | None => {}
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
    sink: Sink,
}

enum Sink {
    Bars(MultiProgress),
    Lines(Lines),
    Silent,
}

impl Progress {
    /// Bars on stderr when it is a terminal, plain lines on stderr when
    /// it is not (a CI log), nothing at all when `quiet`.
    pub fn new(quiet: bool) -> Progress {
        let sink = if quiet {
            Sink::Silent
        } else if std::io::stderr().is_terminal() {
            Sink::Bars(MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
        } else {
            Sink::Lines(Arc::new(Mutex::new(Box::new(std::io::stderr()))))
        };
        Progress { sink }
    }

    /// Plain progress lines into `out`, whatever it is (tests, a log file).
    pub fn lines(out: Box<dyn Write + Send>) -> Progress {
        Progress {
            sink: Sink::Lines(Arc::new(Mutex::new(out))),
        }
    }

    /// A bar for a cell that is starting, with `steps` steps.
    pub fn start_cell(&self, name: &str, steps: u64) -> CellBar {
        let sink = match &self.sink {
            Sink::Bars(multi) => {
                let bar = multi.add(ProgressBar::new(steps));
                bar.set_style(bar_style());
                bar.set_prefix(name.to_owned());
                bar.set_message("starting");
                BarSink::Bar(bar)
            }
            Sink::Lines(out) => {
                line(out, &format!("[{name}] started ({steps} steps)"));
                BarSink::Lines(Arc::clone(out))
            }
            Sink::Silent => BarSink::Silent,
        };
        CellBar {
            name: name.to_owned(),
            steps,
            begun: std::sync::atomic::AtomicU64::new(0),
            started: Instant::now(),
            sink,
        }
    }

    /// A note for the person watching (a warning goes to stderr directly, even when quiet),
    /// printed above the bars so it does not tear them.
    pub fn note(&self, text: &str) {
        match &self.sink {
            Sink::Bars(multi) => {
                let _ = multi.println(awa_runtime::redact::redact(text));
            }
            Sink::Lines(out) => line(out, text),
            Sink::Silent => {}
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
            RunEvent::CellStarted { cell, phases, .. } => {
                let bar = self.progress.start_cell(cell, *phases);
                self.bars.insert(cell.clone(), bar);
            }
            RunEvent::StepStarted { cell, what } => {
                if let Some(bar) = self.bars.get(cell) {
                    bar.step(what);
                }
            }
            RunEvent::CellJudged { cell, verdict, .. } => {
                if let Some(bar) = self.bars.remove(cell) {
                    bar.finish(*verdict);
                }
            }
            RunEvent::Note(note) if note.always => {
                if matches!(self.progress.sink, Sink::Bars(_)) {
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

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:24} [{bar:24}] {pos:>2}/{len:2} {elapsed:>4} {wide_msg}")
        .expect("the template is valid")
        .progress_chars("=> ")
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
    steps: u64,
    begun: std::sync::atomic::AtomicU64,
    started: Instant,
    sink: BarSink,
}

enum BarSink {
    Bar(ProgressBar),
    Lines(Lines),
    Silent,
}

impl CellBar {
    /// The next step begins; `msg` says what it does (`roll to current one at a time`).
    pub fn step(&self, msg: &str) {
        let n = self
            .begun
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        match &self.sink {
            BarSink::Bar(bar) => {
                bar.set_position(n.min(self.steps));
                bar.set_message(msg.to_owned());
            }
            BarSink::Lines(out) => line(out, &format!("[{}] {n}/{} {msg}", self.name, self.steps)),
            BarSink::Silent => {}
        }
    }

    /// The cell has its verdict. A passing bar fills; the others stay where the cell stopped.
    pub fn finish(&self, verdict: Verdict) {
        let word = verdict_name(verdict);
        let took = duration(self.started.elapsed().as_millis() as u64);
        match &self.sink {
            BarSink::Bar(bar) if verdict == Verdict::Pass => {
                bar.finish_with_message(format!("{word} in {took}"));
            }
            BarSink::Bar(bar) => bar.abandon_with_message(format!("{word} in {took}")),
            BarSink::Lines(out) => line(out, &format!("[{}] {word} in {took}", self.name)),
            BarSink::Silent => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;
    use crate::report::text::redact_durations;

    #[test]
    fn the_summary_without_colour_is_plain_text() {
        // The fixture's durations are fixed, so the table needs no redaction.
        let table = summary_table(&fixture::report(), false);
        assert!(!table.contains('\x1b'), "{table}");
        let expected = "\
╭───────────────┬───────────────────────┬──────────────┬──────────────────────────┬─────────╮
│ cell          │ expect                │ verdict      │ findings                 │ elapsed │
├───────────────┼───────────────────────┼──────────────┼──────────────────────────┼─────────┤
│ migrate-first │ pass                  │ pass         │ none                     │   20.4s │
│ fence         │ pass                  │ fail         │ 2 (lost, fence_breached) │    6.3s │
│ defect-fence  │ detect fence_breached │ inconclusive │ none                     │    1.2s │
╰───────────────┴───────────────────────┴──────────────┴──────────────────────────┴─────────╯
3 cells: 1 pass, 1 fail, 1 inconclusive in 2m28s
defect-fence inconclusive: failed to start worker 1 of cell defect-fence: awa exited with code 127
replay: rehearse --matrix smoke --seed 42
";
        assert_eq!(table, expected, "\n{table}");
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
        bar.finish(Verdict::Fail);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            redact_durations(&text),
            "[fence] started (3 steps)\n[fence] 1/3 fleet previous: 2 workers\n[fence] 2/3 flip manual\npostgres restarted\n[fence] fail in [duration]\n"
        );
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
        bar.finish(Verdict::Pass);
        quiet.note("nothing");
        // Bars drawn to a hidden target: the indicatif path runs without a terminal.
        let hidden = Progress {
            sink: Sink::Bars(MultiProgress::with_draw_target(ProgressDrawTarget::hidden())),
        };
        let bar = hidden.start_cell("y", 1);
        bar.step("one");
        bar.step("more steps than planned");
        bar.finish(Verdict::Inconclusive);
        hidden.note("a note");
    }
}
