//! `rollback`: retire every other artifact's processes and run this one alone.

use super::super::ledger::Role;
use super::super::step_ctx::STOP_TIMEOUT;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::with_notes;
use crate::fleet::ProcId;
use crate::matrix::RollbackStep;

/// `rollback`: this artifact runs alone. Its new workers start first
/// (so the queue is never without claimers), then every worker of
/// another artifact stops; producers are replaced as in a roll. The
/// worker count stays the same unless `workers` is given.
pub(super) async fn rollback(cx: &mut StepCtx<'_>, s: &RollbackStep) -> Result<Done, Abort> {
    let live_workers = |cx: &StepCtx<'_>, mine: bool| -> Vec<usize> {
        (0..cx.state.seats.len())
            .filter(|&i| {
                let seat = &cx.state.seats[i];
                seat.role == Role::Worker && !seat.dead && (seat.artifact == s.artifact) == mine
            })
            .collect()
    };
    let total = cx
        .state
        .seats
        .iter()
        .filter(|s| s.role == Role::Worker && !s.dead)
        .count() as u32;
    let target = s.workers.unwrap_or(total) as usize;
    let mine = live_workers(cx, true);
    let others = live_workers(cx, false);
    let mut notes = Vec::new();
    let new = cx.state.add_seats(
        Role::Worker,
        &s.artifact,
        target.saturating_sub(mine.len()) as u32,
    );
    cx.launch_seats(&new, &mut notes).await?;
    let mut retire: Vec<usize> = others.clone();
    if mine.len() > target {
        retire.extend(mine[target..].iter().copied());
    }
    let ids: Vec<ProcId> = retire
        .iter()
        .filter_map(|&r| cx.state.seats[r].proc)
        .collect();
    let retired = super::seat_names(cx, &retire);
    notes.extend(cx.stop(&ids, STOP_TIMEOUT, &cx.cancel()).await?);
    for r in retire {
        cx.state.seats[r].dead = true;
        cx.state.seats[r].proc = None;
    }
    let producers: Vec<usize> = (0..cx.state.seats.len())
        .filter(|&i| {
            let seat = &cx.state.seats[i];
            seat.role == Role::Producer && !seat.dead && seat.artifact != s.artifact
        })
        .collect();
    for &p in &producers {
        super::roll::replace(cx, p, &s.artifact, &mut notes).await?;
    }
    let detail = format!(
        "{} ({}) alone: started {}, retired {retired}, {} replaced",
        s.artifact,
        cx.version_of(&s.artifact),
        super::seat_names(cx, &new),
        crate::observe::count(producers.len() as u64, "producer")
    );
    Ok(with_notes(Done::ok(detail), notes))
}
