//! Faults armed for the next migrate or flip, fired once it is in flight.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::cell::{COMMAND_TIMEOUT, Cell};
use super::super::ledger::Role;
use super::super::state::ArmedFault;
use super::evidence::{Before, Inside};
use crate::fleet::ProcId;
use crate::matrix::When;

/// How long an armed fault waits to see its migrate or flip in flight.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// How an armed fault detects that its migrate or flip is in flight.
#[derive(Clone, Copy, Debug)]
pub(super) enum Detector {
    /// The migration holds its advisory lock (`AWA_MIGRATE_PAUSE` keeps it there).
    Migration,
    /// A session opened after this server time runs the flip's statements.
    FlipSql(f64),
    /// Some session waits on the authority row this backend holds.
    BlockedBy(i32),
}

/// A migrate or flip command that faults may be armed for.
pub(super) struct ArmedCommand<'s> {
    pub artifact: &'s str,
    pub role: Role,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `DuringMigrate` or `DuringFlip`: which armed faults fire inside it.
    pub when: When,
    pub detect: Detector,
    /// What a crash inside it must leave unchanged.
    pub before: Option<Before>,
    /// A transaction the command waits on so that the faults land inside
    /// it; rolled back once they have fired.
    pub holder: Option<tokio_postgres::Client>,
    /// The command already started (a flip let go at the start gate), and
    /// when: judged instead of starting one.
    pub started: Option<(ProcId, u64)>,
}

/// The run of an armed command that is judged: after a PostgreSQL crash
/// the command's second run, else its only one.
pub(super) struct Judged {
    pub id: ProcId,
    /// When it started (ms since the cell started).
    pub at_ms: u64,
}

