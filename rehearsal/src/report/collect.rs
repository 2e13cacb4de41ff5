//! The report's side of the event stream: [`Collector`] folds a run's
//! events into the [`RunReport`] every renderer reads, and [`proved`]
//! writes what a passing cell proved, in sentences.
//!
//! The driver's events are the only input, so a recorded stream
//! (`events.jsonl`, see [`read_events`]) folds into the same report as the
//! run that produced it.

use std::collections::BTreeMap;
use std::path::Path;

use awa_runtime::error::{EXIT_OK, EXIT_REFUSED};

use crate::matrix::Expectation;
use crate::observe::{Verdict, thousands};
use crate::reconcile::Detection;
use crate::stream::{CellRun, RunEnd, RunEvent, RunStart};

use super::json::ReportError;
use super::model::{CellReport, FORMAT_VERSION, RunInfo, RunReport};

/// The file in a report folder that records the run's event stream, one JSON object a line.
pub const EVENTS_JSONL: &str = "events.jsonl";

/// Folds a run's events into its report.
#[derive(Debug, Default)]
pub struct Collector {
    start: Option<RunStart>,
    end: Option<RunEnd>,
    runs: BTreeMap<usize, CellRun>,
    cells: BTreeMap<usize, CellReport>,
}

impl Collector {
    /// Takes one event in.
    pub fn add(&mut self, event: &RunEvent) {
        match event {
            RunEvent::RunStarted(start) => self.start = Some(start.clone()),
            RunEvent::RunFinished(end) => self.end = Some(end.clone()),
            RunEvent::CellFinished(run) => {
                self.runs.insert(run.index, (**run).clone());
            }
            RunEvent::CellJudged {
                index,
                verdict,
                detection,
                reason,
                harness_error,
                ..
            } => {
                if let Some(mut run) = self.runs.remove(index) {
                    run.harness_error.clone_from(harness_error);
                    let cell = cell_report(run, *verdict, *detection, reason.clone());
                    self.cells.insert(*index, cell);
                }
            }
            _ => {}
        }
    }

    /// The report, once the run has started and finished (`None` before).
    pub fn finish(self) -> Option<RunReport> {
        let (start, end) = (self.start?, self.end?);
        let cells: Vec<CellReport> = self.cells.into_values().collect();
        Some(RunReport {
            format_version: FORMAT_VERSION.to_owned(),
            run: RunInfo {
                run_id: start.run_id,
                started_at: start.started_at,
                finished_at: end.finished_at,
                seed: start.seed,
                command_line: start.command_line,
                matrix: start.matrix,
                replay: start.replay,
                backend: start.backend,
                backend_reason: start.backend_reason,
                engine: start.engine,
                postgres_version: start.postgres_version,
                migration_checksums: start.migration_checksums,
                git_commit: start.git_commit,
                git_dirty: start.git_dirty,
                wall_ms: end.wall_ms,
                harness_cpu_ms: end.harness_cpu_ms,
                children_cpu_ms: end.children_cpu_ms,
                container_cpu_ms: end.container_cpu_ms,
                interrupted: end.interrupted,
                cores: start.cores,
                jobs: start.jobs,
                schedule: start.schedule,
            },
            artifacts: start.artifacts,
            selftest: start
                .selftest
                .then(|| crate::selftest::Score::of(&awa_runtime::failpoint::ALL, &cells)),
            cells,
        })
    }
}

/// The report of a recorded stream.
pub fn replay<'a>(events: impl IntoIterator<Item = &'a RunEvent>) -> Option<RunReport> {
    let mut collector = Collector::default();
    for event in events {
        collector.add(event);
    }
    collector.finish()
}

/// Reads a recorded stream (`events.jsonl`).
pub fn read_events(path: &Path) -> Result<Vec<RunEvent>, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Read {
        path: path.to_owned(),
        source,
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(ReportError::Encode))
        .collect()
}

/// One JSON line of the recording, secrets redacted in every string.
pub fn event_line(event: &RunEvent) -> Result<String, ReportError> {
    let value = serde_json::to_value(event).map_err(ReportError::Encode)?;
    serde_json::to_string(&super::folder::redact_value(value)).map_err(ReportError::Encode)
}

