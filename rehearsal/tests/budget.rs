//! Cell budgets, end to end: a real cell whose drain cannot finish within
//! its budget is stopped cleanly (every process ended, none left behind),
//! is inconclusive, says what it was waiting for, and the run exits 3.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Sleep jobs of a minute under a budget of 25 s: the drain is still
/// waiting on them when the budget runs out. Only the workspace build is
/// used (a fresh install), so the test builds nothing else.
fn matrix(cell: &str) -> String {
    format!(
        r#"
[artifacts.current]
build = "workspace"

[workload]
rate_per_s = 20
backlog = 0
mix = {{ sleep = 1 }}
sleep = "60s"

[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "60s"

[[cell]]
name = "{cell}"
about = "sleep jobs of a minute drained under a budget of 25 s"
fresh_install = true
budget = "25s"
steps = [
  {{ fleet = "current", workers = 1, producers = 1, leader = true }},
  {{ load = "on" }},
  {{ hold = "2s" }},
  {{ load = "off" }},
  {{ drain = "60s" }},
]
"#
    )
}

/// A scratch folder with the matrix and a reports folder, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Processes whose environment names `needle` (the cell's database).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
        {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

#[test]
fn a_cell_past_its_budget_is_stopped_cleanly_inconclusive_and_says_what_it_waited_for() {
    let cell = format!("over-budget-{}", std::process::id());
    let scratch = Scratch(std::env::temp_dir().join(format!("rehearse-{cell}")));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(scratch.0.join("reports")).unwrap();
    std::fs::write(scratch.0.join("matrix.toml"), matrix(&cell)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rehearse"))
        .arg("--matrix-file")
        .arg(scratch.0.join("matrix.toml"))
        .args(["--cell", &cell, "--seed", "5"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .env("REHEARSE_REPORTS_DIR", scratch.0.join("reports"))
        .env("REHEARSE_BACKEND", "process")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rehearse");
    // The workspace build may need compiling first; the cell itself is bounded by its budget.
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(1_200) {
            let _ = child.kill();
            panic!("rehearse did not finish within 20 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "exit 3 (inconclusive); stderr:\n{err}"
    );

    let dir = std::fs::read_dir(scratch.0.join("reports"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a report folder");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let c = &report["cells"][0];
    assert_eq!(c["verdict"], "inconclusive", "{c}");
    let why = c["harness_error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("over its budget of 25s, stopped in step 5 (drain): drain: "),
        "{why}"
    );
    // What it waited for: sleep jobs still running, with the age of the oldest claim.
    let running: u64 = why
        .split("drain: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no running count in {why}"));
    assert!(running > 0, "{why}");
    assert!(
        why.contains("jobs still running, oldest claim ")
            || why.contains(": 1 job still running, oldest claim "),
        "{why}"
    );
    // The drain phase is the one that timed out; nothing was reconciled.
    let timeline = c["timeline"].as_array().unwrap();
    let last = timeline.last().unwrap();
    assert_eq!(
        (last["name"].as_str(), last["outcome"].as_str()),
        (Some("drain"), Some("timed out")),
        "{last}"
    );
    assert!(
        last["detail"]
            .as_str()
            .unwrap()
            .starts_with("the cell's budget of 25s ran out: drain: "),
        "{last}"
    );
    assert!(!timeline.iter().any(|p| p["name"] == "reconcile"));
    // Stopped at its budget, not at the drain's own 60 s.
    let elapsed = c["elapsed_ms"].as_u64().unwrap();
    assert!((25_000..55_000).contains(&elapsed), "elapsed {elapsed} ms");
    // Every process it started ended, and none is left running.
    for p in c["processes"].as_array().unwrap() {
        assert!(
            !p["exit_code"].is_null() || !p["signal"].is_null(),
            "process never ended: {p}"
        );
    }
    let database = cell.replace('-', "_");
    assert_eq!(processes_naming(&database), Vec::<String>::new());
    assert!(err.contains("inconclusive"), "{err}");
}
