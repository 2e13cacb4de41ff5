//! One cell from start to report: database, preparation, steps, final
//! drain, reconciliation, verdict.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::database::CellDb;
use super::ledger::{FleetView, Shared};
use super::probe::Probe;
use super::state::CellState;
use super::step_ctx::{FleetHandle, STOP_TIMEOUT, STOP_TIMEOUT_INTERRUPTED, StepCtx, cell_dir};
pub use super::steps::CRON_NAME;
use super::{Abort, CellContext};
use crate::fleet::ReportSender;
use crate::matrix::{FlipMode, Step};
use crate::monitor::{Beating, Live, Monitor};
use crate::observe::{Doubt, Finding, Observations, Phase, ProvedFacts, StepOutcome};
use crate::plan::CellPlan;
use crate::stream::{CellRun, Note, RunEvent};

mod budget;
mod records;

/// A phase that has begun.
pub(super) struct Begun {
    index: usize,
    name: &'static str,
    start_ms: u64,
    failures_before: usize,
}

/// A cell in progress.
pub(super) struct LiveCell<'a> {
    pub ctx: &'a CellContext,
    pub plan: &'a CellPlan,
    pub t0: Instant,
    pub db: CellDb,
    pub probe: Probe,
    pub shared: Arc<Shared>,
    pub sink: ReportSender,
    /// Everything the cell keeps between its steps.
    pub state: CellState,
}

impl LiveCell<'_> {
    /// Milliseconds since the cell started.
    pub fn ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// Reads the ledger as a whole.
    pub(super) fn view<T>(&self, read: impl FnOnce(&FleetView) -> T) -> T {
        read(&self.shared.lock())
    }

    /// What a step may touch, lent for one step.
    pub(super) fn step_ctx(&mut self) -> StepCtx<'_> {
        let fleet = FleetHandle {
            ctx: self.ctx,
            shared: &self.shared,
            sink: &self.sink,
            t0: self.t0,
        };
        StepCtx::new(
            fleet,
            self.plan,
            &mut self.db,
            &mut self.probe,
            &mut self.state,
        )
    }
}

/// Reconciliation, as the driver reaches it: a cell's findings read from
/// its database while it exists, and the verdict on the finished cell.
/// The pipeline (`pipeline.rs`) wires it in; the driver does not judge,
/// but every judgement is made on its side of the event stream, before
/// the readers (the driver sends each verdict right after its cell).
pub trait Reconcile: Send + Sync {
    /// The findings of the cell's run (and the rules it could not be
    /// judged on), or why they could not be had.
    // A String: the cell records it as its harness error, in these words, and asks nothing more of it.
    fn findings<'a>(
        &'a self,
        database_url: &'a str,
        plan: &'a CellPlan,
        observations: &'a Observations,
    ) -> Pin<Box<dyn Future<Output = Result<Reconciled, String>> + Send + 'a>>;
    /// The verdict on a finished try of a cell: the
    /// [`RunEvent::CellJudged`] that follows its `cell_finished`.
    fn judged(&self, run: &CellRun) -> RunEvent;
}

/// What reconciling a cell's run gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// What is wrong.
    pub findings: Vec<Finding>,
    /// The rules the run could not be judged on, for want of evidence.
    pub doubts: Vec<Doubt>,
}

/// Whether a finished cell is tried again, and on which plan: the
/// pipeline's answer (it judges cells; the driver does not).
pub trait Retry: Send + Sync {
    /// Why try `attempt` of a cell, judged as `judged` (its
    /// [`RunEvent::CellJudged`]), should be tried again; `None` when its
    /// verdict stands. `unretryable` is the driver's word that no other
    /// try could do better, when it has one.
    fn again(
        &self,
        judged: &RunEvent,
        unretryable: Option<Unretryable>,
        attempt: u32,
    ) -> Option<String>;
    /// The plan of try `attempt` of the cell `plan` is a try of, and the
    /// seed it was drawn with; `None` when it cannot be planned again.
    fn replan(&self, plan: &CellPlan, attempt: u32) -> Option<(CellPlan, u64)>;
}

