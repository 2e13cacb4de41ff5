//! The cells of a run: started in the schedule's order as its admission
//! and the CPU allow, each on its server, and each tried again while its
//! tries come out inconclusive for the harness's own reasons.

use std::sync::Arc;
use std::time::Instant;

use super::super::CellContext;
use super::super::cell::{Reconcile, Retry};
use super::RunRequest;
use super::servers::Servers;
use crate::schedule::growth::Growth;
use crate::schedule::pressure::{self, Holds};
use crate::stream::{CellTry, HeldBack, Note, RunEvent};

/// Starts the cells in the schedule's order as the schedule's admission
/// lets them (`--jobs` at a time, timing-sensitive cells with room to
/// spare) and, under the schedule's gate, while the CPU is not under
/// pressure, each on its server, and waits for every one; stops starting
/// when the run is interrupted. Under the gate, `--jobs auto` also grows
/// while the cores idle and shrinks back while a cell ticks starved
/// ([`Growth`]). Notes a task that failed and the cells that never
/// started; counts the starts the gate held back and how far it grew.
pub(super) async fn run_each_cell(
    req: &RunRequest,
    ctx: &CellContext,
    servers: &Servers,
    reconcile: Arc<dyn Reconcile>,
) -> (Vec<String>, Option<HeldBack>) {
    let admission = &req.schedule.admission;
    let mut waiting: Vec<usize> = req.schedule.order.clone();
    let mut running: Vec<usize> = Vec::new();
    let mut ran: Vec<usize> = Vec::new();
    let mut notes = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut task_cell = std::collections::HashMap::new();
    let mut holds = Holds::default();
    let mut growth = Growth::of(&req.schedule, req.plan.cells.len());
    loop {
        let starved = ctx.starving.within(pressure::STARVED_WITHIN);
        let limit = growth.as_mut().map_or(req.schedule.jobs, |g| {
            g.look(admission, &waiting, &running, starved)
        });
        while !ctx.cancel.is_set()
            && let Some(index) = admission.next_within(&waiting, &running, limit)
        {
            if req.schedule.gate && !pressure::may_start(starved, running.len(), limit) {
                holds.hold(Instant::now());
                break;
            }
            holds.release(Instant::now());
            waiting.retain(|&i| i != index);
            running.push(index);
            let task = tasks.spawn(run_one_cell(
                ctx.clone(),
                servers,
                req.plan.cells[index].clone(),
                index,
                reconcile.clone(),
                req.retry.clone(),
            ));
            task_cell.insert(task.id(), index);
        }
        if running.is_empty() {
            break;
        }
        let holding = holds.holding();
        let growing = growth.is_some() && !waiting.is_empty() && !ctx.cancel.is_set();
        let joined = tokio::select! {
            joined = tasks.join_next() => joined,
            // Interrupted: start nothing more, then wait for the running cells.
            _ = ctx.cancel.fired(), if !waiting.is_empty() => {
                waiting.clear();
                holds.release(Instant::now());
                continue;
            }
            // A held-back cell looks again, as does growth at the cores' idle time.
            () = tokio::time::sleep(pressure::RECHECK), if holding || growing => continue,
        };
        match joined {
            Some(Ok(index)) => {
                running.retain(|&i| i != index);
                ran.push(index);
            }
            Some(Err(e)) => {
                let cell = task_cell.get(&e.id()).copied();
                running.retain(|&i| Some(i) != cell);
                let name = cell.map_or("?", |i| req.plan.cells[i].name.as_str());
                notes.push(format!("the task of cell {name} failed: {e}"));
            }
            None => break,
        }
    }
    notes.extend(not_run(req, &ran));
    holds.release(Instant::now());
    let grew_to = growth.as_ref().and_then(Growth::grew_to);
    let held_back = HeldBack {
        grew_to,
        ..holds.tally()
    };
    (notes, req.schedule.gate.then_some(held_back))
}

/// The cells that never ran to their end (interrupted before they
/// started, or their task failed), as a note; none when every cell ran.
fn not_run(req: &RunRequest, ran: &[usize]) -> Option<String> {
    let not_run: Vec<&str> = req
        .plan
        .cells
        .iter()
        .enumerate()
        .filter(|(i, _)| !ran.contains(i))
        .map(|(_, c)| c.name.as_str())
        .collect();
    (!not_run.is_empty()).then(|| format!("not run: {}", not_run.join(", ")))
}

/// One cell on its server, within its budget, from its start event to
/// its finish event; yields its index. A try that `retry` wants tried
/// again (an inconclusive one, for the harness's own reasons) is recorded
/// as a [`RunEvent::CellRetried`], its logs moved to a folder of their
/// own, and the cell runs again on the plan `retry` gives it (a new seed);
/// the last try is the cell's finish, followed by its verdict.
fn run_one_cell(
    mut ctx: CellContext,
    servers: &Servers,
    plan: crate::plan::CellPlan,
    index: usize,
    reconcile: Arc<dyn Reconcile>,
    retry: Option<Arc<dyn Retry>>,
) -> impl std::future::Future<Output = usize> + Send + 'static {
    if let Some(server) = servers.get(&plan.server) {
        ctx.server = server.clone();
    }
    async move {
        let mut plan = plan;
        let mut seed = None;
        let all = ctx.cancel.clone();
        for attempt in 1.. {
            // The budget runs from the try's start (not while it waited its turn).
            ctx.cancel = all.with_budget(plan.timings.budget.to_std());
            ctx.attempt = attempt;
            if attempt == 1 {
                ctx.events.send(RunEvent::CellStarted {
                    index,
                    cell: plan.name.clone(),
                    phases: plan.steps.len() as u64 + 2,
                });
            }
            let (run, unretryable) =
                super::super::cell::run_cell(&ctx, index, &plan, reconcile.as_ref()).await;
            let judged = reconcile.judged(&run);
            let again = retry.as_ref().filter(|_| !all.is_set()).and_then(|r| {
                Some((
                    r.again(&judged, unretryable, attempt)?,
                    r.replan(&plan, attempt + 1)?,
                ))
            });
            let Some((why, (next, next_seed))) = again else {
                ctx.events.send(RunEvent::CellFinished(Box::new(run)));
                ctx.events.send(judged);
                break;
            };
            let logs =
                match super::super::cell::set_logs_aside(&ctx.report_dir, &plan.name, attempt) {
                    Ok(aside) => aside,
                    Err(why) => {
                        ctx.events.send(RunEvent::Note(Note::always(
                            Some(&plan.name),
                            format!("{}: {why}", plan.name),
                        )));
                        super::super::step_ctx::cell_dir(&plan.name)
                    }
                };
            ctx.events.send(RunEvent::Note(Note::always(
                Some(&plan.name),
                format!(
                    "{}: try {attempt} inconclusive ({why}); trying again with seed {next_seed} (that try alone: rehearse --cell {} --seed {next_seed})",
                    plan.name, plan.name
                ),
            )));
            ctx.events.send(RunEvent::CellRetried {
                index,
                cell: plan.name.clone(),
                attempt: CellTry {
                    attempt,
                    seed,
                    why,
                    elapsed_ms: run.elapsed_ms,
                    logs,
                },
            });
            plan = next;
            seed = Some(next_seed);
        }
        index
    }
}