fn cell_report(
    run: CellRun,
    verdict: Verdict,
    detection: Option<Detection>,
    verdict_reason: String,
) -> CellReport {
    let proved = if verdict == Verdict::Pass {
        proved(&run)
    } else {
        Vec::new()
    };
    let obs = run.observations;
    CellReport {
        name: run.plan.name.clone(),
        about: run.plan.about.clone(),
        expect: run.plan.expect,
        verdict,
        detection,
        verdict_reason,
        findings: run.findings,
        timeline: obs.phases,
        accepted: obs.accepted.len() as u64,
        uncertain: obs.uncertain.len() as u64,
        kills: obs.kills,
        flips: obs.flips,
        fences: obs.fences,
        processes: obs.processes,
        rings: obs.rings,
        census: obs.census,
        elapsed_ms: run.elapsed_ms,
        reconcile_ms: run.reconcile_ms,
        harness_error: run.harness_error,
        step_failures: obs.step_failures.iter().map(ToString::to_string).collect(),
        proved,
        plan: run.plan,
    }
}

/// What a passing cell proved, one sentence each.
pub fn proved(run: &CellRun) -> Vec<String> {
    let findings = &run.findings;
    let mut out = Vec::new();
    if let Expectation::Detect(rule) = run.plan.expect {
        let hits = findings.iter().filter(|f| f.rule == rule).count();
        out.push(format!(
            "the seeded defect was caught: {hits} {} finding(s)",
            rule.name()
        ));
        return out;
    }
    let accepted = run.observations.accepted.len();
    out.push(format!(
        "{} accepted jobs each ended exactly once, in the terminal state their mode was designed for",
        thousands(accepted as u64)
    ));
    if !run.observations.uncertain.is_empty() {
        out.push(format!(
            "{} jobs of uncertain commit were settled (each ended at most once)",
            run.observations.uncertain.len()
        ));
    }
    if run.proved.claimed_by.len() >= 2 {
        out.push(format!(
            "workers of {} claimed jobs side by side",
            run.proved.claimed_by.join(" and ")
        ));
    }
    for kill in &run.observations.kills {
        if kill.in_flight.is_empty() {
            out.push(format!(
                "killed {} ({}) with no attempt in flight; nothing was lost",
                kill.process, kill.role
            ));
        } else {
            out.push(format!(
                "crash rescue proven on {} in-flight jobs of killed {}",
                kill.in_flight.len(),
                kill.process
            ));
        }
    }
    for w in &run.observations.cron {
        let every = w.every_ms.max(1);
        let fires = w.to_ms.div_euclid(every) - w.from_ms.div_euclid(every);
        if fires > 0 {
            out.push(format!(
                "each of the {fires} cron fire times in the window produced exactly one job"
            ));
        }
    }
    for flip in &run.observations.flips {
        match (flip.mode.as_str(), flip.exit_code) {
            (_, Some(EXIT_REFUSED)) => {
                out.push(format!("a {} flip was refused, as required", flip.mode))
            }
            ("auto", None) if flip.expected == "ok" => {
                out.push("the leader auto-flipped the ring-cursor authority to ledger".into())
            }
            (mode, Some(EXIT_OK)) => out.push(format!(
                "the {mode} flip moved ring-cursor authority to ledger and verified the ledgers"
            )),
            _ => {}
        }
    }
    for fence in &run.observations.fences {
        out.push(format!(
            "{} refused after the flip and changed nothing",
            fence.version
        ));
    }
    out.extend(run.proved.refusals_required.iter().cloned());
    let refused = run.proved.binary_first.len();
    if run.proved.relaunched > 0 {
        out.push(format!(
            "{} process(es) that refused to start on the N-1 schema ran after the migration (binary-first)",
            run.proved.relaunched
        ));
    }
    if refused > run.proved.relaunched {
        out.push(format!(
            "{} start(s) of a flip-aware binary on the N-1 schema were refused before any write, as required",
            refused - run.proved.relaunched
        ));
    }
    out.extend(run.proved.crashes.iter().cloned());
    out.extend(run.proved.asserts.iter().cloned());
    out
}
