//! `rehearse verify DIR` on a real run (real PostgreSQL, real awa
//! processes): the folder as written verifies; the same folder with one
//! terminal record taken out of a cell's recorded history does not, and
//! the job is named; a plan.json edited after the run is bad evidence.
//! The run is two shares merged (`rehearse merge` carries the histories).

pub mod common;

use std::path::Path;
use std::process::Output;

use common::matrix::current_only;
use common::rehearse::{checkout, rehearse as command};
use common::scratch::{Scratch, only_report_dir};

use rehearsal::reconcile::history::{self, History};

/// A worker and a producer; two workers, one killed mid-load.
const CELLS: &str = r#"
[[cell]]
name = "steady"
about = "a worker and a producer"
fresh_install = true
steps = [
  { fleet = "current", workers = 1, producers = 1, leader = true },
  { load = "on" },
  { hold = "500ms" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "killed"
about = "a worker killed"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "500ms" },
  { kill = "worker" },
  { load = "off" },
  { drain = "30s" },
]

[matrix]
small = ["steady", "killed"]
"#;

fn rehearse(args: &[&str]) -> Output {
    command()
        .args(args)
        .current_dir(checkout())
        .output()
        .expect("run rehearse")
}

fn verify(dir: &Path) -> (i32, String, String) {
    let output = rehearse(&["verify", &dir.display().to_string()]);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Copy the run folder `from` to `to` (files and `history/`).
fn copy_run(from: &Path, to: &Path) {
    for entry in walk(from) {
        let rel = entry.strip_prefix(from).unwrap();
        let dest = to.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &dest).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The first job of `h` with exactly one terminal record and no live row.
fn a_terminal_job(h: &History) -> i64 {
    let t = &h.terminals.job;
    *h.jobs
        .id
        .iter()
        .find(|id| t.iter().filter(|j| j == id).count() == 1 && !h.live.job.contains(id))
        .expect("a job that ended once")
}

#[test]
fn a_real_run_verifies_and_a_removed_terminal_record_is_named() {
    let workload = "rate_per_s = 100
backlog = 50
mix = { complete = 9, retry_once = 1 }";
    let scratch = Scratch::with_matrix("verify", "real", &current_only(workload, CELLS));
    let matrix = scratch.matrix().display().to_string();
    // The two cells as two shares of one run, merged: each share's folder
    // and the merged one verify, so a release may carry either.
    let mut shares = Vec::new();
    for (tag, share) in [("p1", "slice:1/2"), ("p2", "slice:2/2")] {
        let reports = scratch.path().join(tag);
        let output = rehearse(&[
            "--matrix-file",
            &matrix,
            "--matrix",
            "small",
            "--seed",
            "5",
            "-q",
            "--backend",
            "process",
            "--partition",
            share,
            "--reports-dir",
            &reports.display().to_string(),
        ]);
        assert!(
            output.status.success(),
            "share {share}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        shares.push(only_report_dir(&reports));
    }
    let dir = scratch.path().join("merged");
    let output = rehearse(&[
        "merge",
        &shares[0].display().to_string(),
        &shares[1].display().to_string(),
        "--out",
        &dir.display().to_string(),
    ]);
    assert!(
        output.status.success(),
        "merge: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for cell in ["steady", "killed"] {
        let h = history::read_file(&history::path(&dir, cell)).expect("a recorded history");
        assert!(h.jobs.id.len() >= 50, "{cell}: {} jobs", h.jobs.id.len());
    }
    for share in &shares {
        let (code, stdout, stderr) = verify(share);
        assert_eq!(
            code,
            0,
            "verify of {}:\n{stdout}\n{stderr}",
            share.display()
        );
    }
    let (code, stdout, stderr) = verify(&dir);
    assert_eq!(code, 0, "verify of the merged run:\n{stdout}\n{stderr}");
    assert!(stderr.contains("2 cell histories"), "{stderr}");

    // One terminal record taken out: the job is lost on the record, and
    // the cell's PASS no longer follows.
    let edited = scratch.path().join("edited");
    copy_run(&dir, &edited);
    let file = history::path(&edited, "steady");
    let mut h = history::read_file(&file).unwrap();
    let job = a_terminal_job(&h);
    let i = h.terminals.job.iter().position(|&j| j == job).unwrap();
    let t = &mut h.terminals;
    for column in [&mut t.job, &mut t.lease] {
        column.remove(i);
    }
    t.attempt.remove(i);
    t.state.remove(i);
    t.source.remove(i);
    history::write(&file, &h).unwrap();
    let (code, stdout, stderr) = verify(&edited);
    assert_eq!(code, 1, "verify of the edited history:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "cell steady, rule lost: the recorded history shows 1 offender(s), the report records 0; only the history shows job {job}"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("cell steady, verdict: the recorded history makes it FAIL"),
        "{stdout}"
    );

    // A history missing altogether, or a plan.json edited: bad evidence.
    let gone = scratch.path().join("gone");
    copy_run(&dir, &gone);
    std::fs::remove_file(history::path(&gone, "killed")).unwrap();
    let (code, stdout, _) = verify(&gone);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stdout.contains("cell killed has a verdict (PASS) but no terminal history"),
        "{stdout}"
    );
    let tampered = scratch.path().join("tampered");
    copy_run(&dir, &tampered);
    let plan = tampered.join("plan.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    json["plan"]["seed"] = 6.into();
    std::fs::write(&plan, json.to_string()).unwrap();
    let (code, stdout, _) = verify(&tampered);
    assert_eq!(code, 2, "{stdout}");
    let (code, _, stderr) = verify(scratch.path());
    assert_eq!(code, 2, "a folder that is no run: {stderr}");
}
