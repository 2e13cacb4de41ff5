//! A small hand-built run for the renderers' tests: one cell that passed
//! and says what it proved, one that failed with findings (one of them
//! carrying markup and a pipe, to prove escaping), one inconclusive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use awa_runtime::events::{Event, Flipped};

use crate::matrix::{self, FindingRule, FlipMode, Outcome};
use crate::observe::{
    CensusSample, FenceRecord, Finding, FlipRecord, InFlight, KillRecord, Phase, ProcessRecord,
    RingSample, Verdict,
};
use crate::plan::{self, Selection};

use super::model::{
    ArtifactInfo, CellReport, FORMAT_VERSION, RunEnd, RunHeader, RunInfo, RunReport,
};

const MATRIX: &str = r#"
[artifacts.previous]
release = "0.6.2"
[artifacts.current]
build = "workspace"
[artifacts.defective_fence]
build = "workspace"
failpoint = "fence_current_slot_only"

[workload]
rate_per_s = 200
mix = { complete = 1 }

[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "60s"

[[cell]]
name = "migrate-first"
about = "N-1 fleet under load, migrate, roll to N, flip, fence"
steps = [
  { fleet = "previous", workers = 2, producers = 1, leader = true },
  { migrate = "current" },
  { kill = "worker", of = "previous" },
  { roll = "current", one_at_a_time = true, pause = "1s" },
  { flip = "manual" },
  { fence = "previous" },
  { drain = "60s" },
]

[[cell]]
name = "fence"
about = "after the flip an N-1 binary refuses before any write"
steps = [
  { fleet = "current", workers = 1, producers = 1 },
  { migrate = "current" },
  { flip = "manual" },
  { fence = "previous" },
  { drain = "60s" },
]

[[cell]]
name = "defect-fence"
about = "a fence that poisons only current_slot must be caught"
expect = { detect = "fence_breached" }
steps = [
  { fleet = "previous", workers = 1, producers = 1 },
  { migrate = "defective_fence" },
  { flip = "force", by = "defective_fence" },
  { fence = "previous" },
  { drain = "60s" },
]

[matrix]
smoke = ["migrate-first", "fence", "defect-fence"]
"#;

/// The fixture's cells, each once on PostgreSQL 15 and once on 18.
pub fn on_two_servers() -> RunReport {
    use crate::servers::Major;
    let mut r = report();
    let cells = std::mem::take(&mut r.cells);
    for major in [Major(15), Major(18)] {
        for (i, c) in cells.iter().enumerate() {
            let mut c = c.clone();
            c.plan.server = Some(major);
            c.name = crate::servers::cell_id(&c.name, major);
            c.elapsed_ms = 1_000 * (i as u64 + 1) * u64::from(major.0 / 5);
            r.cells.push(c);
        }
    }
    r
}

/// [`report`] with the plan.json its run would have written beside it.
pub fn run_with_plan() -> (RunReport, crate::planfile::PlanFile) {
    let report = report();
    let plan = plan::Plan {
        seed: report.run.header.seed,
        selection: Selection {
            matrix: report.run.header.matrix.clone(),
            cells: vec![],
        },
        replay: report.run.header.replay.clone(),
        cells: report.cells.iter().map(|c| c.plan.clone()).collect(),
        matrix_checksum: report.run.header.matrix_checksum.clone(),
        partition: None,
        schedule: Default::default(),
        checklist: report.run.header.checklist.clone(),
    };
    let file = crate::planfile::PlanFile {
        plan_format: crate::planfile::PLAN_FORMAT.to_owned(),
        plan,
        artifacts: report
            .artifacts
            .iter()
            .map(|a| crate::planfile::PinnedArtifact {
                name: a.name.clone(),
                version: a.version.clone(),
                source: a.source.clone(),
                digest: a.digest.clone(),
            })
            .collect(),
    };
    (report, file)
}

/// The three-cell run every renderer test starts from.
pub fn report() -> RunReport {
    let matrix = matrix::parse("fixture.toml", MATRIX).unwrap_or_else(|d| panic!("{d}"));
    let selection = Selection {
        matrix: Some("smoke".into()),
        cells: vec![],
    };
    let plan = plan::expand(&matrix, &selection, 42).unwrap();
    let [first, second, third] = <[_; 3]>::try_from(plan.cells).unwrap();
    RunReport {
        format_version: FORMAT_VERSION.to_owned(),
        run: RunInfo {
            header: RunHeader {
                run_id: "20261130T014512Z-3f2a9c1".into(),
                started_at: "2026-11-30T01:45:12Z".into(),
                seed: 42,
                command_line: "rehearse --matrix smoke --seed 42".into(),
                matrix: Some("smoke".into()),
                replay: plan.replay,
                backend: "process".into(),
                backend_reason: "backend process (--backend process)".into(),
                engine: None,
                postgres_version: "15.18".into(),
                servers: Vec::new(),
                migration_checksums: BTreeMap::from([
                    ("v1".into(), "a".repeat(64)),
                    ("v2".into(), "b".repeat(64)),
                ]),
                git_commit: "3f2a9c1d0e4b5a69788f00112233445566778899".into(),
                git_dirty: true,
                cores: 2,
                jobs: 2,
                schedule:
                    "jobs 2; longest first, estimated from the plan (no earlier report of these cells)"
                        .into(),
                matrix_checksum: String::new(),
                partition: None,
                stress: None,
                checklist: vec![
                    matrix::ChecklistItem {
                        item: "the flip, old-binary fence, and supported rollback boundary".into(),
                        cells: vec!["migrate-first".into(), "fence".into()],
                        all: false,
                    },
                    matrix::ChecklistItem {
                        item: "hard kills with crash and heartbeat rescue asserted".into(),
                        cells: vec!["hard-kill-rescue".into()],
                        all: false,
                    },
                ],
            },
            end: RunEnd {
                finished_at: "2026-11-30T01:47:40Z".into(),
                wall_ms: 148_250,
                prepare_ms: 0,
                harness_cpu_ms: 3_400,
                children_cpu_ms: 95_120,
                container_cpu_ms: None,
                engine_cpu_ms: None,
                container_cpu_source: None,
                interrupted: false,
                held_back: None,
            },
            start_to_ready: None,
            merged_from: Vec::new(),
        },
        artifacts: vec![
            ArtifactInfo {
                name: "previous".into(),
                version: "0.6.2".into(),
                source: "release 0.6.2 (artifacts/awa-runtime-0.6.2.crate)".into(),
                digest: "0123456789abcdef".repeat(4),
                obtained: "cached".into(),
                binary: "target/rehearse/0.6.2/bin/awa".into(),
                failpoint: None,
                image: None,
            },
            ArtifactInfo {
                name: "current".into(),
                version: "0.7.0".into(),
                source: "workspace build".into(),
                digest: "fedcba9876543210".repeat(4),
                obtained: "built".into(),
                binary: "target/debug/awa".into(),
                failpoint: None,
                image: None,
            },
            ArtifactInfo {
                name: "defective_fence".into(),
                version: "0.7.0".into(),
                source: "workspace build".into(),
                digest: "00ff".repeat(16),
                obtained: "built".into(),
                binary: "target/failpoints/debug/awa".into(),
                failpoint: Some("fence_current_slot_only".into()),
                image: None,
            },
        ],
        cells: vec![passed(first), failed(second), inconclusive(third)],
        selftest: None,
    }
}

fn empty_cell(plan: plan::CellPlan) -> CellReport {
    CellReport {
        name: plan.name.clone(),
        about: plan.about.clone(),
        expect: plan.expect,
        verdict: Verdict::Pass,
        detection: None,
        verdict_reason: String::new(),
        findings: vec![],
        timeline: vec![],
        plan,
        accepted: 0,
        uncertain: 0,
        kills: vec![],
        flips: vec![],
        fences: vec![],
        processes: vec![],
        rings: vec![],
        census: vec![],
        elapsed_ms: 0,
        reconcile_ms: 0,
        harness_error: None,
        step_failures: vec![],
        proved: vec![],
        schema_history: vec![],
        schema_checks: vec![],
        late: vec![],
        misplaced: vec![],
        cancels: vec![],
        late_runtimes: vec![],
        queued_runtimes: vec![],
        held_by_commands: vec![],
        idle: vec![],
        leaderships: vec![],
        tries: vec![],
    }
}

fn phase(step: usize, name: &str, detail: &str, start_ms: u64, end_ms: u64) -> Phase {
    Phase {
        step,
        name: name.into(),
        detail: detail.into(),
        start_ms,
        end_ms,
        outcome: crate::observe::StepOutcome::Ok,
    }
}

/// Cumulative `finished` counts: 0.6.2 at 100/s until 8 s then tapering off,
/// 0.7.0 from 6 s on.
fn census() -> Vec<CensusSample> {
    (0..=20u64)
        .map(|s| {
            let old = 100 * s.min(8) + 30 * s.saturating_sub(8).min(2);
            let new = 120 * s.saturating_sub(6);
            let mut by_version = BTreeMap::new();
            by_version.insert(
                "0.6.2".to_owned(),
                BTreeMap::from([
                    ("finished".to_owned(), old),
                    ("accepted".to_owned(), old + 5),
                ]),
            );
            if new > 0 {
                by_version.insert(
                    "0.7.0".to_owned(),
                    BTreeMap::from([("finished".to_owned(), new)]),
                );
            }
            CensusSample {
                at_ms: s * 1_000,
                by_version,
                fresh_runtimes: BTreeMap::from([("0.6.2".to_owned(), 3)]),
                delta_rows: 0,
                lock_waits: 0,
                xacts: None,
                scans: Default::default(),
            }
        })
        .collect()
}

fn passed(plan: plan::CellPlan) -> CellReport {
    CellReport {
        verdict: Verdict::Pass,
        timeline: vec![
            phase(1, "fleet", "2 previous workers, 1 producer", 0, 400),
            phase(2, "migrate", "migrate with current", 2_000, 2_600),
            phase(
                3,
                "kill",
                "SIGKILL previous-worker-2 with 3 jobs in flight",
                4_000,
                4_050,
            ),
            phase(4, "roll", "roll to current one at a time", 6_000, 10_000),
            phase(5, "flip", "flip-ring-authority manual: ok", 12_000, 12_300),
            phase(6, "fence", "previous refused", 13_000, 13_500),
            phase(7, "drain", "queue empty", 14_000, 20_000),
            phase(0, "reconcile", "2,340 jobs reconciled", 20_000, 20_480),
        ],
        accepted: 2_340,
        uncertain: 1,
        kills: vec![KillRecord {
            process: "previous-worker-2".into(),
            version: "0.6.2".into(),
            role: "worker".into(),
            at_ms: 4_000,
            in_flight: vec![InFlight {
                job_id: 812,
                attempt: 1,
                run_lease: 3,
            }],
        }],
        flips: vec![FlipRecord {
            holder_ages: Vec::new(),
            ids_drawn_before: None,
            mode: FlipMode::Manual,
            expected: Outcome::Ok,
            exit_code: Some(0),
            at_ms: 12_000,
            output: vec![Event::Flipped(Flipped {
                forced: Some(false),
                version: Some("0.7.0".into()),
                ..Default::default()
            })],
        }],
        fences: vec![FenceRecord {
            artifact: "previous".into(),
            version: "0.6.2".into(),
            exit_code: Some(3),
            refused: true,
            state_before: "9c1e".into(),
            state_after: "9c1e".into(),
            stderr_tail: "refused: ring authority is ledger".into(),
        }],
        processes: vec![ProcessRecord {
            leader_at_ms: None,
            secret_lines: 0,
            first_secret_line: None,
            target_hidden_lines: 0,
            first_target_hidden_line: None,
            name: "previous-worker-1".into(),
            artifact: "previous".into(),
            version: "0.6.2".into(),
            role: "worker".into(),
            exit_code: Some(0),
            signal: None,
            container: None,
            start_to_ready_ms: None,
            killed: false,
            log: "logs/migrate-first/previous-worker-1.log".into(),
            error: None,
            contract: Default::default(),
        }],
        rings: vec![RingSample {
            at_ms: 1_000,
            ring: "queue".into(),
            authority: "columns".into(),
            column_slot: Some(2),
            column_generation: Some(41),
            ledger_generation: None,
            ledger_slot: None,
            ledger_rows: 0,
            ledger_gaps: 0,
        }],
        census: census(),
        elapsed_ms: 20_480,
        reconcile_ms: 480,
        step_failures: vec![],
        proved: vec![
            "reconcile: every accepted job (2,340) ended exactly once, in the terminal state its mode was designed for"
                .into(),
            "step 3 (kill): crash rescue proven on 1 in-flight job of killed previous-worker-2"
                .into(),
            "step 6 (fence): previous (0.6.2) refused after the flip and changed nothing".into(),
        ],
        ..empty_cell(plan)
    }
}

fn failed(plan: plan::CellPlan) -> CellReport {
    CellReport {
        verdict: Verdict::Fail,
        verdict_reason: "expected pass, got lost, fence_breached and 1 step failure".into(),
        step_failures: vec![
            "step 12 (fence): previous-fence-1 exited 0; an N-1 binary must refuse after the flip"
                .into(),
        ],
        findings: vec![
            Finding {
                rule: FindingRule::Lost,
                phase: "reconcile".into(),
                message: "3 accepted jobs have no terminal record".into(),
                ids: vec![101, 102, 103],
                count: 3,
                at_ms: None,
            },
            Finding {
                rule: FindingRule::FenceBreached,
                phase: "fence".into(),
                message: "N-1 binary wrote <script>alert(1)</script> | a ring row".into(),
                ids: (1..=20).collect(),
                count: 57,
                at_ms: None,
            },
        ],
        timeline: vec![
            phase(1, "fleet", "1 current worker, 1 producer", 0, 300),
            phase(2, "flip", "flip-ring-authority manual: ok", 1_000, 1_200),
            phase(
                3,
                "fence",
                "previous exited 0 without refusing",
                2_000,
                2_400,
            ),
            phase(4, "drain", "queue empty", 3_000, 6_000),
            phase(0, "reconcile", "", 6_000, 6_350),
        ],
        accepted: 410,
        elapsed_ms: 6_350,
        reconcile_ms: 350,
        ..empty_cell(plan)
    }
}

fn inconclusive(plan: plan::CellPlan) -> CellReport {
    CellReport {
        verdict: Verdict::Inconclusive,
        timeline: vec![Phase {
            outcome: crate::observe::StepOutcome::Failed,
            ..phase(1, "fleet", "worker 1 did not start", 0, 1_200)
        }],
        elapsed_ms: 1_200,
        harness_error: Some(
            "failed to start worker 1 of cell defect-fence: awa exited with code 127".into(),
        ),
        ..empty_cell(plan)
    }
}

/// A scratch directory, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh, empty directory named after the test.
    pub fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("rehearse-report-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A worker process that exited cleanly: `name` of `artifact` at
/// `version`, maintenance leader from `leader_at_ms` if it led.
pub fn worker_process(
    name: &str,
    artifact: &str,
    version: &str,
    leader_at_ms: Option<u64>,
) -> ProcessRecord {
    ProcessRecord {
        name: name.into(),
        artifact: artifact.into(),
        version: version.into(),
        role: "worker".into(),
        exit_code: Some(0),
        signal: None,
        container: None,
        start_to_ready_ms: None,
        killed: false,
        log: String::new(),
        error: None,
        contract: Default::default(),
        leader_at_ms,
        secret_lines: 0,
        first_secret_line: None,
        target_hidden_lines: 0,
        first_target_hidden_line: None,
    }
}
