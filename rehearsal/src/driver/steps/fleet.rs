//! `fleet`: start workers and producers of an artifact.

use std::time::Duration;

use super::super::cell::Cell;
use super::super::ledger::Role;
use super::super::{Abort, Done};
use crate::matrix::FleetStep;

/// How long a `leader = true` fleet waits for its first worker's `leader` event.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);

impl Cell<'_> {
    /// `fleet`: start workers (with `leader`, the first alone until it
    /// reports leadership) and add producers, which run while load is on.
    pub(super) async fn fleet(&mut self, s: &FleetStep) -> Result<Done, Abort> {
        let mut notes = Vec::new();
        let version = self.version_of(&s.artifact);
        let workers = self.add_slots(Role::Worker, &s.artifact, s.workers);
        if s.leader && !workers.is_empty() {
            let head = workers[0];
            self.launch_slots(&[head], &mut notes).await?;
            match self.slots[head]
                .proc
                .filter(|&id| self.shared.lock().procs[id].ready)
            {
                Some(id) => {
                    let led = self
                        .shared
                        .wait_for(LEADER_TIMEOUT, &self.cancel(), |l| l.procs[id].leader_at_ms)
                        .await?;
                    let name = self.shared.lock().procs[id].name.clone();
                    match led {
                        Some(at) => {
                            notes.push(format!("{name} took maintenance leadership at {at} ms"))
                        }
                        None => {
                            let other = {
                                let l = self.shared.lock();
                                l.current_leader().map(|o| l.procs[o].name.clone())
                            };
                            self.fail(format!(
                                "{name} did not take maintenance leadership within {}s (leader: {})",
                                LEADER_TIMEOUT.as_secs(),
                                other.unwrap_or_else(|| "none".into())
                            ));
                        }
                    }
                }
                None => self
                    .fail("leader = true, but the first worker did not start, so it cannot lead"),
            }
            self.launch_slots(&workers[1..], &mut notes).await?;
        } else {
            self.launch_slots(&workers, &mut notes).await?;
        }
        let producers = self.add_slots(Role::Producer, &s.artifact, s.producers);
        if self.load_on {
            self.launch_slots(&producers, &mut notes).await?;
        }
        let mut detail = format!(
            "{} ({version}): workers {}",
            s.artifact,
            self.names(&workers)
        );
        if !producers.is_empty() {
            if self.load_on {
                detail.push_str(&format!("; producers {}", self.names(&producers)));
            } else {
                detail.push_str(&format!(
                    "; {} producer(s) to run while load is on",
                    producers.len()
                ));
            }
        }
        notes.insert(0, detail);
        Ok(Done::ok(notes.join("; ")))
    }
}
