//! The lock-queue watch: which runtimes' sessions wait behind an
//! `ACCESS EXCLUSIVE` request on an awa table (a prune's, a migration's),
//! for how long, and whose request it is.
//!
//! While such a request waits, every statement on that table queues
//! behind it: the runtimes' lease heartbeats, and the sampler's own reads
//! of the leases, so the sampler is blind for exactly as long as the
//! heartbeats are held. This watch has its own connection and task and
//! reads only PostgreSQL's views (`pg_stat_activity`, `pg_locks`), which
//! never queue behind a table lock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::INTERVAL;
use crate::observe::{DbClock, HeldByCommand, QueuedRuntime};

/// What the watch saw over the cell.
#[derive(Debug, Default)]
pub(super) struct Watched {
    /// Runtimes queued behind an exclusive request on the lease table.
    pub(super) queued: Vec<QueuedRuntime>,
    /// Statements of unnamed sessions held by a one-shot command.
    pub(super) held: Vec<HeldByCommand>,
}

/// 0.7 and later runtimes' sessions waiting on a lock behind an ungranted
/// `ACCESS EXCLUSIVE` request on the lease table or one of its partitions
/// (where lease heartbeats write; a request on another table cannot hold
/// a heartbeat up), in the columns [`read`] takes: the waiter's
/// `application_name` (`awa <version> <instance_id>`), how long its
/// statement has waited (ms), the requester's `application_name` (empty
/// for 0.6, which sets none), the table, and by the database's clock
/// (Unix ms) when the waiting statement began and now.
const QUEUED_BEHIND_TABLE_LOCK: &str = "
SELECT a.application_name,
       (extract(epoch FROM clock_timestamp() - a.query_start) * 1000)::int8,
       coalesce(r.application_name, ''), c.relname,
       (extract(epoch FROM a.query_start) * 1000)::int8,
       (extract(epoch FROM clock_timestamp()) * 1000)::int8
FROM pg_stat_activity a
CROSS JOIN LATERAL unnest(pg_blocking_pids(a.pid)) AS b(pid)
JOIN pg_locks q ON q.pid = b.pid AND NOT q.granted AND q.locktype = 'relation'
               AND q.mode = 'AccessExclusiveLock'
JOIN pg_class c ON c.oid = q.relation
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'awa'
                   AND (c.relname = 'leases' OR c.relname LIKE 'leases\\_%')
JOIN pg_stat_activity r ON r.pid = b.pid
WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
  AND a.application_name LIKE 'awa %'";

/// Statements of sessions that name no runtime (0.6 sets no
/// `application_name`) waiting on a lock that a one-shot command of the
/// awa binary (`awa <version>`, no instance: a migration, a flip, an
/// operator command) holds or requested, in the columns [`read`] takes:
/// no waiter (NULL), how long the statement has waited (ms), the
/// command's `application_name`, the table (or kind of lock) it waits
/// for, and by the database's clock (Unix ms) when the statement began
/// and now. One row per waiting statement and command.
const HELD_BY_A_COMMAND: &str = "
SELECT DISTINCT
       NULL::text,
       (extract(epoch FROM clock_timestamp() - a.query_start) * 1000)::int8,
       r.application_name,
       coalesce((SELECT coalesce(c.relname, l.locktype) FROM pg_locks l
                 LEFT JOIN pg_class c ON c.oid = l.relation
                 WHERE l.pid = a.pid AND NOT l.granted LIMIT 1), ''),
       (extract(epoch FROM a.query_start) * 1000)::int8,
       (extract(epoch FROM clock_timestamp()) * 1000)::int8
FROM pg_stat_activity a
CROSS JOIN LATERAL unnest(pg_blocking_pids(a.pid)) AS b(pid)
JOIN pg_stat_activity r ON r.pid = b.pid AND r.application_name ~ '^awa [0-9][^ ]*$'
WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
  AND coalesce(a.application_name, '') = ''";

/// The database's clock, Unix ms.
const DB_CLOCK: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8";

/// A statement seen waiting on a lock, as either reading reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waiting {
    /// The waiter's `application_name`; none in the reading of
    /// statements held by a command, whose waiters name no runtime.
    pub(super) waiter: Option<String>,
    /// How long its statement has waited, ms.
    pub(super) waited_ms: i64,
    /// The `application_name` of the session it waits behind: the
    /// exclusive request's (empty: none), or the one-shot command's.
    pub(super) blocker: String,
    /// The table (or kind of lock) waited for.
    pub(super) relation: String,
    /// When the waiting statement began, Unix ms by the database's clock.
    pub(super) since_unix_ms: i64,
    /// When this reading was taken, Unix ms by the database's clock.
    pub(super) now_unix_ms: i64,
}

