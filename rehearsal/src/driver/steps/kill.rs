//! `kill`: SIGKILL a worker, the leader or a producer, now or armed.

use std::time::Duration;

use super::super::cell::{Cell, Fault};
use super::super::ledger::Role;
use super::super::procs::pick;
use super::super::{Abort, Done};
use crate::matrix::{KillTarget, When};
use crate::observe::StepOutcome;
use crate::plan::PlannedKill;

impl Cell<'_> {
    /// `kill`: now, or armed to fire inside the next migrate or flip.
    pub(super) async fn kill(&mut self, k: &PlannedKill) -> Result<Done, Abort> {
        match k.when {
            When::Now => {
                let text = self.fire_kill(k).await?;
                Ok(Done::ok(text))
            }
            when => {
                self.armed.push((when, Fault::Kill(k.clone())));
                Ok(Done::with(StepOutcome::Armed, format!("{k}")))
            }
        }
    }

    /// Chooses the victim (the leader when it fires; else the plan's pick
    /// among live candidates in start order), waits for its trigger
    /// (`after_started` started jobs, or the jitter), and SIGKILLs it.
    pub(super) async fn fire_kill(&mut self, k: &PlannedKill) -> Result<String, Abort> {
        let of = k.of.as_deref();
        let whose = of.map_or(String::new(), |a| format!(" of {a}"));
        let victim = match k.target {
            KillTarget::Leader => {
                let wait = self.plan.timings.stale_after.to_std() * 3 + Duration::from_secs(5);
                let of = k.of.clone();
                self.shared
                    .wait_for(wait, &self.cancel(), |l| {
                        let id = l.current_leader()?;
                        of.as_deref()
                            .is_none_or(|a| l.procs[id].artifact == a)
                            .then_some(id)
                    })
                    .await?
            }
            KillTarget::Worker => pick(&self.live(Role::Worker, of), k.pick),
            KillTarget::Producer => pick(&self.live(Role::Producer, of), k.pick),
        };
        let Some(victim) = victim else {
            let what = match k.target {
                KillTarget::Leader => format!("no live leader{whose}"),
                other => format!("no live {}{whose}", other.name()),
            };
            self.fail(format!("kill {}: {what} to kill", k.target.name()));
            return Ok(format!("nothing to kill: {what}"));
        };
        let mut trigger = String::new();
        if k.after_started > 0 {
            let n = k.after_started;
            let timeout = self.plan.timings.drain_timeout.to_std();
            let reached = self
                .shared
                .wait_for(timeout, &self.cancel(), |l| {
                    let p = &l.procs[victim];
                    (p.started >= n || !p.alive()).then_some(())
                })
                .await?;
            let started = self.shared.lock().procs[victim].started;
            trigger = if reached.is_some() && started >= n {
                format!(" after it started {started} jobs")
            } else {
                format!(
                    " after waiting {}s with {started} of {n} jobs started",
                    timeout.as_secs()
                )
            };
        } else if let Some(jitter) = k.jitter {
            self.cancel().sleep(jitter.to_std()).await?;
            trigger = format!(" after {jitter} jitter");
        }
        if !self.shared.lock().procs[victim].alive() {
            let why = self.shared.lock().procs[victim].why_ended();
            let name = self.shared.lock().procs[victim].name.clone();
            return Ok(format!("{name} had already ended ({why}); nothing to kill"));
        }
        let record = self.kill_proc(victim, k.target.name()).await?;
        if let Some(slot) = self.slot_of(victim) {
            self.slots[slot].dead = true;
            self.slots[slot].proc = None;
        }
        let started = self.shared.lock().procs[victim].started;
        let mut text = format!(
            "SIGKILLed {} ({}{}){trigger}",
            record.process,
            record.version,
            if k.target == KillTarget::Leader {
                ", the leader"
            } else {
                ""
            },
        );
        if k.target != KillTarget::Producer {
            text.push_str(&format!(
                ": {started} jobs started, {} in flight",
                record.in_flight.len()
            ));
        }
        self.obs.kills.push(record);
        Ok(text)
    }
}
