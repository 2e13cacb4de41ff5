//! The fleet view ([`FleetView`]; not the ring ledgers): everything a
//! cell's processes reported, kept current by one task that reads the
//! fleet's channel, and waited on by the steps.
//!
//! Steps never read process output themselves; they state a condition
//! over the ledger ("previous-worker-2 has started 20 jobs", "the migrate
//! process exited and its output is read") and [`Shared::wait_for`]
//! returns once it holds, when it times out, or when the run is
//! interrupted.
//!
//! This file keeps the view and how each report changes it; one
//! process's entry is in `entry`, the shared view and its feed task in
//! `feed`, how a wait ends early in `wait_cancel`.

mod entry;
mod feed;
mod wait_cancel;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

pub use entry::{Proc, Role};
pub use feed::Shared;
pub use wait_cancel::{Cancel, Interrupted};

use crate::fleet::events::{Finished, Flipped, Started};
use crate::fleet::{Event, FleetMsg, Parsed, ProcId, Report};
use crate::observe::{AcceptedJob, ContractCount, DisownedRun, SecretLine, UnstoppedHandler};

/// stderr lines kept per process for messages.
const STDERR_TAIL: usize = 12;

/// The cell's view of its fleet.
#[derive(Debug)]
pub struct FleetView {
    t0: Instant,
    /// Every process, by [`ProcId`] (start order).
    pub procs: Vec<Proc>,
    /// Jobs producers reported accepted.
    pub accepted: Vec<AcceptedJob>,
    /// Jobs producers reported uncertain.
    pub uncertain: Vec<AcceptedJob>,
    /// Event counts by version, then kind.
    pub counts: BTreeMap<String, BTreeMap<String, u64>>,
    /// Versions that reported `started`.
    pub claimed_by: BTreeSet<String>,
    /// Processes in the order they reported `leader`, with when (ms
    /// since the cell started).
    pub leaders: Vec<(ProcId, u64)>,
    /// `cron_fired` events: (name, fire_ms).
    pub cron_fires: Vec<(String, i64)>,
    /// `flipped` events printed by fleet processes (an auto-flip), with the process.
    pub flipped: Vec<(ProcId, Flipped)>,
    /// Attempts a leader reported rescued: (job_id, run_lease).
    pub rescued: BTreeSet<(i64, i64)>,
    /// Results of rescued attempts their workers reported later.
    pub late_results: LateResults,
    /// Older attempts a worker kept running when it started a newer run
    /// lease of the same job.
    pub unstopped: Vec<UnstoppedHandler>,
    /// First attempts of `overrun_deadline` jobs in flight: when each
    /// started (ms since the cell started), by (job_id, run_lease).
    overruns: BTreeMap<(i64, i64), u64>,
    /// First attempts of `overrun_deadline` jobs their handler completed:
    /// nobody deadline-rescued them while the handler ran.
    pub overruns_completed: Vec<crate::observe::UnrescuedOverrun>,
    /// First attempts of `overrun_deadline` jobs in flight on a process
    /// the harness killed, as [`FleetView::cut_by_kill`] moved them.
    pub overruns_killed: Vec<crate::observe::UnrescuedOverrun>,
    /// Attempts (job_id, run_lease) whose own run reported them lost: a
    /// `lease_lost`, or a `finished` whose close lost (`stale`).
    pub lost_by_run: BTreeSet<(i64, i64)>,
    /// Attempts whose own run reported its close recorded (a `finished`
    /// with any outcome but `stale`), and whether that close was terminal.
    pub closed_by_run: BTreeMap<(i64, i64), bool>,
    /// stdout lines that broke the contract, with the process.
    pub garbled: Vec<(ProcId, String)>,
    /// Events of a kind the contract does not have (a newer release's), with the process.
    pub unknown: Vec<(ProcId, String)>,
}

/// Results of rescued attempts that their workers reported anyway: the
/// run-lease guard must make each lose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LateResults {
    /// Reported while the job's next attempt was in flight elsewhere.
    pub during_rerun: u64,
    /// Reported once the next attempt had ended (or never started).
    pub after_rerun: u64,
    /// The first reported during a rerun: (process, job_id).
    pub first: Option<(ProcId, i64)>,
}

