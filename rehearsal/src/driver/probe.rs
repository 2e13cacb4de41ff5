//! The driver's own look into a cell's database: `assert` checks, the
//! fence's state digests, drain's live-job count, and the signs that a
//! migration or flip is in flight (to fire armed faults inside it).
//!
//! Every query works on both schemas: tables the 0.7 expand migration
//! adds are looked up with `to_regclass` first, because PostgreSQL
//! resolves table names before it evaluates any branch. A query that
//! fails on a dead connection (PostgreSQL was just crashed) reconnects
//! and runs once more.

use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use super::database::connect;
use crate::observe::LeftRow;
use crate::pg::describe;

const RINGS: [&str; 3] = ["queue", "claim", "lease"];

const HAS_SCHEMA_VERSION: &str = "SELECT to_regclass('awa.schema_version') IS NOT NULL";
const SCHEMA_VERSION: &str = "SELECT coalesce(max(version), 0) FROM awa.schema_version";
const SCHEMA_VERSIONS: &str =
    "SELECT coalesce(string_agg(version::text, ',' ORDER BY version), '') FROM awa.schema_version";
/// One look at a runtime's heartbeat by the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beat {
    /// The server's clock when it looked, Unix ms.
    pub server_ms: i64,
    /// Its `runtime_instances.heartbeat_at`, Unix ms (`None`: no row).
    pub beat_ms: Option<i64>,
    /// Sessions whose `application_name` names it (0.6 names none).
    pub sessions: u64,
}

/// Whether the rings have the singleton cursor columns (a contract drops
/// them).
fn has_cursor_columns() -> String {
    format!("SELECT {}", crate::pg::CURSOR_COLUMNS_EXIST)
}

/// Every row of `awa.schema_version`, `applied_at` in microseconds.
const SCHEMA_ROWS: &str = "SELECT version, (extract(epoch FROM applied_at) * 1000000)::int8 \
     FROM awa.schema_version ORDER BY version";
const HAS_AUTHORITY: &str = "SELECT to_regclass('awa.ring_cursor_authority') IS NOT NULL";
const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority LIMIT 1";
const AUTHORITY_ROW: &str =
    "SELECT coalesce(string_agg(row_to_json(a)::text, ';'), '') FROM awa.ring_cursor_authority a";
/// Whether the rotation ledgers exist (the expand migration adds them).
const HAS_LEDGERS: &str = "SELECT to_regclass('awa.queue_ring_rotations') IS NOT NULL";
const RING_COLUMNS: &str = "
SELECT 'queue', current_slot, generation FROM awa.queue_ring_state
UNION ALL SELECT 'claim', current_slot, generation FROM awa.claim_ring_state
UNION ALL SELECT 'lease', current_slot, generation FROM awa.lease_ring_state";
/// Each ring's cursor generation in both representations.
const RING_GENERATIONS: &str = "
SELECT 'queue', (SELECT generation FROM awa.queue_ring_state), (SELECT max(generation) FROM awa.queue_ring_rotations)
UNION ALL SELECT 'claim', (SELECT generation FROM awa.claim_ring_state), (SELECT max(generation) FROM awa.claim_ring_rotations)
UNION ALL SELECT 'lease', (SELECT generation FROM awa.lease_ring_state), (SELECT max(generation) FROM awa.lease_ring_rotations)";
/// The same before the expand migration (no ledgers).
const RING_GENERATIONS_COLUMNS: &str = "
SELECT 'queue', (SELECT generation FROM awa.queue_ring_state), NULL::int8
UNION ALL SELECT 'claim', (SELECT generation FROM awa.claim_ring_state), NULL::int8
UNION ALL SELECT 'lease', (SELECT generation FROM awa.lease_ring_state), NULL::int8";
/// The same once a contract dropped the columns (the ledgers only).
const RING_GENERATIONS_LEDGERS: &str = "
SELECT 'queue', NULL::int8, (SELECT max(generation) FROM awa.queue_ring_rotations)
UNION ALL SELECT 'claim', NULL::int8, (SELECT max(generation) FROM awa.claim_ring_rotations)
UNION ALL SELECT 'lease', NULL::int8, (SELECT max(generation) FROM awa.lease_ring_rotations)";
/// Rows of each ring (queue `$1`, claim `$2`, lease `$3`) of that generation or older.
const RING_ROWS_THROUGH: &str = "
SELECT (SELECT count(*) FROM awa.queue_entries WHERE generation <= $1),
       (SELECT count(*) FROM awa.claim_receipts WHERE generation <= $2)
         + (SELECT count(*) FROM awa.claim_closures WHERE generation <= $2),
       (SELECT count(*) FROM awa.leases WHERE generation <= $3)";
