//! The `revoke` step end to end, where its start fails: the processes it
//! started as its role are stopped and their sessions gone before the
//! role is dropped, and nothing of them is left running.

pub mod common;

use std::time::Duration;

use common::matrix::current_only;
use common::rehearse::{on_scratch, run};
use common::report::read_report;
use common::scratch::Scratch;

/// Regression (review of the revoke step): a start that failed part way
/// dropped the role under the processes it had started, which still ran
/// as it. Here the load is never on, so the role's worker starts no
/// attempt and the step gives up after its wait for work: the cell is
/// inconclusive for the harness's reason, the role's worker was stopped
/// as the harness stops a process (not ended by the dropped role's
/// missing privileges), and no session of the role was left to the drop.
#[test]
fn a_revoke_whose_start_fails_stops_what_it_started_before_dropping_its_role() {
    let cell = format!("revoke-start-fails-{}", std::process::id());
    let workload = "rate_per_s = 20\nbacklog = 0\nmix = { complete = 1 }";
    let cells = format!(
        r#"
[[cell]]
name = "{cell}"
about = "a revoke whose worker is never given work"
fresh_install = true
steps = [
  {{ fleet = "current", workers = 1, leader = true }},
  {{ revoke = "current", workers = 1 }},
]
"#
    );
    let scratch = Scratch::with_matrix("revoke", "start", &current_only(workload, &cells));
    // The workspace build may need compiling first.
    let (status, _, err) = run(
        on_scratch(&scratch, &["--cell", &cell, "--seed", "5"]),
        Duration::from_secs(1_200),
    );
    assert_eq!(
        status.code(),
        Some(3),
        "exit 3 (inconclusive); stderr:\n{err}"
    );
    let dir = scratch.report_dir();
    let report = read_report(&dir);
    let c = &report["cells"][0];
    assert_eq!(c["verdict"], "inconclusive", "{c}");
    let why = c["harness_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("revoke: the role's workers started no attempt within 15s"),
        "{why}"
    );
    // The role's worker is the fleet's second; the harness stopped it.
    let processes = c["processes"].as_array().unwrap();
    let role_worker = processes
        .iter()
        .find(|p| p["name"] == "current-worker-2")
        .unwrap_or_else(|| panic!("no worker started as the role: {processes:?}"));
    assert!(role_worker["error"].is_null(), "{role_worker}");
    for p in processes {
        assert!(
            !p["exit_code"].is_null() || !p["signal"].is_null(),
            "process never ended: {p}"
        );
    }
    // What the step noted on its way out (the cell's finish in events.jsonl).
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let finished: serde_json::Value = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "cell_finished")
        .expect("a cell_finished event");
    let notes = finished["proved"]["notes"].as_array().unwrap();
    assert!(
        !notes.iter().any(|n| {
            let n = n.as_str().unwrap_or_default();
            n.contains("still connected when it was dropped") || n.contains("could not be dropped")
        }),
        "{notes:?}"
    );
}
