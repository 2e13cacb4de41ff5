//! Read API: the status an operator sees (`awa status --json`) and the
//! counts reconciliation compares against.

use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use tokio_postgres::Client;

/// One ring's cursor in both representations.
#[derive(Debug, Clone, Serialize)]
pub struct RingStatus {
    pub ring: String,
    pub slot_count: i32,
    /// The singleton columns (poisoned to -1 after the flip).
    pub current_slot: i32,
    pub generation: i64,
    /// The ledger's max row.
    pub ledger_slot: Option<i32>,
    pub ledger_generation: Option<i64>,
    pub ledger_rows: i64,
}

/// One runtime.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceStatus {
    pub instance_id: String,
    pub name: String,
    pub version: String,
    pub role: String,
    pub leader: bool,
    /// Heartbeat age below the staleness threshold.
    pub fresh: bool,
    pub heartbeat_age_ms: i64,
}

/// What `awa status --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub binary_version: String,
    pub schema_version: Option<i32>,
    /// `columns` or `ledger`.
    pub authority: Option<String>,
    pub rings: Vec<RingStatus>,
    pub instances: Vec<InstanceStatus>,
    /// Live jobs by state (scheduled, available, running).
    pub live: BTreeMap<String, i64>,
    /// Terminal records by state, counted row by row (closures in the
    /// claim ring, the archive, dead letters as `failed`).
    pub terminal: BTreeMap<String, i64>,
    /// Terminal counts as an operator reads them: rollups of archived
    /// outcomes plus unarchived closures plus dead letters.
    pub operator_terminal: BTreeMap<String, i64>,
}

const RINGS: &str = "
SELECT 'queue', s.slot_count, s.current_slot, s.generation, l.slot, l.generation, (SELECT count(*) FROM awa.queue_ring_rotations)
FROM awa.queue_ring_state s LEFT JOIN LATERAL (SELECT slot, generation FROM awa.queue_ring_rotations ORDER BY generation DESC LIMIT 1) l ON true
UNION ALL
SELECT 'claim', s.slot_count, s.current_slot, s.generation, l.slot, l.generation, (SELECT count(*) FROM awa.claim_ring_rotations)
FROM awa.claim_ring_state s LEFT JOIN LATERAL (SELECT slot, generation FROM awa.claim_ring_rotations ORDER BY generation DESC LIMIT 1) l ON true
UNION ALL
SELECT 'lease', s.slot_count, s.current_slot, s.generation, l.slot, l.generation, (SELECT count(*) FROM awa.lease_ring_rotations)
FROM awa.lease_ring_state s LEFT JOIN LATERAL (SELECT slot, generation FROM awa.lease_ring_rotations ORDER BY generation DESC LIMIT 1) l ON true";
const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority";
const INSTANCES: &str = "
SELECT instance_id, name, version, role, leader,
       heartbeat_at > now() - $1::float8 * interval '1 millisecond',
       (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint
FROM awa.runtime_instances ORDER BY started_at, instance_id";
const LIVE: &str = "SELECT state, count(*) FROM awa.jobs GROUP BY state";
const TERMINAL: &str = "
SELECT state, sum(n)::bigint FROM (
    SELECT outcome AS state, count(*) AS n FROM awa.claim_closures WHERE terminal GROUP BY 1
    UNION ALL SELECT state, count(*) FROM awa.terminal_archive GROUP BY 1
    UNION ALL SELECT 'failed', count(*) FROM awa.dead_letters
) t GROUP BY state";
/// Rollups plus the unfolded deltas: exact whatever the fold timing.
const OPERATOR_TERMINAL: &str = "
SELECT state, sum(n)::bigint FROM (
    SELECT outcome AS state, count(*) AS n FROM awa.claim_closures WHERE terminal GROUP BY 1
    UNION ALL SELECT state, sum(count) FROM awa.queue_terminal_rollups GROUP BY 1
    UNION ALL SELECT state, sum(count) FROM awa.queue_terminal_rollup_deltas GROUP BY 1
    UNION ALL SELECT 'failed', count(*) FROM awa.dead_letters
) t GROUP BY state";

async fn counts(client: &Client, sql: &str, what: &str) -> Result<BTreeMap<String, i64>> {
    let rows = client
        .query(sql, &[])
        .await
        .map_err(|e| Error::db(what.to_string(), e))?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                r.get::<_, Option<i64>>(1).unwrap_or(0),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect())
}

