//! One tick's reading of the database, and the SQL it runs.
//!
//! A [`Snapshot`] is read in one `REPEATABLE READ READ ONLY`
//! transaction ([`sample`]), each statement only once the tables it
//! reads exist: a cell's database grows them as its migrations run.

use std::collections::BTreeMap;

use tokio_postgres::Client;

use awa_runtime::store::audit::{self, Misplaced, SchemaFeatures};

use crate::observe::{CensusSample, DutyTable, LivenessSample, RingLiveness, RingSample};

use super::CountSource;

const EXISTING_TABLES: &str = "
SELECT to_regclass('awa.queue_ring_state') IS NOT NULL,
       to_regclass('awa.ring_cursor_authority') IS NOT NULL,
       to_regclass('awa.queue_ring_rotations') IS NOT NULL,
       to_regclass('awa.queue_terminal_rollup_deltas') IS NOT NULL,
       to_regclass('awa.runtime_instances') IS NOT NULL";
/// Each ring's cursor columns and slot count, where the schema has the
/// compat cursor columns.
const COLUMNS: &str = "
SELECT 'queue', current_slot, generation, slot_count FROM awa.queue_ring_state
UNION ALL SELECT 'claim', current_slot, generation, slot_count FROM awa.claim_ring_state
UNION ALL SELECT 'lease', current_slot, generation, slot_count FROM awa.lease_ring_state";
/// The same where a contract migration dropped them: the slot count only.
const NO_COLUMNS: &str = "
SELECT 'queue', NULL::int4, NULL::int8, slot_count FROM awa.queue_ring_state
UNION ALL SELECT 'claim', NULL::int4, NULL::int8, slot_count FROM awa.claim_ring_state
UNION ALL SELECT 'lease', NULL::int4, NULL::int8, slot_count FROM awa.lease_ring_state";
const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority LIMIT 1";
const LEDGERS: &str = "
SELECT r.ring, l.max_gen, l.max_slot, l.rows, l.gaps FROM (VALUES ('queue'), ('claim'), ('lease')) r(ring)
CROSS JOIN LATERAL (
    SELECT max(generation) AS max_gen,
           (array_agg(slot ORDER BY generation DESC))[1] AS max_slot,
           count(*) AS rows,
           coalesce(max(generation) - min(generation) + 1 - count(*), 0) AS gaps
    FROM (SELECT generation, slot FROM awa.queue_ring_rotations WHERE r.ring = 'queue'
          UNION ALL SELECT generation, slot FROM awa.claim_ring_rotations WHERE r.ring = 'claim'
          UNION ALL SELECT generation, slot FROM awa.lease_ring_rotations WHERE r.ring = 'lease') g
) l";
const FRESH: &str = "
SELECT version, count(*) FROM awa.runtime_instances
WHERE heartbeat_at > now() - $1::float8 * interval '1 millisecond'
GROUP BY version";
const DELTAS: &str = "SELECT count(*) FROM awa.queue_terminal_rollup_deltas";
/// Every runtime's heartbeat age at the snapshot, in ms.
const HEARTBEAT_AGES: &str = "
SELECT instance_id, (extract(epoch FROM now() - heartbeat_at) * 1000)::int8
FROM awa.runtime_instances";
/// Leases whose heartbeat is older than `$1` ms, with that age: their
/// runtime is not refreshing them (killed, suspended, or its heartbeat held
/// back behind its own closes). A lease never seen here was being
/// refreshed as it should until it was rescued.
const LATE_LEASES: &str = "
SELECT job_id, run_lease, (extract(epoch FROM now() - heartbeat_at) * 1000)::int8
FROM awa.leases WHERE heartbeat_at < now() - $1::float8 * interval '1 millisecond'";
/// Attempts a rescue pass would take for their heartbeat: the lease's own
/// heartbeat or its runtime's older than `$1` ms, or its runtime gone
/// (deadlines left out: a 0.6 leader never deadline-rescues a 0.7 claim,
/// so those can wait a whole cell by design).
const RESCUE_PENDING: &str = "
SELECT count(*) FROM awa.leases l
LEFT JOIN awa.runtime_instances ri ON ri.instance_id = l.instance_id
WHERE l.heartbeat_at < now() - $1::float8 * interval '1 millisecond'
   OR ri.instance_id IS NULL
   OR ri.heartbeat_at < now() - $1::float8 * interval '1 millisecond'";