/// The first [`LEFT_ROWS_PER_RING`] (`$4`) rows of each ring that
/// [`RING_ROWS_THROUGH`] counts, oldest first, each with the job it
/// belongs to as it stands: ring, table, job, run lease, slot,
/// generation, holder, heartbeat age (ms), the job's state and run lease.
const RING_ROWS_LEFT: &str = "
SELECT r.ring, r.tbl, r.job_id, r.run_lease, r.slot, r.generation, r.holder, r.beat_ms,
       j.state, j.run_lease
FROM (
    SELECT *, row_number() OVER (PARTITION BY ring ORDER BY generation, job_id, run_lease) AS n
    FROM (
        SELECT 'queue' AS ring, 'queue_entries' AS tbl, q.job_id, NULL::int8 AS run_lease,
               q.slot, q.generation, NULL::text AS holder, NULL::int8 AS beat_ms
        FROM awa.queue_entries q WHERE q.generation <= $1
        UNION ALL
        SELECT 'claim', 'claim_receipts', c.job_id, c.run_lease, c.slot, c.generation, c.instance_id, NULL
        FROM awa.claim_receipts c WHERE c.generation <= $2
        UNION ALL
        SELECT 'claim', 'claim_closures', c.job_id, c.run_lease, c.slot, c.generation, NULL, NULL
        FROM awa.claim_closures c WHERE c.generation <= $2
        UNION ALL
        SELECT 'lease', 'leases', l.job_id, l.run_lease, l.slot, l.generation, l.instance_id,
               (extract(epoch FROM now() - l.heartbeat_at) * 1000)::int8
        FROM awa.leases l WHERE l.generation <= $3
    ) found
) r
LEFT JOIN awa.jobs j ON j.job_id = r.job_id
WHERE r.n <= $4
ORDER BY r.ring, r.generation, r.job_id";
/// How many left rows of each ring [`Probe::ring_rows_left`] reads.
const LEFT_ROWS_PER_RING: i64 = 3;
const LIVE_JOBS: &str =
    "SELECT count(*), count(*) FILTER (WHERE NOT (args ? 'cron')) FROM awa.jobs";
const INSTANCES_OF_VERSION: &str = "SELECT count(*) FROM awa.runtime_instances WHERE version = $1";
/// How long backend `$1`'s transaction has been open, in ms by the
/// server's clock, worked out as the runtime's lock wait words a holder's
/// age (no row: the session is gone or outside a transaction).
const TRANSACTION_AGE: &str = "SELECT (extract(epoch FROM now() - xact_start) * 1000)::int8 \
     FROM pg_stat_activity WHERE pid = $1 AND xact_start IS NOT NULL";
const SERVER_EPOCH: &str = "SELECT extract(epoch FROM clock_timestamp())::float8";
/// The last job id the sequence has handed out (any session's).
const JOB_IDS_DRAWN: &str = "SELECT last_value FROM awa.job_id_seq";
/// The migration's transaction-scoped advisory lock: the runtime's
/// `MIGRATE_LOCK_KEY` as pg_locks splits a bigint key (high 32 bits in
/// `classid` as `$1`, low in `objid` as `$2`, `objsubid` 1).
const MIGRATE_LOCK_HELD: &str = "
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND granted
                 AND classid = $1::oid AND objid = $2::oid AND objsubid = 1)";
/// A session opened after the flip was launched, inside a transaction,
/// running one of the flip's lock statements (`$2`, the runtime's text).
const FLIP_IN_FLIGHT: &str = "
SELECT EXISTS (SELECT 1 FROM pg_stat_activity
               WHERE pid <> pg_backend_pid() AND datname = current_database()
                 AND backend_start >= to_timestamp($1::float8)
                 AND xact_start IS NOT NULL
                 AND EXISTS (SELECT 1 FROM unnest($2::text[]) s WHERE position(s IN query) > 0))";
