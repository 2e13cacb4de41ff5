//! The hold that keeps a paused migration open while the runtimes armed
//! to start inside it come up: a lock on a connection of its own, kept by
//! a task. The cell's state keeps it between the migrate step that takes
//! it and the fleet step that lets it go, so it sits below both.

use std::time::Duration;

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

/// Why the hold could not be taken or kept.
#[derive(Debug, thiserror::Error)]
pub(super) enum HoldError {
    /// Its connection was refused (the message as `pg::connect` words it).
    #[error("{0}")]
    Connect(crate::pg::ConnectError),
    /// The server did not grant the lock.
    #[error("could not take the migration's hold: {}", crate::pg::describe(.0))]
    Take(tokio_postgres::Error),
    /// Watching for a session held back by the migration failed.
    #[error("{}", crate::pg::describe(.0))]
    Watch(tokio_postgres::Error),
}

/// Keeps a paused migration open (`AWA_MIGRATE_HOLD_KEY`) while the
/// runtimes armed to start inside it come up, however long their start
/// takes on the backend (a container's is about a second, a process's a
/// few ms), instead of for a fixed time they may miss. It lets the
/// migration go when dropped (the runtimes are ready, or failed to
/// start), or by itself once [`MigrationHold::watch`] was called and a
/// session opened since waits on a lock: the preflight's lock holds the
/// new runtimes' registration back until the commit, so holding longer
/// would only hold the fleet's heartbeats back with it.
pub(super) struct MigrationHold {
    watch: tokio::sync::mpsc::UnboundedSender<()>,
    task: tokio::task::JoinHandle<Result<bool, HoldError>>,
}

impl MigrationHold {
    /// The advisory lock the migration waits on.
    pub(super) const KEY: i64 = awa_runtime::schema::MIGRATE_HOLD_KEY;

    /// Takes the hold on its own connection to the cell's database.
    pub(super) async fn take(url: &str) -> Result<MigrationHold, HoldError> {
        let client = crate::pg::connect(url).await.map_err(HoldError::Connect)?;
        client
            .execute(TAKE_HOLD, &[&Self::KEY])
            .await
            .map_err(HoldError::Take)?;
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
) -> Result<bool, HoldError> {
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
) -> Result<bool, HoldError> {
    let since: f64 = client
        .query_one(SERVER_EPOCH, &[])
        .await
        .map_err(HoldError::Watch)?
        .get(0);
    let (high, low) = super::probe::advisory_key_halves(awa_runtime::schema::MIGRATE_LOCK_KEY);
    loop {
        tokio::select! {
            msg = rx.recv() => if msg.is_none() { return Ok(false) },
            () = tokio::time::sleep(BLOCKED_POLL) => {
                let row = client
                    .query_one(BLOCKED_SINCE, &[&since, &high, &low])
                    .await
                    .map_err(HoldError::Watch)?;
                if row.get::<_, bool>(0) {
                    return Ok(true);
                }
            }
        }
    }
}
