//! The cheaper seeded-defect cells of the shipped matrix, end to end: the
//! real `rehearse` binary, a throwaway PostgreSQL, the frozen releases and
//! the workspace built with its failpoints. Each cell must catch its
//! defect by name (its expected rule, not merely a red run). The whole
//! `defects` matrix runs nightly through `rehearse selftest`.

pub mod common;

use std::time::Duration;

use common::rehearse::{checkout, rehearse, run};
use common::report::read_report;
use common::scratch::Scratch;

/// Cells cheap and deterministic enough for every commit (about 10 to 25 s
/// each), with the rule each must fire.
const CHEAP: [(&str, &str); 4] = [
    ("defect-preflight-no-lock", "floor_bypassed"),
    ("defect-expand-drops-columns", "n1_incompatible"),
    ("defect-flip-skip-reconcile", "flip_unverified"),
    ("defect-quoted-secret-cut-at-space", "secret_printed"),
];

#[test]
fn the_cheaper_defect_cells_each_catch_their_defect_by_name() {
    let scratch = Scratch::new("defects", "cheap");
    let mut cmd = rehearse();
    cmd.arg("--matrix-file")
        .arg(checkout().join("matrix.toml"))
        .args(["--seed", "5"]);
    for (cell, _) in CHEAP {
        cmd.args(["--cell", cell]);
    }
    cmd.current_dir(scratch.path())
        .env("REHEARSE_REPORTS_DIR", scratch.reports())
        // The same cells on docker are in tests/docker.rs.
        .env("REHEARSE_BACKEND", "process");
    let (status, out, err) = run(cmd, Duration::from_secs(900));
    let report_dir = scratch
        .report_dirs()
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no report folder\nstdout:\n{out}\nstderr:\n{err}"));
    let report = read_report(&report_dir);
    for (cell, rule) in CHEAP {
        let c = common::report::cell(&report, cell);
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
}