/// Moves the logs of try `attempt` of cell `name` to a folder of their own
/// (`logs/NAME.try-N`), so the next try's processes, which have the same
/// names, do not write over them; returns that folder relative to the
/// report folder, or why they stay where they are.
pub fn set_logs_aside(
    report_dir: &std::path::Path,
    name: &str,
    attempt: u32,
) -> Result<String, String> {
    // A String: the caller only notes why the logs stayed where they are.
    let from = cell_dir(name);
    let to = format!("{from}.try-{attempt}");
    std::fs::rename(report_dir.join(&from), report_dir.join(&to))
        .map(|()| to)
        .map_err(|e| {
            format!(
                "could not move {from} aside ({e}): the next try's logs are added to the same files"
            )
        })
}

/// Why a try of a cell gave no verdict when no other try could give one:
/// the harness errors `--retries` leaves alone, told apart where they are
/// made (the words of each stay the report's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unretryable {
    /// Ctrl-C or SIGTERM reached rehearse, before the cell started or
    /// while it ran: the run is stopping.
    Interrupted,
    /// The cell's database could not be created.
    NoDatabase,
    /// The server lacks what a step of the cell needs (`pg_crash` or
    /// `revoke` on a server given by `--database-url`): every try of the
    /// cell has the same steps.
    ServerLacks,
}

/// Why a cell could not start, and that no other try of it could.
struct Unstarted {
    kind: Unretryable,
    why: String,
}

impl Unstarted {
    fn new(kind: Unretryable, why: impl Into<String>) -> Self {
        Unstarted {
            kind,
            why: why.into(),
        }
    }
}

/// Runs one cell to its end, sending its events on the way. Never fails:
/// what goes wrong becomes the run's `harness_error`, and when no other
/// try could do better, the [`Unretryable`] kind of it.
pub async fn run_cell(
    ctx: &CellContext,
    index: usize,
    plan: &CellPlan,
    reconcile: &dyn Reconcile,
) -> (CellRun, Option<Unretryable>) {
    let t0 = Instant::now();
    let db = match open_database(ctx, plan).await {
        Ok(db) => db,
        Err(unstarted) => return (unrun(index, plan, t0, unstarted.why), Some(unstarted.kind)),
    };
    let (mut cell, monitor) = LiveCell::start(ctx, plan, t0, db);
    let abort = cell.run_phases().await;
    let unreadable = cell.wind_down(abort.is_some(), monitor).await;
    let failed = matches!(abort, Some(Abort::Failed(_)));
    let unretryable = matches!(abort, Some(Abort::Interrupted)).then_some(Unretryable::Interrupted);
    let mut harness_error = abort.and_then(|a| match a {
        Abort::Interrupted => Some(format!(
            "interrupted (Ctrl-C or SIGTERM) during {}; the cell was cut short",
            describe_phase(cell.state.step_index, cell.state.step_name)
        )),
        Abort::OverBudget(waiting) => Some(format!(
            "over its budget of {}, stopped in {}: {waiting}",
            plan.timings.budget,
            describe_phase(cell.state.step_index, cell.state.step_name)
        )),
        Abort::Harness(message) => Some(format!(
            "{}: {message}",
            describe_phase(cell.state.step_index, cell.state.step_name)
        )),
        // The product failed and the cell stopped there: its step failure
        // is the verdict's, nothing was left for the harness to doubt.
        Abort::Failed(_) => None,
    });
    let mut reconciled = Reconciled::default();
    let mut reconcile_ms = 0;
    if harness_error.is_none() && !failed {
        let started = Instant::now();
        match cell.reconcile_phase(reconcile).await {
            Ok(found) => reconciled = found,
            Err(e) => harness_error = Some(e),
        }
        reconcile_ms = started.elapsed().as_millis() as u64;
    }
    // A cell the product did not fail, watched by a monitor that could not
    // read the schema, proves nothing about the rings: inconclusive.
    if let Some(u) = unreadable
        && harness_error.is_none()
        && !failed
        && reconciled.findings.is_empty()
    {
        harness_error = Some(format!(
            "the monitor could not read the schema under test for {} ticks in a row, from {} to {} ({}): its ring, liveness and placement rules had nothing to judge then; the monitor's SQL (rehearsal/src/monitor/snapshot.rs) must read what this schema has",
            u.ticks,
            crate::observe::duration(u.first_ms),
            crate::observe::duration(u.last_ms),
            u.error
        ));
    }
    let run = cell
        .finish(index, reconciled, harness_error, reconcile_ms)
        .await;
    (run, unretryable)
}