/// Whether a session holds `runtime_instances` in a mode that blocks a
/// heartbeat's `UPDATE` (the migration preflight's `SHARE ROW EXCLUSIVE`,
/// held to commit; a migration's DDL): heartbeats then wait on the lock
/// by the product's design, however much CPU the runtimes have.
const INSTANCES_LOCKED: &str = "
SELECT EXISTS (SELECT 1 FROM pg_locks l
               JOIN pg_class c ON c.oid = l.relation
               JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'awa' AND c.relname = 'runtime_instances' AND l.granted
                 AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                                'AccessExclusiveLock'))";
/// Transactions the cell's database has ended so far: what each backend
/// has reported (about once a second while it works, at the latest when
/// it ends), read first in the sample so its time is the tick's.
const XACTS: &str = "
SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = current_database()";
/// Reads so far of the tables named in `$1` (sequential and index scans,
/// a partition summed into its table, should one of them ever be
/// partitioned; none is today): how often the
/// duties that alone read them ran, while the fleet stands idle
/// ([`DutyTable`]). Read with [`XACTS`], at the start of the sample,
/// before the sample's own reads.
const SCANS: &str = "
SELECT coalesce(p.relname, c.relname)::text AS name,
       sum(coalesce(s.seq_scan, 0) + coalesce(s.idx_scan, 0))::int8
FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
LEFT JOIN pg_inherits i ON i.inhrelid = s.relid
LEFT JOIN pg_class p ON p.oid = i.inhparent
WHERE s.schemaname = 'awa' AND coalesce(p.relname, c.relname)::text = ANY($1)
GROUP BY 1";
/// Opens the snapshot every statement of a sample shares.
const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
const END: &str = "COMMIT";
/// Fresh maintenance leaders, and how many of them are flip-aware (report
/// a `binary_version`; the column exists only after the expand migration,
/// so it is read through the row's JSON).
const LEADERS: &str = "
SELECT count(*), count(*) FILTER (WHERE to_jsonb(ri) ->> 'binary_version' IS NOT NULL)
FROM awa.runtime_instances ri
WHERE leader AND heartbeat_at > now() - $1::float8 * interval '1 millisecond'";
/// Per ring, given the slot after its authoritative current one (`$1`
/// queue, `$2` claim, `$3` lease: the next to open): whether the ring
/// holds any row, and whether that slot holds live work (a ready entry,
/// an open claim, a held lease). Rotation may refuse only while that
/// slot holds rows; prune may keep them only while they are live.
const LIVENESS: &str = "
SELECT EXISTS (SELECT 1 FROM awa.queue_entries),
       EXISTS (SELECT 1 FROM awa.queue_entries WHERE slot = $1),
       EXISTS (SELECT 1 FROM awa.claim_receipts) OR EXISTS (SELECT 1 FROM awa.claim_closures),
       EXISTS (SELECT 1 FROM awa.claim_receipts r WHERE r.slot = $2 AND NOT EXISTS (
           SELECT 1 FROM awa.claim_closures k WHERE k.job_id = r.job_id AND k.run_lease = r.run_lease)),
       EXISTS (SELECT 1 FROM awa.leases),
       EXISTS (SELECT 1 FROM awa.leases WHERE slot = $3)";