/// Some session waits for a lock the session `$1` holds.
const BLOCKED_BY: &str = "
SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int4 = ANY(pg_blocking_pids(pid)))";
/// Overrun-deadline attempts of `version` whose deadline passed more than
/// `$3` ms ago and that nobody closed yet.
const DEADLINE_PENDING: &str = "
SELECT count(*), coalesce((array_agg(e.job_id ORDER BY e.job_id))[1:10], '{}')
FROM awa.executions e
WHERE e.job_id = ANY($1) AND e.version = $2 AND e.outcome IS NULL
  AND e.started_at < now() - ($4::float8 + $3::float8) * interval '1 millisecond'";
/// First attempts of overrun-deadline jobs started before `$2` (Unix
/// seconds on the server's clock: long enough ago that a working leader
/// must have rescued them), and how many were.
const DEADLINE_RESCUED: &str = "
SELECT count(*),
       count(*) FILTER (WHERE e.outcome LIKE 'rescued\\_%'),
       coalesce((array_agg(e.job_id ORDER BY e.job_id) FILTER (WHERE e.outcome IS NULL OR e.outcome NOT LIKE 'rescued\\_%'))[1:10], '{}'),
       coalesce(string_agg(DISTINCT e.outcome, ','), '')
FROM awa.executions e
WHERE e.job_id = ANY($1) AND e.attempt = 1 AND e.started_at < to_timestamp($2::float8)";
/// Sessions of the cell's database idle inside a transaction (a stopped
/// client's look), other than the orchestrator's own (`awa X.Y.Z` with no
/// instance): pid, transaction start, and whether it holds a ring
/// singleton's row lock (`FOR UPDATE`: a rotation or prune), which the
/// flip must wait for.
///
/// A ring lock is a ring-state table lock stronger than a read's that
/// came with a row lock:
/// PostgreSQL takes `ROW SHARE` on the table already when it *parses* a
/// `FOR UPDATE`, and tokio-postgres prepares a statement before it runs
/// it, so a client stopped in between sits idle in its transaction with
/// the table lock and no row locked (the flip then goes through). Locking
/// the row is what gives the transaction its id (`backend_xid`), and a
/// rotation or prune locks the ring's row first, so the id tells the two
/// apart without reading the ring tables (a read that could queue behind
/// a migration's `ACCESS EXCLUSIVE`).
const IDLE_IN_TRANSACTION: &str = "
SELECT a.pid, extract(epoch FROM a.xact_start)::float8,
       a.backend_xid IS NOT NULL
         AND EXISTS (SELECT 1 FROM pg_locks l
                     JOIN pg_class c ON c.oid = l.relation
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE l.pid = a.pid AND l.granted AND n.nspname = 'awa'
                       AND l.mode <> 'AccessShareLock'
                       AND c.relname IN ('queue_ring_state', 'claim_ring_state', 'lease_ring_state')),
       coalesce(a.application_name, '')
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.state = 'idle in transaction' AND a.application_name !~ '^awa [0-9.]+$'
ORDER BY a.pid";
/// Whether a session names runtime `$1` (`awa <version> <instance_id>`).
const NAMES_SESSIONS: &str = "
SELECT EXISTS (SELECT 1 FROM pg_stat_activity
               WHERE datname = current_database() AND $1 <> ''
                 AND right(application_name, length($1) + 1) = ' ' || $1)";
/// Runtime `$1`'s heartbeat and the server's clock, in Unix ms, and how
/// many sessions name it (0.7 names its sessions; 0.6 names none): the
/// evidence a suspend, resume or kill took that does not come from the
/// process. No heartbeat row reads as NULL (never registered, or gone).
const HEARTBEAT_OF: &str = "
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8,
       (SELECT (extract(epoch FROM heartbeat_at) * 1000)::int8
        FROM awa.runtime_instances WHERE instance_id = $1),
       (SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND $1 <> ''
          AND right(application_name, length($1) + 1) = ' ' || $1
          -- A backend waiting on a lock notices its client is gone only
          -- once granted: it holds nothing and does nothing until then.
          AND wait_event_type IS DISTINCT FROM 'Lock')";
