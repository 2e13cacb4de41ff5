//! `roll`: replace other artifacts' processes with this one's.

use super::super::cell::{Cell, STOP_TIMEOUT};
use super::super::ledger::Role;
use super::super::{Abort, Done};
use super::with_notes;
use crate::fleet::ProcId;
use crate::matrix::RollStep;

impl Cell<'_> {
    /// `roll`: replace every worker (and, with `producers`, every producer)
    /// of another artifact by one of this artifact, in start order: one at a
    /// time (SIGTERM the old, wait, start the new, wait for `ready`, pause),
    /// or all at once (stop all, start all). A new process that refuses
    /// before the expand migration is parked (binary-first) and re-launched
    /// after the next successful migrate.
    pub(super) async fn roll(&mut self, s: &RollStep) -> Result<Done, Abort> {
        let of_role = |role: Role| -> Vec<usize> {
            (0..self.state.seats.len())
                .filter(|&i| {
                    let seat = &self.state.seats[i];
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
                    self.cancel().sleep(s.pause.to_std()).await?;
                }
                self.replace(seat, &s.artifact, &mut notes).await?;
            }
        } else {
            let old: Vec<ProcId> = targets
                .iter()
                .filter_map(|&t| self.state.seats[t].proc)
                .collect();
            notes.extend(self.stop(&old, STOP_TIMEOUT, &self.cancel()).await?);
            for &t in &targets {
                let seat = &mut self.state.seats[t];
                seat.artifact = s.artifact.clone();
                seat.proc = None;
                seat.parked = false;
            }
            let launch: Vec<usize> = targets
                .iter()
                .copied()
                .filter(|&t| self.state.seats[t].role == Role::Worker || self.state.load_on)
                .collect();
            self.launch_seats(&launch, &mut notes).await?;
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
            self.version_of(&s.artifact),
            self.names(&targets)
        );
        Ok(with_notes(Done::ok(detail), notes))
    }

    /// One seat of a roll: stop its process, then start the new artifact's.
    pub(super) async fn replace(
        &mut self,
        seat: usize,
        artifact: &str,
        notes: &mut Vec<String>,
    ) -> Result<(), Abort> {
        if let Some(id) = self.state.seats[seat].proc {
            notes.extend(self.stop(&[id], STOP_TIMEOUT, &self.cancel()).await?);
        }
        let s = &mut self.state.seats[seat];
        s.artifact = artifact.to_owned();
        s.proc = None;
        s.parked = false;
        if s.role == Role::Worker || self.state.load_on {
            self.launch_seats(&[seat], notes).await?;
        }
        Ok(())
    }
}
