//! `rollback`: retire every other artifact's processes and run this one alone.

use super::super::cell::{Cell, STOP_TIMEOUT};
use super::super::ledger::Role;
use super::super::{Abort, Done};
use super::with_notes;
use crate::fleet::ProcId;
use crate::matrix::RollbackStep;

impl Cell<'_> {
    /// `rollback`: this artifact runs alone. Its new workers start first
    /// (so the queue is never without claimers), then every worker of
    /// another artifact stops; producers are replaced as in a roll. The
    /// worker count stays the same unless `workers` is given.
    pub(super) async fn rollback(&mut self, s: &RollbackStep) -> Result<Done, Abort> {
        let live_workers = |cell: &Self, mine: bool| -> Vec<usize> {
            (0..cell.state.seats.len())
                .filter(|&i| {
                    let seat = &cell.state.seats[i];
                    seat.role == Role::Worker && !seat.dead && (seat.artifact == s.artifact) == mine
                })
                .collect()
        };
        let total = self
            .state
            .seats
            .iter()
            .filter(|s| s.role == Role::Worker && !s.dead)
            .count() as u32;
        let target = s.workers.unwrap_or(total) as usize;
        let mine = live_workers(self, true);
        let others = live_workers(self, false);
        let mut notes = Vec::new();
        let new = self.state.add_seats(
            Role::Worker,
            &s.artifact,
            target.saturating_sub(mine.len()) as u32,
        );
        self.launch_seats(&new, &mut notes).await?;
        let mut retire: Vec<usize> = others.clone();
        if mine.len() > target {
            retire.extend(mine[target..].iter().copied());
        }
        let ids: Vec<ProcId> = retire
            .iter()
            .filter_map(|&r| self.state.seats[r].proc)
            .collect();
        let retired = self.names(&retire);
        notes.extend(self.stop(&ids, STOP_TIMEOUT, &self.cancel()).await?);
        for r in retire {
            self.state.seats[r].dead = true;
            self.state.seats[r].proc = None;
        }
        let producers: Vec<usize> = (0..self.state.seats.len())
            .filter(|&i| {
                let seat = &self.state.seats[i];
                seat.role == Role::Producer && !seat.dead && seat.artifact != s.artifact
            })
            .collect();
        for &p in &producers {
            self.replace(p, &s.artifact, &mut notes).await?;
        }
        let detail = format!(
            "{} ({}) alone: started {}, retired {retired}, {} replaced",
            s.artifact,
            self.version_of(&s.artifact),
            self.names(&new),
            crate::observe::count(producers.len() as u64, "producer")
        );
        Ok(with_notes(Done::ok(detail), notes))
    }
}
