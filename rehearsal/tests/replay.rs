//! The event stream is the whole story of a run: the `events.jsonl` a
//! real run records folds into the same report as the run wrote.

pub mod common;

use common::matrix::current_only;
use common::rehearse::on_scratch;
use common::scratch::Scratch;
use rehearsal::report::{self, EVENTS_JSONL, REPORT_JSON, REPORT_MD};
use rehearsal::stream::{Fault, RunEvent};

const WORKLOAD: &str = "rate_per_s = 100
backlog = 100
mix = { complete = 8, retry_once = 1, sleep = 1 }";

const CELLS: &str = r#"
[[cell]]
name = "replayed"
about = "a small fleet with a kill, recorded and replayed"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "1s" },
  { kill = "worker", after_started = 5 },
  { load = "off" },
  { drain = "30s" },
]
"#;

#[test]
fn a_recorded_stream_renders_the_report_the_run_wrote() {
    let scratch = Scratch::with_matrix("replay", "stream", &current_only(WORKLOAD, CELLS));
    let output = on_scratch(&scratch, &["--cell", "replayed", "--seed", "5", "--quiet"])
        .output()
        .expect("run rehearse");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr:\n{stderr}");
    let folder = scratch.report_dir();

    let events = report::read_events(&folder.join(EVENTS_JSONL)).unwrap();
    let replayed = report::replay(&events).expect("the stream has a start and an end");
    let written = report::read_json(&folder.join(REPORT_JSON)).unwrap();
    assert_eq!(replayed, written, "report.json differs from the replay");
    let markdown = std::fs::read_to_string(folder.join(REPORT_MD)).unwrap();
    assert_eq!(report::render_markdown(&replayed), markdown);

    // Every kind of event the driver sends for such a cell is in the stream.
    let kind = |e: &RunEvent| match e {
        RunEvent::RunStarted(_) => "run_started",
        RunEvent::Note(_) => "note",
        RunEvent::CellStarted { .. } => "cell_started",
        RunEvent::StepStarted { .. } => "step_started",
        RunEvent::StepFinished { .. } => "step_finished",
        RunEvent::ProcessStarted { .. } => "process_started",
        RunEvent::ProcessExited { .. } => "process_exited",
        RunEvent::FaultInjected {
            fault: Fault::Kill(_),
            ..
        } => "kill",
        RunEvent::FaultInjected { .. } => "other fault",
        RunEvent::MonitorSample { .. } => "monitor_sample",
        RunEvent::CellRetried { .. } => "cell_retried",
        RunEvent::CellFinished(_) => "cell_finished",
        RunEvent::CellJudged { .. } => "cell_judged",
        RunEvent::RunFinished(_) => "run_finished",
    };
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    for want in [
        "run_started",
        "cell_started",
        "step_started",
        "step_finished",
        "process_started",
        "process_exited",
        "kill",
        "monitor_sample",
        "cell_finished",
        "cell_judged",
        "run_finished",
    ] {
        assert!(kinds.contains(&want), "no {want} in {kinds:?}");
    }
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_finished"));
    // Steps: setup, six steps and reconciliation, each started and finished.
    let finished = kinds.iter().filter(|k| **k == "step_finished").count();
    assert_eq!(finished, 8, "{kinds:?}");
}
