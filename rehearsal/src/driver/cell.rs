//! One cell from start to report: database, preparation, steps, final
//! drain, reconciliation, verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::database::CellDb;
use super::ledger::{Cancel, Role, Shared};
use super::probe::Probe;
use super::{Abort, CellContext, CellProgress, Done};
use super::{EXIT_OK, EXIT_REFUSED};
use crate::fleet::{ProcId, Sink};
use crate::matrix::{Expectation, FlipMode, Step, When};
use crate::monitor::Monitor;
use crate::observe::{
    CronWindow, Observations, Phase, ProcessRecord, StepFailure, StepOutcome, Verdict,
};
use crate::plan::{CellPlan, PlannedKill};
use crate::report::CellReport;

/// Name of the cron schedule every cell with a `[workload] cron` upserts.
pub const CRON_NAME: &str = "rehearse";

/// How long a runtime may take to print `ready` (or refuse) after its start.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a one-shot command (migrate, flip, cron upsert) may run.
pub(super) const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the backlog may take to bank.
pub(super) const BACKLOG_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a process may take to stop after SIGTERM before SIGKILL:
/// the runtime's own grace plus room for its last statements.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// The same when rehearse itself is being interrupted.
pub(super) const STOP_TIMEOUT_INTERRUPTED: Duration = Duration::from_secs(3);

/// A fault armed for the next migrate or flip.
#[derive(Clone, Debug)]
pub(super) enum Fault {
    Kill(PlannedKill),
    Crash,
    /// Start these runtimes inside the migration (after its preflight).
    Fleet(crate::matrix::FleetStep),
}

/// One place in the fleet: a worker or a producer of some artifact.
/// A roll replaces a slot's process; a kill removes the slot.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub role: Role,
    pub artifact: String,
    /// The process filling it now (producers only while load is on).
    pub proc: Option<ProcId>,
    /// The last process started for it (also when it refused or died).
    pub last: Option<ProcId>,
    /// Its binary refused on the N-1 schema; re-launched after the next migrate.
    pub parked: bool,
    /// Gone: killed, refused for good, or died; removed after the step.
    pub dead: bool,
}

/// Facts gathered for the report's "proved" lines.
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub asserts: Vec<String>,
    pub refusals_required: Vec<String>,
    pub binary_first: Vec<String>,
    pub relaunched: usize,
    pub crashes: Vec<String>,
    pub notes: Vec<String>,
}

/// A phase that has begun.
pub(super) struct Begun {
    index: usize,
    name: &'static str,
    start_ms: u64,
    failures_before: usize,
}

/// A cell in progress.
pub(super) struct Cell<'a> {
    pub ctx: &'a CellContext,
    pub plan: &'a CellPlan,
    pub t0: Instant,
    pub db: CellDb,
    pub probe: Probe,
    pub shared: Arc<Shared>,
    pub sink: Sink,
    pub obs: Observations,
    pub slots: Vec<Slot>,
    pub load_on: bool,
    pub armed: Vec<(When, Fault)>,
    pub names: BTreeMap<(String, Role), u32>,
    /// Artifacts whose workers auto-flip (the `by` of a `flip = "auto"` step).
    pub auto_flip_by: BTreeSet<String>,
    pub drained: bool,
    /// Processes whose unexpected end was already reported.
    pub reported_exits: BTreeSet<ProcId>,
    pub facts: Facts,
    /// The step running (1-based; 0 for setup and the end).
    pub step_index: usize,
    pub step_name: &'static str,
}

impl Cell<'_> {
    /// Milliseconds since the cell started.
    pub fn ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// Records a step failure: the product did not do what the plan requires.
    pub fn fail(&mut self, message: impl Into<String>) {
        let message = message.into();
        self.obs.step_failures.push(StepFailure {
            step: self.step_index,
            kind: self.step_name.to_owned(),
            message,
        });
    }

    /// The cancellation to use for waits: none once the cell is winding down.
    pub fn cancel(&self) -> Cancel {
        self.ctx.cancel.clone()
    }
}

/// The folder of a cell's process logs, relative to the report folder.
pub(super) fn cell_dir(name: &str) -> String {
    format!("logs/{name}")
}

