//! One function per step kind. The matrix author's words (matrix.toml,
//! `matrix::Step` docs) are the specification; where they leave room, the
//! choice made is stated on the function.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::cell::{COMMAND_TIMEOUT, Cell, Fault, STOP_TIMEOUT, Slot};
use super::ledger::Role;
use super::probe::{changed_lines, digest};
use super::procs::pick;
use super::{Abort, Done};
use crate::fleet::ProcId;
use crate::matrix::{
    CURRENT, Check, Duration as MatrixDuration, FleetStep, FlipMode, FlipStep, KillTarget,
    MigrateStep, Outcome, RollStep, RollbackStep, When,
};
use crate::observe::{FenceRecord, FlipRecord};
use crate::plan::PlannedKill;

/// How long a `leader = true` fleet waits for its first worker's `leader` event.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a fenced binary may run before it is killed (it should refuse at once).
const FENCE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an armed fault waits to see its migrate or flip in flight.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(5);
/// `AWA_MIGRATE_PAUSE` of a migration a fault is armed for: the 0.7
/// migration holds its transaction open this long after the preflight, so
/// the fault lands inside it. Shorter than the stale threshold, because the
/// preflight's lock on runtime_instances holds heartbeats back meanwhile.
const MIGRATE_PAUSE: &str = "750ms";
/// How long the cron jobs of a final mop-up may take.
const MOPUP_TIMEOUT: Duration = Duration::from_secs(20);

/// How an armed fault recognises that its migrate or flip is in flight.
#[derive(Clone, Copy, Debug)]
enum InFlight {
    /// The migration holds its advisory lock (`AWA_MIGRATE_PAUSE` keeps it there).
    Migration,
    /// A session opened after this server time runs the flip's statements.
    FlipSql(f64),
    /// Some session waits on the authority row this backend holds.
    BlockedBy(i32),
}