/// Sessions of the cell's database waiting on a lock that rotation or
/// prune can be behind: a table lock (a migration's or a prune's
/// `ACCESS EXCLUSIVE`, a held partition), an advisory lock, or any lock a
/// session waits for while it holds a ring-state or authority table more
/// strongly than a read does (a rotation's or a flip's `FOR UPDATE`
/// queued behind the other's row lock; the same test as the probe's
/// `IDLE_IN_TRANSACTION`). A worker waiting on a job's row is not
/// counted, even after it read a ring cursor: under CPU pressure such
/// waits come every few seconds and say nothing about rotation.
const ROTATION_LOCK_WAITS: &str = "
SELECT count(DISTINCT w.pid) FROM pg_locks w
JOIN pg_stat_activity a ON a.pid = w.pid AND a.datname = current_database()
WHERE NOT w.granted
  AND (w.locktype IN ('relation', 'advisory')
       OR EXISTS (SELECT 1 FROM pg_locks h
                  JOIN pg_class c ON c.oid = h.relation
                  JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE h.pid = w.pid AND h.granted AND h.locktype = 'relation'
                    AND h.mode <> 'AccessShareLock' AND n.nspname = 'awa'
                    AND c.relname IN ('queue_ring_state', 'claim_ring_state', 'lease_ring_state',
                                      'ring_cursor_authority')))";

/// The authoritative cursor of a sampled ring, as the runtime reads it:
/// the ledger's top under ledger authority or where the schema has no
/// cursor columns, the singleton columns otherwise; `None` where that one
/// is not there (an empty ledger).
fn authoritative(r: &RingSample) -> Option<(i32, i64)> {
    let ledger = r.ledger_slot.zip(r.ledger_generation);
    let columns = r.column_slot.zip(r.column_generation);
    if r.authority == "ledger" || columns.is_none() {
        ledger
    } else {
        columns
    }
}

/// One tick's reading of the database.
pub(super) struct Snapshot {
    pub(super) rings: Vec<RingSample>,
    pub(super) census: CensusSample,
    pub(super) liveness: Option<LivenessSample>,
    /// Every runtime's heartbeat age (ms), by `instance_id`.
    pub(super) beats: Vec<(String, i64)>,
    /// Heartbeats were blocked by a lock on `runtime_instances`.
    pub(super) instances_locked: bool,
    /// Ring rows outside the slot their ring's cursor gives them.
    pub(super) misplaced: Vec<Misplaced>,
    /// Leases whose heartbeat is older than half `stale_after`:
    /// (job_id, run_lease, age in ms).
    pub(super) late_leases: Vec<(i64, i64, i64)>,
}

/// One sample, read in one snapshot. A failed statement aborts the
/// transaction; the caller then drops the connection, which ends it.
pub(super) async fn sample(
    client: &Client,
    at_ms: u64,
    stale_ms: f64,
    counts: &CountSource,
) -> Result<Snapshot, tokio_postgres::Error> {
    client.batch_execute(BEGIN).await?;
    let snapshot = read_snapshot(client, at_ms, stale_ms, counts).await?;
    client.batch_execute(END).await?;
    Ok(snapshot)
}

