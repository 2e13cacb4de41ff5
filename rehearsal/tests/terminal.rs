//! What a real run prints for other tools and for a person who asked for
//! little: `--format json` streams the run's events on stdout, one
//! `RunEvent` a line, as `events.jsonl` records them; `--quiet` prints the
//! failures and the verdict line, nothing else.

pub mod common;

use std::process::Output;

use common::matrix::current_only;
use common::rehearse::on_scratch;
use common::scratch::Scratch;
use rehearsal::report::{self, EVENTS_JSONL};
use rehearsal::stream::RunEvent;

/// One small cell on the current build (a fresh install, a short load, a
/// drain), and the same cell declared to lose jobs.
const CELLS: &str = r#"
[[cell]]
name = "small"
about = "two workers, a short load, a drain"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "1s" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "small-expecting-a-loss"
about = "the same cell, declared to lose jobs: it cannot meet that"
fresh_install = true
expect = { detect = "lost" }
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "1s" },
  { load = "off" },
  { drain = "30s" },
]
"#;

/// A scratch tree with the matrix.
fn scratch(tag: &str) -> Scratch {
    let workload = "rate_per_s = 100
backlog = 50
mix = { complete = 8, retry_once = 1, sleep = 1 }";
    Scratch::with_matrix("terminal", tag, &current_only(workload, CELLS))
}

/// `rehearse --matrix-file MATRIX ARGS` on the scratch tree, with neither
/// a format nor a database asked for by the environment.
fn rehearse(scratch: &Scratch, args: &[&str]) -> Output {
    on_scratch(scratch, args)
        .env_remove("REHEARSE_FORMAT")
        .env_remove("REHEARSE_DATABASE_URL")
        .output()
        .expect("rehearse runs")
}

#[test]
fn format_json_streams_every_event_as_a_line_events_jsonl_records() {
    let scratch = scratch("json");
    let out = rehearse(
        &scratch,
        &["--cell", "small", "--seed", "3", "--format", "json"],
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let streamed: Vec<RunEvent> = stdout
        .lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("stdout line {} is not a RunEvent ({e}): {line}", i + 1))
        })
        .collect();
    assert!(
        matches!(streamed.first(), Some(RunEvent::RunStarted(_))),
        "{stdout}"
    );
    assert!(
        matches!(streamed.last(), Some(RunEvent::RunFinished(_))),
        "{stdout}"
    );
    assert!(
        streamed.iter().any(|e| matches!(
            e,
            RunEvent::CellJudged { cell, verdict, .. }
                if cell == "small" && *verdict == rehearsal::observe::Verdict::Pass
        )),
        "{stdout}"
    );
    // The same stream the run recorded, event for event.
    let recorded = report::read_events(&scratch.report_dir().join(EVENTS_JSONL)).unwrap();
    assert_eq!(streamed, recorded);
    // The summary table went to stderr, out of the stream's way.
    assert!(stderr.contains("│ small "), "{stderr}");
    assert!(
        stderr.contains("PASS: 1 cell: 1 pass, 0 fail, 0 inconclusive in "),
        "{stderr}"
    );
}

#[test]
fn quiet_prints_only_the_failures_and_the_verdict_line() {
    let scratch = scratch("quiet");
    let out = rehearse(
        &scratch,
        &[
            "--cell",
            "small",
            "--cell",
            "small-expecting-a-loss",
            "--seed",
            "4",
            "--quiet",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(stderr, "", "--quiet printed more than the failures");
    let file = scratch.matrix().display().to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    let (verdict, failures) = lines.split_last().expect("a verdict line");
    assert_eq!(
        failures,
        [
            "small-expecting-a-loss fail: expected lost, got none".to_owned(),
            format!(
                "replay: rehearse --matrix-file {file} --cell small --cell small-expecting-a-loss --seed 4"
            ),
        ],
        "{stdout}"
    );
    assert!(
        verdict.starts_with("FAIL: 2 cells: 1 pass, 1 fail, 0 inconclusive in "),
        "{stdout}"
    );
}
