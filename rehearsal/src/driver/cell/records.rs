//! What a cell records as its phases run: each phase's begin and end
//! (its outcome and the step failures it added), the processes' ledger
//! collected into the observations, and the cron schedule's window.

use super::super::{Abort, Done, EXIT_OK};
use super::{Begun, CRON_NAME, LiveCell};
use crate::observe::{CronWindow, Phase, ProcessRecord, StepOutcome};

impl LiveCell<'_> {
    /// A phase begins.
    pub(super) fn begin(&mut self, index: usize, name: &'static str) -> Begun {
        self.state.step_index = index;
        self.state.step_name = name;
        Begun {
            index,
            name,
            start_ms: self.ms(),
            failures_before: self.state.obs.step_failures.len(),
        }
    }

    /// A phase ended with `result`: names its outcome and records it.
    pub(super) async fn end(
        &mut self,
        begun: Begun,
        result: Result<Done, Abort>,
    ) -> Result<(), Abort> {
        let result = match result {
            Err(Abort::Interrupted) if self.over_budget() => {
                Err(Abort::OverBudget(self.waiting_for().await))
            }
            other => other,
        };
        // An exit the harness cannot judge ends the step as its failure.
        let (result, notes) = match result {
            Ok(done) => match self.step_ctx().check_unexpected_exits().await {
                Ok(notes) => (Ok(done), notes),
                Err(abort) => (Err(abort), Vec::new()),
            },
            other => (other, Vec::new()),
        };
        self.state.seats.retain(|s| !s.dead);
        let end_ms = self.ms();
        let new_failures = &self.state.obs.step_failures[begun.failures_before..];
        let failed = !new_failures.is_empty();
        let (outcome, mut detail, abort) = match result {
            Ok(done) => (
                if failed {
                    StepOutcome::Failed
                } else {
                    done.outcome
                },
                done.detail,
                None,
            ),
            Err(Abort::Interrupted) => (
                StepOutcome::Interrupted,
                "interrupted by Ctrl-C or SIGTERM".to_owned(),
                Some(Abort::Interrupted),
            ),
            Err(Abort::OverBudget(why)) => (
                StepOutcome::TimedOut,
                format!(
                    "the cell's budget of {} ran out: {why}",
                    self.plan.timings.budget
                ),
                Some(Abort::OverBudget(why)),
            ),
            Err(Abort::Harness(m)) => (
                StepOutcome::HarnessError,
                m.clone(),
                Some(Abort::Harness(m)),
            ),
            Err(Abort::Failed(m)) => (StepOutcome::Failed, m.clone(), Some(Abort::Failed(m))),
        };
        if failed {
            let failures: Vec<&str> = new_failures.iter().map(|f| f.message.as_str()).collect();
            detail = format!("{detail}; FAILED: {}", failures.join("; "));
        }
        if !notes.is_empty() {
            detail = format!("{detail}; {}", notes.join("; "));
        }
        self.record_phase(Phase {
            step: begun.index,
            name: begun.name.to_owned(),
            detail: detail.trim_start_matches("; ").to_owned(),
            start_ms: begun.start_ms,
            end_ms,
            outcome,
        });
        match abort {
            Some(a) => Err(a),
            None => Ok(()),
        }
    }

    /// Copies what the ledger saw into the observations.
    pub(super) fn collect_ledger(&mut self) {
        let ledger = self.shared.lock();
        self.state.obs.accepted = ledger.accepted.clone();
        self.state.obs.uncertain = ledger.uncertain.clone();
        let late = ledger.late_results;
        self.state.obs.late_results = crate::observe::LateResultCount {
            during_rerun: late.during_rerun,
            after_rerun: late.after_rerun,
            first: late
                .first
                .map(|(id, job)| format!("job {job} by {}", ledger.procs[id].name)),
        };
        self.state.obs.unstopped_handlers = ledger.unstopped.clone();
        self.state.obs.overruns_completed = ledger.overruns_completed.clone();
        self.state.obs.overruns_killed = ledger.overruns_killed.clone();
        self.state.obs.disowned_runs = ledger.disowned();
        let suspended: std::collections::BTreeSet<&str> = (self.state.obs.suspensions.iter())
            .map(|s| s.process.as_str())
            .collect();
        self.state.obs.stopped_runtimes = ledger
            .procs
            .iter()
            .filter_map(|p| {
                Some(crate::observe::StoppedRuntime {
                    instance_id: p.instance_id.clone()?,
                    artifact: p.artifact.clone(),
                    asked_ms: p.stop_asked_ms?,
                })
            })
            .collect();
        self.state.obs.faulted_runtimes = ledger
            .procs
            .iter()
            .filter(|p| {
                p.killed
                    || suspended.contains(p.name.as_str())
                    || p.fatal.is_some()
                    || p.refused.is_some()
                    || (p.exit.is_some() && !p.stopping)
            })
            .filter_map(|p| p.instance_id.clone())
            .collect();
        self.state.obs.leaderships = ledger
            .leaders
            .iter()
            .map(|&(id, from_ms)| {
                let p = &ledger.procs[id];
                crate::observe::LeaderTerm {
                    process: p.name.clone(),
                    artifact: p.artifact.clone(),
                    version: p.version.clone(),
                    from_ms,
                    stop_asked_ms: p.stop_asked_ms,
                    ended_ms: p.ended_ms,
                }
            })
            .collect();
        self.state.obs.processes = ledger
            .procs
            .iter()
            .map(|p| ProcessRecord {
                name: p.name.clone(),
                artifact: p.artifact.clone(),
                version: p.version.clone(),
                role: p.role.name().to_owned(),
                exit_code: p.code(),
                signal: p.exit.and_then(|e| e.signal),
                container: p.handle.as_ref().and_then(|h| h.container.clone()),
                start_to_ready_ms: p.ready_ms.map(|r| r.saturating_sub(p.spawned_ms)),
                killed: p.killed,
                log: p.log.clone(),
                error: p.fatal.clone().or_else(|| {
                    (p.code().is_some_and(|c| c != EXIT_OK) && p.refused.is_none())
                        .then(|| p.stderr_tail.back().cloned())
                        .flatten()
                }),
                contract: p.contract,
                leader_at_ms: p.leader_at_ms,
                secret_lines: p.secret_lines,
                first_secret_line: p.first_secret_line.clone(),
                target_hidden_lines: p.target_hidden_lines,
                first_target_hidden_line: p.first_target_hidden_line.clone(),
            })
            .collect();
    }

    /// The cron window: fire times from the first fire to the last one
    /// minus an interval (the last may have had no worker left to run it).
    pub(super) async fn record_cron_window(&mut self) {
        let Some(cron) = self.plan.workload.cron else {
            return;
        };
        let every = cron.every.as_millis() as i64;
        let bounds = match self.probe.cron_bounds(CRON_NAME).await {
            Ok(bounds) => bounds.map(|(first, last, _)| (first, last)),
            Err(_) => {
                let fires: Vec<i64> = self.view(|l| {
                    l.cron_fires
                        .iter()
                        .filter(|(n, _)| n == CRON_NAME)
                        .map(|(_, t)| *t)
                        .collect()
                });
                fires
                    .iter()
                    .min()
                    .zip(fires.iter().max())
                    .map(|(a, b)| (*a, *b))
            }
        };
        if let Some((first, last)) = bounds {
            self.state
                .obs
                .cron
                .push(cron_window(CRON_NAME, every, first, last));
        }
    }
}