impl Cell<'_> {
    fn add_slots(&mut self, role: Role, artifact: &str, n: u32) -> Vec<usize> {
        let first = self.slots.len();
        for _ in 0..n {
            self.slots.push(Slot {
                role,
                artifact: artifact.to_owned(),
                proc: None,
                last: None,
                parked: false,
                dead: false,
            });
        }
        (first..self.slots.len()).collect()
    }

    fn names(&self, slots: &[usize]) -> String {
        let l = self.shared.lock();
        let names: Vec<String> = slots
            .iter()
            .filter_map(|&s| self.slots[s].proc.or(self.slots[s].last))
            .map(|id| l.procs[id].name.clone())
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }

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

    /// `load = "on"`: start a producer process for every producer slot;
    /// they share `rate_per_s` and run until `load = "off"`.
    pub(super) async fn load_on(&mut self) -> Result<Done, Abort> {
        if self.load_on {
            return Ok(Done::ok("load was already on"));
        }
        self.load_on = true;
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&s| {
                let slot = &self.slots[s];
                slot.role == Role::Producer && !slot.dead && slot.proc.is_none()
            })
            .collect();
        let mut notes = Vec::new();
        self.launch_slots(&slots, &mut notes).await?;
        notes.insert(
            0,
            format!(
                "{} jobs/s through {}",
                self.plan.workload.rate_per_s,
                self.names(&slots)
            ),
        );
        Ok(Done::ok(notes.join("; ")))
    }

    /// `load = "off"`: SIGTERM every producer and wait for it (a producer
    /// prints `accepted` for each job only after its batch commits).
    pub(super) async fn load_off(&mut self) -> Result<Done, Abort> {
        self.load_on = false;
        let ids = self.live(Role::Producer, None);
        let notes = self.stop(&ids, STOP_TIMEOUT, &self.cancel()).await?;
        for slot in &mut self.slots {
            if slot.role == Role::Producer {
                slot.proc = None;
            }
        }
        let (accepted, uncertain) = {
            let l = self.shared.lock();
            (l.accepted.len(), l.uncertain.len())
        };
        let mut detail = format!(
            "stopped {} producer(s); {} jobs accepted so far",
            ids.len(),
            super::cell::thousands(accepted as u64)
        );
        if uncertain > 0 {
            detail.push_str(&format!(", {uncertain} uncertain"));
        }
        for note in notes {
            detail.push_str(&format!("; {note}"));
        }
        Ok(Done::ok(detail))
    }

    /// `migrate`: `awa migrate` of the artifact, judged by its exit code
    /// (0 ok, 2 refused). Faults armed for it fire once the migration holds
    /// its lock; after a PostgreSQL crash the command runs once more and the
    /// step's `expect` applies to that run. A successful migration
    /// re-launches the processes parked by a binary-first refusal.
    pub(super) async fn migrate(&mut self, s: &MigrateStep) -> Result<Done, Abort> {
        let mut args = vec!["migrate".to_owned()];
        if s.allow_live_runtimes {
            args.push("--allow-live-runtimes".into());
        }
        let armed = self.armed.iter().any(|(w, _)| *w == When::DuringMigrate);
        let env = if armed {
            vec![("AWA_MIGRATE_PAUSE".to_owned(), MIGRATE_PAUSE.to_owned())]
        } else {
            Vec::new()
        };
        let mut notes = Vec::new();
        let id = self.spawn(&s.artifact, Role::Migrate, args.clone(), env)?;
        let crashed = self
            .fire_armed(
                When::DuringMigrate,
                Some((id, InFlight::Migration)),
                &mut notes,
            )
            .await?;
        self.finish_command(id, COMMAND_TIMEOUT).await?;
        let mut last = id;
        if crashed {
            let why = self.shared.lock().procs[id].why_ended();
            notes.push(format!(
                "the interrupted migration: {why}; run once more after the restart"
            ));
            last = self
                .run_command(
                    &s.artifact,
                    Role::Migrate,
                    args,
                    Vec::new(),
                    COMMAND_TIMEOUT,
                )
                .await?;
        }
        let (name, code, refused, why, migrated) = {
            let l = self.shared.lock();
            let p = &l.procs[last];
            let migrated = p
                .json
                .iter()
                .find(|v| v["event"] == "migrated")
                .map(|v| format!("schema v{} -> v{}", v["from"], v["to"]));
            (
                p.name.clone(),
                p.code(),
                p.refused.clone(),
                p.why_ended(),
                migrated,
            )
        };
        let version = self.version_of(&s.artifact);
        let done = match (s.expect, code) {
            (Outcome::Ok, Some(0)) => {
                self.relaunch_parked(&mut notes).await?;
                Done::ok(format!(
                    "{name} ({version}): {}",
                    migrated.unwrap_or_else(|| "migrated".into())
                ))
            }
            (Outcome::Ok, Some(2)) => {
                let reason = refused.unwrap_or(why);
                self.fail(format!("{name} was refused: {reason}"));
                Done::with("refused", format!("{name} ({version}) refused: {reason}"))
            }
            (Outcome::Ok, _) => {
                self.fail(format!("{name} failed ({why})"));
                Done::with("failed", format!("{name} ({version}) {why}"))
            }
            (Outcome::Refused, Some(2)) => {
                let reason = refused.unwrap_or(why);
                self.facts.refusals_required.push(format!(
                    "migrate by {} ({version}) was refused as required: {reason}",
                    s.artifact
                ));
                Done::with(
                    "refused",
                    format!("{name} ({version}) refused as required: {reason}"),
                )
            }
            (Outcome::Refused, Some(0)) => {
                self.fail(format!("{name} succeeded, but the plan requires a refusal"));
                Done::with(
                    "ok",
                    format!("{name} ({version}): {}", migrated.unwrap_or_default()),
                )
            }
            (Outcome::Refused, _) => {
                self.fail(format!("{name} failed ({why}) instead of refusing"));
                Done::with("failed", format!("{name} ({version}) {why}"))
            }
        };
        Ok(with_notes(done, notes))
    }

    /// `roll`: replace every worker (and, with `producers`, every producer)
    /// of another artifact by one of this artifact, in start order: one at a
    /// time (SIGTERM the old, wait, start the new, wait for `ready`, pause),
    /// or all at once (stop all, start all). A new process that refuses
    /// before the expand migration is parked (binary-first) and re-launched
    /// after the next successful migrate.
    pub(super) async fn roll(&mut self, s: &RollStep) -> Result<Done, Abort> {
        let of_role = |role: Role| -> Vec<usize> {
            (0..self.slots.len())
                .filter(|&i| {
                    let slot = &self.slots[i];
                    slot.role == role && !slot.dead && slot.artifact != s.artifact
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
            for (n, &slot) in targets.iter().enumerate() {
                if n > 0 && !s.pause.is_zero() {
                    self.cancel().sleep(s.pause.to_std()).await?;
                }
                self.replace(slot, &s.artifact, &mut notes).await?;
            }
        } else {
            let old: Vec<ProcId> = targets.iter().filter_map(|&t| self.slots[t].proc).collect();
            notes.extend(self.stop(&old, STOP_TIMEOUT, &self.cancel()).await?);
            for &t in &targets {
                let slot = &mut self.slots[t];
                slot.artifact = s.artifact.clone();
                slot.proc = None;
                slot.parked = false;
            }
            let launch: Vec<usize> = targets
                .iter()
                .copied()
                .filter(|&t| self.slots[t].role == Role::Worker || self.load_on)
                .collect();
            self.launch_slots(&launch, &mut notes).await?;
        }
        let how = if s.one_at_a_time {
            format!("one at a time, {} apart", s.pause)
        } else {
            "all at once".to_owned()
        };
        let detail = format!(
            "replaced {workers} worker(s) and {producers} producer(s) with {} ({}), {how}: {}",
            s.artifact,
            self.version_of(&s.artifact),
            self.names(&targets)
        );
        Ok(with_notes(Done::ok(detail), notes))
    }

    /// One slot of a roll: stop its process, then start the new artifact's.
    async fn replace(
        &mut self,
        slot: usize,
        artifact: &str,
        notes: &mut Vec<String>,
    ) -> Result<(), Abort> {
        if let Some(id) = self.slots[slot].proc {
            notes.extend(self.stop(&[id], STOP_TIMEOUT, &self.cancel()).await?);
        }
        let s = &mut self.slots[slot];
        s.artifact = artifact.to_owned();
        s.proc = None;
        s.parked = false;
        if s.role == Role::Worker || self.load_on {
            self.launch_slots(&[slot], notes).await?;
        }
        Ok(())
    }

    /// `rollback`: this artifact runs alone. Its new workers start first
    /// (so the queue is never without claimers), then every worker of
    /// another artifact stops; producers are replaced as in a roll. The
    /// worker count stays the same unless `workers` is given.
    pub(super) async fn rollback(&mut self, s: &RollbackStep) -> Result<Done, Abort> {
        let live_workers = |cell: &Self, mine: bool| -> Vec<usize> {
            (0..cell.slots.len())
                .filter(|&i| {
                    let slot = &cell.slots[i];
                    slot.role == Role::Worker && !slot.dead && (slot.artifact == s.artifact) == mine
                })
                .collect()
        };
        let total = self
            .slots
            .iter()
            .filter(|s| s.role == Role::Worker && !s.dead)
            .count() as u32;
        let target = s.workers.unwrap_or(total) as usize;
        let mine = live_workers(self, true);
        let others = live_workers(self, false);
        let mut notes = Vec::new();
        let new = self.add_slots(
            Role::Worker,
            &s.artifact,
            target.saturating_sub(mine.len()) as u32,
        );
        self.launch_slots(&new, &mut notes).await?;
        let mut retire: Vec<usize> = others.clone();
        if mine.len() > target {
            retire.extend(mine[target..].iter().copied());
        }
        let ids: Vec<ProcId> = retire.iter().filter_map(|&r| self.slots[r].proc).collect();
        let retired = self.names(&retire);
        notes.extend(self.stop(&ids, STOP_TIMEOUT, &self.cancel()).await?);
        for r in retire {
            self.slots[r].dead = true;
            self.slots[r].proc = None;
        }
        let producers: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let slot = &self.slots[i];
                slot.role == Role::Producer && !slot.dead && slot.artifact != s.artifact
            })
            .collect();
        for &p in &producers {
            self.replace(p, &s.artifact, &mut notes).await?;
        }
        let detail = format!(
            "{} ({}) alone: started {}, retired {retired}, {} producer(s) replaced",
            s.artifact,
            self.version_of(&s.artifact),
            self.names(&new),
            producers.len()
        );
        Ok(with_notes(Done::ok(detail), notes))
    }

    /// `kill`: now, or armed to fire inside the next migrate or flip.
    pub(super) async fn kill(&mut self, k: &PlannedKill) -> Result<Done, Abort> {
        match k.when {
            When::Now => {
                let text = self.fire_kill(k).await?;
                Ok(Done::ok(text))
            }
            when => {
                self.armed.push((when, Fault::Kill(k.clone())));
                Ok(Done::with("armed", format!("{k}")))
            }
        }
    }

    /// Chooses the victim (the leader when it fires; else the plan's pick
    /// among live candidates in start order), waits for its trigger
    /// (`after_started` started jobs, or the jitter), and SIGKILLs it.
    async fn fire_kill(&mut self, k: &PlannedKill) -> Result<String, Abort> {
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

    /// `pg_crash`: now, or armed for the next migrate or flip.
    pub(super) async fn pg_crash(&mut self, when: When) -> Result<Done, Abort> {
        if when != When::Now {
            self.armed.push((when, Fault::Crash));
            let next = if when == When::DuringMigrate {
                "migrate"
            } else {
                "flip"
            };
            return Ok(Done::with(
                "armed",
                format!("PostgreSQL crash armed for the next {next}"),
            ));
        }
        let text = self.crash("").await?;
        Ok(Done::ok(text))
    }

    async fn crash(&mut self, during: &str) -> Result<String, Abort> {
        let ms = self.db.crash_and_restart().await.map_err(Abort::Harness)?;
        self.facts
            .crashes
            .push(format!("the fleet survived a PostgreSQL crash{during}"));
        Ok(format!(
            "PostgreSQL crashed (SIGKILL to every server process){during} and was back after crash recovery in {ms} ms"
        ))
    }

    /// A transaction holding `awa.ring_cursor_authority` FOR UPDATE, and
    /// its backend pid; `None` before the expand migration.
    async fn hold_authority_row(&mut self) -> Option<(tokio_postgres::Client, i32)> {
        self.probe.authority().await.ok().flatten()?;
        let client = super::database::connect(&self.db.url).await.ok()?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .ok()?
            .get(0);
        client
            .batch_execute("BEGIN; SELECT authority FROM awa.ring_cursor_authority FOR UPDATE")
            .await
            .ok()?;
        Some((client, pid))
    }

    /// Fires the faults armed for `when`, inside `trigger` (a migrate or
    /// flip process) once the database shows it in flight (or after 5 s, or
    /// when it already ended). Returns whether PostgreSQL was crashed.
    async fn fire_armed(
        &mut self,
        when: When,
        trigger: Option<(ProcId, InFlight)>,
        notes: &mut Vec<String>,
    ) -> Result<bool, Abort> {
        let (firing, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.armed)
            .into_iter()
            .partition(|(w, _)| *w == when);
        self.armed = waiting;
        if firing.is_empty() {
            return Ok(false);
        }
        let what = if when == When::DuringMigrate {
            "migration"
        } else {
            "flip"
        };
        if let Some((id, detect)) = trigger {
            let deadline = Instant::now() + IN_FLIGHT_TIMEOUT;
            loop {
                if self.shared.lock().procs[id].exit.is_some() {
                    notes.push(format!(
                        "the {what} ended before the armed fault could fire inside it"
                    ));
                    break;
                }
                let seen = match detect {
                    InFlight::Migration => self.probe.migration_in_flight().await,
                    InFlight::FlipSql(since) => self.probe.flip_in_flight(since).await,
                    InFlight::BlockedBy(pid) => self.probe.blocked_by(pid).await,
                };
                if seen == Ok(true) {
                    notes.push(match detect {
                        InFlight::BlockedBy(_) => format!(
                            "the {what} was held inside its transaction at the authority lock"
                        ),
                        _ => format!("the {what} was seen in flight"),
                    });
                    break;
                }
                if Instant::now() >= deadline {
                    notes.push(format!(
                        "the {what} was not seen in flight within 5s; firing anyway"
                    ));
                    break;
                }
                self.cancel().sleep(Duration::from_millis(5)).await?;
            }
        }
        let mut crashed = false;
        for (_, fault) in firing {
            match fault {
                Fault::Kill(k) => {
                    let text = self.fire_kill(&k).await?;
                    notes.push(text);
                }
                Fault::Crash => {
                    let text = self.crash(&format!(" during the {what}")).await?;
                    notes.push(text);
                    crashed = true;
                }
            }
        }
        Ok(crashed)
    }

    /// `flip`: manual or forced runs `awa storage flip-ring-authority` of
    /// `by` (0 ok, 2 refused); auto waits for the leader's auto-flip. Faults
    /// armed for it fire inside it; after a PostgreSQL crash a manual flip
    /// runs once more, and only that run is recorded and judged.
    pub(super) async fn flip(&mut self, s: &FlipStep) -> Result<Done, Abort> {
        if s.mode == FlipMode::Auto {
            return self.flip_auto(s).await;
        }
        let mut args = vec!["storage".to_owned(), "flip-ring-authority".to_owned()];
        if s.mode == FlipMode::Force {
            args.push("--force".into());
        }
        let armed = self.armed.iter().any(|(w, _)| *w == When::DuringFlip);
        // To land a fault inside the flip's transaction, hold the authority
        // row it locks last: the flip then waits, singletons locked, until
        // the fault has fired (a crash ends the wait; after a kill the row
        // is released and the flip goes on).
        let mut holder = if armed {
            self.hold_authority_row().await
        } else {
            None
        };
        let since = if armed && holder.is_none() {
            self.probe.server_epoch().await.ok()
        } else {
            None
        };
        let mut notes = Vec::new();
        let mut at_ms = self.ms();
        let id = self.spawn(&s.by, Role::Flip, args.clone(), Vec::new())?;
        let detect = match &holder {
            Some((_, pid)) => InFlight::BlockedBy(*pid),
            None => InFlight::FlipSql(since.unwrap_or(0.0)),
        };
        let fired = self
            .fire_armed(When::DuringFlip, Some((id, detect)), &mut notes)
            .await;
        if let Some((client, _)) = holder.take() {
            // Gone already when PostgreSQL was crashed; else this lets the flip go on.
            let _ = client.batch_execute("ROLLBACK").await;
        }
        let crashed = fired?;
        self.finish_command(id, COMMAND_TIMEOUT).await?;
        let mut last = id;
        if crashed {
            let why = self.shared.lock().procs[id].why_ended();
            notes.push(format!(
                "the interrupted flip: {why}; run once more after the restart"
            ));
            at_ms = self.ms();
            last = self
                .run_command(&s.by, Role::Flip, args, Vec::new(), COMMAND_TIMEOUT)
                .await?;
        }
        let (name, code, refused, why, output) = {
            let l = self.shared.lock();
            let p = &l.procs[last];
            (
                p.name.clone(),
                p.code(),
                p.refused.clone(),
                p.why_ended(),
                p.json.clone(),
            )
        };
        let expected = outcome_word(s.expect);
        self.obs.flips.push(FlipRecord {
            mode: s.mode.name().into(),
            expected: expected.into(),
            exit_code: code,
            at_ms,
            output: output.clone(),
        });
        let version = self.version_of(&s.by);
        let summary = flip_summary(&output);
        let done = match (s.expect, code) {
            (Outcome::Ok, Some(0)) => Done::ok(format!("{name} ({version}): {summary}")),
            (Outcome::Refused, Some(2)) => Done::with(
                "refused",
                format!(
                    "{name} ({version}) refused as required: {}",
                    refused.unwrap_or(why)
                ),
            ),
            (Outcome::Ok, Some(2)) => {
                let reason = refused.unwrap_or(why);
                self.fail(format!("{name} was refused: {reason}"));
                Done::with("refused", format!("{name} ({version}) refused: {reason}"))
            }
            (Outcome::Refused, Some(0)) => {
                self.fail(format!("{name} flipped, but the plan requires a refusal"));
                Done::ok(format!("{name} ({version}): {summary}"))
            }
            _ => {
                self.fail(format!("{name} failed ({why})"));
                Done::with("failed", format!("{name} ({version}) {why}"))
            }
        };
        Ok(with_notes(done, notes))
    }

    /// `flip = "auto"`: polls the authority every 100 ms for `timeout`.
    /// The flipping artifact's workers were started with `AWA_AUTO_FLIP`.
    async fn flip_auto(&mut self, s: &FlipStep) -> Result<Done, Abort> {
        let start_ms = self.ms();
        let mut notes = Vec::new();
        self.fire_armed(When::DuringFlip, None, &mut notes).await?;
        let timeout = s.timeout.unwrap_or(MatrixDuration::from_secs(30));
        let deadline = Instant::now() + timeout.to_std();
        let mut flipped_at = None;
        let mut last = None;
        loop {
            last = self.probe.authority().await.ok().flatten().or(last);
            if last.as_deref() == Some("ledger") {
                flipped_at = Some(self.ms());
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            self.cancel().sleep(Duration::from_millis(100)).await?;
        }
        let (output, by) = {
            let l = self.shared.lock();
            let output: Vec<Value> = l.flipped.iter().map(|(_, v)| v.clone()).collect();
            let by = l.flipped.last().map(|(id, _)| l.procs[*id].name.clone());
            (output, by)
        };
        self.obs.flips.push(FlipRecord {
            mode: "auto".into(),
            expected: outcome_word(s.expect).into(),
            exit_code: None,
            at_ms: flipped_at.unwrap_or(start_ms),
            output,
        });
        let authority = last.unwrap_or_else(|| "unknown".into());
        let done = match (s.expect, flipped_at) {
            (Outcome::Ok, Some(at)) => Done::ok(format!(
                "authority is ledger after {} ms{}",
                at - start_ms,
                by.map_or(String::new(), |b| format!(" (flipped by {b})"))
            )),
            (Outcome::Ok, None) => {
                self.fail(format!(
                    "authority still {authority} after {timeout}: no auto-flip"
                ));
                Done::with(
                    "timed out",
                    format!("authority still {authority} after {timeout}"),
                )
            }
            (Outcome::Refused, None) => Done::with(
                "refused",
                format!("authority stayed {authority} for {timeout}, as required"),
            ),
            (Outcome::Refused, Some(_)) => {
                self.fail("the leader auto-flipped, but the plan requires it not to");
                Done::ok("authority is ledger")
            }
        };
        Ok(with_notes(done, notes))
    }

    /// `fence`: one worker of the artifact started after the flip must
    /// refuse before any write. The state an old binary could write is
    /// dumped before and after (see `Probe::fence_state`); the worker gets
    /// 20 s to exit before it is killed. Judged by reconciliation.
    pub(super) async fn fence(&mut self, artifact: &str) -> Result<Done, Abort> {
        let version = self.version_of(artifact);
        let before = self.probe.fence_state(&version).await.map_err(|e| {
            Abort::Harness(format!("could not read the state before the fence: {e}"))
        })?;
        let id = self.spawn(artifact, Role::Fence, vec!["worker".into()], Vec::new())?;
        let exited = self.await_done(id, FENCE_TIMEOUT, &self.cancel()).await?;
        if !exited {
            self.kill_proc(id, "fence").await?;
        }
        let after = self.probe.fence_state(&version).await.map_err(|e| {
            Abort::Harness(format!("could not read the state after the fence: {e}"))
        })?;
        let (name, code, refused, why, stderr_tail) = {
            let l = self.shared.lock();
            let p = &l.procs[id];
            (
                p.name.clone(),
                p.code(),
                p.refused.clone(),
                p.why_ended(),
                p.stderr_tail(5),
            )
        };
        self.obs.fences.push(FenceRecord {
            artifact: artifact.to_owned(),
            version: version.clone(),
            exit_code: code,
            refused: refused.is_some(),
            state_before: digest(&before),
            state_after: digest(&after),
            stderr_tail,
        });
        let changed = changed_lines(&before, &after);
        let state = if changed.is_empty() {
            "state unchanged".to_owned()
        } else {
            format!("state CHANGED: {}", changed.join(" | "))
        };
        Ok(match (&refused, code) {
            (Some(reason), Some(2)) if changed.is_empty() => Done::with(
                "refused",
                format!("{name} ({version}) refused: {reason}; {state}"),
            ),
            _ if !exited => Done::with(
                "breached",
                format!(
                    "{name} ({version}) was still running after {}s and was killed; {state}",
                    FENCE_TIMEOUT.as_secs()
                ),
            ),
            _ => Done::with("breached", format!("{name} ({version}) {why}; {state}")),
        })
    }

    /// `drain`: load off, wait until no job is live (`awa.jobs` is empty:
    /// every accepted and fired job terminal), then SIGTERM every worker.
    /// Cron jobs the leader fires while the fleet stops are finished by one
    /// maintenance-free worker (it cannot fire more); any other job left
    /// live is for reconciliation to report as stuck.
    pub(super) async fn drain(&mut self, timeout: MatrixDuration) -> Result<Done, Abort> {
        let mut parts = Vec::new();
        if self.load_on {
            parts.push(self.load_off().await?.detail);
        }
        let start = Instant::now();
        let mut live = (0, 0);
        loop {
            live = self.probe.live_jobs().await.unwrap_or(live);
            if live.0 == 0 && start.elapsed() > Duration::from_millis(100) {
                break;
            }
            if start.elapsed() >= timeout.to_std() {
                break;
            }
            self.cancel().sleep(Duration::from_millis(250)).await?;
        }
        let waited = start.elapsed().as_millis();
        if live.0 == 0 {
            parts.push(format!("no live job after {waited} ms"));
        } else {
            parts.push(format!("{} job(s) still live after {timeout}", live.0));
        }
        // Runtimes that died while the queue drained (a crash, a fence)
        // are judged before the fleet is stopped on purpose.
        parts.extend(self.check_unexpected_exits().await);
        let last_artifact = self
            .slots
            .iter()
            .rev()
            .find(|s| s.role == Role::Worker && !s.dead)
            .map(|s| s.artifact.clone());
        let workers = self.live(Role::Worker, None);
        parts.push(format!("stopped {} worker(s)", workers.len()));
        parts.extend(self.stop(&workers, STOP_TIMEOUT, &self.cancel()).await?);
        for slot in &mut self.slots {
            slot.proc = None;
            if slot.role == Role::Worker {
                slot.parked = false;
            }
        }
        self.drained = true;
        let (left, not_cron) = self.probe.live_jobs().await.unwrap_or(live);
        if left > 0 && not_cron == 0 {
            let artifact = last_artifact.unwrap_or_else(|| CURRENT.to_owned());
            parts.push(self.mop_up(&artifact, left).await?);
        }
        let (left, _) = self.probe.live_jobs().await.unwrap_or((left, not_cron));
        Ok(if left == 0 {
            Done::ok(parts.join("; "))
        } else {
            Done::with(
                "timed out",
                format!("{}; {left} live job(s) left", parts.join("; ")),
            )
        })
    }

    async fn mop_up(&mut self, artifact: &str, left: i64) -> Result<String, Abort> {
        let env = vec![("AWA_NO_MAINTENANCE".to_owned(), "true".to_owned())];
        let id = self.spawn(artifact, Role::Mopup, vec!["worker".into()], env)?;
        let start = Instant::now();
        while start.elapsed() < MOPUP_TIMEOUT {
            if self.probe.live_jobs().await.is_ok_and(|(n, _)| n == 0)
                || !self.shared.lock().procs[id].alive()
            {
                break;
            }
            self.cancel().sleep(Duration::from_millis(100)).await?;
        }
        let mut text = self.stop(&[id], STOP_TIMEOUT, &self.cancel()).await?;
        let name = self.shared.lock().procs[id].name.clone();
        text.insert(0, format!("{left} cron job(s) fired while the fleet stopped were run by {name} (no maintenance)"));
        Ok(text.join("; "))
    }

    /// `assert`: a named check, now. A failed check is a step failure.
    pub(super) async fn assert(&mut self, check: &Check) -> Result<Done, Abort> {
        let result = self.check(check).await?;
        Ok(match result {
            Ok(what) => {
                self.facts
                    .asserts
                    .push(format!("{check} held at step {}: {what}", self.step_index));
                Done::ok(what)
            }
            Err(what) => {
                self.fail(format!("assert {check}: {what}"));
                Done::with("failed", what)
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
                        "{n} overrun_deadline attempt(s) claimed by {version} are past their deadline by over {rescue_margin} ms and not rescued (first: {ids:?})"
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
            .filter(|j| j.mode == "overrun_deadline")
            .map(|j| j.job_id)
            .collect()
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok",
        Outcome::Refused => "refused",
    }
}

fn with_notes(mut done: Done, notes: Vec<String>) -> Done {
    for note in notes {
        done.detail.push_str("; ");
        done.detail.push_str(&note);
    }
    done
}

/// What a flip command printed, in a few words.
fn flip_summary(output: &[Value]) -> String {
    let Some(flipped) = output.iter().rev().find(|v| v["event"] == "flipped") else {
        return "printed no flipped event".into();
    };
    if flipped["already"] == true {
        return "authority was already ledger".into();
    }
    let rings: Vec<String> = flipped["rings"]
        .as_array()
        .map(|rings| {
            rings
                .iter()
                .map(|r| {
                    let generation = r
                        .get("ledger_generation")
                        .or_else(|| r.get("columns_generation"));
                    format!(
                        "{} at generation {}",
                        r["ring"].as_str().unwrap_or("?"),
                        generation.unwrap_or(&Value::Null)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let forced = if flipped["forced"] == true {
        " (forced)"
    } else {
        ""
    };
    format!("flipped to ledger{forced}: {}", rings.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flip_output_in_a_few_words() {
        let out = [
            json!({"event":"flipped","rings":[{"ring":"queue","columns_generation":7,"ledger_generation":7},{"ring":"claim","ledger_generation":3}],"forced":false}),
        ];
        assert_eq!(
            flip_summary(&out),
            "flipped to ledger: queue at generation 7, claim at generation 3"
        );
        assert_eq!(
            flip_summary(&[json!({"event":"flipped","already":true})]),
            "authority was already ledger"
        );
        assert_eq!(
            flip_summary(&[json!({"event":"flip_check","ready":false})]),
            "printed no flipped event"
        );
    }

    #[test]
    fn notes_follow_the_detail() {
        let done = with_notes(Done::ok("a"), vec!["b".into(), "c".into()]);
        assert_eq!(done.detail, "a; b; c");
    }
}