/// Runs one cell to its report. Never fails: what goes wrong becomes the
/// report's `harness_error` (inconclusive) or a failing verdict.
pub async fn run_cell(
    ctx: &CellContext,
    plan: &CellPlan,
    progress: &dyn CellProgress,
) -> CellReport {
    let t0 = Instant::now();
    let needs_crash = plan.steps.iter().any(|s| matches!(s, Step::PgCrash(_)));
    if needs_crash && matches!(ctx.server, super::database::Server::External { .. }) {
        return unrun(
            plan,
            t0,
            "pg_crash needs the throwaway PostgreSQL cluster: with --database-url rehearse does not control the server, so it cannot crash and restart it; run this cell without --database-url".into(),
        );
    }
    if ctx.cancel.is_set() {
        return unrun(plan, t0, "interrupted before the cell started".into());
    }
    let db = match CellDb::create(&ctx.server, &plan.name, &ctx.run_id, needs_crash).await {
        Ok(db) => db,
        Err(e) => {
            return unrun(
                plan,
                t0,
                format!("could not create the cell's database: {e}"),
            );
        }
    };
    let (sink, rx) = mpsc::unbounded_channel();
    let shared = Shared::start(t0, rx);
    let auto_flip_by = plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Flip(f) if f.mode == FlipMode::Auto => Some(f.by.clone()),
            _ => None,
        })
        .collect();
    let probe = Probe::new(&db.url);
    let counts = {
        let shared = shared.clone();
        Arc::new(move || shared.lock().counts.clone())
    };
    let monitor = Monitor::start(
        db.url.clone(),
        t0,
        plan.timings.stale_after.to_std(),
        counts,
    );
    let mut cell = Cell {
        ctx,
        plan,
        t0,
        db,
        probe,
        shared,
        sink,
        obs: Observations::default(),
        slots: Vec::new(),
        load_on: false,
        armed: Vec::new(),
        names: BTreeMap::new(),
        auto_flip_by,
        drained: false,
        reported_exits: BTreeSet::new(),
        facts: Facts::default(),
        step_index: 0,
        step_name: "setup",
    };

    // Setup, the steps, and (unless the plan drains) a final drain.
    progress.step("prepare the database");
    let begun = cell.begin(0, "setup");
    let result = cell.setup().await;
    let mut abort = cell.end(begun, result).await.err();
    if abort.is_none() {
        for (i, step) in plan.steps.iter().enumerate() {
            progress.step(&step.to_string());
            let begun = cell.begin(i + 1, step.name());
            let result = cell.step(step).await;
            if let Err(a) = cell.end(begun, result).await {
                abort = Some(a);
                break;
            }
        }
    }
    if abort.is_none() && !cell.drained {
        progress.step("final drain (the plan has none)");
        let begun = cell.begin(0, "drain");
        let result = cell
            .drain(plan.timings.drain_timeout)
            .await
            .map(|mut done| {
                done.detail = format!("final drain (the plan has none): {}", done.detail);
                done
            });
        abort = cell.end(begun, result).await.err();
    }
    // Whatever happened, nothing of this cell keeps running.
    let grace = if abort.is_some() {
        STOP_TIMEOUT_INTERRUPTED
    } else {
        STOP_TIMEOUT
    };
    let leftovers = cell.stop_everything(grace).await;
    if !leftovers.is_empty() {
        cell.facts.notes.push(leftovers.join("; "));
    }
    let samples = monitor.stop().await;
    cell.obs.rings = samples.rings;
    cell.obs.census = samples.census;
    cell.obs.liveness = samples.liveness;
    cell.collect_ledger();
    if abort.is_none() {
        cell.record_cron_window().await;
    }

    let mut harness_error = match &abort {
        None => None,
        Some(Abort::Interrupted) => Some(format!(
            "interrupted (Ctrl-C or SIGTERM) during {}; the cell was cut short",
            describe_phase(cell.step_index, cell.step_name)
        )),
        Some(Abort::Harness(message)) => Some(format!(
            "{}: {message}",
            describe_phase(cell.step_index, cell.step_name)
        )),
    };
    let mut findings = Vec::new();
    let mut reconcile_ms = 0;
    if harness_error.is_none() {
        progress.step("reconcile");
        let started = Instant::now();
        let start_ms = cell.ms();
        match reconcile(&cell.db.url, plan, &cell.obs).await {
            Ok(found) => findings = found,
            Err(e) => harness_error = Some(e),
        }
        reconcile_ms = started.elapsed().as_millis() as u64;
        let detail = format!(
            "{} finding(s) over {} accepted job(s)",
            findings.len(),
            cell.obs.accepted.len()
        );
        let outcome = if harness_error.is_some() {
            StepOutcome::HarnessError
        } else {
            StepOutcome::Ok
        };
        let end_ms = cell.ms();
        cell.obs.phases.push(Phase {
            step: 0,
            name: "reconcile".into(),
            detail,
            start_ms,
            end_ms,
            outcome,
        });
    }
    cell.probe.close();
    // Findings stay in the report, but a fault that did not fire leaves
    // the cell unjudged.
    if harness_error.is_none() {
        harness_error = crate::reconcile::unfired_faults(&cell.obs);
    }
    let step_failures: Vec<String> = cell
        .obs
        .step_failures
        .iter()
        .map(ToString::to_string)
        .collect();
    let judgement = crate::reconcile::judge(
        &plan.expect,
        &findings,
        &step_failures,
        harness_error.as_deref(),
    );
    let verdict = judgement.verdict;
    let proved = if verdict == Verdict::Pass {
        cell.proved(&findings)
    } else {
        Vec::new()
    };
    let obs = std::mem::take(&mut cell.obs);
    let keep = ctx.keep;
    if let Some(note) = cell.db.finish(keep).await {
        eprintln!("{}: {}", plan.name, super::database::redact(&note));
    }
    CellReport {
        name: plan.name.clone(),
        about: plan.about.clone(),
        expect: plan.expect,
        verdict,
        detection: judgement.detection,
        verdict_reason: judgement.reason,
        findings,
        timeline: obs.phases,
        plan: plan.clone(),
        accepted: obs.accepted.len() as u64,
        uncertain: obs.uncertain.len() as u64,
        kills: obs.kills,
        flips: obs.flips,
        fences: obs.fences,
        processes: obs.processes,
        rings: obs.rings,
        census: obs.census,
        elapsed_ms: t0.elapsed().as_millis() as u64,
        reconcile_ms,
        harness_error,
        step_failures,
        proved,
    }
}

