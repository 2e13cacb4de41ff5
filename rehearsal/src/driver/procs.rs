//! Starting, waiting on, stopping and killing a cell's processes, and
//! keeping the fleet's seats.

use std::time::Duration;

use super::env::{mix_string, producer_env};
use super::ledger::{Cancel, FleetView, Role};
use super::state::Seat;
use super::step_ctx::{START_TIMEOUT, StepCtx};
use super::{Abort, Interrupted};
use super::{EXIT_OK, EXIT_REFUSED};
use crate::fleet::ProcId;
use crate::matrix::{Expectation, KillTarget};
use crate::observe::{KillRecord, RefusalTiming, StepOutcome};
use crate::plan::Pick;
use crate::stream::{Fault, RunEvent};

/// How long a killed process has, after the backend's own wait, to show
/// it is gone (reaped, no session naming it): the server notices a closed
/// socket at once, so this is only for its answer on a loaded machine.
const KILL_PROOF: Duration = Duration::from_secs(5);

/// How a runtime's start went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Start {
    /// It printed `ready`.
    Ready,
    /// It exited 2: refused by a guard, with the reason.
    Refused(String),
    /// It exited otherwise before `ready`.
    Exited(String),
    /// Neither within the start timeout.
    TimedOut,
}

/// The `nth` (1-based) of the live candidates in start order, `nth`
/// taken modulo their number, so a replay always finds a victim.
pub fn pick(candidates: &[ProcId], choice: Option<Pick>) -> Option<ProcId> {
    if candidates.is_empty() {
        return None;
    }
    let nth = choice.map_or(1, |p| p.nth.max(1)) as usize;
    Some(candidates[(nth - 1) % candidates.len()])
}

/// What a pre-flip binary says when the fence stops it: the fenced legacy
/// resolver, the enqueue fence and the cursor trigger ("ring cursor
/// authority is ledger"), or a write at the poisoned slot -1.
const FENCE_MESSAGES: [&str; 2] = [
    "ring cursor authority is ledger",
    "no partition of relation",
];

/// Live processes of `seats` of `role` (of `artifact` if given), in start order.
fn live(seats: &[Seat], ledger: &FleetView, role: Role, artifact: Option<&str>) -> Vec<ProcId> {
    let mut ids: Vec<ProcId> = seats
        .iter()
        .filter(|s| !s.dead && s.role == role && artifact.is_none_or(|a| s.artifact == a))
        .filter_map(|s| s.proc)
        .filter(|&id| ledger.procs[id].alive())
        .collect();
    ids.sort_unstable();
    ids
}