/// Every statement of a sample, each reading only the tables that exist.
async fn read_snapshot(
    client: &Client,
    at_ms: u64,
    stale_ms: f64,
    counts: &CountSource,
) -> Result<Snapshot, tokio_postgres::Error> {
    let xacts = client
        .query_opt(XACTS, &[])
        .await?
        .and_then(|r| r.get::<_, Option<i64>>(0));
    let names: Vec<&str> = DutyTable::ALL.iter().map(|t| t.name()).collect();
    let scans = client
        .query(SCANS, &[&names])
        .await?
        .iter()
        .filter_map(|r| Some((DutyTable::named(r.get(0))?, r.get::<_, i64>(1))))
        .collect();
    let exists = Existing::read(client).await?;
    let authority = read_authority(client, &exists).await?;
    let (rings, slot_counts) = if exists.rings {
        read_rings(client, at_ms, &authority, &exists).await?
    } else {
        (Vec::new(), BTreeMap::new())
    };
    let (fresh_runtimes, leaders) = if exists.instances {
        read_runtimes(client, stale_ms).await?
    } else {
        (BTreeMap::new(), (0, 0))
    };
    let instances_locked =
        exists.instances && client.query_one(INSTANCES_LOCKED, &[]).await?.get(0);
    let beats = read_beats(client, &exists).await?;
    let delta_rows = if exists.deltas {
        client.query_one(DELTAS, &[]).await?.get(0)
    } else {
        0
    };
    let lock_waits = client.query_one(ROTATION_LOCK_WAITS, &[]).await?.get(0);
    let misplaced = read_misplaced(client, &exists).await?;
    let late_leases = read_late_leases(client, &exists, stale_ms).await?;
    let liveness = if exists.rings {
        let rescue_pending = if exists.instances {
            client.query_one(RESCUE_PENDING, &[&stale_ms]).await?.get(0)
        } else {
            0
        };
        let cursors = read_liveness(client, &rings, &slot_counts).await?;
        Some(LivenessSample {
            at_ms,
            authority,
            leaders: leaders.0,
            flip_aware_leaders: leaders.1,
            lock_waits,
            after_outage: false,
            rescue_pending,
            rings: cursors,
            load: crate::observe::TickLoad::default(),
        })
    } else {
        None
    };
    let census = CensusSample {
        at_ms,
        by_version: counts(),
        fresh_runtimes,
        delta_rows,
        lock_waits,
        xacts,
        scans,
    };
    Ok(Snapshot {
        rings,
        census,
        liveness,
        beats,
        instances_locked,
        misplaced,
        late_leases,
    })
}

/// The cursor authority (`none` before its table exists or holds a row).
async fn read_authority(
    client: &Client,
    exists: &Existing,
) -> Result<String, tokio_postgres::Error> {
    Ok(if exists.authority {
        client
            .query_opt(AUTHORITY, &[])
            .await?
            .map_or("none".to_owned(), |r| r.get(0))
    } else {
        "none".to_owned()
    })
}

/// Every runtime's heartbeat age in ms, by `instance_id`.
async fn read_beats(
    client: &Client,
    exists: &Existing,
) -> Result<Vec<(String, i64)>, tokio_postgres::Error> {
    Ok(if exists.instances {
        client
            .query(HEARTBEAT_AGES, &[])
            .await?
            .iter()
            .filter_map(|r| Some((r.get(0), r.get::<_, Option<i64>>(1)?)))
            .collect()
    } else {
        Vec::new()
    })
}

/// Ring rows outside their slots, through the runtime's audit API.
async fn read_misplaced(
    client: &Client,
    exists: &Existing,
) -> Result<Vec<Misplaced>, tokio_postgres::Error> {
    Ok(if exists.rings {
        let features = SchemaFeatures {
            authority: exists.authority,
            ledgers: exists.ledgers,
            rollup_deltas: exists.deltas,
            cursor_columns: exists.columns,
        };
        audit::read_misplaced(client, &features).await?
    } else {
        Vec::new()
    })
}

/// Leases whose heartbeat is older than half `stale_after`:
/// (job_id, run_lease, age in ms).
async fn read_late_leases(
    client: &Client,
    exists: &Existing,
    stale_ms: f64,
) -> Result<Vec<(i64, i64, i64)>, tokio_postgres::Error> {
    Ok(if exists.rings {
        client
            .query(LATE_LEASES, &[&(stale_ms / 2.0)])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    } else {
        Vec::new()
    })
}

/// Which of the tables a sample reads exist yet (a cell's database grows
/// them as its migrations run).
struct Existing {
    rings: bool,
    authority: bool,
    ledgers: bool,
    deltas: bool,
    instances: bool,
    /// The rings' compat cursor columns (until a contract drops them).
    columns: bool,
}

