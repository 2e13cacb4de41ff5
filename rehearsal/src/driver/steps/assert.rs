//! `assert`: check a named condition now.

use std::time::Duration;

use super::super::cell::Cell;
use super::super::{Abort, Done};
use crate::matrix::{CURRENT, Check};
use crate::observe::StepOutcome;

impl Cell<'_> {
    /// `assert`: a named check, now. A failed check is a step failure.
    pub(super) async fn assert(&mut self, check: &Check) -> Result<Done, Abort> {
        let result = self.check(check).await?;
        Ok(match result {
            Ok(what) => {
                self.facts.asserts.push(format!(
                    "step {} ({}): {check} held: {what}",
                    self.step_index, self.step_name
                ));
                Done::ok(what)
            }
            Err(what) => {
                self.fail(format!("assert {check}: {what}"));
                Done::with(StepOutcome::Failed, what)
            }
        })
    }

    async fn check(&mut self, check: &Check) -> Result<Result<String, String>, Abort> {
        let db = |e: String| Abort::Harness(format!("the check could not read the database: {e}"));
        let rescue_margin = (self.plan.timings.rescue_every.as_millis() * 2 + 1_000) as f64;
        let deadline_ms = self.plan.timings.deadline.as_millis() as f64;
        Ok(match check {
            Check::SchemaExpanded => {
                let v = self.probe.schema_version().await.map_err(db)?;
                if v >= self.ctx.expand_version {
                    Ok(format!("schema at v{v}"))
                } else {
                    Err(format!(
                        "schema at v{v}, below the expand migration (v{})",
                        self.ctx.expand_version
                    ))
                }
            }
            Check::AuthorityColumns | Check::AuthorityLedger => {
                let want = if *check == Check::AuthorityColumns {
                    "columns"
                } else {
                    "ledger"
                };
                match self.probe.authority().await.map_err(db)? {
                    Some(a) if a == want => Ok(format!("authority is {a}")),
                    Some(a) => Err(format!("authority is {a}")),
                    None => Err("there is no ring_cursor_authority table (the expand migration has not run)".into()),
                }
            }
            Check::FenceActive => {
                let rings = self.probe.ring_columns().await.map_err(db)?;
                let live: Vec<String> = rings
                    .iter()
                    .filter(|(_, slot, generation)| (*slot, *generation) != (-1, -1))
                    .map(|(ring, slot, generation)| {
                        format!("{ring} ring at (slot {slot}, generation {generation})")
                    })
                    .collect();
                if live.is_empty() {
                    Ok("the three ring singletons are poisoned (-1, -1)".into())
                } else {
                    Err(format!("not poisoned: {}", live.join(", ")))
                }
            }
            Check::MixedFleetClaimed => {
                let versions: Vec<String> = self.shared.lock().claimed_by.iter().cloned().collect();
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
            Check::DeadlineRescuePending => {
                let version = self.version_of(CURRENT);
                let jobs = self.overrun_jobs();
                let (n, ids) = self
                    .probe
                    .deadline_pending(&jobs, &version, deadline_ms, rescue_margin)
                    .await
                    .map_err(db)?;
                if n > 0 {
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
                }
            }
            Check::DeadlineRescued => {
                let jobs = self.overrun_jobs();
                let t = self
                    .probe
                    .deadline_rescued(&jobs, deadline_ms, rescue_margin)
                    .await
                    .map_err(db)?;
                if t.due > 0 && t.rescued == t.due {
                    Ok(format!(
                        "all {} overdue first attempts were rescued ({})",
                        t.due, t.outcomes
                    ))
                } else if t.due == 0 {
                    Err("no overrun_deadline first attempt is old enough to judge".into())
                } else {
                    Err(format!(
                        "{} of {} overdue first attempts were not rescued (first: {:?}; outcomes seen: {})",
                        t.due - t.rescued,
                        t.due,
                        t.not_rescued,
                        t.outcomes
                    ))
                }
            }
            Check::RingsPrunedBack => return self.rings_pruned_back().await,
            Check::SchemaMatchesFresh => return self.schema_matches_fresh().await,
            Check::LeaderIs(artifact) => {
                let wait = self.plan.timings.stale_after.to_std() * 2 + Duration::from_secs(3);
                let leader = self
                    .shared
                    .wait_for(wait, &self.cancel(), |l| l.current_leader())
                    .await?;
                let l = self.shared.lock();
                match leader {
                    Some(id) if l.procs[id].artifact == *artifact => Ok(format!(
                        "the leader is {} ({})",
                        l.procs[id].name, l.procs[id].version
                    )),
                    Some(id) => Err(format!(
                        "the leader is {} ({} {})",
                        l.procs[id].name, l.procs[id].artifact, l.procs[id].version
                    )),
                    None => Err("no live process holds maintenance leadership".into()),
                }
            }
        })
    }

    fn overrun_jobs(&self) -> Vec<i64> {
        let l = self.shared.lock();
        l.accepted
            .iter()
            .chain(&l.uncertain)
            .filter(|j| j.mode == awa_runtime::workload::Mode::OverrunDeadline)
            .map(|j| j.job_id)
            .collect()
    }
}