impl Cell<'_> {
    /// Runs `cmd`, fires the faults armed for it once it is in flight,
    /// waits for it to end, and after a PostgreSQL crash runs it once more
    /// (without the armed environment): the run whose outcome the step's
    /// `expect` applies to.
    pub(super) async fn run_armed(
        &mut self,
        cmd: ArmedCommand<'_>,
        notes: &mut Vec<String>,
    ) -> Result<Judged, Abort> {
        let (id, at_ms) = match cmd.started {
            Some(started) => started,
            None => {
                let at_ms = self.ms();
                match self
                    .spawn(cmd.artifact, cmd.role, cmd.args.clone(), cmd.env)
                    .await
                {
                    Ok(id) => (id, at_ms),
                    Err(e) => {
                        self.state.migration_hold = None;
                        return Err(e);
                    }
                }
            }
        };
        let fired = self
            .fire_armed(cmd.when, Some((id, cmd.detect)), cmd.before, notes)
            .await;
        // Whatever happened to the armed faults, the command goes on.
        self.state.migration_hold = None;
        if let Some(client) = cmd.holder {
            // Gone already when PostgreSQL was crashed; else this lets the command go on.
            let _ = client.batch_execute("ROLLBACK").await;
        }
        let crashed = fired?;
        self.finish_command(id, COMMAND_TIMEOUT).await?;
        if !crashed {
            return Ok(Judged { id, at_ms });
        }
        let why = self.proc(id, |p| p.why_ended());
        notes.push(format!(
            "the interrupted {}: {why}; run once more after the restart",
            command_word(cmd.when)
        ));
        let at_ms = self.ms();
        let id = self
            .run_command(
                cmd.artifact,
                cmd.role,
                cmd.args,
                Vec::new(),
                COMMAND_TIMEOUT,
            )
            .await?;
        Ok(Judged { id, at_ms })
    }

    /// Fires the faults armed for `when`, inside `trigger` (a migrate or
    /// flip process) once the database shows it in flight (or after 5 s, or
    /// when it already ended), and records each one's evidence; a crash's
    /// is that the state `before` the command is unchanged right after
    /// the restart. Returns whether PostgreSQL was crashed.
    pub(super) async fn fire_armed(
        &mut self,
        when: When,
        trigger: Option<(ProcId, Detector)>,
        before: Option<Before>,
        notes: &mut Vec<String>,
    ) -> Result<bool, Abort> {
        let (firing, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.state.armed)
            .into_iter()
            .partition(|(w, _)| *w == when);
        self.state.armed = waiting;
        if firing.is_empty() {
            return Ok(false);
        }
        let what = command_word(when);
        let inside = match trigger {
            Some((id, detect)) => {
                let inside = self.until_in_flight(what, id, detect).await?;
                notes.push(inside.note.clone());
                inside
            }
            None => Inside {
                what,
                seen: true,
                note: format!(
                    "the {what} step was running (an auto-flip is not visible from outside)"
                ),
            },
        };
        let trigger_id = trigger.map(|(id, _)| id);
        let mut crashed = false;
        for (_, fault) in firing {
            match fault {
                ArmedFault::Kill(k) => {
                    let text = self.fire_kill(&k, Some(&inside)).await?;
                    notes.push(text);
                }
                ArmedFault::Crash => {
                    let text = self.crash(&format!(" during the {what}")).await?;
                    notes.push(text);
                    crashed = true;
                    let fault = format!("pg_crash during the {what}");
                    let (fired, evidence) = match &before {
                        Some(before) if inside.seen => self.crash_evidence(before).await,
                        Some(_) => (false, inside.note.clone()),
                        None => (inside.seen, inside.note.clone()),
                    };
                    notes.push(evidence.clone());
                    self.record_fault(fault, fired, evidence);
                }
                ArmedFault::Fleet(f) => {
                    let text = self.fleet_inside_migration(&f, trigger_id).await?;
                    notes.push(text);
                }
            }
        }
        Ok(crashed)
    }

    /// Waits (up to 5 s) for the database to show process `id`, the
    /// migration or flip, in flight; says whether it did and how.
    async fn until_in_flight(
        &mut self,
        what: &'static str,
        id: ProcId,
        detect: Detector,
    ) -> Result<Inside, Abort> {
        let deadline = Instant::now() + IN_FLIGHT_TIMEOUT;
        loop {
            if self.proc(id, |p| p.exit.is_some()) {
                let note = format!("the {what} ended before the armed fault could fire inside it");
                return Ok(Inside {
                    what,
                    seen: false,
                    note,
                });
            }
            let seen = match detect {
                Detector::Migration => self.probe.migration_in_flight().await,
                Detector::FlipSql(since) => self.probe.flip_in_flight(since).await,
                Detector::BlockedBy(pid) => self.probe.blocked_by(pid).await,
            };
            if seen == Ok(true) {
                let note = match detect {
                    Detector::BlockedBy(_) => {
                        format!("the {what} was held inside its transaction at the authority lock")
                    }
                    _ => format!("the {what} was seen in flight"),
                };
                return Ok(Inside {
                    what,
                    seen: true,
                    note,
                });
            }
            if Instant::now() >= deadline {
                let note = format!("the {what} was not seen in flight within 5s; firing anyway");
                return Ok(Inside {
                    what,
                    seen: false,
                    note,
                });
            }
            self.cancel().sleep(Duration::from_millis(5)).await?;
        }
    }
}

/// The command a fault armed for `when` fires inside, in a word.
fn command_word(when: When) -> &'static str {
    if when == When::DuringMigrate {
        "migration"
    } else {
        "flip"
    }
}

/// The server's clock, as the epoch seconds `BLOCKED_SINCE` compares with.
const SERVER_EPOCH: &str = "SELECT extract(epoch FROM clock_timestamp())::float8";
/// Whether a session of this database that connected after `$1` (epoch
/// seconds) waits on the session holding the migration's advisory lock
/// (the runtime's `MIGRATE_LOCK_KEY` as pg_locks splits it: `$2` high,
/// `$3` low): a runtime started inside the migration that a correct
/// preflight's lock on `runtime_instances` holds back.
const BLOCKED_SINCE: &str = "
SELECT EXISTS (
  SELECT 1 FROM pg_stat_activity a
  WHERE a.datname = current_database()
    AND extract(epoch FROM a.backend_start)::float8 > $1::float8
    AND EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted
                  AND l.classid = $2::oid AND l.objid = $3::oid AND l.objsubid = 1
                  AND l.pid = ANY (pg_blocking_pids(a.pid))))";