/// The cell's own database, or why it cannot have one (the cell is
/// reported unrun in those words).
async fn open_database(ctx: &CellContext, plan: &CellPlan) -> Result<CellDb, Unstarted> {
    let needs_crash = plan.steps.iter().any(|s| matches!(s, Step::PgCrash(_)));
    let external = matches!(ctx.server, super::database::Server::External { .. });
    if needs_crash && external {
        return Err(Unstarted::new(
            Unretryable::ServerLacks,
            "pg_crash needs the throwaway PostgreSQL cluster: with --database-url rehearse does not control the server, so it cannot crash and restart it; run this cell without --database-url",
        ));
    }
    if external && plan.steps.iter().any(|s| matches!(s, Step::Revoke(_))) {
        return Err(Unstarted::new(
            Unretryable::ServerLacks,
            "revoke needs the throwaway PostgreSQL cluster: it creates a login role that the throwaway cluster lets in without a password, and a server given by --database-url may refuse it (or not let rehearse create roles), which would read as the release's failure; run this cell without --database-url",
        ));
    }
    if ctx.cancel.is_set() {
        return Err(Unstarted::new(
            Unretryable::Interrupted,
            "interrupted before the cell started",
        ));
    }
    // Another try gets a database of its own: the earlier try's is kept
    // until the run's server goes (a shared cluster drops none).
    let tag = super::try_tag(ctx.attempt, '_');
    CellDb::create(&ctx.server, &plan.name, &tag, &ctx.run_id, needs_crash)
        .await
        .map_err(|e| {
            Unstarted::new(
                Unretryable::NoDatabase,
                format!("could not create the cell's database: {e}"),
            )
        })
}

fn describe_phase(index: usize, name: &str) -> String {
    if index == 0 {
        name.to_owned()
    } else {
        format!("step {index} ({name})")
    }
}

/// The run of a cell that never started (inconclusive, saying why).
fn unrun(index: usize, plan: &CellPlan, t0: Instant, why: String) -> CellRun {
    CellRun {
        index,
        plan: plan.clone(),
        observations: Observations::default(),
        proved: ProvedFacts::default(),
        findings: Vec::new(),
        doubts: Vec::new(),
        harness_error: Some(why),
        elapsed_ms: t0.elapsed().as_millis() as u64,
        reconcile_ms: 0,
    }
}

impl<'a> LiveCell<'a> {
    /// A cell whose database is ready: its ledger, probe and monitor start.
    fn start(ctx: &'a CellContext, plan: &'a CellPlan, t0: Instant, db: CellDb) -> (Self, Monitor) {
        let (sink, rx) = mpsc::unbounded_channel();
        let shared = Shared::start(t0, rx, ctx.events.clone(), plan.name.clone());
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
        let beating = {
            let shared = shared.clone();
            // A runtime let go is not late until it has had as long to
            // beat again as a resume step gives it to prove it runs.
            let grace = plan.timings.stale_after.to_std() + super::steps::PROOF_SLACK;
            Arc::new(move || shared.lock().beating(grace))
        };
        let monitor = Monitor::start(
            db.url.clone(),
            t0,
            plan.timings.stale_after.to_std(),
            counts,
            Beating {
                source: beating,
                heartbeat: plan.timings.heartbeat.to_std(),
                starving: ctx.starving.clone(),
            },
            Live {
                events: ctx.events.clone(),
                cell: plan.name.clone(),
            },
        );
        let cell = LiveCell {
            ctx,
            plan,
            t0,
            db,
            probe,
            shared,
            sink,
            state: CellState::new(auto_flip_by),
        };
        (cell, monitor)
    }

    /// Sends one of the cell's events.
    pub fn emit(&self, event: RunEvent) {
        self.ctx.events.send(event);
    }

    /// The next phase begins; `what` says what it does.
    fn announce(&self, what: &str) {
        self.emit(RunEvent::StepStarted {
            cell: self.plan.name.clone(),
            what: what.to_owned(),
        });
    }