/// [`status`], giving up after waiting `lock_timeout` for any one lock
/// (a suspended process holding claim-ring partitions must not make it
/// hang): the error then names the sessions holding locks on the
/// runtime's tables ([`Error::Blocked`]). Sets the session's lock_timeout.
pub async fn status_bounded(
    client: &Client,
    stale_ms: f64,
    lock_timeout: std::time::Duration,
) -> Result<Status> {
    super::lock_wait::bound_session(client, lock_timeout).await?;
    let result = status(client, stale_ms).await;
    super::lock_wait::name_holders(client, "status", lock_timeout, result).await
}

const HAS_VERSION_TABLE: &str = "SELECT to_regclass('awa.schema_version') IS NOT NULL";
const MAX_VERSION: &str = "SELECT coalesce(max(version), 0) FROM awa.schema_version";

/// The schema's current version, or `None` when no schema is installed.
pub async fn current_version(client: &impl tokio_postgres::GenericClient) -> Result<Option<i32>> {
    let has: bool = client
        .query_one(HAS_VERSION_TABLE, &[])
        .await
        .map_err(|e| Error::db("reading the schema version", e))?
        .get(0);
    if !has {
        return Ok(None);
    }
    let v: i32 = client
        .query_one(MAX_VERSION, &[])
        .await
        .map_err(|e| Error::db("reading the schema version", e))?
        .get(0);
    Ok(Some(v))
}

/// Read the whole status; `stale_ms` decides which runtimes are fresh.
pub async fn status(client: &Client, stale_ms: f64) -> Result<Status> {
    let schema_version = current_version(client).await?;
    let mut s = Status {
        binary_version: crate::version::VERSION.to_string(),
        schema_version,
        authority: None,
        rings: vec![],
        instances: vec![],
        live: BTreeMap::new(),
        terminal: BTreeMap::new(),
        operator_terminal: BTreeMap::new(),
    };
    if schema_version.is_none_or(|v| v < crate::version::SCHEMA_VERSION) {
        // Not this release's schema: the rest of the read API would not fit.
        return Ok(s);
    }
    s.authority = Some(
        client
            .query_one(AUTHORITY, &[])
            .await
            .map_err(|e| Error::db("reading the authority", e))?
            .get(0),
    );
    s.rings = client
        .query(RINGS, &[])
        .await
        .map_err(|e| Error::db("reading ring cursors", e))?
        .iter()
        .map(|r| RingStatus {
            ring: r.get(0),
            slot_count: r.get(1),
            current_slot: r.get(2),
            generation: r.get(3),
            ledger_slot: r.get(4),
            ledger_generation: r.get(5),
            ledger_rows: r.get(6),
        })
        .collect();
    s.instances = client
        .query(INSTANCES, &[&stale_ms])
        .await
        .map_err(|e| Error::db("reading runtime_instances", e))?
        .iter()
        .map(|r| InstanceStatus {
            instance_id: r.get(0),
            name: r.get(1),
            version: r.get(2),
            role: r.get(3),
            leader: r.get(4),
            fresh: r.get(5),
            heartbeat_age_ms: r.get(6),
        })
        .collect();
    s.live = counts(client, LIVE, "counting live jobs").await?;
    s.terminal = counts(client, TERMINAL, "counting terminal records").await?;
    s.operator_terminal = counts(client, OPERATOR_TERMINAL, "reading operator counts").await?;
    Ok(s)
}

/// One terminal record, wherever it lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TerminalRecord {
    pub job_id: i64,
    pub state: String,
    pub attempt: i32,
    /// `ring` (a closure not yet pruned), `archive` or `dead_letter`.
    pub source: String,
}

/// Every terminal record: unpruned terminal closures, the prune archive
/// and the dead letters. A job should appear exactly once.
pub const TERMINAL_RECORDS: &str = "
SELECT job_id, outcome, attempt, 'ring' FROM awa.claim_closures WHERE terminal
UNION ALL SELECT job_id, state, attempt, 'archive' FROM awa.terminal_archive
UNION ALL SELECT job_id, 'failed', attempt, 'dead_letter' FROM awa.dead_letters";

/// Read every terminal record (small databases; reconciliation at scale
/// runs set-based SQL over `TERMINAL_RECORDS` instead).
pub async fn terminal_records(client: &Client) -> Result<Vec<TerminalRecord>> {
    let rows = client
        .query(TERMINAL_RECORDS, &[])
        .await
        .map_err(|e| Error::db("reading terminal records", e))?;
    Ok(rows
        .iter()
        .map(|r| TerminalRecord {
            job_id: r.get(0),
            state: r.get(1),
            attempt: r.get(2),
            source: r.get(3),
        })
        .collect())
}
