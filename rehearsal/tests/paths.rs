//! Upgrade paths end to end: the real `rehearse` binary runs the shipped
//! `paths` matrix (real PostgreSQL, the frozen 0.6.1 and 0.6.2 releases,
//! the workspace build) and report.json shows each cell did what it is for:
//!
//! - 0.6.1 -> 0.6.2 -> 0.7 passes with every accepted job reconciled, the
//!   floor refusing while 0.6.1 runs and the schema equal to a fresh install;
//! - the skipped stepping stone (0.6.1 -> 0.7) is refused by the floor;
//! - the same skip forced is caught as `schema_rewritten`, naming the
//!   0.6.1 migrate that rewrote `schema_version`.

pub mod common;

use std::fs::File;
use std::time::{Duration, Instant};

use common::rehearse::in_checkout;
use common::report::{cell, read_report};
use common::scratch::Scratch;
use serde_json::Value;

/// The timeline phases of `cell` called `name`, as (step, outcome, detail).
fn phases<'r>(cell: &'r Value, name: &str) -> Vec<(u64, &'r str, &'r str)> {
    cell["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == name)
        .map(|p| {
            (
                p["step"].as_u64().unwrap(),
                p["outcome"].as_str().unwrap(),
                p["detail"].as_str().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_paths_matrix_walks_skips_and_catches_the_pre_guard_rewrite() {
    let scratch = Scratch::new("paths", "matrix");
    let out = File::create(scratch.path().join("stdout")).unwrap();
    let err = File::create(scratch.path().join("stderr")).unwrap();
    // Its output goes to files: a pipe nobody reads while it runs would fill up.
    let mut child = in_checkout(
        &scratch.reports(),
        &["--matrix", "paths", "--seed", "5", "--jobs", "1"],
    )
    .stdout(out)
    .stderr(err)
    .spawn()
    .expect("start rehearse");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(1_200) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rehearse --matrix paths did not finish in 20 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stdout = std::fs::read_to_string(scratch.path().join("stdout")).unwrap();
    let stderr = std::fs::read_to_string(scratch.path().join("stderr")).unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = read_report(&scratch.report_dir());

    let full = cell(&report, "path-through-stepping-stone");
    assert_eq!(full["verdict"], "pass", "{}", full["verdict_reason"]);
    assert_eq!(full["findings"], Value::Array(vec![]));
    assert!(full["accepted"].as_u64().unwrap() >= 5_000);
    assert_eq!(full["plan"]["database"]["migrated_by"], "pre_guard");
    let versions: Vec<&str> = full["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["role"] == "worker")
        .map(|p| p["version"].as_str().unwrap())
        .collect();
    for v in ["0.6.1", "0.6.2", "0.7.0"] {
        assert!(versions.contains(&v), "no {v} worker ran: {versions:?}");
    }
    let migrates = phases(full, "migrate");
    assert_eq!(migrates.len(), 2, "{migrates:?}");
    assert_eq!(migrates[0].1, "refused");
    assert!(migrates[0].2.contains("version 0.6.1"), "{}", migrates[0].2);
    assert_eq!(migrates[1].1, "ok");
    let checks = full["schema_checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0]["judged"]["undeclared"], Value::Array(vec![]));
    assert!(checks[0]["objects"].as_u64().unwrap() > 100);
    eprintln!(
        "path cell: {} ms; schema comparison: {} ms",
        full["elapsed_ms"], checks[0]["elapsed_ms"]
    );

    let refused = cell(&report, "path-skip-refused");
    assert_eq!(refused["verdict"], "pass", "{}", refused["verdict_reason"]);
    let migrates = phases(refused, "migrate");
    assert_eq!(migrates[0].1, "refused");
    assert!(
        migrates[0]
            .2
            .contains("requires every live runtime at 0.6.2"),
        "{}",
        migrates[0].2
    );

    let forced = cell(&report, "path-skip-forced");
    assert_eq!(forced["verdict"], "pass", "{}", forced["verdict_reason"]);
    let rewritten: Vec<&Value> = forced["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "schema_rewritten")
        .collect();
    assert_eq!(rewritten.len(), 1, "{}", forced["findings"]);
    let message = rewritten[0]["message"].as_str().unwrap();
    assert!(
        message.contains("(migrate by pre_guard 0.6.1): v3 removed; v1, v2 recorded again"),
        "{message}"
    );
}