/// Live jobs by state, and the age (ms) of the oldest open claim of a
/// running job: what a drain that does not end is waiting for.
const LIVE_JOBS_WAITING: &str = "
SELECT count(*) FILTER (WHERE j.state = 'running'),
       count(*) FILTER (WHERE j.state = 'available'),
       count(*) FILTER (WHERE j.state = 'scheduled'),
       coalesce(extract(epoch FROM now() - min(r.claimed_at)) * 1000, 0)::float8
FROM awa.jobs j
LEFT JOIN awa.claim_receipts r ON r.job_id = j.job_id AND r.run_lease = j.run_lease AND j.state = 'running'";
/// Sessions of the cell's database waiting on a lock: how many, and how
/// long the oldest has waited (ms).
const LOCK_WAITS: &str = "
SELECT count(*), coalesce(max(extract(epoch FROM now() - state_change)) * 1000, 0)::float8
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'";
/// Jobs an operator's `cancel` step may pick: producer-enqueued (not cron)
/// jobs in state `$1`, newest first (`$3` limits), those of mode `$2`
/// first when given (sleep jobs, so a cancel of a running one lands while
/// it runs).
const CANCEL_CANDIDATES: &str = "
SELECT job_id FROM awa.jobs
WHERE state = $1 AND NOT (args ? 'cron')
ORDER BY (args->>'mode' IS NOT DISTINCT FROM $2) DESC, job_id DESC
LIMIT $3";
const CRON_BOUNDS: &str =
    "SELECT min(fire_ms), max(fire_ms), count(*) FROM awa.cron_fires WHERE name = $1";

/// How long one probe query may wait for a lock (the server then cancels
/// it with "canceling statement due to lock timeout").
const PROBE_LOCK_TIMEOUT: &str = "SET lock_timeout = '10s'";

/// Why a look into the cell's database failed. Each message is one line,
/// as the step that looked puts it into its own sentence.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The database did not answer the connection (its one-line message,
    /// as [`connect`] words it).
    #[error("{0}")]
    Connect(crate::pg::ConnectError),
    /// The session's bound on lock waits could not be set. The error is
    /// not a `#[source]`: the message already says it, on one line.
    #[error("bounding the probe's lock waits: {}", describe(.0))]
    LockBound(tokio_postgres::Error),
    /// The server refused the query or the connection was lost twice. Not
    /// a `#[source]` either, for the same reason.
    #[error("{}", describe(.0))]
    Query(tokio_postgres::Error),
    /// A query that always returns a row returned none.
    #[error("the query returned no row")]
    NoRow,
    /// A ring (by its place: queue, claim, lease) whose cursor is in no
    /// representation: no singleton columns and an empty ledger.
    #[error("the {} ring has no cursor: no singleton columns and an empty rotation ledger", ["queue", "claim", "lease"][(*.0).min(2)])]
    NoCursor(usize),
}

/// A connection to one cell's database that comes back after a crash.
pub struct Probe {
    url: String,
    client: Option<Client>,
}

/// What `deadline_rescued` found.
#[derive(Debug, PartialEq, Eq)]
pub struct RescueTally {
    /// First attempts that should have been rescued by now.
    pub due: i64,
    /// Of which closed by a rescue.
    pub rescued: i64,
    /// Some that were not.
    pub not_rescued: Vec<i64>,
    /// The outcomes seen (`rescued_deadline,rescued_crash`).
    pub outcomes: String,
}

/// A session idle inside a transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct IdleSession {
    /// Its backend's pid.
    pub pid: i32,
    /// When its transaction started (epoch seconds).
    pub xact_start: f64,
    /// It holds a ring singleton's row lock (a rotation or prune inside).
    pub ring_locks: bool,
    /// Its `application_name` (empty for 0.6, which sets none).
    pub application_name: String,
}