/// Who waited, as the watch keeps it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Waiter {
    /// A runtime's session, behind an exclusive request of a session
    /// naming this version (none: a session naming none).
    Runtime {
        instance_id: String,
        requester_version: Option<String>,
    },
    /// A session naming no runtime, behind a command of this version.
    Unnamed { command_version: String },
}

/// What the watch keeps of one waiting statement: the first tick that
/// saw it waiting at least half `stale_after`, the longest wait seen,
/// and until when it can explain a rescue.
#[derive(Debug)]
struct Kept {
    first_ms: u64,
    waited_ms: u64,
    explains_until_unix_ms: i64,
}

/// What the watch keeps, per waiting statement: who waited, on which
/// table, and when the statement began.
#[derive(Debug, Default)]
pub(super) struct Queued {
    floor_ms: i64,
    stale_after_ms: i64,
    seen: BTreeMap<(Waiter, String, i64), Kept>,
}

impl Queued {
    /// Keeps waits of at least half `stale_after`: shorter ones cannot
    /// have made a lease stale.
    pub(super) fn new(stale_after: Duration) -> Queued {
        Queued {
            floor_ms: (stale_after.as_millis() / 2) as i64,
            stale_after_ms: stale_after.as_millis() as i64,
            seen: BTreeMap::new(),
        }
    }

    /// The latest a rescue can have found a lease this wait held stale,
    /// from a tick that saw the wait at `now_unix_ms`: the next tick (the
    /// first that may not see it), and `stale_after` more for the rescue
    /// pass that found the lease stale to close it (a pass slower than
    /// that is starvation, which the cell's starvation gauge judges).
    fn explains_until(&self, now_unix_ms: i64) -> i64 {
        now_unix_ms + INTERVAL.as_millis() as i64 + self.stale_after_ms
    }

    /// Records one tick's reading (of either query), taken `at_ms` into
    /// the cell. A runtime's wait needs a runtime's name; a statement
    /// held by a command, a command that names its version.
    pub(super) fn record(&mut self, at_ms: u64, reading: &[Waiting]) {
        for w in reading.iter().filter(|w| w.waited_ms >= self.floor_ms) {
            let Some(waiter) = waiter_of(w) else {
                continue;
            };
            let waited_ms = w.waited_ms.max(0) as u64;
            let until = self.explains_until(w.now_unix_ms);
            self.seen
                .entry((waiter, w.relation.clone(), w.since_unix_ms))
                .and_modify(|k| {
                    k.waited_ms = k.waited_ms.max(waited_ms);
                    k.explains_until_unix_ms = k.explains_until_unix_ms.max(until);
                })
                .or_insert(Kept {
                    first_ms: at_ms,
                    waited_ms,
                    explains_until_unix_ms: until,
                });
        }
    }

    /// Everything kept: the runtimes' waits by runtime, then the
    /// statements held by a command by when they began.
    pub(super) fn finish(self) -> Watched {
        let mut watched = Watched::default();
        for ((waiter, relation, since_unix_ms), k) in self.seen {
            match waiter {
                Waiter::Runtime {
                    instance_id,
                    requester_version,
                } => watched.queued.push(QueuedRuntime {
                    instance_id,
                    first_ms: k.first_ms,
                    waited_ms: k.waited_ms,
                    requester_version,
                    relation,
                    since_unix_ms,
                    explains_until_unix_ms: k.explains_until_unix_ms,
                }),
                Waiter::Unnamed { command_version } => watched.held.push(HeldByCommand {
                    first_ms: k.first_ms,
                    waited_ms: k.waited_ms,
                    command_version,
                    relation,
                    since_unix_ms,
                    explains_until_unix_ms: k.explains_until_unix_ms,
                }),
            }
        }
        watched.held.sort_by_key(|h| h.since_unix_ms);
        watched
    }
}

