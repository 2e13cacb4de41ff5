//! `plan.json` and `rehearse replay`: a recorded plan reruns with the same
//! steps and targets, and a plan whose artifact changed is refused (exit 2)
//! before anything starts.

pub mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::matrix::current_only;
use common::rehearse::in_checkout;
use common::scratch::{Scratch, report_dirs};
use rehearsal::planfile::{PLAN_JSON, PlanFile};
use rehearsal::report::{self, REPORT_JSON};

const WORKLOAD: &str = "rate_per_s = 100
backlog = 100
mix = { complete = 8, retry_once = 1, sleep = 1 }";

const CELLS: &str = r#"
[[cell]]
name = "replayed"
about = "a small fleet with a kill at a seeded moment, recorded and replayed"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "1s" },
  { kill = "worker" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "other"
about = "a second cell, left out of the replay"
fresh_install = true
steps = [
  { fleet = "current", workers = 1, producers = 1, leader = true },
  { load = "on" },
  { hold = "500ms" },
  { load = "off" },
  { drain = "30s" },
]
"#;

fn rehearse(args: &[&str], reports: &Path) -> Output {
    in_checkout(reports, args).output().expect("run rehearse")
}

#[test]
fn a_recorded_plan_replays_with_the_same_steps_and_a_changed_digest_is_refused() {
    let text = current_only(WORKLOAD, CELLS);
    let scratch = Scratch::with_matrix("plan", "replay", &text);
    let matrix = scratch.matrix();
    let first_reports = scratch.path().join("first");
    let matrix_arg = matrix.display().to_string();
    let output = rehearse(
        &[
            "--matrix-file",
            &matrix_arg,
            "--cell",
            "replayed",
            "--cell",
            "other",
            "--seed",
            "0x5eed",
            "-q",
        ],
        &first_reports,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr:\n{stderr}");
    let [first] = <[PathBuf; 1]>::try_from(report_dirs(&first_reports)).unwrap();
    let recorded = PlanFile::read(&first.join(PLAN_JSON)).unwrap();
    let report = report::read_json(&first.join(REPORT_JSON)).unwrap();
    assert_eq!(recorded.plan.seed, 0x5eed);
    assert_eq!(
        recorded.plan.matrix_checksum,
        report.run.header.matrix_checksum
    );
    assert_eq!(
        recorded.plan.matrix_checksum,
        awa_harness::release::sha256_hex(text.as_bytes())
    );
    for cell in &report.cells {
        let planned = recorded
            .plan
            .cells
            .iter()
            .find(|c| c.name == cell.name)
            .unwrap();
        assert_eq!(&cell.plan, planned, "plan.json holds the plan the cell ran");
    }
    let current = recorded
        .artifacts
        .iter()
        .find(|a| a.name == "current")
        .unwrap();
    let ran = report
        .artifacts
        .iter()
        .find(|a| a.name == "current")
        .unwrap();
    assert_eq!(current.digest, ran.digest);

    // The matrix file changes (the kill would be drawn elsewhere): the
    // replay reads the plan, not the file.
    std::fs::write(
        &matrix,
        text.replace("{ kill = \"worker\" }", "{ hold = \"9s\" }"),
    )
    .unwrap();
    let plan_arg = first.join(PLAN_JSON).display().to_string();
    let replay_reports = scratch.path().join("replay");
    let output = rehearse(
        &[
            "--matrix-file",
            &matrix_arg,
            "replay",
            &plan_arg,
            "--cell",
            "replayed",
            "-q",
        ],
        &replay_reports,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr:\n{stderr}");
    let [again] = <[PathBuf; 1]>::try_from(report_dirs(&replay_reports)).unwrap();
    let replayed = report::read_json(&again.join(REPORT_JSON)).unwrap();
    assert_eq!(replayed.cells.len(), 1, "only --cell replayed");
    let original = report.cells.iter().find(|c| c.name == "replayed").unwrap();
    assert_eq!(
        replayed.cells[0].plan, original.plan,
        "same steps, timings and targets"
    );
    assert!(
        replayed.cells[0]
            .plan
            .steps
            .iter()
            .any(|s| format!("{s:?}").contains("Kill")),
        "the kill of the recorded plan ran, though the matrix file dropped it"
    );
    assert_eq!(replayed.run.header.seed, 0x5eed);
    assert_eq!(
        replayed.run.header.replay,
        format!("rehearse replay {plan_arg} --cell replayed")
    );
    assert_eq!(replayed.cells[0].kills.len(), 1, "the kill ran");
    assert_eq!(
        replayed.cells[0].kills[0].process, original.kills[0].process,
        "the same worker was killed"
    );

    // An artifact whose digest changed is refused, naming both digests; nothing starts.
    let mut tampered = recorded.clone();
    let planned = "0".repeat(64);
    for a in &mut tampered.artifacts {
        if a.name == "current" {
            a.digest.clone_from(&planned);
        }
    }
    let tampered_file = scratch.path().join("tampered-plan.json");
    std::fs::write(&tampered_file, tampered.to_json()).unwrap();
    let refused_reports = scratch.path().join("refused");
    let output = rehearse(
        &["replay", &tampered_file.display().to_string()],
        &refused_reports,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr:\n{stderr}");
    for needle in [
        "artifact current has changed since",
        &format!("the plan ran sha256 {planned}"),
        &format!("resolves sha256 {}", current.digest),
        "check out the commit",
    ] {
        assert!(stderr.contains(needle), "{needle} missing from:\n{stderr}");
    }
    assert!(
        report_dirs(&refused_reports).is_empty(),
        "a report folder was made"
    );

    // A cell the plan does not have, and a file that is not a plan, are bad input.
    let output = rehearse(&["replay", &plan_arg, "--cell", "replay"], &refused_reports);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("has no cell \"replay\""), "{stderr}");
    let output = rehearse(
        &["replay", &first.join(REPORT_JSON).display().to_string()],
        &refused_reports,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a plan.json"));
    assert!(report_dirs(&refused_reports).is_empty());
}
