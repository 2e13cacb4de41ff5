//! `load = "on"` and `load = "off"`: live enqueue by the producers.

use super::super::cell::{Cell, STOP_TIMEOUT};
use super::super::ledger::Role;
use super::super::{Abort, Done};

impl Cell<'_> {
    /// `load = "on"`: start a producer process for every producer seat;
    /// they share `rate_per_s` and run until `load = "off"`.
    pub(super) async fn load_on(&mut self) -> Result<Done, Abort> {
        if self.state.load_on {
            return Ok(Done::ok("load was already on"));
        }
        self.state.load_on = true;
        let seats: Vec<usize> = (0..self.state.seats.len())
            .filter(|&s| {
                let seat = &self.state.seats[s];
                seat.role == Role::Producer && !seat.dead && seat.proc.is_none()
            })
            .collect();
        let mut notes = Vec::new();
        self.launch_seats(&seats, &mut notes).await?;
        notes.insert(
            0,
            format!(
                "{} jobs/s through {}",
                self.plan.workload.rate_per_s,
                self.names(&seats)
            ),
        );
        Ok(Done::ok(notes.join("; ")))
    }

    /// `load = "off"`: SIGTERM every producer and wait for it (a producer
    /// prints `accepted` for each job only after its batch commits).
    pub(super) async fn load_off(&mut self) -> Result<Done, Abort> {
        self.state.load_on = false;
        let ids = self.live(Role::Producer, None);
        let notes = self.stop(&ids, STOP_TIMEOUT, &self.cancel()).await?;
        for seat in &mut self.state.seats {
            if seat.role == Role::Producer {
                seat.proc = None;
            }
        }
        let (accepted, uncertain) = self.view(|l| (l.accepted.len(), l.uncertain.len()));
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
}