/// Who `w` is: a runtime named by its session (and the version of the
/// session it waits behind, if that names one), or a session naming none
/// behind a command of the version its name gives.
fn waiter_of(w: &Waiting) -> Option<Waiter> {
    match &w.waiter {
        Some(name) => Some(Waiter::Runtime {
            instance_id: runtime_of(name)?.to_owned(),
            requester_version: version_of(&w.blocker),
        }),
        None => Some(Waiter::Unnamed {
            command_version: version_of(&w.blocker)?,
        }),
    }
}

/// Starts the watch on its own connection, every [`INTERVAL`] until
/// `stopped`; a tick whose connection or query fails is skipped (the
/// sampler accounts for outages). Its first connection also reads the
/// database's clock against the cell's.
pub(super) fn start(
    url: String,
    t0: Instant,
    stale_after: Duration,
    mut stopped: watch::Receiver<bool>,
) -> JoinHandle<(Watched, Option<DbClock>)> {
    tokio::spawn(async move {
        let mut queued = Queued::new(stale_after);
        let mut clock: Option<DbClock> = None;
        let mut client: Option<Client> = None;
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.changed() => break,
            }
            if client.as_ref().is_none_or(Client::is_closed) {
                client = super::connect_briefly(&url).await;
            }
            let Some(c) = client.as_ref() else { continue };
            if clock.is_none() {
                clock = read_clock(c, t0).await;
            }
            let at_ms = t0.elapsed().as_millis() as u64;
            for query in [QUEUED_BEHIND_TABLE_LOCK, HELD_BY_A_COMMAND] {
                if let Ok(reading) = read(c, query).await {
                    queued.record(at_ms, &reading);
                }
            }
        }
        (queued.finish(), clock)
    })
}

/// The database's clock against the cell's: the middle of the query's
/// round trip stands for the moment the database read its clock.
async fn read_clock(client: &Client, t0: Instant) -> Option<DbClock> {
    let before = t0.elapsed().as_millis() as u64;
    let unix_ms: i64 = client.query_one(DB_CLOCK, &[]).await.ok()?.get(0);
    let after = t0.elapsed().as_millis() as u64;
    Some(DbClock {
        at_ms: before + (after - before) / 2,
        unix_ms,
    })
}

/// One reading of `query` ([`QUEUED_BEHIND_TABLE_LOCK`] or
/// [`HELD_BY_A_COMMAND`], which return the same columns).
async fn read(client: &Client, query: &str) -> Result<Vec<Waiting>, tokio_postgres::Error> {
    Ok(client
        .query(query, &[])
        .await?
        .iter()
        .map(|r| Waiting {
            waiter: r.get(0),
            waited_ms: r.get::<_, Option<i64>>(1).unwrap_or(0),
            blocker: r.get(2),
            relation: r.get(3),
            since_unix_ms: r.get::<_, Option<i64>>(4).unwrap_or(0),
            now_unix_ms: r.get::<_, Option<i64>>(5).unwrap_or(0),
        })
        .collect())
}

/// The `runtime_instances` key a 0.7+ runtime's `application_name`
/// (`awa <version> <instance_id>`) carries.
fn runtime_of(application_name: &str) -> Option<&str> {
    let mut words = application_name.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("awa"), Some(_), Some(id), None) => Some(id),
        _ => None,
    }
}

