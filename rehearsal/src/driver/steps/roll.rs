//! `roll`: replace other artifacts' processes with this one's.

use super::super::ledger::Role;
use super::super::step_ctx::STOP_TIMEOUT;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::with_notes;
use crate::fleet::ProcId;
use crate::matrix::RollStep;

/// `roll`: replace every worker (and, with `producers`, every producer)
/// of another artifact by one of this artifact, in start order: one at a
/// time (SIGTERM the old, wait, start the new, wait for `ready`, pause),
/// or all at once (stop all, start all). A new process that refuses
/// before the expand migration is parked (binary-first) and re-launched
/// after the next successful migrate.
pub(super) async fn roll(cx: &mut StepCtx<'_>, s: &RollStep) -> Result<Done, Abort> {
    let of_role = |role: Role| -> Vec<usize> {
        (0..cx.state.seats.len())
            .filter(|&i| {
                let seat = &cx.state.seats[i];
                seat.role == role && !seat.dead && seat.artifact != s.artifact
            })
            .collect()
    };
    let mut targets = of_role(Role::Worker);
    let workers = targets.len();
    if s.producers {
        targets.extend(of_role(Role::Producer));
    }
    let producers = targets.len() - workers;
    let mut notes = Vec::new();
    if s.one_at_a_time {
        for (n, &seat) in targets.iter().enumerate() {
            if n > 0 && !s.pause.is_zero() {
                cx.cancel().sleep(s.pause.to_std()).await?;
            }
            replace(cx, seat, &s.artifact, &mut notes).await?;
        }
    } else {
        let old: Vec<ProcId> = targets
            .iter()
            .filter_map(|&t| cx.state.seats[t].proc)
            .collect();
        notes.extend(cx.stop(&old, STOP_TIMEOUT, &cx.cancel()).await?);
        for &t in &targets {
            let seat = &mut cx.state.seats[t];
            seat.artifact = s.artifact.clone();
            seat.proc = None;
            seat.parked = false;
        }
        let launch: Vec<usize> = targets
            .iter()
            .copied()
            .filter(|&t| cx.state.seats[t].role == Role::Worker || cx.state.load_on)
            .collect();
        cx.launch_seats(&launch, &mut notes).await?;
    }
    let how = if s.one_at_a_time {
        format!("one at a time, {} apart", s.pause)
    } else {
        "all at once".to_owned()
    };
    let detail = format!(
        "replaced {} and {} with {} ({}), {how}: {}",
        crate::observe::count(workers as u64, "worker"),
        crate::observe::count(producers as u64, "producer"),
        s.artifact,
        cx.version_of(&s.artifact),
        super::seat_names(cx, &targets)
    );
    Ok(with_notes(Done::ok(detail), notes))
}

/// One seat of a roll: stop its process, then start the new artifact's.
pub(super) async fn replace(
    cx: &mut StepCtx<'_>,
    seat: usize,
    artifact: &str,
    notes: &mut Vec<String>,
) -> Result<(), Abort> {
    if let Some(id) = cx.state.seats[seat].proc {
        notes.extend(cx.stop(&[id], STOP_TIMEOUT, &cx.cancel()).await?);
    }
    let s = &mut cx.state.seats[seat];
    s.artifact = artifact.to_owned();
    s.proc = None;
    s.parked = false;
    if s.role == Role::Worker || cx.state.load_on {
        cx.launch_seats(&[seat], notes).await?;
    }
    Ok(())
}