/// The window whose every fire time must have produced exactly one job:
/// from the first fire seen (inclusive) to one interval before the last
/// (a fire at the very end may have found no worker left to run it).
/// `CronWindow` bounds are `from_ms < t <= to_ms`.
pub fn cron_window(name: &str, every_ms: i64, first_fire: i64, last_fire: i64) -> CronWindow {
    let from_ms = first_fire - 1;
    CronWindow {
        name: name.to_owned(),
        every_ms,
        from_ms,
        to_ms: (last_fire - every_ms).max(from_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cron_window_runs_from_the_first_fire_to_one_before_the_last() {
        let w = cron_window("rehearse", 2_000, 10_000, 20_000);
        assert_eq!((w.from_ms, w.to_ms, w.every_ms), (9_999, 18_000, 2_000));
        // Fire times in the window: 10 000 .. 18 000, five of them.
        let fires: Vec<i64> = (0..20)
            .map(|i| i * 2_000)
            .filter(|t| w.from_ms < *t && *t <= w.to_ms)
            .collect();
        assert_eq!(fires, [10_000, 12_000, 14_000, 16_000, 18_000]);
        // One fire only: an empty window, never an inverted one.
        let w = cron_window("rehearse", 2_000, 10_000, 10_000);
        assert_eq!((w.from_ms, w.to_ms), (9_999, 9_999));
    }
}