const TAKE_HOLD: &str = "SELECT pg_advisory_lock($1)";
const LET_GO: &str = "SELECT pg_advisory_unlock($1)";
/// How often the hold looks for a runtime held back by the migration.
const BLOCKED_POLL: Duration = Duration::from_millis(20);

/// Keeps a paused migration open (`AWA_MIGRATE_HOLD_KEY`) while the
/// runtimes armed to start inside it come up, however long their start
/// takes on the backend (a container's is about a second, a process's a
/// few ms), instead of for a fixed time they may miss. It lets the
/// migration go when dropped (the runtimes are ready, or failed to
/// start), or by itself once [`MigrationHold::watch`] was called and a
/// session opened since waits on a lock: the preflight's lock holds the
/// new runtimes' registration back until the commit, so holding longer
/// would only hold the fleet's heartbeats back with it.
pub(in crate::driver) struct MigrationHold {
    watch: tokio::sync::mpsc::UnboundedSender<()>,
    task: tokio::task::JoinHandle<Result<bool, String>>,
}

impl MigrationHold {
    /// The advisory lock the migration waits on.
    pub(super) const KEY: i64 = awa_runtime::schema::MIGRATE_HOLD_KEY;

    /// Takes the hold on its own connection to the cell's database.
    pub(super) async fn take(url: &str) -> Result<MigrationHold, String> {
        let client = crate::pg::connect(url).await?;
        client
            .execute(TAKE_HOLD, &[&Self::KEY])
            .await
            .map_err(|e| {
                format!(
                    "could not take the migration's hold: {}",
                    crate::pg::describe(&e)
                )
            })?;
        let (watch, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(keep(client, rx));
        Ok(MigrationHold { watch, task })
    }

    /// From now on, let the migration go as soon as a new session waits on a lock.
    pub(super) fn watch(&self) {
        let _ = self.watch.send(());
    }

    /// Lets the migration go; says why it went.
    pub(super) async fn let_go(self) -> String {
        let MigrationHold { watch, task } = self;
        drop(watch);
        match task.await {
            Ok(Ok(true)) => "a runtime started inside it waited on the migration's lock".into(),
            Ok(Ok(false)) => "the runtimes started inside it were up".into(),
            Ok(Err(e)) => format!("the hold failed ({e})"),
            Err(e) => format!("the hold failed ({e})"),
        }
    }
}

/// Holds the lock until the sender is dropped or, once watching, a new
/// session waits on the migration; true in the second case.
async fn keep(
    client: tokio_postgres::Client,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<()>,
) -> Result<bool, String> {
    let watched = if rx.recv().await.is_some() {
        watch_blocked(&client, &mut rx).await
    } else {
        Ok(false)
    };
    let _ = client.execute(LET_GO, &[&MigrationHold::KEY]).await;
    watched
}

/// Until the sender is dropped: whether a session opened from now on
/// waits on the migration.
async fn watch_blocked(
    client: &tokio_postgres::Client,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>,
) -> Result<bool, String> {
    let since: f64 = client
        .query_one(SERVER_EPOCH, &[])
        .await
        .map_err(|e| crate::pg::describe(&e))?
        .get(0);
    let (high, low) =
        super::super::probe::advisory_key_halves(awa_runtime::schema::MIGRATE_LOCK_KEY);
    loop {
        tokio::select! {
            msg = rx.recv() => if msg.is_none() { return Ok(false) },
            () = tokio::time::sleep(BLOCKED_POLL) => {
                let row = client
                    .query_one(BLOCKED_SINCE, &[&since, &high, &low])
                    .await
                    .map_err(|e| crate::pg::describe(&e))?;
                if row.get::<_, bool>(0) {
                    return Ok(true);
                }
            }
        }
    }
}