/// The version an `application_name` of the form `awa <version> ...` names.
fn version_of(application_name: &str) -> Option<String> {
    let mut words = application_name.split_whitespace();
    match (words.next(), words.next()) {
        (Some("awa"), Some(v)) => Some(v.to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading `now` (Unix ms) of `waiter`'s statement begun at `since`.
    fn session(waiter: &str, since: i64, now: i64, requester: &str) -> Waiting {
        Waiting {
            waiter: Some(waiter.into()),
            waited_ms: now - since,
            blocker: requester.into(),
            relation: "leases_3".into(),
            since_unix_ms: since,
            now_unix_ms: now,
        }
    }

    #[test]
    fn each_waiting_statement_is_kept_with_its_longest_wait_and_how_long_it_explains_a_rescue() {
        let mut q = Queued::new(Duration::from_millis(1_500));
        let worker_2 = "awa 0.7.0 current-worker-2-1-a";
        q.record(
            1_000,
            &[
                session(worker_2, 100_000, 100_800, ""),
                // Under half stale_after: cannot have made a lease stale.
                session("awa 0.7.0 current-worker-1-2-b", 100_100, 100_800, ""),
                // Not a runtime's session (a harness's, or 0.6's: no name).
                session("rehearse", 95_000, 100_800, ""),
                session("", 95_000, 100_800, ""),
            ],
        );
        q.record(
            1_250,
            &[
                // The same statement, still waiting.
                session(worker_2, 100_000, 101_050, ""),
                // Behind the release's own request.
                session(worker_2, 100_150, 101_050, "awa 0.7.0 current-worker-3-4-c"),
            ],
        );
        // A later statement of the same runtime behind a later request.
        q.record(9_000, &[session(worker_2, 108_000, 108_900, "")]);
        let kept = |first_ms, waited_ms, requester: Option<&str>, since, seen: i64| QueuedRuntime {
            instance_id: "current-worker-2-1-a".into(),
            first_ms,
            waited_ms,
            requester_version: requester.map(str::to_owned),
            relation: "leases_3".into(),
            since_unix_ms: since,
            // One tick, then stale_after, past the last reading that saw it.
            explains_until_unix_ms: seen + 250 + 1_500,
        };
        assert_eq!(
            q.finish().queued,
            [
                kept(1_000, 1_050, None, 100_000, 101_050),
                kept(9_000, 900, None, 108_000, 108_900),
                kept(1_250, 900, Some("0.7.0"), 100_150, 101_050),
            ]
        );
    }

    /// Starts `sql` on a connection of its own; it runs on (and may wait)
    /// in the background, and its session lives until the test ends.
    async fn in_background(cluster: &awa_harness::pgtemp::Cluster, sql: &str) {
        let client = cluster.connect("watch").await.unwrap();
        let sql = sql.to_owned();
        tokio::spawn(async move {
            let _ = client.batch_execute(&sql).await;
            std::future::pending::<()>().await;
        });
    }

    /// The watch on a real PostgreSQL: a migration-like command (`awa
    /// 0.7.0`, no instance) holds `awa.jobs`; a 0.6-like session (no
    /// `application_name`) waits behind it and is seen, with the table
    /// and the command's version; a 0.7 runtime waiting behind the same
    /// command, and an unnamed session behind a runtime's lock, are not.
    #[tokio::test]
    async fn an_unnamed_statement_held_behind_a_command_is_seen_and_kept_past_half_stale_after() {
        use awa_runtime::schema::{MigrateOptions, migrate};
        let cluster = awa_harness::pgtemp::Cluster::start()
            .await
            .expect("a throwaway cluster");
        cluster.create_database("watch").await.unwrap();
        let mut setup = cluster.connect("watch").await.unwrap();
        migrate(&mut setup, &MigrateOptions::default())
            .await
            .unwrap();
        in_background(
            &cluster,
            "SET application_name = 'awa 0.7.0'; BEGIN; \
             LOCK TABLE awa.jobs IN SHARE ROW EXCLUSIVE MODE",
        )
        .await;
        in_background(
            &cluster,
            "SET application_name = 'awa 0.7.0 current-worker-1-a'; BEGIN; \
             LOCK TABLE awa.queue_entries IN SHARE ROW EXCLUSIVE MODE; \
             UPDATE awa.jobs SET priority = priority WHERE false",
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        in_background(
            &cluster,
            "UPDATE awa.jobs SET priority = priority WHERE false",
        )
        .await;
        in_background(&cluster, "DELETE FROM awa.queue_entries WHERE false").await;
        let mut q = Queued::new(Duration::from_millis(1_500));
        let mut waits = Vec::new();
        for tick in 0..40u64 {
            tokio::time::sleep(INTERVAL).await;
            waits = read(&setup, HELD_BY_A_COMMAND).await.unwrap();
            q.record(tick * 250, &waits);
            if waits.iter().any(|w| w.waited_ms >= 1_000) {
                break;
            }
        }
        assert_eq!(waits.len(), 1, "{waits:?}");
        assert_eq!(
            (waits[0].blocker.as_str(), waits[0].relation.as_str()),
            ("awa 0.7.0", "jobs")
        );
        let held = q.finish().held;
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].command_version, "0.7.0");
        assert!(held[0].waited_ms >= 1_000, "{held:?}");
        // Kept from the first tick that saw it waiting half stale_after.
        assert!(held[0].first_ms >= 500, "{held:?}");
        assert!(held[0].explains_until_unix_ms >= held[0].since_unix_ms + 1_000 + 1_500);
    }
}