impl IdleSession {
    /// Whether this can be a session of the runtime `instance_id`: one
    /// that names it, or, for a runtime that names none of its sessions
    /// (`names_sessions` false: 0.6), one that names nothing.
    pub fn of(&self, instance_id: Option<&str>, names_sessions: bool) -> bool {
        match instance_id {
            Some(id) if names_sessions => self
                .application_name
                .strip_suffix(id)
                .is_some_and(|rest| rest.ends_with(' ')),
            _ => self.application_name.is_empty(),
        }
    }
}

impl Probe {
    /// A probe of the database at `url` (connects on first use).
    pub fn new(url: &str) -> Self {
        Probe {
            url: url.to_owned(),
            client: None,
        }
    }

    async fn client(&mut self) -> Result<&Client, ProbeError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let client = connect(&self.url).await.map_err(ProbeError::Connect)?;
            // A step's look into the database must not queue without bound
            // behind a suspended process's locks: it fails, saying so.
            client
                .batch_execute(PROBE_LOCK_TIMEOUT)
                .await
                .map_err(ProbeError::LockBound)?;
            self.client = Some(client);
        }
        Ok(self.client.as_ref().expect("connected"))
    }

    async fn rows(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, ProbeError> {
        for attempt in 0..2 {
            let result = self.client().await?.query(sql, params).await;
            match result {
                Ok(rows) => return Ok(rows),
                Err(e)
                    if attempt == 0
                        && (e.is_closed()
                            || self.client.as_ref().is_some_and(Client::is_closed)) =>
                {
                    self.client = None;
                }
                Err(e) => return Err(ProbeError::Query(e)),
            }
        }
        unreachable!("the second attempt returns")
    }

    async fn one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, ProbeError> {
        self.rows(sql, params)
            .await?
            .into_iter()
            .next()
            .ok_or(ProbeError::NoRow)
    }

    async fn exists(&mut self, check: &str) -> Result<bool, ProbeError> {
        Ok(self.one(check, &[]).await?.get(0))
    }

    /// `MAX(schema_version)`, 0 before any migration.
    pub async fn schema_version(&mut self) -> Result<i32, ProbeError> {
        if !self.exists(HAS_SCHEMA_VERSION).await? {
            return Ok(0);
        }
        Ok(self.one(SCHEMA_VERSION, &[]).await?.get(0))
    }

    /// Every `awa.schema_version` row (none before any migration).
    pub async fn schema_rows(
        &mut self,
    ) -> Result<Vec<crate::observe::SchemaVersionRow>, ProbeError> {
        if !self.exists(HAS_SCHEMA_VERSION).await? {
            return Ok(Vec::new());
        }
        Ok(self
            .rows(SCHEMA_ROWS, &[])
            .await?
            .iter()
            .map(|r| crate::observe::SchemaVersionRow {
                version: r.get(0),
                applied_at_us: r.get(1),
            })
            .collect())
    }

    /// `columns` or `ledger`; `None` before the expand migration.
    pub async fn authority(&mut self) -> Result<Option<String>, ProbeError> {
        if !self.exists(HAS_AUTHORITY).await? {
            return Ok(None);
        }
        Ok(self.rows(AUTHORITY, &[]).await?.first().map(|r| r.get(0)))
    }

    /// (ring, current_slot, generation) of the three singletons; `None`
    /// where the schema has no cursor columns (a contract dropped them).
    pub async fn ring_columns(&mut self) -> Result<Option<Vec<(String, i32, i64)>>, ProbeError> {
        if !self.exists(&has_cursor_columns()).await? {
            return Ok(None);
        }
        Ok(Some(
            self.rows(RING_COLUMNS, &[])
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect(),
        ))
    }

    /// (live jobs, of which not fired by cron).
    pub async fn live_jobs(&mut self) -> Result<(i64, i64), ProbeError> {
        let row = self.one(LIVE_JOBS, &[]).await?;
        Ok((row.get(0), row.get(1)))
    }

    /// Each ring's authoritative generation (queue, claim, lease): the
    /// ledger's top under ledger authority or where the schema has no
    /// cursor columns, the columns otherwise. A ring with no cursor at all
    /// (no columns and an empty ledger) is an error: a generation made up
    /// for it would let a caller count nothing and pass.
    pub async fn ring_generations(&mut self) -> Result<[i64; 3], ProbeError> {
        let ledger = self.authority().await? == Some("ledger".to_owned());
        let columns = self.exists(&has_cursor_columns()).await?;
        let sql = match (columns, self.exists(HAS_LEDGERS).await?) {
            (true, true) => RING_GENERATIONS,
            (true, false) => RING_GENERATIONS_COLUMNS,
            (false, _) => RING_GENERATIONS_LEDGERS,
        };
        let rows = self.rows(sql, &[]).await?;
        let mut out = [-1; 3];
        for (i, r) in rows.iter().take(3).enumerate() {
            let columns: Option<i64> = r.get(1);
            let top: Option<i64> = r.get(2);
            // As the runtime reads it: under ledger authority the ledger
            // alone (its columns are poisoned), else the columns.
            let authoritative = if ledger || columns.is_none() {
                top
            } else {
                columns
            };
            out[i] = authoritative.ok_or(ProbeError::NoCursor(i))?;
        }
        Ok(out)
    }

    /// Rows of each ring of the given generation or older.
    pub async fn ring_rows_through(&mut self, through: [i64; 3]) -> Result<[i64; 3], ProbeError> {
        let row = self
            .one(RING_ROWS_THROUGH, &[&through[0], &through[1], &through[2]])
            .await?;
        Ok([row.get(0), row.get(1), row.get(2)])
    }

    /// The first few rows of each ring (queue, claim, lease) that
    /// [`Probe::ring_rows_through`] counts, with their jobs as they stand.
    pub async fn ring_rows_left(
        &mut self,
        through: [i64; 3],
    ) -> Result<[Vec<LeftRow>; 3], ProbeError> {
        let rows = self
            .rows(
                RING_ROWS_LEFT,
                &[&through[0], &through[1], &through[2], &LEFT_ROWS_PER_RING],
            )
            .await?;
        let mut out: [Vec<LeftRow>; 3] = Default::default();
        for r in rows {
            let ring: &str = r.get(0);
            let Some(i) = RINGS.iter().position(|name| *name == ring) else {
                continue;
            };
            let state: Option<String> = r.get(8);
            let job_run: Option<i64> = r.get(9);
            out[i].push(LeftRow {
                table: r.get(1),
                job_id: r.get(2),
                run_lease: r.get(3),
                slot: r.get(4),
                generation: r.get(5),
                holder: r.get(6),
                heartbeat_age_ms: r.get(7),
                job: state.zip(job_run),
            });
        }
        Ok(out)
    }

    /// The age of backend `pid`'s open transaction by the server's clock
    /// (ms); `None` when it has none or is gone.
    pub async fn transaction_age_ms(&mut self, pid: i32) -> Result<Option<i64>, ProbeError> {
        Ok(self
            .rows(TRANSACTION_AGE, &[&pid])
            .await?
            .first()
            .map(|r| r.get(0)))
    }

    /// The server's clock, as Unix seconds.
    pub async fn server_epoch(&mut self) -> Result<f64, ProbeError> {
        Ok(self.one(SERVER_EPOCH, &[]).await?.get(0))
    }

    /// The last job id handed out so far: an id above it is drawn after
    /// this read.
    pub async fn job_ids_drawn(&mut self) -> Result<i64, ProbeError> {
        Ok(self.one(JOB_IDS_DRAWN, &[]).await?.get(0))
    }

    /// A migration holds its advisory lock right now.
    pub async fn migration_in_flight(&mut self) -> Result<bool, ProbeError> {
        let (high, low) = advisory_key_halves(awa_runtime::schema::MIGRATE_LOCK_KEY);
        Ok(self.one(MIGRATE_LOCK_HELD, &[&high, &low]).await?.get(0))
    }

    /// A flip launched at server time `since` is inside its transaction.
    pub async fn flip_in_flight(&mut self, since: f64) -> Result<bool, ProbeError> {
        let statements = awa_runtime::store::authority::flip_lock_statements();
        Ok(self
            .one(FLIP_IN_FLIGHT, &[&since, &statements])
            .await?
            .get(0))
    }

    /// Some session waits for a lock held by backend `pid`.
    pub async fn blocked_by(&mut self, pid: i32) -> Result<bool, ProbeError> {
        Ok(self.one(BLOCKED_BY, &[&pid]).await?.get(0))
    }

    /// (count, first ids) of overdue, unrescued attempts of `jobs` by `version`.
    pub async fn deadline_pending(
        &mut self,
        jobs: &[i64],
        version: &str,
        deadline_ms: f64,
        margin_ms: f64,
    ) -> Result<(i64, Vec<i64>), ProbeError> {
        let row = self
            .one(
                DEADLINE_PENDING,
                &[&jobs, &version, &deadline_ms, &margin_ms],
            )
            .await?;
        Ok((row.get(0), row.get(1)))
    }

    /// First attempts of `jobs` started before `before` (Unix seconds on
    /// the server's clock, [`Probe::server_epoch`]), and how many of them
    /// a rescue closed.
    pub async fn deadline_rescued(
        &mut self,
        jobs: &[i64],
        before: f64,
    ) -> Result<RescueTally, ProbeError> {
        let row = self.one(DEADLINE_RESCUED, &[&jobs, &before]).await?;
        Ok(RescueTally {
            due: row.get(0),
            rescued: row.get(1),
            not_rescued: row.get(2),
            outcomes: row.get(3),
        })
    }

    /// Up to `limit` jobs in `state` an operator may cancel, those of
    /// `mode` first.
    pub async fn cancel_candidates(
        &mut self,
        state: &str,
        mode: Option<&str>,
        limit: i64,
    ) -> Result<Vec<i64>, ProbeError> {
        Ok(self
            .rows(CANCEL_CANDIDATES, &[&state, &mode, &limit])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    /// (first fire, last fire, fires) of a cron schedule, if it fired.
    pub async fn cron_bounds(&mut self, name: &str) -> Result<Option<(i64, i64, i64)>, ProbeError> {
        let row = self.one(CRON_BOUNDS, &[&name]).await?;
        let count: i64 = row.get(2);
        Ok((count > 0).then(|| (row.get(0), row.get(1), count)))
    }

    /// A text dump of what an old binary could write, for the fence: the
    /// three singletons and the legacy per-slot prune metadata, the
    /// authority row, the schema versions, and the runtime_instances rows
    /// of `version`. Ledger rows are left out on purpose: the N leader
    /// appends to them on every rotation while the fenced binary runs.
    pub async fn fence_state(&mut self, version: &str) -> Result<String, ProbeError> {
        let mut dump = String::new();
        for ring in RINGS {
            for table in ["ring_state", "ring_slots"] {
                // Table names come from the constants above, never from input.
                let sql = format!(
                    "SELECT coalesce(string_agg(row_to_json(t)::text, ';' ORDER BY row_to_json(t)::text), '') FROM awa.{ring}_{table} t"
                );
                let row = self.one(&sql, &[]).await?;
                dump.push_str(&format!("{ring}_{table}: {}\n", row.get::<_, String>(0)));
            }
        }
        if self.exists(HAS_AUTHORITY).await? {
            let row = self.one(AUTHORITY_ROW, &[]).await?;
            dump.push_str(&format!(
                "ring_cursor_authority: {}\n",
                row.get::<_, String>(0)
            ));
        }
        let row = self.one(SCHEMA_VERSIONS, &[]).await?;
        dump.push_str(&format!("schema_version: {}\n", row.get::<_, String>(0)));
        let row = self.one(INSTANCES_OF_VERSION, &[&version]).await?;
        dump.push_str(&format!(
            "runtime_instances of {version}: {}\n",
            row.get::<_, i64>(0)
        ));
        Ok(dump)
    }

    /// Sessions idle inside a transaction (but the one-shot commands').
    pub async fn idle_in_transaction(&mut self) -> Result<Vec<IdleSession>, ProbeError> {
        Ok(self
            .rows(IDLE_IN_TRANSACTION, &[])
            .await?
            .iter()
            .map(|r| IdleSession {
                pid: r.get(0),
                xact_start: r.get(1),
                ring_locks: r.get(2),
                application_name: r.get(3),
            })
            .collect())
    }

    /// Whether any session of this database names runtime `instance_id`
    /// in its `application_name` (0.7 does, 0.6 names none).
    pub async fn names_sessions(&mut self, instance_id: &str) -> Result<bool, ProbeError> {
        Ok(self.one(NAMES_SESSIONS, &[&instance_id]).await?.get(0))
    }

    /// One look at runtime `instance_id`'s heartbeat, by the server's clock.
    pub async fn heartbeat_of(&mut self, instance_id: &str) -> Result<Beat, ProbeError> {
        let row = self.one(HEARTBEAT_OF, &[&instance_id]).await?;
        Ok(Beat {
            server_ms: row.get(0),
            beat_ms: row.get(1),
            sessions: row.get::<_, i64>(2).max(0) as u64,
        })
    }

    /// Live jobs: (running, available, scheduled, oldest open claim in ms).
    pub async fn live_jobs_waiting(&mut self) -> Result<(i64, i64, i64, f64), ProbeError> {
        let row = self.one(LIVE_JOBS_WAITING, &[]).await?;
        Ok((row.get(0), row.get(1), row.get(2), row.get(3)))
    }

    /// Sessions waiting on a lock: (how many, longest wait in ms).
    pub async fn lock_waits(&mut self) -> Result<(i64, f64), ProbeError> {
        let row = self.one(LOCK_WAITS, &[]).await?;
        Ok((row.get(0), row.get(1)))
    }

    /// Closes the connection (before the database is dropped).
    pub fn close(&mut self) {
        self.client = None;
    }
}

/// `sha256:<hex>` of a state dump.
pub fn digest(dump: &str) -> String {
    format!(
        "sha256:{}",
        awa_harness::release::sha256_hex(dump.as_bytes())
    )
}

/// The lines of `after` that are not in `before`, for a phase detail.
pub fn changed_lines(before: &str, after: &str) -> Vec<String> {
    let old: std::collections::BTreeSet<&str> = before.lines().collect();
    after
        .lines()
        .filter(|l| !old.contains(l))
        .map(str::to_owned)
        .collect()
}

/// A bigint advisory-lock key as `pg_locks` shows it: (`classid`, `objid`).
pub(super) fn advisory_key_halves(key: i64) -> (u32, u32) {
    ((key as u64 >> 32) as u32, key as u64 as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_session_is_a_runtimes_own_by_its_name_or_by_naming_nothing() {
        let session = |app: &str| IdleSession {
            pid: 1,
            xact_start: 0.0,
            ring_locks: true,
            application_name: app.to_owned(),
        };
        let id = "3f2a-worker";
        for (app, victim, names, own) in [
            // A 0.7 runtime names its sessions: only those count.
            ("awa 0.7.0 3f2a-worker", Some(id), true, true),
            ("awa 0.7.0 9c1d-worker", Some(id), true, false),
            ("awa 0.7.0 x3f2a-worker", Some(id), true, false),
            ("", Some(id), true, false),
            // A 0.6 runtime names none: sessions that name nothing count.
            ("", Some(id), false, true),
            ("awa 0.7.0 9c1d-worker", Some(id), false, false),
            // No instance id (it never said ready): likewise.
            ("", None, false, true),
            ("awa 0.7.0 9c1d-worker", None, true, false),
        ] {
            assert_eq!(
                session(app).of(victim, names),
                own,
                "{app:?} {victim:?} {names}"
            );
        }
    }

    #[test]
    fn advisory_keys_split_as_pg_locks_shows_them() {
        // The values pg_locks showed for the migrate lock before they came from the runtime.
        assert_eq!(
            advisory_key_halves(awa_runtime::schema::MIGRATE_LOCK_KEY),
            (1635213663, 1835496052)
        );
    }

    #[test]
    fn digests_are_stable_and_changes_are_named() {
        assert_eq!(
            digest(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let before = "queue_ring_state: {\"current_slot\":-1}\nschema_version: 1,2,3\n";
        let after = "queue_ring_state: {\"current_slot\":4}\nschema_version: 1,2,3\n";
        assert_ne!(digest(before), digest(after));
        assert_eq!(
            changed_lines(before, after),
            ["queue_ring_state: {\"current_slot\":4}"]
        );
        assert!(changed_lines(before, before).is_empty());
    }
}