impl Existing {
    async fn read(client: &Client) -> Result<Existing, tokio_postgres::Error> {
        let sql = format!("{EXISTING_TABLES}, {}", crate::pg::CURSOR_COLUMNS_EXIST);
        let row = client.query_one(&sql, &[]).await?;
        Ok(Existing {
            rings: row.get(0),
            authority: row.get(1),
            ledgers: row.get(2),
            deltas: row.get(3),
            instances: row.get(4),
            columns: row.get(5),
        })
    }
}

/// Each ring's cursor columns (when the schema has them) beside its
/// ledger's top (when the ledgers exist), and each ring's slot count.
async fn read_rings(
    client: &Client,
    at_ms: u64,
    authority: &str,
    exists: &Existing,
) -> Result<(Vec<RingSample>, BTreeMap<String, i32>), tokio_postgres::Error> {
    let mut ledgers: BTreeMap<String, (Option<i64>, Option<i32>, i64, i64)> = BTreeMap::new();
    if exists.ledgers {
        for r in client.query(LEDGERS, &[]).await? {
            ledgers.insert(r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4)));
        }
    }
    let mut rings = Vec::new();
    let mut slot_counts = BTreeMap::new();
    let columns = if exists.columns { COLUMNS } else { NO_COLUMNS };
    for r in client.query(columns, &[]).await? {
        let ring: String = r.get(0);
        let (ledger_generation, ledger_slot, ledger_rows, ledger_gaps) =
            ledgers.get(&ring).copied().unwrap_or((None, None, 0, 0));
        slot_counts.insert(ring.clone(), r.get::<_, i32>(3));
        rings.push(RingSample {
            at_ms,
            ring,
            authority: authority.to_owned(),
            column_slot: r.get(1),
            column_generation: r.get(2),
            ledger_generation,
            ledger_slot,
            ledger_rows,
            ledger_gaps,
        });
    }
    Ok((rings, slot_counts))
}

/// Fresh runtimes by version, and the leaders (all, and flip-aware).
async fn read_runtimes(
    client: &Client,
    stale_ms: f64,
) -> Result<(BTreeMap<String, u64>, (u64, u64)), tokio_postgres::Error> {
    let mut fresh_runtimes = BTreeMap::new();
    for r in client.query(FRESH, &[&stale_ms]).await? {
        fresh_runtimes.insert(r.get::<_, String>(0), r.get::<_, i64>(1) as u64);
    }
    let r = client.query_one(LEADERS, &[&stale_ms]).await?;
    let leaders = (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64);
    Ok((fresh_runtimes, leaders))
}

/// Each ring's authoritative cursor, whether its slot is busy and whether
/// the next slot still holds live rows.
async fn read_liveness(
    client: &Client,
    rings: &[RingSample],
    slot_counts: &BTreeMap<String, i32>,
) -> Result<Vec<RingLiveness>, tokio_postgres::Error> {
    let cursors: Vec<RingLiveness> = rings
        .iter()
        .filter_map(|r| {
            let (slot, generation) = authoritative(r)?;
            Some(RingLiveness {
                ring: r.ring.clone(),
                slot,
                generation,
                busy: false,
                next_live: false,
            })
        })
        .collect();
    let next = |name: &str| -> i32 {
        let n = slot_counts.get(name).copied().unwrap_or(1).max(1);
        cursors
            .iter()
            .find(|c| c.ring == name)
            .map_or(0, |c| (c.slot + 1).rem_euclid(n))
    };
    let row = client
        .query_one(LIVENESS, &[&next("queue"), &next("claim"), &next("lease")])
        .await?;
    Ok(cursors
        .into_iter()
        .map(|mut c| {
            let at = match c.ring.as_str() {
                "queue" => 0,
                "claim" => 2,
                _ => 4,
            };
            c.busy = row.get(at);
            c.next_live = row.get(at + 1);
            c
        })
        .collect())
}
