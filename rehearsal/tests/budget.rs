//! Cells stopped part way, end to end: a real cell whose drain cannot
//! finish within its budget is stopped cleanly (every process ended, none
//! left behind), is inconclusive, says what it was waiting for, and the run
//! exits 3; a cell interrupted in a hold kills the flip it started ahead.

pub mod common;

use std::time::Duration;

use common::matrix::{CURRENT, matrix};
use common::rehearse::{on_scratch, run};
use common::report::read_report;
use common::scratch::Scratch;

/// Sleep jobs of a minute under a budget of 25 s: the drain is still
/// waiting on them when the budget runs out. Only the workspace build is
/// used (a fresh install), so the test builds nothing else.
fn budget_matrix(cell: &str) -> String {
    let workload = "rate_per_s = 20
backlog = 0
mix = { sleep = 1 }
sleep = \"60s\"";
    let cells = format!(
        r#"
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
    );
    matrix(CURRENT, workload, "60s", &cells)
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
    let scratch = Scratch::with_matrix("budget", "over", &budget_matrix(&cell));
    // The workspace build may need compiling first; the cell itself is bounded by its budget.
    let (status, _, err) = run(
        on_scratch(&scratch, &["--cell", &cell, "--seed", "5"]),
        Duration::from_secs(1_200),
    );
    assert_eq!(
        status.code(),
        Some(3),
        "exit 3 (inconclusive); stderr:\n{err}"
    );

    let report = read_report(&scratch.report_dir());
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

/// A flip started with a `hold` that never sees its condition, and Ctrl-C
/// during the hold: the flip waiting at the start gate must be killed
/// before the hold's connection (and with it the gate's lock) goes, not
/// let through to flip while the cell stops.
#[test]
fn a_flip_waiting_at_the_start_gate_is_killed_when_ctrl_c_ends_the_hold() {
    let cell = format!("gated-interrupted-{}", std::process::id());
    // No producer and no backlog: the claim rings stay empty, so slot_zero_free never holds.
    let workload = "rate_per_s = 1\nbacklog = 0\nmix = { complete = 1 }";
    let cells = format!(
        r#"
[[cell]]
name = "{cell}"
about = "a hold whose condition never holds, a manual flip after it"
fresh_install = true
steps = [
  {{ fleet = "current", workers = 1, leader = true }},
  {{ hold = "60s", until = "slot_zero_free" }},
  {{ flip = "manual" }},
]
"#
    );
    let scratch =
        Scratch::with_matrix("budget", "gated", &matrix(CURRENT, workload, "30s", &cells));
    let mut child = on_scratch(&scratch, &["--cell", &cell, "--seed", "5"])
        .spawn()
        .expect("start rehearse");
    // Wait until the flip started with the hold has a log (it is waiting at the gate).
    let start = std::time::Instant::now();
    let report_dir = loop {
        if let Some(dir) = scratch.report_dirs().into_iter().next()
            && dir.join(format!("logs/{cell}/current-flip-1.log")).exists()
        {
            break dir;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            panic!("rehearse ended before the hold ({status}):\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "no flip was started with the hold"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(1));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    assert_eq!(
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT),
        Ok(())
    );
    let (status, _, err) = common::rehearse::wait(&mut child, Duration::from_secs(60));
    assert_eq!(
        status.code(),
        Some(3),
        "exit 3 (interrupted); stderr:\n{err}"
    );
    let report = read_report(&report_dir);
    let c = &report["cells"][0];
    assert_eq!(c["verdict"], "inconclusive", "{c}");
    let processes = c["processes"].as_array().unwrap();
    let flip = processes
        .iter()
        .find(|p| p["role"] == "flip")
        .unwrap_or_else(|| panic!("no flip started with the hold: {processes:?}"));
    // Killed at the gate: no exit code of its own, never let through.
    assert_eq!(flip["signal"], 9, "{flip}");
    assert!(flip["exit_code"].is_null(), "{flip}");
    assert_eq!(flip["killed"], true, "{flip}");
    let log = std::fs::read_to_string(report_dir.join(flip["log"].as_str().unwrap())).unwrap();
    assert!(log.contains("waiting at the start gate"), "{log}");
    assert!(
        !log.contains("the start gate opened"),
        "the flip was let through:\n{log}"
    );
    let database = cell.replace('-', "_");
    assert_eq!(processes_naming(&database), Vec::<String>::new());
}
