//! What a real run prints for other tools and for a person who asked for
//! little: `--format json` streams the run's events on stdout, one
//! `RunEvent` a line, as `events.jsonl` records them; `--quiet` prints the
//! failures and the verdict line, nothing else.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rehearsal::report::{self, EVENTS_JSONL};
use rehearsal::stream::RunEvent;

/// One small cell on the current build: a fresh install, a short load, a drain.
const MATRIX: &str = r#"
[artifacts.current]
build = "workspace"

[workload]
rate_per_s = 100
backlog = 50
mix = { complete = 8, retry_once = 1, sleep = 1 }

[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "30s"

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

/// A scratch directory with the matrix and a reports folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("rehearse-terminal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("reports")).unwrap();
        std::fs::write(dir.join("matrix.toml"), MATRIX).unwrap();
        Scratch(dir)
    }

    /// `rehearse --matrix-file MATRIX ARGS` from the checkout (so the
    /// workspace build is this tree's), reports into the scratch folder.
    fn rehearse(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_rehearse"))
            .arg("--matrix-file")
            .arg(self.0.join("matrix.toml"))
            .args(args)
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
            .env("REHEARSE_REPORTS_DIR", self.0.join("reports"))
            .env("REHEARSE_BACKEND", "process")
            .env_remove("REHEARSE_FORMAT")
            .env_remove("REHEARSE_DATABASE_URL")
            .stdin(Stdio::null())
            .output()
            .expect("rehearse runs")
    }

    /// The one run folder.
    fn run_folder(&self) -> PathBuf {
        std::fs::read_dir(self.0.join("reports"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .expect("a report folder")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn format_json_streams_every_event_as_a_line_events_jsonl_records() {
    let scratch = Scratch::new("json");
    let out = scratch.rehearse(&["--cell", "small", "--seed", "3", "--format", "json"]);
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
    let recorded = report::read_events(&scratch.run_folder().join(EVENTS_JSONL)).unwrap();
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
    let scratch = Scratch::new("quiet");
    let out = scratch.rehearse(&[
        "--cell",
        "small",
        "--cell",
        "small-expecting-a-loss",
        "--seed",
        "4",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(stderr, "", "--quiet printed more than the failures");
    let file = scratch.0.join("matrix.toml").display().to_string();
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