impl FleetView {
    /// An empty ledger for a cell that started at `t0`.
    pub fn new(t0: Instant) -> Self {
        FleetView {
            t0,
            procs: Vec::new(),
            accepted: Vec::new(),
            uncertain: Vec::new(),
            counts: BTreeMap::new(),
            claimed_by: BTreeSet::new(),
            leaders: Vec::new(),
            cron_fires: Vec::new(),
            flipped: Vec::new(),
            rescued: BTreeSet::new(),
            late_results: LateResults::default(),
            unstopped: Vec::new(),
            overruns: BTreeMap::new(),
            overruns_completed: Vec::new(),
            overruns_killed: Vec::new(),
            lost_by_run: BTreeSet::new(),
            closed_by_run: BTreeMap::new(),
            garbled: Vec::new(),
            unknown: Vec::new(),
        }
    }

    /// Milliseconds since the cell started.
    pub fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.t0).as_millis() as u64
    }

    /// Registers a process about to be spawned; its reports use the returned id.
    pub fn register(
        &mut self,
        name: String,
        artifact: &str,
        version: &str,
        role: Role,
        log: String,
    ) -> ProcId {
        let spawned_ms = self.ms(Instant::now());
        self.procs.push(Proc {
            name,
            artifact: artifact.to_owned(),
            version: version.to_owned(),
            role,
            log,
            spawned_ms,
            handle: None,
            instance_id: None,
            ready: false,
            ready_ms: None,
            refused: None,
            answered_ms: None,
            fatal: None,
            started: 0,
            finished: 0,
            in_flight: BTreeMap::new(),
            leader_at_ms: None,
            json: Vec::new(),
            contract: ContractCount::default(),
            stderr_tail: VecDeque::new(),
            output_closed: false,
            exit: None,
            ended_ms: None,
            killed: false,
            stopping: false,
            stop_asked_ms: None,
            secret_lines: 0,
            first_secret_line: None,
            target_hidden_lines: 0,
            first_target_hidden_line: None,
        });
        self.procs.len() - 1
    }

    fn count(&mut self, version: &str, kind: &str, n: u64) {
        *self
            .counts
            .entry(version.to_owned())
            .or_default()
            .entry(kind.to_owned())
            .or_default() += n;
    }

    /// Applies one report.
    pub fn apply(&mut self, msg: FleetMsg) {
        let at_ms = self.ms(msg.at);
        let Some(proc) = self.procs.get_mut(msg.id) else {
            return;
        };
        let version = proc.version.clone();
        match msg.report {
            Report::Stderr(line) => {
                if proc.stderr_tail.len() == STDERR_TAIL {
                    proc.stderr_tail.pop_front();
                }
                proc.stderr_tail.push_back(line);
            }
            Report::SecretPrinted { stderr, line } => {
                proc.secret_lines += 1;
                proc.first_secret_line.get_or_insert(SecretLine {
                    at_ms,
                    stderr,
                    line,
                });
            }
            Report::TargetHidden { stderr, line } => {
                proc.target_hidden_lines += 1;
                proc.first_target_hidden_line.get_or_insert(SecretLine {
                    at_ms,
                    stderr,
                    line,
                });
            }
            Report::OutputClosed => proc.output_closed = true,
            Report::Exited(info) => {
                proc.exit = Some(info);
                proc.ended_ms.get_or_insert(at_ms);
            }
            Report::Line(Parsed::Event(event)) => {
                proc.contract.events += 1;
                let keep = matches!(
                    proc.role,
                    Role::Migrate | Role::Flip | Role::Fence | Role::Cron | Role::Operator
                ) || matches!(event, Event::Flipped(_) | Event::FlipCheck(_));
                if keep {
                    proc.json.push(event.clone());
                }
                self.apply_event(msg.id, at_ms, &version, event);
            }
            Report::Line(Parsed::Unknown { line, .. }) => {
                proc.contract.unknown += 1;
                self.unknown.push((msg.id, line));
            }
            Report::Line(Parsed::Garbled { line }) => {
                proc.contract.garbled += 1;
                self.garbled.push((msg.id, line));
            }
        }
    }

    fn apply_event(&mut self, id: ProcId, at_ms: u64, version: &str, event: Event) {
        let proc = &mut self.procs[id];
        let kind = event.name();
        match event {
            Event::Ready(r) => {
                proc.instance_id.get_or_insert(r.instance_id);
                proc.ready = true;
                proc.ready_ms.get_or_insert(at_ms);
            }
            Event::Refused(r) => {
                proc.refused = Some(r.reason);
                proc.answered_ms.get_or_insert(at_ms);
            }
            Event::Blocked(_) => {
                proc.answered_ms.get_or_insert(at_ms);
            }
            // A fatal error is the runtime's answer to a permanent one:
            // timed by the line, not by when the backend saw the exit
            // (seconds later on a loaded docker engine).
            Event::Fatal(f) => {
                proc.fatal = Some(f.error);
                proc.answered_ms.get_or_insert(at_ms);
            }
            Event::Started(s) => self.on_started(id, at_ms, s),
            Event::Finished(f) => self.on_finished(id, at_ms, f),
            // The worker stopped the attempt's handler: its lease is gone.
            Event::LeaseLost(l) => {
                proc.in_flight.remove(&(l.job_id, l.run_lease));
                self.lost_by_run.insert((l.job_id, l.run_lease));
            }
            // At its stop, the worker handed the attempt back.
            Event::Released(l) => {
                proc.in_flight.remove(&(l.job_id, l.run_lease));
            }
            Event::Leader(_) => {
                proc.leader_at_ms = Some(at_ms);
                self.leaders.push((id, at_ms));
            }
            Event::Accepted(a) => self.accepted.push(AcceptedJob {
                job_id: a.job_id,
                mode: a.mode,
                max_attempts: a.max_attempts,
                version: a.version,
                run_at_ms: a.run_at_ms,
            }),
            Event::Uncertain(u) => {
                for (job_id, mode) in u.job_ids.iter().zip(&u.modes) {
                    self.uncertain.push(AcceptedJob {
                        job_id: *job_id,
                        mode: *mode,
                        max_attempts: super::env::MAX_ATTEMPTS,
                        version: version.to_owned(),
                        run_at_ms: None,
                    });
                }
            }
            Event::CronFired(c) => self.cron_fires.push((c.name, c.fire_ms)),
            Event::Flipped(f) => {
                if proc.role.is_runtime() {
                    self.flipped.push((id, f));
                }
            }
            Event::Rescued(r) => {
                self.rescued.insert((r.job_id, r.run_lease));
            }
            Event::FoldStoodDown(_)
            | Event::Stopped(_)
            | Event::Migrated(_)
            | Event::CronUpserted(_)
            | Event::Cancelled(_)
            | Event::FlipCheck(_) => {}
        }
        if matches!(
            kind,
            "accepted" | "started" | "finished" | "rescued" | "cron_fired"
        ) {
            self.count(version, kind, 1);
        }
    }

    /// An attempt started: in flight in its process, an overrun's first
    /// attempt timed, and a handler the process left running under an
    /// older run lease of the same job recorded.
    fn on_started(&mut self, id: ProcId, at_ms: u64, s: Started) {
        let proc = &mut self.procs[id];
        proc.started += 1;
        let older = proc
            .in_flight
            .range((s.job_id, i64::MIN)..(s.job_id, s.run_lease))
            .next()
            .map(|(&(_, run_lease), &attempt)| (run_lease, attempt));
        if let Some((run_lease, attempt)) = older
            && stops_lost_handlers(&proc.version)
        {
            self.unstopped.push(UnstoppedHandler {
                process: proc.name.clone(),
                job_id: s.job_id,
                attempt,
                run_lease,
                next_run_lease: s.run_lease,
                at_ms,
            });
        }
        proc.in_flight.insert((s.job_id, s.run_lease), s.attempt);
        if s.attempt == 1 && s.mode == Some(awa_runtime::workload::Mode::OverrunDeadline) {
            self.overruns.insert((s.job_id, s.run_lease), at_ms);
        }
        self.claimed_by.insert(s.version);
    }

    /// An attempt finished: out of flight, its run closed (finally or for
    /// another try) or lost, an overrun completed unrescued recorded, and
    /// a result after a rescue judged.
    fn on_finished(&mut self, id: ProcId, at_ms: u64, f: Finished) {
        let proc = &mut self.procs[id];
        proc.finished += 1;
        proc.in_flight.remove(&(f.job_id, f.run_lease));
        let key = (f.job_id, f.run_lease);
        use awa_runtime::events::AttemptOutcome as O;
        match f.outcome {
            O::Stale => {
                self.lost_by_run.insert(key);
            }
            O::Retry | O::Snoozed => {
                self.closed_by_run.insert(key, false);
            }
            O::Completed | O::Failed | O::Cancelled | O::DeadLettered => {
                self.closed_by_run.insert(key, true);
            }
        }
        if let Some(started_ms) = self.overruns.remove(&key)
            && f.outcome == O::Completed
        {
            self.overruns_completed
                .push(crate::observe::UnrescuedOverrun {
                    job_id: f.job_id,
                    started_ms,
                    finished_ms: at_ms,
                });
        }
        self.judge_late_result(id, f.job_id, f.run_lease);
    }

    /// A result of attempt (`job_id`, `run_lease`), reported by `id`, that
    /// was rescued before: a late result. It counts as one reported while
    /// the job's next attempt ran when some process has that attempt in
    /// flight: the interleaving the run-lease guard exists for.
    fn judge_late_result(&mut self, id: ProcId, job_id: i64, run_lease: i64) {
        if !self.rescued.contains(&(job_id, run_lease)) {
            return;
        }
        let rerun = (job_id, run_lease + 1);
        if self.procs.iter().any(|p| p.in_flight.contains_key(&rerun)) {
            self.late_results.during_rerun += 1;
            self.late_results.first.get_or_insert((id, job_id));
        } else {
            self.late_results.after_rerun += 1;
        }
    }

    /// Attempts whose own run reported them lost and never reported its
    /// close recorded, of jobs another run of which reported its terminal
    /// close recorded: a terminal record naming one of these leases is
    /// that other run's result, closing an attempt that was not its own.
    /// A run that reports both (its close committed just as its heartbeat
    /// missed the deleted lease twice) owns its lease; and a run alone in
    /// reporting its close lost disowns nothing, since a PostgreSQL crash
    /// can lose the answer to a close that committed (the retried close
    /// then finds the attempt gone and says `stale`).
    pub fn disowned(&self) -> Vec<DisownedRun> {
        self.lost_by_run
            .iter()
            .filter(|key| !self.closed_by_run.contains_key(key))
            .filter(|&&(job, lease)| {
                self.closed_by_run
                    .range((job, i64::MIN)..=(job, i64::MAX))
                    .any(|(&(_, other), &terminal)| terminal && other != lease)
            })
            .map(|&(job_id, run_lease)| DisownedRun { job_id, run_lease })
            .collect()
    }

    /// Process `id` was SIGKILLed at `at_ms`: the first attempts of
    /// `overrun_deadline` jobs it had in flight may have ended there
    /// unseen. A runtime commits an attempt's outcome before it prints
    /// the `finished` line, so a kill between the two leaves a completed
    /// attempt that no event reports; whatever the handler completed, it
    /// completed before `at_ms`, which stands as its end.
    pub fn cut_by_kill(&mut self, id: ProcId, at_ms: u64) {
        let keys: Vec<(i64, i64)> = self.procs[id].in_flight.keys().copied().collect();
        for key in keys {
            if let Some(started_ms) = self.overruns.remove(&key) {
                self.overruns_killed.push(crate::observe::UnrescuedOverrun {
                    job_id: key.0,
                    started_ms,
                    finished_ms: at_ms,
                });
            }
        }
    }

    /// The process that reported `leader` last, if it is still running.
    pub fn current_leader(&self) -> Option<ProcId> {
        let (last, _) = *self.leaders.last()?;
        self.procs[last].alive().then_some(last)
    }

    /// The runtimes that should be beating now, by `instance_id`, with
    /// their names: ready and running, neither asked to stop nor killed,
    /// and not held stopped by the driver or let go less than `grace` ago.
    pub fn beating(&self, grace: std::time::Duration) -> BTreeMap<String, String> {
        self.procs
            .iter()
            .filter(|p| p.ready && p.alive() && !p.killed && !p.stopping)
            .filter(|p| p.handle.as_ref().is_none_or(|h| !h.held_within(grace)))
            .filter_map(|p| Some((p.instance_id.clone()?, p.name.clone())))
            .collect()
    }
}