impl StepCtx<'_> {
    /// Waits for a runtime's `ready`, or its refusal or exit.
    pub async fn await_start(&self, id: ProcId) -> Result<Start, Interrupted> {
        let found = self
            .ledger()
            .wait_for(START_TIMEOUT, &self.cancel(), |l| {
                let p = &l.procs[id];
                if p.ready {
                    Some(Start::Ready)
                } else if p.done() {
                    Some(if p.code() == Some(EXIT_REFUSED) {
                        Start::Refused(p.refused.clone().unwrap_or_else(|| p.stderr_tail(1)))
                    } else {
                        Start::Exited(p.why_ended())
                    })
                } else {
                    None
                }
            })
            .await?;
        Ok(found.unwrap_or(Start::TimedOut))
    }

    /// The expand migration has been applied: a flip-aware binary's refusal
    /// is no longer the expected binary-first outcome.
    pub async fn schema_expanded(&mut self) -> Result<bool, Abort> {
        let version = self
            .probe
            .schema_version()
            .await
            .map_err(|e| Abort::Harness(format!("could not read the schema version: {e}")))?;
        Ok(version >= self.expand_version())
    }

    /// Records how long process `id` took to refuse, from `requested_ms`
    /// to its `refused` or `blocked` event (else its exit), and says so
    /// in words for the step's detail; `None` when it has neither said no
    /// nor ended (nothing to time). `declared_wait_ms` is a wait the
    /// command declares before it gives up (a blocked flip's lock timeout).
    pub fn time_refusal(
        &mut self,
        kind: &str,
        id: ProcId,
        requested_ms: u64,
        outcome: StepOutcome,
        declared_wait_ms: u64,
    ) -> Option<String> {
        let (process, version, answered) = self.proc(id, |p| {
            (
                p.name.clone(),
                p.version.clone(),
                p.answered_ms.or(p.ended_ms),
            )
        });
        let timing = RefusalTiming {
            step: self.state.step_index,
            kind: kind.to_owned(),
            process,
            version,
            outcome,
            requested_ms,
            answered_ms: answered?,
            declared_wait_ms,
        };
        let took = timing.answered_ms.saturating_sub(requested_ms);
        self.state.obs.refusals.push(timing);
        Some(format!(
            "{} {} after the request",
            outcome.word(),
            crate::observe::duration(took)
        ))
    }

    /// Starts the processes of `seats` (all first, then waits for each).
    /// A refusal before the expand migration parks the seat (binary-first);
    /// any other failure to start is a step failure.
    pub async fn launch_seats(
        &mut self,
        seats: &[usize],
        notes: &mut Vec<String>,
    ) -> Result<(), Abort> {
        let started = self.start_seats(seats).await?;
        let mut expanded = None;
        for (s, id) in started {
            let start = self.await_start(id).await?;
            let name = self.proc(id, |p| p.name.clone());
            match start {
                Start::Ready => {}
                Start::Refused(reason) => {
                    let expanded = match expanded {
                        Some(e) => e,
                        None => *expanded.insert(self.schema_expanded().await?),
                    };
                    self.state.reported_exits.insert(id);
                    self.state.seats[s].proc = None;
                    if expanded {
                        self.state.seats[s].dead = true;
                        self.state
                            .fail(format!("{name} refused to start: {reason}"));
                    } else {
                        self.state.seats[s].parked = true;
                        self.state.facts.binary_first.push(name.clone());
                        let spawned = self.proc(id, |p| p.spawned_ms);
                        let took = self
                            .time_refusal("fleet", id, spawned, StepOutcome::Refused, 0)
                            .map_or(String::new(), |t| format!(" ({t})"));
                        notes.push(format!(
                            "{name} refused (binary-first){took}, to run after the migration: {reason}"
                        ));
                    }
                }
                Start::Exited(why) => {
                    self.state.reported_exits.insert(id);
                    self.state.seats[s].proc = None;
                    self.state.seats[s].dead = true;
                    self.state
                        .fail(format!("{name} exited before it was ready ({why})"));
                }
                Start::TimedOut => {
                    self.state.fail(format!(
                        "{name} did not report ready within {}s",
                        START_TIMEOUT.as_secs()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Spawns the process of each of `seats`, without waiting for any.
    async fn start_seats(&mut self, seats: &[usize]) -> Result<Vec<(usize, ProcId)>, Abort> {
        let producers = self
            .state
            .seats
            .iter()
            .filter(|s| s.role == Role::Producer && !s.dead)
            .count()
            .max(1);
        let mut started = Vec::new();
        for &s in seats {
            let Seat {
                role,
                artifact,
                idle,
                ..
            } = self.state.seats[s].clone();
            let (args, env) = self.seat_command(role, idle, producers);
            let id = self.spawn(&artifact, role, args, env).await?;
            self.state.seats[s].proc = Some(id);
            self.state.seats[s].last = Some(id);
            self.state.seats[s].parked = false;
            started.push((s, id));
        }
        Ok(started)
    }

    /// A seat's arguments and extra environment: a producer's share of
    /// the workload's rate among `producers`, an idle worker's settings.
    fn seat_command(
        &self,
        role: Role,
        idle: bool,
        producers: usize,
    ) -> (Vec<String>, Vec<(String, String)>) {
        match role {
            Role::Producer => {
                let rate = f64::from(self.plan.workload.rate_per_s) / producers as f64;
                let mix = mix_string(&self.plan.workload.mix);
                (
                    vec!["produce".to_owned()],
                    producer_env(rate, 0, &mix, self.plan.workload.sleep),
                )
            }
            _ if idle => (
                vec!["worker".to_owned()],
                super::env::IDLE
                    .iter()
                    .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ),
            _ => (vec!["worker".to_owned()], Vec::new()),
        }
    }

    /// Re-launches the seats parked by a binary-first refusal (after a migration).
    pub async fn relaunch_parked(&mut self, notes: &mut Vec<String>) -> Result<(), Abort> {
        let parked: Vec<usize> = (0..self.state.seats.len())
            .filter(|&s| {
                let seat = &self.state.seats[s];
                seat.parked && !seat.dead && (seat.role == Role::Worker || self.state.load_on)
            })
            .collect();
        if parked.is_empty() {
            return Ok(());
        }
        self.launch_seats(&parked, notes).await?;
        let names: Vec<String> = {
            let l = self.ledger().lock();
            parked
                .iter()
                .filter_map(|&s| self.state.seats[s].proc)
                .filter(|&id| l.procs[id].ready)
                .map(|id| l.procs[id].name.clone())
                .collect()
        };
        self.state.facts.relaunched += names.len();
        if !names.is_empty() {
            notes.push(format!(
                "re-launched after the migration: {}",
                names.join(", ")
            ));
        }
        Ok(())
    }

    /// SIGTERM to every process of `ids`, then SIGKILL to those still
    /// running after `grace`; returns notes for the ones that needed it.
    pub async fn stop(
        &mut self,
        ids: &[ProcId],
        grace: Duration,
        cancel: &Cancel,
    ) -> Result<Vec<String>, Interrupted> {
        let mut handles = Vec::new();
        {
            let mut l = self.ledger().lock();
            let now = l.ms(std::time::Instant::now());
            for &id in ids {
                let p = &mut l.procs[id];
                if p.alive() {
                    p.stopping = true;
                    p.stop_asked_ms.get_or_insert(now);
                    if let Some(h) = p.handle.clone() {
                        handles.push((id, h));
                    }
                }
            }
        }
        for (_, h) in &handles {
            h.terminate();
        }
        let all: Vec<ProcId> = ids.to_vec();
        self.ledger()
            .wait_for(grace, cancel, |l| {
                all.iter().all(|&id| l.procs[id].done()).then_some(())
            })
            .await?;
        let mut notes = Vec::new();
        let stuck: Vec<(ProcId, crate::fleet::Handle)> = {
            let mut l = self.ledger().lock();
            let now = l.ms(std::time::Instant::now());
            let stuck: Vec<(ProcId, crate::fleet::Handle)> = handles
                .into_iter()
                .filter(|(id, _)| l.procs[*id].alive())
                .collect();
            for (id, _) in &stuck {
                l.procs[*id].killed = true;
                // Killed as a fault kills: what it completed, it completed by now.
                l.cut_by_kill(*id, now);
            }
            stuck
        };
        for (id, h) in &stuck {
            h.kill();
            let name = self.proc(*id, |p| p.name.clone());
            notes.push(format!(
                "{name} did not stop within {}s of SIGTERM and was SIGKILLed",
                grace.as_secs()
            ));
        }
        if !stuck.is_empty() {
            let ids: Vec<ProcId> = stuck.iter().map(|(id, _)| *id).collect();
            self.ledger()
                .wait_for(Duration::from_secs(10), &Cancel::never(), |l| {
                    ids.iter().all(|&id| l.procs[id].done()).then_some(())
                })
                .await?;
        }
        Ok(notes)
    }

    /// SIGKILL, on purpose: the kill step's record, with the attempts the
    /// victim had started and not finished (read after its last line).
    pub async fn kill_proc(&mut self, id: ProcId, role: &str) -> Result<KillRecord, Abort> {
        let at_ms = self.ms();
        self.kill_quietly(id).await;
        // A kill the cell cannot see land is no kill to judge rescue by.
        super::effect::prove(self, id, super::effect::Effect::Gone, None, KILL_PROOF).await?;
        let record = {
            let mut l = self.ledger().lock();
            l.cut_by_kill(id, at_ms);
            let p = &l.procs[id];
            KillRecord {
                process: p.name.clone(),
                version: p.version.clone(),
                role: role.to_owned(),
                at_ms,
                in_flight: p.in_flight(),
            }
        };
        self.emit(RunEvent::FaultInjected {
            cell: self.plan.name.clone(),
            fault: Fault::Kill(record.clone()),
        });
        Ok(record)
    }

    /// The process a kill or a suspend acts on: the leader when the step
    /// runs (waited for up to three stale intervals), else the plan's
    /// `pick` among the live candidates of `target`, of artifact `of` if
    /// given. `None` when there is none; the step says so.
    pub async fn find_victim(
        &self,
        target: KillTarget,
        of: Option<&str>,
        choice: Option<Pick>,
    ) -> Result<Option<ProcId>, Interrupted> {
        match target {
            KillTarget::Leader => {
                let wait = self.plan.timings.stale_after.to_std() * 3 + Duration::from_secs(5);
                self.wait_for(wait, |l| {
                    let id = l.current_leader()?;
                    of.is_none_or(|a| l.procs[id].artifact == a).then_some(id)
                })
                .await
            }
            KillTarget::Worker => Ok(pick(&self.live(Role::Worker, of), choice)),
            KillTarget::Producer => Ok(pick(&self.live(Role::Producer, of), choice)),
        }
    }

    /// Stops every process still running (the cell is over); returns notes.
    pub async fn stop_everything(&mut self, grace: Duration) -> Vec<String> {
        let alive: Vec<ProcId> = {
            let l = self.ledger().lock();
            (0..l.procs.len())
                .filter(|&id| l.procs[id].alive())
                .collect()
        };
        if alive.is_empty() {
            return Vec::new();
        }
        let notes = self
            .stop(&alive, grace, &Cancel::never())
            .await
            .unwrap_or_default();
        // Every line read, so the ledger is complete.
        let _ = self
            .ledger()
            .wait_for(Duration::from_secs(5), &Cancel::never(), |l| {
                alive
                    .iter()
                    .all(|&id| l.procs[id].output_closed)
                    .then_some(())
            })
            .await;
        for seat in &mut self.state.seats {
            seat.proc = None;
        }
        notes
    }

    /// Live processes of the seats of `role` (of `artifact` if given), in start order.
    pub fn live(&self, role: Role, artifact: Option<&str>) -> Vec<ProcId> {
        self.view(|l| live(&self.state.seats, l, role, artifact))
    }

    /// Fleet processes that ended without the driver asking: a runtime
    /// that refuses before the migration is parked (binary-first); one the
    /// fence stopped after the flip is noted; any other end is a step
    /// failure in a `pass` cell (in a `detect` cell, where a defect may
    /// well crash runtimes, a note). An end that cannot be told apart
    /// from the fence's (its last output still on its way, the authority
    /// unreadable) is the harness's failure in a `pass` cell that no
    /// other exit failed (the cell is inconclusive), and a note in a
    /// `detect` cell.
    pub async fn check_unexpected_exits(&mut self) -> Result<Vec<String>, Abort> {
        let ended: Vec<(usize, ProcId)> = {
            let l = self.ledger().lock();
            self.state
                .seats
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.dead)
                .filter_map(|(i, s)| s.proc.map(|id| (i, id)))
                .filter(|(_, id)| {
                    let p = &l.procs[*id];
                    !p.alive()
                        && !p.stopping
                        && !p.killed
                        && !self.state.reported_exits.contains(id)
                })
                .collect()
        };
        let mut notes = Vec::new();
        let mut unjudged = Vec::new();
        let failures_before = self.state.obs.step_failures.len();
        for (seat, id) in ended {
            self.state.reported_exits.insert(id);
            // Its last lines (a fence's refusal) may reach the ledger after
            // its exit does: on a busy engine the log stream lags the wait.
            let complete = matches!(
                self.await_done(id, OUTPUT_AFTER_EXIT, &Cancel::never())
                    .await,
                Ok(true)
            );
            let (name, code, refused, why) = {
                let l = self.ledger().lock();
                let p = &l.procs[id];
                (p.name.clone(), p.code(), p.refused.clone(), p.why_ended())
            };
            self.state.seats[seat].proc = None;
            let binary_first = code == Some(EXIT_REFUSED)
                && refused.is_some()
                && !self.schema_expanded().await.unwrap_or(true);
            if binary_first {
                self.state.seats[seat].parked = true;
                self.state.facts.binary_first.push(name.clone());
                // Timed from its spawn only when it refused at start-up.
                let (spawned, ready) = self.proc(id, |p| (p.spawned_ms, p.ready));
                let took = if ready {
                    None
                } else {
                    self.time_refusal("fleet", id, spawned, StepOutcome::Refused, 0)
                };
                let took = took.map_or(String::new(), |t| format!(" ({t})"));
                notes.push(format!(
                    "{name} refused (binary-first){took}, to run after the migration"
                ));
                continue;
            }
            self.state.seats[seat].dead = true;
            match self.fenced_exit(id, complete).await {
                FencedExit::Fenced(fence) => {
                    notes.push(format!(
                        "{name} was stopped by the fence after the flip: {fence}"
                    ));
                    self.state.facts.notes.push(format!(
                        "{name} met the fence after the flip and exited: {fence}"
                    ));
                    continue;
                }
                FencedExit::Unknown(doubt) => {
                    unjudged.push(format!(
                        "{name} exited ({why}), and whether the fence stopped it cannot be told: {doubt}"
                    ));
                    continue;
                }
                FencedExit::NotFenced => {}
            }
            let message = format!("{name} exited unexpectedly ({why})");
            if self.plan.expect == Expectation::Pass {
                self.state.fail(message);
            } else {
                notes.push(message);
            }
        }
        // A failure another exit showed stands; otherwise a pass cell
        // cannot rest on an exit nobody could judge.
        let failed = self.state.obs.step_failures.len() > failures_before;
        if self.plan.expect == Expectation::Pass && !failed && !unjudged.is_empty() {
            return Err(Abort::Harness(unjudged.join("; ")));
        }
        notes.extend(unjudged);
        Ok(notes)
    }

    /// Whether a process that exited with an error after the flip was
    /// stopped by the fence (ADR-041 §6: a returning pre-flip binary must
    /// fail loudly): the designed end, not a step failure. Whether it
    /// wrote anything first is for reconciliation to judge. `complete`:
    /// its output ended before the wait for it did.
    async fn fenced_exit(&mut self, id: ProcId, complete: bool) -> FencedExit {
        if self.proc(id, |p| p.code().is_none_or(|c| c == EXIT_OK)) {
            return FencedExit::NotFenced;
        }
        // Asked before the output is read: its tries take time, in which
        // the last lines may land.
        let flipped = self.flipped().await;
        let text = {
            let l = self.ledger().lock();
            let p = &l.procs[id];
            format!(
                "{}\n{}",
                p.fatal.clone().unwrap_or_default(),
                p.stderr_tail(10)
            )
        };
        let line = fence_line(&text).map(|line| match crate::observe::FenceLayer::refusing(line) {
            Some(layer) => format!("{} refused it: {line}", layer.name()),
            None => line.to_owned(),
        });
        judge_exit(line, complete, flipped)
    }

    /// Whether the cursor authority is `ledger` (the flip committed),
    /// asking a busy database again; `None` when it never answered.
    async fn flipped(&mut self) -> Option<bool> {
        for _ in 0..AUTHORITY_TRIES {
            match self.probe.authority().await {
                Ok(authority) => return Some(authority.as_deref() == Some("ledger")),
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
        None
    }
}

/// What an unasked exit with an error was: `line` is the fence's refusal
/// its output ends with, if it does; `complete`, whether that output had
/// all arrived; `flipped`, whether the cursor authority is `ledger`
/// (`None`: it could not be read).
fn judge_exit(line: Option<String>, complete: bool, flipped: Option<bool>) -> FencedExit {
    match (line, complete, flipped) {
        (Some(line), _, Some(true)) => FencedExit::Fenced(line),
        (Some(_), _, None) => FencedExit::Unknown(format!(
            "its last output names the fence, but the cursor authority could not be read ({AUTHORITY_TRIES} tries)"
        )),
        (None, false, Some(true) | None) => FencedExit::Unknown(format!(
            "its output had not all arrived within {} of its exit, and {}",
            crate::observe::duration(OUTPUT_AFTER_EXIT.as_millis() as u64),
            if flipped.is_some() {
                "the flip had committed (cursor authority: ledger)"
            } else {
                "the cursor authority could not be read"
            }
        )),
        _ => FencedExit::NotFenced,
    }
}

/// How an unasked exit relates to the fence.
#[derive(Debug, PartialEq, Eq)]
enum FencedExit {
    /// The fence stopped it: its refusal, as its output said it.
    Fenced(String),
    /// Not the fence (an ordinary exit, judged as such).
    NotFenced,
    /// It cannot be told: why.
    Unknown(String),
}

/// How long an unexpected exit's output may take to reach the ledger
/// before the exit is judged (a fence's refusal is in its last lines).
const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(10);

/// Reads of the cursor authority tried before an exit with a fence's
/// refusal is judged without it.
const AUTHORITY_TRIES: u32 = 4;

/// The fence line of a failure text, if it has one.
fn fence_line(text: &str) -> Option<&str> {
    text.lines()
        .find(|l| FENCE_MESSAGES.iter().any(|m| l.contains(m)))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_is_told_from_other_failures() {
        assert_eq!(
            fence_line(
                "awa: claiming jobs: ring cursor authority is ledger: the legacy cursor resolver awa.ring_cursor(claim) is fenced (SQLSTATE 55000)"
            ),
            Some(
                "awa: claiming jobs: ring cursor authority is ledger: the legacy cursor resolver awa.ring_cursor(claim) is fenced (SQLSTATE 55000)"
            )
        );
        assert!(
            fence_line(
                "x\nclosing an attempt: no partition of relation \"claim_closures\" found for row"
            )
            .is_some()
        );
        assert_eq!(fence_line("cannot connect to the database"), None);
    }

    #[test]
    fn an_exit_is_the_fences_only_on_its_evidence_and_unjudged_without_it() {
        let line = || Some("claim ring: the legacy cursor resolver is fenced".to_owned());
        // The refusal, after the flip: the fence's designed end.
        assert_eq!(
            judge_exit(line(), true, Some(true)),
            FencedExit::Fenced(line().unwrap())
        );
        assert_eq!(
            judge_exit(line(), false, Some(true)),
            FencedExit::Fenced(line().unwrap())
        );
        // A refusal text before any flip is no fence: an ordinary exit.
        assert_eq!(judge_exit(line(), true, Some(false)), FencedExit::NotFenced);
        // Output all in and no refusal in it: an ordinary exit, flip or not.
        assert_eq!(judge_exit(None, true, Some(true)), FencedExit::NotFenced);
        assert_eq!(judge_exit(None, false, Some(false)), FencedExit::NotFenced);
        // After the flip with its last lines still on their way, or with
        // the authority unreadable: it cannot be told.
        let FencedExit::Unknown(why) = judge_exit(None, false, Some(true)) else {
            panic!("an exit after the flip whose output had not arrived was judged");
        };
        assert_eq!(
            why,
            "its output had not all arrived within 10.0s of its exit, and the flip had committed (cursor authority: ledger)"
        );
        assert!(matches!(
            judge_exit(line(), true, None),
            FencedExit::Unknown(_)
        ));
        assert!(matches!(
            judge_exit(None, false, None),
            FencedExit::Unknown(_)
        ));
    }

    #[test]
    fn picks_take_nth_modulo_the_live_count_in_start_order() {
        let live = [3, 5, 9];
        let at = |nth, among| pick(&live, Some(Pick { nth, among }));
        assert_eq!(at(1, 3), Some(3));
        assert_eq!(at(3, 3), Some(9));
        // The plan expected more candidates than are alive: wrap around.
        assert_eq!(at(4, 5), Some(3));
        assert_eq!(at(5, 5), Some(5));
        assert_eq!(pick(&live, None), Some(3));
        assert_eq!(pick(&[], Some(Pick { nth: 1, among: 1 })), None);
        // A degenerate nth of 0 is read as the first.
        assert_eq!(at(0, 3), Some(3));
    }
}
