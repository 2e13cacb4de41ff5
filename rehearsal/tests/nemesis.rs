//! The harness against a hostile machine, end to end on real processes:
//! what a step asked for did not happen, or the cell's processes were
//! starved, and the verdict says so (inconclusive, naming it) instead of
//! passing or failing.
//!
//! - A suspend whose target someone else keeps thawing cannot prove its
//!   stop: the step is a harness failure.
//! - A fleet stopped whole for longer than `stale_after` in the middle
//!   of a hold is starvation past the cell's timings: the monitor records
//!   the lateness and the try is inconclusive with the figure; tried
//!   again (`--retries`) without the nemesis, the cell gets its verdict.
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

/// Runs `rehearse --cell NAME --retries 1` on `matrix` while `nemesis`
/// acts on the scratch's fleet from a thread of its own (until told to
/// stop), expecting exit code `code`; returns the cell's report entry,
/// having checked that every earlier try's logs were kept.
fn under_nemesis(
    tag: &str,
    matrix: &str,
    name: &str,
    code: i32,
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
        on_scratch(
            &scratch,
            &["--cell", name, "--jobs", "1", "--retries", "1", "--quiet"],
        ),
        Duration::from_secs(600),
    );
    done.store(true, Ordering::SeqCst);
    worker.join().unwrap();
    assert_eq!(
        status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let dir = scratch.report_dir();
    let c = cell(&read_report(&dir), name).clone();
    for t in c["tries"].as_array().into_iter().flatten() {
        let logs = dir.join(t["logs"].as_str().unwrap_or_default());
        assert!(
            logs.join("current-worker-1.log").is_file(),
            "the earlier try's logs are kept in {}: {t:#}",
            logs.display()
        );
    }
    c
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
    let c = under_nemesis("thawed", &matrix, "thawed", 3, |reports, done| {
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
    // Both tries: the nemesis thaws whatever the seed.
    assert_eq!(c["verdict"], "inconclusive", "{c:#}");
    let tries = c["tries"].as_array().expect("the earlier try is recorded");
    assert_eq!(tries.len(), 1, "{c:#}");
    for error in [&c["harness_error"], &tries[0]["why"]] {
        let error = error.as_str().unwrap_or_default();
        assert!(
            error.starts_with("step 4 (suspend): ")
                && (error.contains("could not prove current-worker-")
                    || error.contains("could not stop current-worker-")),
            "{error}"
        );
    }
    assert!(
        tries[0]["seed"].is_null(),
        "the first try ran on the run's seed"
    );
}

#[test]
fn a_fleet_starved_past_stale_after_is_inconclusive_with_the_figure_then_tried_again() {
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
    let c = under_nemesis("starved", &matrix, "starved", 0, |reports, done| {
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
    // The first try was starved: inconclusive, with the figure. The
    // nemesis acts once, so the second try gives the cell its verdict.
    assert_eq!(c["verdict"], "pass", "{c:#}");
    let tries = c["tries"].as_array().expect("the starved try is recorded");
    assert_eq!(tries.len(), 1, "{c:#}");
    let why = tries[0]["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("starved: heartbeats up to ") && why.contains("during step 3 (hold)"),
        "{why}"
    );
    // The figure: about the 3 s the fleet was stopped, less an interval.
    let figure = why
        .strip_prefix("starved: heartbeats up to ")
        .and_then(|rest| rest.split_once("s late"))
        .and_then(|(secs, _)| secs.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!((2.0..10.0).contains(&figure), "{why}");
    assert!(tries[0]["seed"].is_null() && c["plan"]["steps"].is_array());
}