fn describe_phase(index: usize, name: &str) -> String {
    if index == 0 {
        name.to_owned()
    } else {
        format!("step {index} ({name})")
    }
}

/// The report of a cell that never started (inconclusive, saying why).
fn unrun(plan: &CellPlan, t0: Instant, why: String) -> CellReport {
    CellReport {
        name: plan.name.clone(),
        about: plan.about.clone(),
        expect: plan.expect,
        verdict: Verdict::Inconclusive,
        detection: None,
        verdict_reason: format!("inconclusive: {why}"),
        findings: Vec::new(),
        timeline: Vec::new(),
        plan: plan.clone(),
        accepted: 0,
        uncertain: 0,
        kills: Vec::new(),
        flips: Vec::new(),
        fences: Vec::new(),
        processes: Vec::new(),
        rings: Vec::new(),
        census: Vec::new(),
        elapsed_ms: t0.elapsed().as_millis() as u64,
        reconcile_ms: 0,
        harness_error: Some(why),
        step_failures: Vec::new(),
        proved: Vec::new(),
    }
}

/// Reconciliation over the cell's database.
async fn reconcile(
    url: &str,
    plan: &CellPlan,
    obs: &Observations,
) -> Result<Vec<crate::observe::Finding>, String> {
    let client = super::database::connect(url)
        .await
        .map_err(|e| format!("reconciliation could not connect: {e}"))?;
    crate::reconcile::reconcile(&client, plan, obs)
        .await
        .map_err(|e| awa_runtime::error::chain(&e))
}