/// Whether `awa` of this version stops the handler of an attempt whose
/// lease it lost (0.7.0 on, with `lease_lost`); the 0.6 releases let it
/// run its course, their overrun for a bounded number of deadlines.
fn stops_lost_handlers(version: &str) -> bool {
    crate::vocab::release::from_flip_release(version) == Some(true)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::{mpsc, watch};

    use super::*;
    use crate::fleet::{ExitInfo, events};
    use crate::stream::Events;
    use awa_runtime::workload::Mode;

    fn line(id: ProcId, json: &str) -> FleetMsg {
        FleetMsg {
            id,
            at: Instant::now(),
            report: Report::Line(events::parse(json)),
        }
    }

    fn ledger() -> (FleetView, ProcId, ProcId) {
        let mut l = FleetView::new(Instant::now());
        let w = l.register(
            "previous-worker-1".into(),
            "previous",
            "0.6.2",
            Role::Worker,
            "logs/c/w.log".into(),
        );
        let p = l.register(
            "current-producer-1".into(),
            "current",
            "0.7.0",
            Role::Producer,
            "logs/c/p.log".into(),
        );
        (l, w, p)
    }

    #[test]
    fn in_flight_is_started_minus_finished() {
        let (mut l, w, _) = ledger();
        for (job, lease) in [(1, 10), (2, 20), (3, 30)] {
            l.apply(line(w, &format!(r#"{{"event":"started","job_id":{job},"attempt":1,"run_lease":{lease},"mode":"sleep","instance_id":"i","version":"0.6.2"}}"#)));
        }
        l.apply(line(w, r#"{"event":"finished","job_id":2,"attempt":1,"run_lease":20,"outcome":"completed","mode":"sleep","version":"0.6.2"}"#));
        let proc = &l.procs[w];
        assert_eq!((proc.started, proc.finished), (3, 1));
        let ids: Vec<(i64, i32, i64)> = proc
            .in_flight()
            .iter()
            .map(|f| (f.job_id, f.attempt, f.run_lease))
            .collect();
        assert_eq!(ids, [(1, 1, 10), (3, 1, 30)]);
        assert_eq!(l.counts["0.6.2"]["started"], 3);
        assert_eq!(l.counts["0.6.2"]["finished"], 1);
        assert!(l.claimed_by.contains("0.6.2"));
    }

    /// A fatal error is the runtime's answer to a permanent one, timed by
    /// its line; the first answer stands.
    #[test]
    fn a_fatal_line_times_the_answer() {
        let (mut l, w, p) = ledger();
        assert_eq!(l.procs[w].answered_ms, None);
        l.apply(line(
            w,
            r#"{"event":"fatal","error":"permission denied (SQLSTATE 42501)"}"#,
        ));
        let answered = l.procs[w].answered_ms.expect("answered");
        assert_eq!(
            l.procs[w].fatal.as_deref(),
            Some("permission denied (SQLSTATE 42501)")
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        l.apply(line(w, r#"{"event":"fatal","error":"again"}"#));
        assert_eq!(l.procs[w].answered_ms, Some(answered));
        // Other lines answer nothing.
        l.apply(line(p, r#"{"event":"leader","instance_id":"i"}"#));
        assert_eq!(l.procs[p].answered_ms, None);
    }

    /// A run disowns its lease when it reports it lost or its close lost,
    /// and never its close recorded; a release is no such report.
    #[test]
    fn runs_that_report_their_lease_or_close_lost_disown_it() {
        let (mut l, w, _) = ledger();
        let finished = |job: i64, lease: i64, outcome: &str| {
            format!(
                r#"{{"event":"finished","job_id":{job},"attempt":1,"run_lease":{lease},"outcome":"{outcome}","mode":"sleep","version":"0.7.0"}}"#
            )
        };
        let lease = |event: &str, job: i64, lease: i64| {
            format!(r#"{{"event":"{event}","job_id":{job},"run_lease":{lease}}}"#)
        };
        // Another run of the job reported a terminal close recorded.
        l.apply(line(w, &finished(1, 1, "completed")));
        l.apply(line(w, &lease("lease_lost", 1, 2)));
        l.apply(line(w, &finished(2, 2, "failed")));
        l.apply(line(w, &finished(2, 1, "stale")));
        l.apply(line(w, &finished(3, 1, "completed")));
        // Lost just as its own close committed: the run owns its record.
        l.apply(line(w, &finished(4, 2, "completed")));
        l.apply(line(w, &lease("lease_lost", 4, 1)));
        l.apply(line(w, &finished(4, 1, "completed")));
        l.apply(line(w, &lease("released", 5, 1)));
        // Alone in its report (a PostgreSQL crash lost its close's
        // answer), or beside another run that only retried: nothing.
        l.apply(line(w, &finished(6, 1, "stale")));
        l.apply(line(w, &finished(7, 1, "retry")));
        l.apply(line(w, &lease("lease_lost", 7, 2)));
        let disowned: Vec<(i64, i64)> = l
            .disowned()
            .iter()
            .map(|d| (d.job_id, d.run_lease))
            .collect();
        assert_eq!(disowned, [(1, 2), (2, 1)]);
    }

    /// The `leader-handoff-cron` run under load: a 0.7 worker started
    /// run lease 2 of a job its own leadership had rescued while run
    /// lease 1's handler ran on, never stopped. A worker that reported the
    /// old lease lost first, and a 0.6 worker (which never stops them), are
    /// no finding.
    #[test]
    fn an_overrun_first_attempt_its_handler_completed_is_recorded_and_no_other() {
        let started = |job: i64, attempt: i64, mode: &str| {
            format!(
                r#"{{"event":"started","job_id":{job},"attempt":{attempt},"run_lease":{attempt},"mode":"{mode}","instance_id":"i","version":"0.6.2"}}"#
            )
        };
        let finished = |job: i64, lease: i64, outcome: &str| {
            format!(
                r#"{{"event":"finished","job_id":{job},"attempt":{lease},"run_lease":{lease},"mode":"overrun_deadline","outcome":"{outcome}","version":"0.6.2"}}"#
            )
        };
        let (mut l, old, _) = ledger();
        // Completed on attempt 1: nobody deadline-rescued it in time.
        l.apply(line(old, &started(1, 1, "overrun_deadline")));
        l.apply(line(old, &finished(1, 1, "completed")));
        // Rescued in time: its first attempt ended stale, the second completed.
        l.apply(line(old, &started(2, 1, "overrun_deadline")));
        l.apply(line(old, &finished(2, 1, "stale")));
        l.apply(line(old, &started(2, 2, "overrun_deadline")));
        l.apply(line(old, &finished(2, 2, "completed")));
        // Another mode completing on attempt 1 is no overrun.
        l.apply(line(old, &started(3, 1, "complete")));
        l.apply(line(old, &finished(3, 1, "completed")));
        assert_eq!(
            l.overruns_completed
                .iter()
                .map(|o| o.job_id)
                .collect::<Vec<_>>(),
            [1]
        );
        // In flight when its process is killed: it may have completed
        // unseen, by the kill at the latest. The other attempt in flight
        // (no overrun) and a finished overrun are not moved.
        l.apply(line(old, &started(4, 1, "overrun_deadline")));
        l.apply(line(old, &started(5, 1, "complete")));
        l.cut_by_kill(old, 9_000);
        assert_eq!(
            l.overruns_killed
                .iter()
                .map(|o| (o.job_id, o.finished_ms))
                .collect::<Vec<_>>(),
            [(4, 9_000)]
        );
        l.cut_by_kill(old, 9_500);
        assert_eq!(l.overruns_killed.len(), 1, "moved once");
    }

    #[test]
    fn a_newer_run_lease_started_over_a_running_older_one_is_an_unstopped_handler() {
        let started = |job: i64, lease: i64, version: &str| {
            format!(
                r#"{{"event":"started","job_id":{job},"attempt":{lease},"run_lease":{lease},"mode":"overrun_deadline","instance_id":"i","version":"{version}"}}"#
            )
        };
        let lost = |job: i64, lease: i64| {
            format!(r#"{{"event":"lease_lost","job_id":{job},"run_lease":{lease}}}"#)
        };
        let (mut l, old, _) = ledger();
        let cur = l.register(
            "current-worker-2".into(),
            "current",
            "0.7.0",
            Role::Worker,
            "logs/c/w2.log".into(),
        );
        // Unstopped: 6564 run lease 1 still runs when run lease 2 starts.
        l.apply(line(cur, &started(6564, 1, "0.7.0")));
        l.apply(line(cur, &started(6564, 2, "0.7.0")));
        // Stopped first: 6615 run lease 1 was reported lost.
        l.apply(line(cur, &started(6615, 1, "0.7.0")));
        l.apply(line(cur, &lost(6615, 1)));
        l.apply(line(cur, &started(6615, 2, "0.7.0")));
        // A 0.6 worker runs an overrun out by design.
        l.apply(line(old, &started(7000, 1, "0.6.2")));
        l.apply(line(old, &started(7000, 2, "0.6.2")));
        assert_eq!(
            l.unstopped
                .iter()
                .map(|u| (
                    u.process.as_str(),
                    u.job_id,
                    u.attempt,
                    u.run_lease,
                    u.next_run_lease
                ))
                .collect::<Vec<_>>(),
            [("current-worker-2", 6564, 1, 1, 2)]
        );
        // The reported-lost attempt left the worker's in-flight set; the
        // unstopped one did not.
        assert_eq!(
            l.procs[cur].in_flight.keys().copied().collect::<Vec<_>>(),
            [(6564, 1), (6564, 2), (6615, 2)]
        );
    }

    #[test]
    fn accepted_uncertain_and_leaders() {
        let (mut l, w, p) = ledger();
        l.apply(line(p, r#"{"event":"accepted","job_id":5,"mode":"complete","max_attempts":3,"run_at_ms":null,"version":"0.7.0"}"#));
        l.apply(line(
            p,
            r#"{"event":"uncertain","job_ids":[6,7],"modes":["sleep","complete"]}"#,
        ));
        assert_eq!(l.accepted.len(), 1);
        assert_eq!(
            l.uncertain
                .iter()
                .map(|j| (j.job_id, j.mode, j.version.as_str()))
                .collect::<Vec<_>>(),
            [(6, Mode::Sleep, "0.7.0"), (7, Mode::Complete, "0.7.0")]
        );
        assert_eq!(l.current_leader(), None);
        l.apply(line(
            w,
            r#"{"event":"leader","instance_id":"i","name":"previous-worker-1","version":"0.6.2"}"#,
        ));
        assert_eq!(l.current_leader(), Some(w));
        l.apply(FleetMsg {
            id: w,
            at: Instant::now(),
            report: Report::Exited(ExitInfo {
                code: None,
                signal: Some(9),
            }),
        });
        assert_eq!(l.current_leader(), None, "a dead leader leads nothing");
        l.apply(line(w, "not json"));
        assert_eq!(l.garbled, [(w, "not json".to_owned())]);
        let future = r#"{"event":"ring_folded","ring":"queue"}"#;
        l.apply(line(w, future));
        assert_eq!(l.unknown, [(w, future.to_owned())]);
        assert_eq!(
            l.procs[w].contract,
            ContractCount {
                events: 1,
                unknown: 1,
                garbled: 1,
            },
            "its leader event, the unknown and the garbled line, counted per process"
        );
    }

    #[test]
    fn commands_keep_their_json_lines_and_stderr_tail() {
        let mut l = FleetView::new(Instant::now());
        let m = l.register(
            "current-migrate-1".into(),
            "current",
            "0.7.0",
            Role::Migrate,
            "m.log".into(),
        );
        l.apply(line(
            m,
            r#"{"event":"refused","reason":"previous-worker-1 is below the floor"}"#,
        ));
        for i in 0..20 {
            l.apply(FleetMsg {
                id: m,
                at: Instant::now(),
                report: Report::Stderr(format!("line {i}")),
            });
        }
        l.apply(FleetMsg {
            id: m,
            at: Instant::now(),
            report: Report::Exited(ExitInfo {
                code: Some(2),
                signal: None,
            }),
        });
        assert!(!l.procs[m].done());
        l.apply(FleetMsg {
            id: m,
            at: Instant::now(),
            report: Report::OutputClosed,
        });
        let proc = &l.procs[m];
        assert!(proc.done());
        assert_eq!(proc.json.len(), 1);
        assert_eq!(proc.stderr_tail(2), "line 18\nline 19");
        assert_eq!(
            proc.why_ended(),
            "exit code 2, refused: previous-worker-1 is below the floor"
        );
    }

    #[tokio::test]
    async fn wait_for_sees_changes_times_out_and_is_interrupted() {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Shared::start(Instant::now(), rx, Events::discard(), "c".into());
        let id = shared
            .lock()
            .register("w".into(), "a", "1", Role::Worker, "l".into());
        let cancel = Cancel::never();
        let waiter = {
            let shared = shared.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                shared
                    .wait_for(Duration::from_secs(5), &cancel, |l| {
                        l.procs[id].ready.then_some(())
                    })
                    .await
            })
        };
        tx.send(line(id, r#"{"event":"ready","role":"worker","instance_id":"i","name":"w","version":"1","pid":1}"#)).unwrap();
        assert_eq!(waiter.await.unwrap(), Ok(Some(())));
        let none = shared
            .wait_for(Duration::from_millis(100), &cancel, |l| l.procs[id].exit)
            .await;
        assert_eq!(none, Ok(None));
        let (set, rx) = watch::channel(false);
        let cancel = Cancel::new(rx);
        set.send(true).unwrap();
        assert_eq!(
            shared
                .wait_for(Duration::from_secs(5), &cancel, |_| None::<()>)
                .await,
            Err(Interrupted)
        );
        assert_eq!(cancel.sleep(Duration::from_secs(5)).await, Err(Interrupted));
    }

    #[tokio::test]
    async fn a_budget_fires_at_its_deadline_without_interrupting_the_run() {
        let (_set, rx) = watch::channel(false);
        let run = Cancel::new(rx);
        // A budget long enough that a loaded machine cannot deschedule
        // the test past it between two lines (150 ms did, once).
        let budget = Duration::from_secs(1);
        let started = std::time::Instant::now();
        let cell = run.with_budget(budget);
        assert!(!cell.is_set() && !cell.overran());
        assert_eq!(cell.sleep(Duration::from_secs(60)).await, Err(Interrupted));
        let waited = started.elapsed();
        assert!(waited >= budget, "{waited:?}");
        assert!(waited < Duration::from_secs(50), "{waited:?}");
        assert!(cell.is_set() && cell.overran() && !cell.run_interrupted());
        // The run's own cancellation is untouched by a cell's budget.
        assert!(!run.is_set() && !run.overran());
        assert_eq!(run.sleep(Duration::from_millis(10)).await, Ok(()));
    }
}
