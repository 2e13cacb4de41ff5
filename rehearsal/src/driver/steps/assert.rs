//! `assert`: check a named condition now.

use std::time::{Duration, Instant};

use super::super::cell::Cell;
use super::super::{Abort, Done};
use crate::matrix::{CURRENT, Check};
use crate::observe::StepOutcome;

/// How often `deadline_rescued` looks again while a rescue is late.
const RESCUE_POLL: Duration = Duration::from_millis(250);

/// A check's result: `Ok(what held)` or `Err(what did not)`.
pub(super) type Held = Result<String, String>;

/// The harness could not read what a check looks at.
pub(super) fn unreadable(e: String) -> Abort {
    Abort::Harness(format!("the check could not read the database: {e}"))
}

impl Cell<'_> {
    /// `assert`: a named check, now. A failed check is a step failure.
    pub(super) async fn assert(&mut self, check: &Check) -> Result<Done, Abort> {
        let result = self.check(check).await?;
        Ok(match result {
            Ok(what) => {
                self.state.facts.asserts.push(format!(
                    "step {} ({}): {check} held: {what}",
                    self.state.step_index, self.state.step_name
                ));
                Done::ok(what)
            }
            Err(what) => {
                self.state.fail(format!("assert {check}: {what}"));
                Done::with(StepOutcome::Failed, what)
            }
        })
    }

    /// The check's result: `Ok(what held)` or `Err(what did not)`; the
    /// outer error when the harness could not look.
    async fn check(&mut self, check: &Check) -> Result<Held, Abort> {
        match check {
            Check::SchemaExpanded => self.schema_is_expanded().await,
            Check::AuthorityColumns => self.authority_is("columns").await,
            Check::AuthorityLedger => self.authority_is("ledger").await,
            Check::FenceActive => self.fence_active().await,
            Check::MixedFleetClaimed => Ok(self.mixed_fleet_claimed()),
            Check::DeadlineRescuePending => self.deadline_rescue_pending().await,
            Check::DeadlineRescued => self.deadline_rescued().await,
            Check::RingsPrunedBack => self.rings_pruned_back().await,
            Check::SchemaMatchesFresh => self.schema_matches_fresh().await,
            Check::LeaderIs(artifact) => self.leader_is(artifact).await,
        }
    }

    async fn schema_is_expanded(&mut self) -> Result<Held, Abort> {
        let v = self.probe.schema_version().await.map_err(unreadable)?;
        Ok(if v >= self.ctx.expand_version {
            Ok(format!("schema at v{v}"))
        } else {
            Err(format!(
                "schema at v{v}, below the expand migration (v{})",
                self.ctx.expand_version
            ))
        })
    }

    async fn authority_is(&mut self, want: &str) -> Result<Held, Abort> {
        Ok(match self.probe.authority().await.map_err(unreadable)? {
            Some(a) if a == want => Ok(format!("authority is {a}")),
            Some(a) => Err(format!("authority is {a}")),
            None => Err(
                "there is no ring_cursor_authority table (the expand migration has not run)".into(),
            ),
        })
    }

    async fn fence_active(&mut self) -> Result<Held, Abort> {
        let rings = self.probe.ring_columns().await.map_err(unreadable)?;
        let live: Vec<String> = rings
            .iter()
            .filter(|(_, slot, generation)| (*slot, *generation) != (-1, -1))
            .map(|(ring, slot, generation)| {
                format!("{ring} ring at (slot {slot}, generation {generation})")
            })
            .collect();
        Ok(if live.is_empty() {
            Ok("the three ring singletons are poisoned (-1, -1)".into())
        } else {
            Err(format!("not poisoned: {}", live.join(", ")))
        })
    }

    fn mixed_fleet_claimed(&self) -> Held {
        let versions: Vec<String> = self.view(|l| l.claimed_by.iter().cloned().collect());
        if versions.len() >= 2 {
            Ok(format!(
                "workers of {} claimed jobs",
                versions.join(" and ")
            ))
        } else {
            Err(format!(
                "only workers of {} claimed jobs",
                if versions.is_empty() {
                    "no version".into()
                } else {
                    versions.join(", ")
                }
            ))
        }
    }

    /// How long past its deadline an attempt may go unrescued: two rescue
    /// intervals and a second.
    fn rescue_margin_ms(&self) -> f64 {
        (self.plan.timings.rescue_every.as_millis() * 2 + 1_000) as f64
    }

    async fn deadline_rescue_pending(&mut self) -> Result<Held, Abort> {
        let rescue_margin = self.rescue_margin_ms();
        let deadline_ms = self.plan.timings.deadline.as_millis() as f64;
        let version = self.version_of(CURRENT);
        let jobs = self.overrun_jobs();
        let (n, ids) = self
            .probe
            .deadline_pending(&jobs, &version, deadline_ms, rescue_margin)
            .await
            .map_err(unreadable)?;
        Ok(if n > 0 {
            Ok(format!(
                "{} claimed by {version} {} past their deadline by over {} and not rescued (first: {ids:?})",
                crate::observe::count(n.unsigned_abs(), "overrun_deadline attempt"),
                crate::observe::agree(n.unsigned_abs(), "is", "are"),
                crate::observe::duration(rescue_margin as u64)
            ))
        } else {
            Err(format!(
                "no overrun_deadline attempt claimed by {version} is overdue and unrescued ({} such jobs accepted)",
                jobs.len()
            ))
        })
    }

    /// Every overrun first attempt that was overdue once the N leader had
    /// its margin is closed by a rescue. The set is fixed then; a rescue
    /// running late on a loaded machine gets `takeover_wait` to
    /// close it, a leader that never rescues fails after it.
    async fn deadline_rescued(&mut self) -> Result<Held, Abort> {
        let rescue_margin = self.rescue_margin_ms();
        let deadline_ms = self.plan.timings.deadline.as_millis() as f64;
        let jobs = self.overrun_jobs();
        // Attempts that were overdue before the leader took over are due
        // from its takeover on: give a new leader the margin first.
        let since = self.view(|l| l.current_leader().and_then(|id| l.procs[id].leader_at_ms));
        if let Some(since) = since {
            let due_at = since + rescue_margin as u64;
            let now = self.ms();
            if now < due_at {
                self.cancel()
                    .sleep(Duration::from_millis(due_at - now))
                    .await?;
            }
        }
        let now = self.probe.server_epoch().await.map_err(unreadable)?;
        let before = now - (deadline_ms + rescue_margin) / 1_000.0;
        let patience = self.takeover_wait();
        let start = Instant::now();
        let mut waited = false;
        let t = loop {
            let t = self
                .probe
                .deadline_rescued(&jobs, before)
                .await
                .map_err(unreadable)?;
            if t.rescued == t.due || start.elapsed() >= patience {
                break t;
            }
            waited = true;
            self.cancel().sleep(RESCUE_POLL).await?;
        };
        let late = if waited {
            let late = crate::observe::duration(start.elapsed().as_millis() as u64);
            format!("; the last {late} after the margin")
        } else {
            String::new()
        };
        Ok(if t.due > 0 && t.rescued == t.due {
            Ok(format!(
                "all {} overdue first attempts were rescued ({}{late})",
                t.due, t.outcomes
            ))
        } else if t.due == 0 {
            Err("no overrun_deadline first attempt is old enough to judge".into())
        } else {
            Err(format!(
                "{} of {} overdue first attempts were not rescued {} after the margin (first: {:?}; outcomes seen: {})",
                t.due - t.rescued,
                t.due,
                crate::observe::duration(patience.as_millis() as u64),
                t.not_rescued,
                t.outcomes
            ))
        })
    }

    /// How long a leader takeover (and the rescues it owes) may take:
    /// two stale periods and 3 s, for a loaded machine.
    fn takeover_wait(&self) -> Duration {
        self.plan.timings.stale_after.to_std() * 2 + Duration::from_secs(3)
    }

    async fn leader_is(&mut self, artifact: &str) -> Result<Held, Abort> {
        let wait = self.takeover_wait();
        let leader = self
            .shared
            .wait_for(wait, &self.cancel(), |l| l.current_leader())
            .await?;
        Ok(match leader {
            Some(id) => self.proc(id, |p| {
                if p.artifact == artifact {
                    Ok(format!("the leader is {} ({})", p.name, p.version))
                } else {
                    Err(format!(
                        "the leader is {} ({} {})",
                        p.name, p.artifact, p.version
                    ))
                }
            }),
            None => Err("no live process holds maintenance leadership".into()),
        })
    }

    fn overrun_jobs(&self) -> Vec<i64> {
        self.view(|l| {
            l.accepted
                .iter()
                .chain(&l.uncertain)
                .filter(|j| j.mode == awa_runtime::workload::Mode::OverrunDeadline)
                .map(|j| j.job_id)
                .collect()
        })
    }
}
