//! The harness against a hostile machine, end to end on real processes:
//! what a step asked for did not happen, or the cell's processes were
//! starved, and the verdict says so (inconclusive, naming it) instead of
//! passing or failing.
//!
//! - A suspend whose target someone else keeps thawing cannot prove its
//!   stop: the step is a harness failure.
//! - A fleet stopped whole for longer than `stale_after` in the middle
//!   of a hold is starvation past the cell's timings: the monitor records
//!   the lateness and the cell is inconclusive with the figure.
//!
//! Each test acts only on processes whose environment names its own
//! scratch reports folder, so tests running beside it are untouched.

pub mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::matrix::current_only;
use common::rehearse::{on_scratch, run};
use common::report::{cell, read_report};
use common::scratch::Scratch;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const WORKLOAD: &str = "rate_per_s = 40
backlog = 100
mix = { complete = 8, sleep = 2 }
sleep = \"200ms\"";

/// The pids of `awa worker` and `awa produce` processes started for runs
/// reporting into `reports` (their environment names it).
fn fleet_of(reports: &Path) -> Vec<(i32, char)> {
    let needle = format!("REHEARSE_REPORT_DIR={}", reports.display());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ
            .split(|&b| b == 0)
            .any(|v| v.starts_with(needle.as_bytes()))
        {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if !words.iter().any(|w| *w == b"worker" || *w == b"produce") {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .unwrap_or('?');
        found.push((pid, state));
    }
    found
}

/// Runs `rehearse --cell NAME` on `matrix` while `nemesis` acts on the
/// scratch's fleet from a thread of its own (until told to stop); returns
/// the cell's report entry.
fn under_nemesis(
    tag: &str,
    matrix: &str,
    name: &str,
    nemesis: impl FnOnce(&Path, &AtomicBool) + Send + 'static,
) -> serde_json::Value {
    let scratch = Scratch::with_matrix("nemesis", tag, matrix);
    let done = Arc::new(AtomicBool::new(false));
    let reports = scratch.reports();
    let worker = {
        let done = done.clone();
        std::thread::spawn(move || nemesis(&reports, &done))
    };
    let (status, stdout, stderr) = run(
        on_scratch(&scratch, &["--cell", name, "--jobs", "1", "--quiet"]),
        Duration::from_secs(600),
    );
    done.store(true, Ordering::SeqCst);
    worker.join().unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "an inconclusive run exits 3\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = read_report(&scratch.report_dir());
    cell(&report, name).clone()
}

#[test]
fn a_suspend_someone_else_keeps_thawing_is_inconclusive() {
    let matrix = current_only(
        WORKLOAD,
        r#"
[[cell]]
name = "thawed"
about = "a worker suspended while a nemesis keeps sending it SIGCONT"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "2s" },
  { suspend = "worker", of = "current" },
  { hold = "2s" },
  { resume = "worker", of = "current" },
  { load = "off" },
  { drain = "20s" },
]
"#,
    );
    let c = under_nemesis("thawed", &matrix, "thawed", |reports, done| {
        // Every 5 ms, any stopped process of this fleet is let go again.
        while !done.load(Ordering::SeqCst) {
            for (pid, state) in fleet_of(reports) {
                if state == 'T' {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    assert_eq!(c["verdict"], "inconclusive", "{c:#}");
    let error = c["harness_error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("step 4 (suspend): ")
            && (error.contains("could not prove current-worker-")
                || error.contains("could not stop current-worker-")),
        "{error}"
    );
}

#[test]
fn a_fleet_starved_past_stale_after_in_a_hold_is_inconclusive_with_the_figure() {
    let matrix = current_only(
        WORKLOAD,
        r#"
[[cell]]
name = "starved"
about = "the whole fleet stopped for 3 s by a nemesis during a hold"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "12s" },
  { load = "off" },
  { drain = "20s" },
]
"#,
    );
    let c = under_nemesis("starved", &matrix, "starved", |reports, done| {
        // Once the fleet (two workers, a producer) has run for 3 s, stop
        // all of it for 3 s: twice stale_after.
        let start = Instant::now();
        let mut seen: Option<Instant> = None;
        while !done.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(300) {
            let fleet = fleet_of(reports);
            if fleet.len() >= 3 {
                let since = *seen.get_or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_secs(3) {
                    for (pid, _) in &fleet {
                        let _ = kill(Pid::from_raw(*pid), Signal::SIGSTOP);
                    }
                    std::thread::sleep(Duration::from_secs(3));
                    for (pid, _) in &fleet {
                        let _ = kill(Pid::from_raw(*pid), Signal::SIGCONT);
                    }
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert_eq!(c["verdict"], "inconclusive", "{c:#}");
    let error = c["harness_error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("starved: heartbeats up to ") && error.contains("during step 3 (hold)"),
        "{error}"
    );
    // The figure: about the 3 s the fleet was stopped, less an interval.
    let worst = c["late"]
        .as_array()
        .expect("late samples recorded")
        .iter()
        .filter_map(|l| l["beat_late_ms"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(
        (2_000..10_000).contains(&worst),
        "worst lateness {worst} ms: {c:#}"
    );
}