impl Cell<'_> {
    /// A phase begins.
    fn begin(&mut self, index: usize, name: &'static str) -> Begun {
        self.step_index = index;
        self.step_name = name;
        Begun {
            index,
            name,
            start_ms: self.ms(),
            failures_before: self.obs.step_failures.len(),
        }
    }

    /// A phase ended with `result`: names its outcome and records it.
    async fn end(&mut self, begun: Begun, result: Result<Done, Abort>) -> Result<(), Abort> {
        let notes = if result.is_ok() {
            self.check_unexpected_exits().await
        } else {
            Vec::new()
        };
        self.slots.retain(|s| !s.dead);
        let end_ms = self.ms();
        let new_failures = &self.obs.step_failures[begun.failures_before..];
        let failed = !new_failures.is_empty();
        let (outcome, mut detail, abort) = match result {
            Ok(done) => (
                if failed {
                    StepOutcome::Failed
                } else {
                    done.outcome
                },
                done.detail,
                None,
            ),
            Err(Abort::Interrupted) => (
                StepOutcome::Interrupted,
                "interrupted by Ctrl-C or SIGTERM".to_owned(),
                Some(Abort::Interrupted),
            ),
            Err(Abort::Harness(m)) => (
                StepOutcome::HarnessError,
                m.clone(),
                Some(Abort::Harness(m)),
            ),
        };
        if failed {
            let failures: Vec<&str> = new_failures.iter().map(|f| f.message.as_str()).collect();
            detail = format!("{detail}; FAILED: {}", failures.join("; "));
        }
        if !notes.is_empty() {
            detail = format!("{detail}; {}", notes.join("; "));
        }
        self.obs.phases.push(Phase {
            step: begun.index,
            name: begun.name.to_owned(),
            detail: detail.trim_start_matches("; ").to_owned(),
            start_ms: begun.start_ms,
            end_ms,
            outcome,
        });
        match abort {
            Some(a) => Err(a),
            None => Ok(()),
        }
    }

    /// Step 0: the N-1 (or fresh) schema, the cron schedule, the banked backlog.
    async fn setup(&mut self) -> Result<Done, Abort> {
        let plan = self.plan;
        let by = plan.database.migrated_by.clone();
        let version = self.version_of(&by);
        let mut detail = Vec::new();
        let id = self
            .run_command(
                &by,
                Role::Migrate,
                vec!["migrate".into()],
                Vec::new(),
                COMMAND_TIMEOUT,
            )
            .await?;
        let code = self.shared.lock().procs[id].code();
        if code != Some(EXIT_OK) {
            let why = self.shared.lock().procs[id].why_ended();
            return Err(Abort::Harness(format!(
                "preparing the database with {by} ({version}) failed: awa migrate {why}"
            )));
        }
        let schema = self.probe.schema_version().await.unwrap_or(0);
        detail.push(format!(
            "{} schema v{schema} by {by} ({version})",
            if plan.database.fresh_install {
                "fresh"
            } else {
                "N-1"
            }
        ));
        if let Some(cron) = plan.workload.cron {
            let every = super::env::awa_duration(cron.every);
            let args = [
                "cron",
                "upsert",
                "--name",
                CRON_NAME,
                "--every",
                every.as_str(),
            ]
            .map(str::to_owned)
            .to_vec();
            let id = self
                .run_command(&by, Role::Cron, args, Vec::new(), COMMAND_TIMEOUT)
                .await?;
            let ended = self.shared.lock().procs[id].code();
            if ended != Some(EXIT_OK) {
                let why = self.shared.lock().procs[id].why_ended();
                return Err(Abort::Harness(format!(
                    "awa cron upsert by {by} failed: {why}"
                )));
            }
            detail.push(format!("cron {CRON_NAME} every {}", cron.every));
        }
        let backlog = plan.workload.backlog;
        if backlog > 0 {
            let mix = super::env::mix_string(&plan.workload.mix);
            let env = super::env::producer_env(0.0, backlog, &mix, plan.workload.sleep);
            let id = self
                .run_command(
                    &by,
                    Role::Backlog,
                    vec!["produce".into()],
                    env,
                    BACKLOG_TIMEOUT,
                )
                .await?;
            let (code, why, accepted) = {
                let l = self.shared.lock();
                (
                    l.procs[id].code(),
                    l.procs[id].why_ended(),
                    l.accepted.len(),
                )
            };
            if code != Some(EXIT_OK) {
                return Err(Abort::Harness(format!(
                    "banking the backlog with {by} failed: {why}"
                )));
            }
            detail.push(format!("backlog of {accepted} jobs banked by {by}"));
        }
        Ok(Done::ok(detail.join("; ")))
    }

    /// Copies what the ledger saw into the observations.
    fn collect_ledger(&mut self) {
        let ledger = self.shared.lock();
        self.obs.accepted = ledger.accepted.clone();
        self.obs.uncertain = ledger.uncertain.clone();
        self.obs.processes = ledger
            .procs
            .iter()
            .map(|p| ProcessRecord {
                name: p.name.clone(),
                artifact: p.artifact.clone(),
                version: p.version.clone(),
                role: p.role.name().to_owned(),
                exit_code: p.code(),
                killed: p.killed,
                log: p.log.clone(),
                error: p.fatal.clone().or_else(|| {
                    (p.code().is_some_and(|c| c != 0) && p.refused.is_none())
                        .then(|| p.stderr_tail.back().cloned())
                        .flatten()
                }),
            })
            .collect();
    }

    /// The cron window: fire times from the first fire to the last one
    /// minus an interval (the last may have had no worker left to run it).
    async fn record_cron_window(&mut self) {
        let Some(cron) = self.plan.workload.cron else {
            return;
        };
        let every = cron.every.as_millis() as i64;
        let bounds = match self.probe.cron_bounds(CRON_NAME).await {
            Ok(bounds) => bounds.map(|(first, last, _)| (first, last)),
            Err(_) => {
                let l = self.shared.lock();
                let fires: Vec<i64> = l
                    .cron_fires
                    .iter()
                    .filter(|(n, _)| n == CRON_NAME)
                    .map(|(_, t)| *t)
                    .collect();
                fires
                    .iter()
                    .min()
                    .zip(fires.iter().max())
                    .map(|(a, b)| (*a, *b))
            }
        };
        if let Some((first, last)) = bounds {
            self.obs
                .cron
                .push(cron_window(CRON_NAME, every, first, last));
        }
    }

    /// What the cell proved, one sentence each (only for a passing cell).
    fn proved(&self, findings: &[crate::observe::Finding]) -> Vec<String> {
        let mut out = Vec::new();
        if let Expectation::Detect(rule) = self.plan.expect {
            let hits = findings.iter().filter(|f| f.rule == rule).count();
            out.push(format!(
                "the seeded defect was caught: {hits} {} finding(s)",
                rule.name()
            ));
            return out;
        }
        let accepted = self.obs.accepted.len();
        out.push(format!(
            "{} accepted jobs each ended exactly once, in the terminal state their mode was designed for",
            thousands(accepted as u64)
        ));
        if !self.obs.uncertain.is_empty() {
            out.push(format!(
                "{} jobs of uncertain commit were settled (each ended at most once)",
                self.obs.uncertain.len()
            ));
        }
        let ledger = self.shared.lock();
        if ledger.claimed_by.len() >= 2 {
            let versions: Vec<&str> = ledger.claimed_by.iter().map(String::as_str).collect();
            out.push(format!(
                "workers of {} claimed jobs side by side",
                versions.join(" and ")
            ));
        }
        drop(ledger);
        for kill in &self.obs.kills {
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
        for w in &self.obs.cron {
            let every = w.every_ms.max(1);
            let fires = w.to_ms.div_euclid(every) - w.from_ms.div_euclid(every);
            if fires > 0 {
                out.push(format!(
                    "each of the {fires} cron fire times in the window produced exactly one job"
                ));
            }
        }
        for flip in &self.obs.flips {
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
        for fence in &self.obs.fences {
            out.push(format!(
                "{} refused after the flip and changed nothing",
                fence.version
            ));
        }
        out.extend(self.facts.refusals_required.iter().cloned());
        let refused = self.facts.binary_first.len();
        if self.facts.relaunched > 0 {
            out.push(format!(
                "{} process(es) that refused to start on the N-1 schema ran after the migration (binary-first)",
                self.facts.relaunched
            ));
        }
        if refused > self.facts.relaunched {
            out.push(format!(
                "{} start(s) of a flip-aware binary on the N-1 schema were refused before any write, as required",
                refused - self.facts.relaunched
            ));
        }
        out.extend(self.facts.crashes.iter().cloned());
        out.extend(self.facts.asserts.iter().cloned());
        out
    }
}

/// The window whose every fire time must have produced exactly one job:
/// from the first fire seen (inclusive) to one interval before the last
/// (a fire at the very end may have found no worker left to run it).
/// `CronWindow` bounds are `from_ms < t <= to_ms`.
pub fn cron_window(name: &str, every_ms: i64, first_fire: i64, last_fire: i64) -> CronWindow {
    let from_ms = first_fire - 1;
    CronWindow {
        name: name.to_owned(),
        every_ms,
        from_ms,
        to_ms: (last_fire - every_ms).max(from_ms),
    }
}

/// 12345 -> "12,345".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cron_window_runs_from_the_first_fire_to_one_before_the_last() {
        let w = cron_window("rehearse", 2_000, 10_000, 20_000);
        assert_eq!((w.from_ms, w.to_ms, w.every_ms), (9_999, 18_000, 2_000));
        // Fire times in the window: 10 000 .. 18 000, five of them.
        let fires: Vec<i64> = (0..20)
            .map(|i| i * 2_000)
            .filter(|t| w.from_ms < *t && *t <= w.to_ms)
            .collect();
        assert_eq!(fires, [10_000, 12_000, 14_000, 16_000, 18_000]);
        // One fire only: an empty window, never an inverted one.
        let w = cron_window("rehearse", 2_000, 10_000, 10_000);
        assert_eq!((w.from_ms, w.to_ms), (9_999, 9_999));
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_345), "12,345");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn logs_live_under_the_cell() {
        assert_eq!(cell_dir("migrate-first"), "logs/migrate-first");
    }
}
