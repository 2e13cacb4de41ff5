//! The cheaper seeded-defect cells of the shipped matrix, end to end: the
//! real `rehearse` binary, a throwaway PostgreSQL, the frozen releases and
//! the workspace built with its failpoints. Each cell must catch its
//! defect by name (its expected rule, not merely a red run). The whole
//! `defects` matrix runs nightly through `rehearse selftest`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Cells cheap and deterministic enough for every commit (about 10 to 25 s
/// each), with the rule each must fire.
const CHEAP: [(&str, &str); 3] = [
    ("defect-preflight-no-lock", "floor_bypassed"),
    ("defect-expand-drops-columns", "n1_incompatible"),
    ("defect-flip-skip-reconcile", "flip_unverified"),
];

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-defects-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("reports")).unwrap();
    dir
}

#[test]
fn the_cheaper_defect_cells_each_catch_their_defect_by_name() {
    let dir = scratch();
    let matrix = Path::new(env!("CARGO_MANIFEST_DIR")).join("../matrix.toml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rehearse"));
    cmd.arg("--matrix-file").arg(&matrix).args(["--seed", "5"]);
    for (cell, _) in CHEAP {
        cmd.args(["--cell", cell]);
    }
    let mut child = cmd
        .current_dir(&dir)
        .env("REHEARSE_REPORTS_DIR", dir.join("reports"))
        // The same cells on docker are in tests/docker.rs.
        .env("REHEARSE_BACKEND", "process")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(900) {
            let _ = child.kill();
            panic!("rehearse ran longer than 900 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    let report_dir = std::fs::read_dir(dir.join("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no report folder\nstdout:\n{out}\nstderr:\n{err}"));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(report_dir.join("report.json")).unwrap())
            .unwrap();
    for (cell, rule) in CHEAP {
        let c = report["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == cell)
            .unwrap_or_else(|| panic!("{cell} did not run"));
        assert_eq!(c["expect"]["detect"], rule, "{cell}");
        assert_eq!(
            (c["verdict"].as_str(), c["detection"].as_str()),
            (Some("pass"), Some("by_name")),
            "{cell}: {}",
            c["verdict_reason"]
        );
        assert!(
            c["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["rule"] == rule),
            "{cell} has no {rule} finding"
        );
    }
    assert_eq!(status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
