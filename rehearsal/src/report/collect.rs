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

use crate::matrix::{Expectation, FlipMode, Outcome};
use crate::observe::{Phase, Verdict, agree, count, thousands};
use crate::reconcile::Detection;
use crate::stream::{CellRun, Reached, RunEnd, RunEvent, RunStart};

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
    /// Earlier tries of cells tried again, by cell index.
    tries: BTreeMap<usize, Vec<crate::stream::CellTry>>,
}

impl Collector {
    /// Takes one event in.
    pub fn add(&mut self, event: &RunEvent) {
        match event {
            RunEvent::RunStarted(start) => self.start = Some(start.clone()),
            RunEvent::RunFinished(end) => self.end = Some(end.clone()),
            RunEvent::CellRetried { index, attempt, .. } => {
                self.tries.entry(*index).or_default().push(attempt.clone());
            }
            RunEvent::CellFinished(run) => {
                self.runs.insert(run.index, (**run).clone());
            }
            RunEvent::CellJudged {
                index,
                verdict,
                detection,
                reason,
                harness_error,
                reached,
                ..
            } => {
                if let Some(mut run) = self.runs.remove(index) {
                    run.harness_error.clone_from(harness_error);
                    let judged = JudgedEvent {
                        verdict: *verdict,
                        detection: *detection,
                        reason: reason.clone(),
                        reached,
                    };
                    let mut cell = cell_report(run, judged);
                    cell.tries = self.tries.remove(index).unwrap_or_default();
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
                header: start.header,
                end,
                start_to_ready: super::model::ReadyTimes::of(&cells),
                merged_from: Vec::new(),
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

/// Reconciliation's verdict on a cell, as its `cell_judged` event gave it.
struct JudgedEvent<'a> {
    verdict: Verdict,
    detection: Option<Detection>,
    reason: String,
    reached: &'a [Reached],
}

fn cell_report(run: CellRun, judged: JudgedEvent<'_>) -> CellReport {
    let JudgedEvent {
        verdict,
        detection,
        reason: verdict_reason,
        reached,
    } = judged;
    let proved = if verdict == Verdict::Pass {
        proved(&run, reached)
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
        schema_history: obs.schema_history,
        schema_checks: obs.schema_checks,
        late: obs.late,
        misplaced: obs.misplaced,
        cancels: obs.cancels,
        late_runtimes: obs.late_runtimes,
        queued_runtimes: obs.queued_runtimes,
        held_by_commands: obs.held_by_commands,
        idle: obs.idle,
        leaderships: obs.leaderships,
        tries: Vec::new(),
    }
}

/// What a passing cell proved, one sentence each, each led by the step
/// (or phase) that proved it (`step 5 (kill): crash rescue proven on 3
/// in-flight jobs of killed previous-worker-2`), counts written one way
/// ([`count`]) and no sentence twice. `reached` is what reconciliation
/// judged of the interleavings the cell declares.
pub fn proved(run: &CellRun, reached: &[Reached]) -> Vec<String> {
    let phases = &run.observations.phases;
    let mut out = Vec::new();
    if let Expectation::Detect(rule) = run.plan.expect {
        let hits: Vec<&str> = run
            .findings
            .iter()
            .filter(|f| f.rule == rule)
            .map(|f| f.phase.as_str())
            .collect();
        let mut wheres: Vec<&str> = Vec::new();
        for phase in &hits {
            if !wheres.contains(phase) {
                wheres.push(phase);
            }
        }
        out.push(format!(
            "{}: the seeded defect was caught by {}",
            wheres.join(", "),
            count(hits.len() as u64, &format!("{} finding", rule.name()))
        ));
        return out;
    }
    out.extend(jobs_settled(run));
    for r in reached {
        if r.reached {
            out.push(format!("reached {}: {}", r.reach.name(), r.evidence));
        }
    }
    if run.proved.claimed_by.len() >= 2 {
        let from = phases
            .iter()
            .filter(|p| matches!(p.name.as_str(), "roll" | "rollback" | "fleet"))
            .nth(1)
            .map_or("whole cell".to_owned(), |p| {
                format!("from {}", step_label(p))
            });
        out.push(format!(
            "{from}: workers of {} claimed jobs side by side",
            run.proved.claimed_by.join(" and ")
        ));
    }
    for kill in &run.observations.kills {
        let at = label_at(phases, kill.at_ms);
        out.push(if kill.in_flight.is_empty() {
            format!(
                "{at}: killed {} ({}) with no attempt in flight; nothing was lost",
                kill.process, kill.role
            )
        } else {
            format!(
                "{at}: crash rescue proven on {} of killed {}",
                count(kill.in_flight.len() as u64, "in-flight job"),
                kill.process
            )
        });
    }
    out.extend(flips_and_fences(run));
    out.extend(run.proved.refusals_required.iter().cloned());
    out.extend(binary_first(run));
    out.extend(run.proved.crashes.iter().cloned());
    out.extend(run.proved.asserts.iter().cloned());
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|line| seen.insert(line.clone()));
    out
}

/// Reconciliation's sentences: every accepted job ended once, the
/// uncertain ones at most once, every cron fire time produced one job.
fn jobs_settled(run: &CellRun) -> Vec<String> {
    let mut out = Vec::new();
    let accepted = run.observations.accepted.len() as u64;
    if accepted > 0 {
        out.push(format!(
            "reconcile: every accepted job ({}) ended exactly once, in the terminal state its mode was designed for",
            thousands(accepted)
        ));
    }
    let uncertain = run.observations.uncertain.len() as u64;
    if uncertain > 0 {
        out.push(format!(
            "reconcile: {} of uncertain commit settled, each ending at most once",
            count(uncertain, "job")
        ));
    }
    // One sentence per schedule, its windows added up.
    let mut fires: BTreeMap<&str, i64> = BTreeMap::new();
    for w in &run.observations.cron {
        let every = w.every_ms.max(1);
        *fires.entry(w.name.as_str()).or_default() +=
            w.to_ms.div_euclid(every) - w.from_ms.div_euclid(every);
    }
    for (name, n) in fires.into_iter().filter(|(_, n)| *n > 0) {
        out.push(format!(
            "reconcile: each of the {} of cron schedule {name} produced exactly one job",
            count(n.unsigned_abs(), "fire time")
        ));
    }
    out
}

/// The flips that did what they declared, and the fences that held.
fn flips_and_fences(run: &CellRun) -> Vec<String> {
    let phases = &run.observations.phases;
    let mut out = Vec::new();
    for flip in &run.observations.flips {
        let at = label_at(phases, flip.at_ms);
        match (flip.mode, flip.exit_code) {
            (_, Some(EXIT_REFUSED)) => out.push(format!(
                "{at}: a {} flip was refused, as required",
                flip.mode.name()
            )),
            (FlipMode::Auto, None) if flip.expected == Outcome::Ok => out.push(format!(
                "{at}: the leader auto-flipped the ring-cursor authority to ledger"
            )),
            (mode, Some(EXIT_OK)) => out.push(format!(
                "{at}: the {} flip moved ring-cursor authority to ledger and verified the ledgers",
                mode.name()
            )),
            _ => {}
        }
    }
    let mut fence_steps = phases.iter().filter(|p| p.name == "fence");
    for fence in &run.observations.fences {
        let at = fence_steps.next().map_or("fence".to_owned(), step_label);
        out.push(format!(
            "{at}: {} ({}) refused after the flip and changed nothing",
            fence.artifact, fence.version
        ));
    }
    out
}

/// Binary-first: flip-aware binaries refused on the N-1 schema until
/// the migration, and ran after it.
fn binary_first(run: &CellRun) -> Vec<String> {
    let migrate = run
        .observations
        .phases
        .iter()
        .find(|p| p.name == "migrate")
        .map_or("the migration".to_owned(), step_label);
    let mut out = Vec::new();
    let refused = run.proved.binary_first.len();
    let relaunched = run.proved.relaunched;
    if refused > relaunched {
        out.push(format!(
            "until {migrate}: {} of a flip-aware binary on the N-1 schema {} refused before any write, as required",
            count((refused - relaunched) as u64, "start"),
            agree((refused - relaunched) as u64, "was", "were")
        ));
    }
    if relaunched > 0 {
        out.push(format!(
            "after {migrate}: {} that refused to start on the N-1 schema ran (binary-first)",
            count(relaunched as u64, "process")
        ));
    }
    out
}

/// `step 5 (kill)`, or the phase's name for setup and the final phases.
fn step_label(p: &Phase) -> String {
    if p.step == 0 {
        p.name.clone()
    } else {
        format!("step {} ({})", p.step, p.name)
    }
}

/// The label of the phase running at `at_ms` (the latest to start, when
/// phases nest); `whole cell` when none was.
fn label_at(phases: &[Phase], at_ms: u64) -> String {
    phases
        .iter()
        .filter(|p| p.start_ms <= at_ms && at_ms <= p.end_ms)
        .max_by_key(|p| (p.start_ms, p.step))
        .map_or("whole cell".to_owned(), step_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::FindingRule;
    use crate::observe::{AcceptedJob, CronWindow, Finding, Observations, ProvedFacts};
    use crate::report::fixture;

    /// The fixture's passing cell as the driver hands it over, with `accepted` jobs.
    fn migrate_first(accepted: i64) -> CellRun {
        let cell = fixture::report().cells.remove(0);
        let job = |job_id| AcceptedJob {
            job_id,
            mode: awa_runtime::workload::Mode::Complete,
            max_attempts: 3,
            version: "0.6.2".into(),
            run_at_ms: None,
        };
        CellRun {
            index: 0,
            observations: Observations {
                accepted: (1..=accepted).map(job).collect(),
                uncertain: vec![job(accepted + 1)],
                kills: cell.kills.clone(),
                flips: cell.flips.clone(),
                fences: cell.fences.clone(),
                phases: cell.timeline.clone(),
                // Two windows of one schedule: one sentence, the fires added up.
                cron: ["nightly", "nightly"]
                    .iter()
                    .enumerate()
                    .map(|(i, name)| CronWindow {
                        name: (*name).into(),
                        every_ms: 1_000,
                        from_ms: i as i64 * 10_000,
                        to_ms: i as i64 * 10_000 + 5_000,
                    })
                    .collect(),
                ..Observations::default()
            },
            proved: ProvedFacts {
                claimed_by: vec!["0.6.2".into(), "0.7.0".into()],
                binary_first: vec!["current-worker-1".into(), "current-worker-1".into()],
                relaunched: 1,
                asserts: vec!["step 2 (assert): schema_expanded held: schema at v3".into()],
                ..ProvedFacts::default()
            },
            findings: vec![],
            doubts: vec![],
            harness_error: None,
            elapsed_ms: cell.elapsed_ms,
            reconcile_ms: cell.reconcile_ms,
            plan: cell.plan,
        }
    }

    /// A pass, as a `cell_judged` event with nothing reached would give it.
    fn passed() -> JudgedEvent<'static> {
        JudgedEvent {
            verdict: Verdict::Pass,
            detection: None,
            reason: String::new(),
            reached: &[],
        }
    }

    #[test]
    fn every_proof_names_its_step_and_counts_read_one_way() {
        let mut run = migrate_first(2_340);
        // A proof recorded twice is said once.
        run.proved.asserts.push(run.proved.asserts[0].clone());
        assert_eq!(
            proved(&run, &[]),
            [
                "reconcile: every accepted job (2,340) ended exactly once, in the terminal state its mode was designed for",
                "reconcile: 1 job of uncertain commit settled, each ending at most once",
                "reconcile: each of the 10 fire times of cron schedule nightly produced exactly one job",
                "from step 4 (roll): workers of 0.6.2 and 0.7.0 claimed jobs side by side",
                "step 3 (kill): crash rescue proven on 1 in-flight job of killed previous-worker-2",
                "step 5 (flip): the manual flip moved ring-cursor authority to ledger and verified the ledgers",
                "step 6 (fence): previous (0.6.2) refused after the flip and changed nothing",
                "until step 2 (migrate): 1 start of a flip-aware binary on the N-1 schema was refused before any write, as required",
                "after step 2 (migrate): 1 process that refused to start on the N-1 schema ran (binary-first)",
                "step 2 (assert): schema_expanded held: schema at v3",
            ]
        );
    }

    #[test]
    fn what_reconciliation_judged_reached_is_a_proof_and_what_it_did_not_is_not() {
        use crate::matrix::Reach;
        let run = migrate_first(10);
        let reached = [
            Reached {
                reach: Reach::MixedClaims,
                reached: true,
                evidence: "workers of 0.6.2 and 0.7.0 claimed".into(),
            },
            Reached {
                reach: Reach::LeaderTakeover,
                reached: false,
                evidence: "nobody took over".into(),
            },
        ];
        let proofs = proved(&run, &reached);
        let said = format!(
            "reached {}: workers of 0.6.2 and 0.7.0 claimed",
            Reach::MixedClaims.name()
        );
        assert!(proofs.contains(&said), "{proofs:?}");
        assert!(
            !proofs.iter().any(|p| p.contains("nobody took over")),
            "{proofs:?}"
        );
        assert_eq!(proofs.len(), proved(&run, &[]).len() + 1);
    }

    #[test]
    fn a_caught_defect_says_where_and_by_how_many_findings() {
        let mut run = migrate_first(10);
        run.plan.expect = Expectation::Detect(FindingRule::FenceBreached);
        let finding = |phase: &str| Finding {
            phase: phase.into(),
            ..Finding::of(FindingRule::FenceBreached)
        };
        run.findings = vec![finding("fence"), finding("reconcile"), finding("fence")];
        assert_eq!(
            proved(&run, &[]),
            ["fence, reconcile: the seeded defect was caught by 3 fence_breached findings"]
        );
        run.findings.truncate(1);
        assert_eq!(
            proved(&run, &[]),
            ["fence: the seeded defect was caught by 1 fence_breached finding"]
        );
    }

    #[test]
    fn the_evidence_behind_an_excused_rescue_is_written_into_the_cell() {
        let mut run = migrate_first(1);
        run.observations.queued_runtimes = vec![crate::observe::QueuedRuntime {
            instance_id: "current-worker-2-1-a".into(),
            first_ms: 30_000,
            waited_ms: 1_600,
            requester_version: None,
            relation: "leases_3".into(),
            since_unix_ms: 1_780_000_000_000,
            explains_until_unix_ms: 1_780_000_003_350,
        }];
        run.observations.late_runtimes = vec![crate::observe::LateRuntime {
            instance_id: "previous-worker-1-2-b".into(),
            first_ms: 4_000,
            age_ms: 1_900,
        }];
        let cell = cell_report(run, passed());
        let json = serde_json::to_value(&cell).unwrap();
        assert_eq!(
            json["queued_runtimes"][0]["instance_id"],
            "current-worker-2-1-a"
        );
        assert_eq!(
            json["queued_runtimes"][0]["requester_version"],
            serde_json::Value::Null
        );
        assert_eq!(json["late_runtimes"][0]["age_ms"], 1_900);
        let back: CellReport = serde_json::from_value(json).unwrap();
        assert_eq!(back.queued_runtimes, cell.queued_runtimes);
        // None seen: the keys are left out, as older reports have them.
        let quiet = cell_report(migrate_first(1), passed());
        let json = serde_json::to_value(&quiet).unwrap();
        assert!(json.get("queued_runtimes").is_none() && json.get("late_runtimes").is_none());
    }
}
