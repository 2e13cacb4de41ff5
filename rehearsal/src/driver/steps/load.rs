//! `load = "on"` and `load = "off"`: live enqueue by the producers.

use super::super::ledger::Role;
use super::super::step_ctx::STOP_TIMEOUT;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};

/// `load = "on"`: start a producer process for every producer seat;
/// they share `rate_per_s` and run until `load = "off"`.
pub(super) async fn load_on(cx: &mut StepCtx<'_>) -> Result<Done, Abort> {
    if cx.state.load_on {
        return Ok(Done::ok("load was already on"));
    }
    cx.state.load_on = true;
    let seats: Vec<usize> = (0..cx.state.seats.len())
        .filter(|&s| {
            let seat = &cx.state.seats[s];
            seat.role == Role::Producer && !seat.dead && seat.proc.is_none()
        })
        .collect();
    let mut notes = Vec::new();
    cx.launch_seats(&seats, &mut notes).await?;
    notes.insert(
        0,
        format!(
            "{} jobs/s through {}",
            cx.plan.workload.rate_per_s,
            super::seat_names(cx, &seats)
        ),
    );
    Ok(Done::ok(notes.join("; ")))
}

/// `load = "off"`: SIGTERM every producer and wait for it (a producer
/// prints `accepted` for each job only after its batch commits).
pub(super) async fn load_off(cx: &mut StepCtx<'_>) -> Result<Done, Abort> {
    cx.state.load_on = false;
    let ids = cx.live(Role::Producer, None);
    let notes = cx.stop(&ids, STOP_TIMEOUT, &cx.cancel()).await?;
    for seat in &mut cx.state.seats {
        if seat.role == Role::Producer {
            seat.proc = None;
        }
    }
    let (accepted, uncertain) = cx.view(|l| (l.accepted.len(), l.uncertain.len()));
    let mut detail = format!(
        "stopped {}; {} accepted so far",
        crate::observe::count(ids.len() as u64, "producer"),
        crate::observe::count(accepted as u64, "job")
    );
    if uncertain > 0 {
        detail.push_str(&format!(", {uncertain} uncertain"));
    }
    for note in notes {
        detail.push_str(&format!("; {note}"));
    }
    Ok(Done::ok(detail))
}
