//! The cells of a run: started in the schedule's order as its admission
//! and the CPU allow, each on its server, and each tried again while its
//! tries come out inconclusive for the harness's own reasons.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::super::CellContext;
use super::super::cell::{Reconcile, Retry};
use super::RunRequest;
use super::servers::Servers;
use crate::plan::CellPlan;
use crate::schedule::growth::Growth;
use crate::schedule::pressure::{self, Holds};
use crate::stream::{CellRun, CellTry, HeldBack, Note, RunEvent};

/// Starts the cells in the schedule's order as the schedule's admission
/// lets them (`--jobs` at a time, timing-sensitive cells with room to
/// spare) and, under the schedule's gate, while the CPU is not under
/// pressure, each on its server, and waits for every one; stops starting
/// when the run is interrupted. A try that comes out inconclusive for the
/// harness's own reasons goes back to the head of the queue and waits for
/// room like any cell, so a cell starved beside others is not tried again
/// beside the same others. Under the gate, `--jobs auto` also grows while
/// the cores idle and shrinks while a cell ticks starved ([`Growth`]).
/// Notes a task that failed and the cells that never started; counts the
/// starts the gate held back, how far it grew and how low it went.
pub(super) async fn run_each_cell(
    req: &RunRequest,
    ctx: &CellContext,
    servers: &Servers,
    reconcile: Arc<dyn Reconcile>,
) -> (Vec<String>, Option<HeldBack>) {
    let admission = &req.schedule.admission;
    let mut waiting: Vec<usize> = req.schedule.order.clone();
    // The cells whose next try waits in `waiting`, by index.
    let mut again: HashMap<usize, Again> = HashMap::new();
    let mut running: Vec<usize> = Vec::new();
    let mut ran: Vec<usize> = Vec::new();
    let mut notes = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut task_cell = HashMap::new();
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
            let next = again.remove(&index).map_or_else(
                || Try::first(req.plan.cells[index].clone()),
                Again::into_try,
            );
            let task = tasks.spawn(try_cell(
                ctx.clone(),
                servers,
                next,
                index,
                reconcile.clone(),
                req.retry.clone(),
            ));
            task_cell.insert(task.id(), index);
        }
        if running.is_empty() {
            // Nothing waits, or the run was interrupted: a cell waiting to
            // be tried again ends on its last try.
            finish_waiting(ctx, &mut again, &mut waiting, &mut ran);
            break;
        }
        let holding = holds.holding();
        let growing = growth.is_some() && !waiting.is_empty() && !ctx.cancel.is_set();
        let joined = tokio::select! {
            joined = tasks.join_next() => joined,
            // Interrupted: start nothing more (a cell waiting to be tried
            // again keeps its last try), then wait for the running cells.
            _ = ctx.cancel.fired(), if !waiting.is_empty() => {
                finish_waiting(ctx, &mut again, &mut waiting, &mut ran);
                holds.release(Instant::now());
                continue;
            }
            // A held-back cell looks again, as does growth at the cores' idle time.
            () = tokio::time::sleep(pressure::RECHECK), if holding || growing => continue,
        };
        match joined {
            Some(Ok((index, next))) => {
                running.retain(|&i| i != index);
                match next {
                    Some(next) if !ctx.cancel.is_set() => {
                        next.announce(ctx);
                        again.insert(index, next);
                        waiting.insert(0, index);
                    }
                    Some(next) => {
                        next.finish(ctx);
                        ran.push(index);
                    }
                    None => ran.push(index),
                }
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
    let held_back = HeldBack {
        grew_to: growth.as_ref().and_then(Growth::grew_to),
        shrank_to: growth.as_ref().and_then(Growth::shrank_to),
        ..holds.tally()
    };
    (notes, req.schedule.gate.then_some(held_back))
}

/// Interrupted: the cells waiting to be tried again end on their last
/// try, and nothing else waits.
fn finish_waiting(
    ctx: &CellContext,
    again: &mut HashMap<usize, Again>,
    waiting: &mut Vec<usize>,
    ran: &mut Vec<usize>,
) {
    for (index, next) in again.drain() {
        next.finish(ctx);
        ran.push(index);
    }
    waiting.clear();
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

/// One try of a cell: its plan, its number, the seed it was drawn with
/// (`None` for the plan's own) and, after the first, why the try before
/// it is tried again.
struct Try {
    plan: CellPlan,
    attempt: u32,
    seed: Option<u64>,
    after: Option<Retried>,
}

/// The try before a [`Try`]: why it is tried again, and its figures for
/// the [`RunEvent::CellRetried`] that opens the next try.
struct Retried {
    why: String,
    seed: Option<u64>,
    elapsed_ms: u64,
}

impl Try {
    /// A cell's first try, on its plan.
    fn first(plan: CellPlan) -> Try {
        Try {
            plan,
            attempt: 1,
            seed: None,
            after: None,
        }
    }
}

/// A cell waiting for room to be tried again: its next try, and the last
/// try's run and verdict, which stand if the run is interrupted first.
struct Again {
    next: Try,
    last: Box<CellRun>,
    judged: RunEvent,
}

impl Again {
    /// Says why the cell will be tried again, and how to replay that try,
    /// as it joins the queue (it may wait there for room).
    fn announce(&self, ctx: &CellContext) {
        let name = &self.next.plan.name;
        let last = self.next.attempt - 1;
        let why = self.next.after.as_ref().map_or("", |b| b.why.as_str());
        let again = match self.next.seed {
            Some(seed) => format!(
                "trying again with seed {seed} once there is room (that try alone: rehearse --cell {name} --seed {seed})"
            ),
            None => "trying again once there is room".to_owned(),
        };
        ctx.events.send(RunEvent::Note(Note::always(
            Some(name),
            format!("{name}: try {last} inconclusive ({why}); {again}"),
        )));
    }

    /// The next try, now that it starts.
    fn into_try(self) -> Try {
        self.next
    }

    /// The last try stands as the cell's finish and verdict.
    fn finish(self, ctx: &CellContext) {
        ctx.events.send(RunEvent::CellFinished(self.last));
        ctx.events.send(self.judged);
    }
}

/// One try of a cell on its server, within its budget; yields its index,
/// and its next try when `retry` wants this one tried again (an
/// inconclusive try, for the harness's own reasons), on the plan `retry`
/// gives it (a new seed). The first try opens with the cell's start
/// event; a later one with a [`RunEvent::CellRetried`] for the try before
/// it, whose logs move to a folder of their own. The last try sends the
/// cell's finish event and its verdict.
fn try_cell(
    mut ctx: CellContext,
    servers: &Servers,
    this: Try,
    index: usize,
    reconcile: Arc<dyn Reconcile>,
    retry: Option<Arc<dyn Retry>>,
) -> impl std::future::Future<Output = (usize, Option<Again>)> + Send + 'static {
    if let Some(server) = servers.get(&this.plan.server) {
        ctx.server = server.clone();
    }
    async move {
        let Try {
            plan,
            attempt,
            seed,
            after,
        } = this;
        let all = ctx.cancel.clone();
        match after {
            None => ctx.events.send(RunEvent::CellStarted {
                index,
                cell: plan.name.clone(),
                phases: plan.steps.len() as u64 + 2,
            }),
            Some(before) => open_retry(&ctx, index, &plan, attempt, before),
        }
        // The budget runs from the try's start (not while it waited its turn).
        ctx.cancel = all.with_budget(plan.timings.budget.to_std());
        ctx.attempt = attempt;
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
            return (index, None);
        };
        let next = Try {
            plan: next,
            attempt: attempt + 1,
            seed: Some(next_seed),
            after: Some(Retried {
                why,
                seed,
                elapsed_ms: run.elapsed_ms,
            }),
        };
        (
            index,
            Some(Again {
                next,
                last: Box::new(run),
                judged,
            }),
        )
    }
}

/// Opens try `attempt` of cell `plan`: the try before it moves its logs
/// aside and is recorded as retried, with why.
fn open_retry(ctx: &CellContext, index: usize, plan: &CellPlan, attempt: u32, before: Retried) {
    let last = attempt - 1;
    let name = &plan.name;
    let logs = match super::super::cell::set_logs_aside(&ctx.report_dir, name, last) {
        Ok(aside) => aside,
        Err(why) => {
            ctx.events.send(RunEvent::Note(Note::always(
                Some(name),
                format!("{name}: {why}"),
            )));
            super::super::step_ctx::cell_dir(name)
        }
    };
    ctx.events.send(RunEvent::CellRetried {
        index,
        cell: name.clone(),
        attempt: CellTry {
            attempt: last,
            seed: before.seed,
            why: before.why,
            elapsed_ms: before.elapsed_ms,
            logs,
        },
    });
}