    /// Setup, the steps, and (unless the plan drains) a final drain; the
    /// abort that cut them short, if one did.
    async fn run_phases(&mut self) -> Option<Abort> {
        self.announce("prepare the database");
        let begun = self.begin(0, "setup");
        let result = super::steps::setup(&mut self.step_ctx()).await;
        if let Err(a) = self.end(begun, result).await {
            return Some(a);
        }
        let plan = self.plan;
        for (i, step) in plan.steps.iter().enumerate() {
            self.announce(&step.to_string());
            let begun = self.begin(i + 1, step.name());
            let result = super::steps::execute(&mut self.step_ctx(), step).await;
            if let Err(a) = self.end(begun, result).await {
                return Some(a);
            }
        }
        if self.state.drained {
            return None;
        }
        self.announce("final drain (the plan has none)");
        let begun = self.begin(0, "drain");
        let result = super::steps::drain(&mut self.step_ctx(), plan.timings.drain_timeout)
            .await
            .map(|mut done| {
                done.detail = format!("final drain (the plan has none): {}", done.detail);
                done
            });
        self.end(begun, result).await.err()
    }

    /// Whatever happened, nothing of this cell keeps running; the
    /// monitor's samples, the ledger and the cron window are recorded.
    /// Says whether the monitor found the schema unreadable.
    async fn wind_down(
        &mut self,
        aborted: bool,
        monitor: Monitor,
    ) -> Option<crate::monitor::Unreadable> {
        let grace = if aborted {
            STOP_TIMEOUT_INTERRUPTED
        } else {
            STOP_TIMEOUT
        };
        let leftovers = self.step_ctx().stop_everything(grace).await;
        if !leftovers.is_empty() {
            self.state.facts.notes.push(leftovers.join("; "));
        }
        let samples = monitor.stop().await;
        self.state.obs.rings = samples.rings;
        self.state.obs.census = samples.census;
        self.state.obs.liveness = samples.liveness;
        self.state.obs.late = samples.late;
        self.state.obs.misplaced = samples.misplaced;
        self.state.obs.late_leases = samples.late_leases;
        self.state.obs.late_runtimes = samples.late_runtimes;
        self.state.obs.queued_runtimes = samples.queued_runtimes;
        self.state.obs.held_by_commands = samples.held_by_commands;
        self.state.obs.db_clock = samples.db_clock;
        self.collect_ledger();
        if !aborted {
            self.record_cron_window().await;
        }
        samples.unreadable
    }

    /// Reconciliation as the cell's last phase.
    // A String: Reconcile::findings's, which the cell only records.
    async fn reconcile_phase(&mut self, reconcile: &dyn Reconcile) -> Result<Reconciled, String> {
        self.announce("reconcile");
        let start_ms = self.ms();
        let result = reconcile
            .findings(&self.db.url, self.plan, &self.state.obs)
            .await;
        let (outcome, count) = match &result {
            Ok(found) => (StepOutcome::Ok, found.findings.len()),
            Err(_) => (StepOutcome::HarnessError, 0),
        };
        let phase = Phase {
            step: 0,
            name: "reconcile".into(),
            detail: format!(
                "{} over {}",
                crate::observe::count(count as u64, "finding"),
                crate::observe::count(self.state.obs.accepted.len() as u64, "accepted job")
            ),
            start_ms,
            end_ms: self.ms(),
            outcome,
        };
        self.record_phase(phase);
        result
    }

    /// The cell's run, its database removed (or kept).
    async fn finish(
        mut self,
        index: usize,
        reconciled: Reconciled,
        harness_error: Option<String>,
        reconcile_ms: u64,
    ) -> CellRun {
        self.probe.close();
        self.state.facts.claimed_by = self.view(|l| l.claimed_by.iter().cloned().collect());
        let (ctx, name) = (self.ctx, &self.plan.name);
        if let Some(note) = self.db.finish(ctx.keep).await {
            let text = super::database::redact(&note);
            ctx.events.send(RunEvent::Note(Note::always(
                Some(name),
                format!("{name}: {text}"),
            )));
        }
        CellRun {
            index,
            plan: self.plan.clone(),
            observations: self.state.obs,
            proved: self.state.facts,
            findings: reconciled.findings,
            doubts: reconciled.doubts,
            harness_error,
            elapsed_ms: self.t0.elapsed().as_millis() as u64,
            reconcile_ms,
        }
    }

    /// Records a phase in the timeline and tells the stream.
    fn record_phase(&mut self, phase: Phase) {
        self.emit(RunEvent::StepFinished {
            cell: self.plan.name.clone(),
            phase: phase.clone(),
        });
        self.state.obs.phases.push(phase);
    }
}
