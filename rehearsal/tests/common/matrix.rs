//! The small test matrices' TOML: the artifacts, a workload, and the fast
//! timings every one of them runs under; each test adds its cells.

/// The workspace build as the artifact `current` (nothing to download).
pub const CURRENT: &str = "[artifacts.current]\nbuild = \"workspace\"\n";

/// The frozen 0.6.2 release as `previous`, then [`CURRENT`].
pub const PREVIOUS_AND_CURRENT: &str =
    "[artifacts.previous]\nrelease = \"0.6.2\"\n[artifacts.current]\nbuild = \"workspace\"\n";

/// The `[timings]` of a small matrix: heartbeats every 200 ms, a claim
/// stale after 1.5 s, rescue every 250 ms, a rotation a second, a 2 s
/// deadline, and drains of at most `drain_timeout`.
pub fn timings(drain_timeout: &str) -> String {
    format!(
        r#"[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "{drain_timeout}"
"#
    )
}

/// `artifacts`, a `[workload]` of the lines `workload`, [`timings`] with
/// `drain_timeout`, then `cells` (the `[[cell]]` tables and any `[matrix]`).
pub fn matrix(artifacts: &str, workload: &str, drain_timeout: &str, cells: &str) -> String {
    format!(
        "{artifacts}\n[workload]\n{}\n\n{}\n{}",
        workload.trim(),
        timings(drain_timeout),
        cells.trim_start()
    )
}

/// A matrix on the workspace build alone, drains of at most 30 s: the
/// shape of most small tests.
pub fn current_only(workload: &str, cells: &str) -> String {
    matrix(CURRENT, workload, "30s", cells)
}
