//! The ring-cursor authority (ADR-040): which representation of the three
//! ring cursors is authoritative, the one-way flip from the singleton
//! columns to the ledgers, and the fence that makes returning pre-flip
//! binaries fail loudly.

use crate::error::{Error, Result};
use crate::failpoint;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio_postgres::{Client, GenericClient, Transaction};

/// Which cursor representation is authoritative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Authority {
    /// The 0.6 singleton columns (compat mode; a mixed fleet may run).
    Columns,
    /// The append-only ledgers (after the flip, or a fresh install).
    Ledger,
}

const READ: &str = "SELECT authority FROM awa.ring_cursor_authority";

/// Read the authority (no lock).
pub async fn read(client: &impl GenericClient) -> Result<Authority> {
    let a: String = client
        .query_one(READ, &[])
        .await
        .map_err(|e| Error::db("reading the ring-cursor authority", e))?
        .get(0);
    Ok(if a == "ledger" {
        Authority::Ledger
    } else {
        Authority::Columns
    })
}

/// A fresh runtime that is not known to be flip-aware.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Blocker {
    pub instance_id: String,
    pub name: String,
    pub version: String,
    pub binary_version: Option<String>,
    pub heartbeat_age_ms: i64,
}

impl Blocker {
    /// `name (version X, binary_version Y, heartbeat N ms ago)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, version {}, binary_version {}, heartbeat {} ms ago)",
            self.name,
            self.instance_id,
            self.version,
            self.binary_version.as_deref().unwrap_or("NULL"),
            self.heartbeat_age_ms
        )
    }
}

const FRESH: &str = "
SELECT instance_id, name, version, binary_version, (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint
FROM awa.runtime_instances
WHERE heartbeat_at > now() - $1::float8 * interval '1 millisecond'
ORDER BY started_at, instance_id";
/// The oldest binary version the schema counts as flip-aware.
pub(crate) const MIN_FLIP_VERSION: &str = "SELECT awa.ring_authority_min_flip_version()";

/// Parse a semantic version `X.Y.Z`; a pre-release or build suffix is
/// accepted and ignored (a `0.7.0-rc.1` binary meets a `0.7.0` floor).
pub fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let v = semver::Version::parse(v).ok()?;
    Some((v.major, v.minor, v.patch))
}

/// Fresh runtimes that block a flip, and how many are fresh at all. A
/// NULL, unparseable or below-minimum `binary_version` blocks.
pub async fn flip_readiness(
    client: &impl GenericClient,
    stale_ms: f64,
) -> Result<(Vec<Blocker>, usize)> {
    let min: String = client
        .query_one(MIN_FLIP_VERSION, &[])
        .await
        .map_err(|e| Error::db("reading ring_authority_min_flip_version()", e))?
        .get(0);
    let min = parse_version(&min).ok_or_else(|| {
        Error::Config(format!(
            "the schema's minimum flip version {min:?} is not X.Y.Z"
        ))
    })?;
    let rows = client
        .query(FRESH, &[&stale_ms])
        .await
        .map_err(|e| Error::db("reading runtime_instances", e))?;
    let fresh = rows.len();
    let blocking = rows
        .iter()
        .map(|r| Blocker {
            instance_id: r.get(0),
            name: r.get(1),
            version: r.get(2),
            binary_version: r.get(3),
            heartbeat_age_ms: r.get(4),
        })
        .filter(|b| {
            b.binary_version
                .as_deref()
                .and_then(parse_version)
                .is_none_or(|v| v < min)
        })
        .collect();
    Ok((blocking, fresh))
}

/// One ring as the flip found and left it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RingFlip {
    pub ring: String,
    /// The final compat cursor, read under the singleton lock.
    pub columns_slot: i32,
    pub columns_generation: i64,
    /// The ledger's max row after reconciliation.
    pub ledger_slot: i32,
    pub ledger_generation: i64,
    /// Ledger rows the flip had to add.
    pub backfilled: u64,
}

/// What a flip did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum FlipOutcome {
    /// The authority is now `ledger`.
    Flipped { rings: Vec<RingFlip>, forced: bool },
    /// It already was.
    Already,
    /// Fresh runtimes are not flip-aware and `force` was not given.
    Blocked { blocking: Vec<Blocker> },
}

const RINGS: [&str; 3] = ["queue", "claim", "lease"];

/// Poison both cursor fields and the legacy per-slot prune metadata.
const POISON: &str = "
UPDATE awa.queue_ring_state SET current_slot = -1, generation = -1;
UPDATE awa.claim_ring_state SET current_slot = -1, generation = -1;
UPDATE awa.lease_ring_state SET current_slot = -1, generation = -1;
UPDATE awa.queue_ring_slots SET generation = -1;
UPDATE awa.claim_ring_slots SET generation = -1;
UPDATE awa.lease_ring_slots SET generation = -1;";
/// The seeded defect: only `current_slot`.
const POISON_SLOT_ONLY: &str = "
UPDATE awa.queue_ring_state SET current_slot = -1;
UPDATE awa.claim_ring_state SET current_slot = -1;
UPDATE awa.lease_ring_state SET current_slot = -1;";
/// Activate the fence's resolver layer: the refusal of the legacy
/// resolver `awa.ring_cursor(ring)` and of enqueues from sessions that are
/// not flip-aware (the claim and enqueue path of pre-flip binaries).
const FENCE_RESOLVER: &str = "UPDATE awa.ring_cursor_authority SET legacy_fenced = true";
/// Activate the fence's trigger layer on every old-style cursor table
/// (the rotate and prune path of pre-flip binaries).
const FENCE_TRIGGER: &str = "
ALTER TABLE awa.queue_ring_state ENABLE TRIGGER ring_cursor_fence;
ALTER TABLE awa.claim_ring_state ENABLE TRIGGER ring_cursor_fence;
ALTER TABLE awa.lease_ring_state ENABLE TRIGGER ring_cursor_fence;
ALTER TABLE awa.queue_ring_slots ENABLE TRIGGER ring_cursor_fence;
ALTER TABLE awa.claim_ring_slots ENABLE TRIGGER ring_cursor_fence;
ALTER TABLE awa.lease_ring_slots ENABLE TRIGGER ring_cursor_fence;";
/// Last in the flip's transaction: `flipped_at` is the moment just
/// before the commit, so an attempt started after it (plus a margin for
/// the commit itself) was started by a session that saw the flip.
const SET_LEDGER: &str =
    "UPDATE awa.ring_cursor_authority SET authority = 'ledger', flipped_at = clock_timestamp()";
/// The flip's lock on the authority row. Public, with
/// [`lock_ring_state_sql`], so an observer (the rehearsal) can recognise
/// the flip in flight in `pg_stat_activity`.
pub const LOCK_AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority FOR UPDATE";

/// The flip's lock on one ring's singleton, as it sends it.
pub fn lock_ring_state_sql(ring: &str) -> String {
    format!("SELECT slot_count, current_slot, generation FROM awa.{ring}_ring_state FOR UPDATE")
}

/// Every statement by which the flip holds its locks.
pub fn flip_lock_statements() -> Vec<String> {
    let mut all: Vec<String> = RINGS.iter().map(|r| lock_ring_state_sql(r)).collect();
    all.push(LOCK_AUTHORITY.to_owned());
    all
}

/// Poison the columns, set `ledger` and activate the fence, inside `tx`.
/// Used by the flip and by a fresh install.
pub(crate) async fn promote_ledger(tx: &Transaction<'_>) -> Result<()> {
    if failpoint::armed(failpoint::FENCE_CURRENT_SLOT_ONLY) {
        tx.batch_execute(POISON_SLOT_ONLY)
            .await
            .map_err(|e| Error::db("poisoning the cursor columns", e))?;
    } else {
        tx.batch_execute(POISON)
            .await
            .map_err(|e| Error::db("poisoning the cursor columns", e))?;
        // ADR-041 §6: both layers, each covering its own old write path.
        if !failpoint::armed(failpoint::FENCE_NO_RESOLVER) {
            tx.batch_execute(FENCE_RESOLVER)
                .await
                .map_err(|e| Error::db("fencing the legacy resolver", e))?;
        }
        if !failpoint::armed(failpoint::FENCE_NO_TRIGGER) {
            tx.batch_execute(FENCE_TRIGGER)
                .await
                .map_err(|e| Error::db("activating the fence trigger", e))?;
        }
    }
    tx.batch_execute(SET_LEDGER)
        .await
        .map_err(|e| Error::db("setting ledger authority", e))?;
    Ok(())
}

/// Flip the authority from `columns` to `ledger` in one transaction: lock
/// the three singletons (the lock old-representation writers take), read
/// the authority only then, refuse while a fresh runtime is not
/// flip-aware (unless `force`), reconcile each ledger through the final
/// columns and verify it, poison the columns and the per-slot metadata,
/// set `ledger` and activate the fence. Idempotent.
pub async fn flip(client: &mut Client, stale_ms: f64, force: bool) -> Result<FlipOutcome> {
    flip_bounded(client, stale_ms, force, DEFAULT_LOCK_TIMEOUT).await
}

/// How long the flip waits for a lock before it gives up, by default.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// [`flip`], giving up after waiting `lock_timeout` for any one lock (a
/// suspended process holding a ring singleton or partition must not make
/// it hang): then nothing is changed and the error names the sessions
/// holding locks on the runtime's tables ([`Error::Blocked`]).
pub async fn flip_bounded(
    client: &mut Client,
    stale_ms: f64,
    force: bool,
    lock_timeout: Duration,
) -> Result<FlipOutcome> {
    let result = flip_once(client, stale_ms, force, lock_timeout).await;
    super::lock_wait::name_holders(&*client, "the flip", lock_timeout, result).await
}

async fn flip_once(
    client: &mut Client,
    stale_ms: f64,
    force: bool,
    lock_timeout: Duration,
) -> Result<FlipOutcome> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| Error::db("starting the flip", e))?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = {}",
        lock_timeout.as_millis().max(1)
    ))
    .await
    .map_err(|e| Error::db("bounding the flip's lock waits", e))?;
    let mut columns = Vec::new();
    for ring in RINGS {
        let sql = lock_ring_state_sql(ring);
        let row = tx
            .query_one(&sql, &[])
            .await
            .map_err(|e| Error::db(format!("locking the {ring} ring singleton"), e))?;
        columns.push((
            ring,
            row.get::<_, i32>(0),
            row.get::<_, i32>(1),
            row.get::<_, i64>(2),
        ));
    }
    let authority: String = tx
        .query_one(LOCK_AUTHORITY, &[])
        .await
        .map_err(|e| Error::db("locking the ring-cursor authority", e))?
        .get(0);
    if authority == "ledger" {
        tx.commit()
            .await
            .map_err(|e| Error::db("finishing the flip", e))?;
        return Ok(FlipOutcome::Already);
    }
    if !force {
        let (blocking, _) = flip_readiness(&tx, stale_ms).await?;
        if !blocking.is_empty() {
            return Ok(FlipOutcome::Blocked { blocking });
        }
    }
    let skip_reconcile = failpoint::armed(failpoint::FLIP_SKIP_RECONCILE);
    let mut rings = Vec::new();
    for (ring, slot_count, slot, generation) in columns {
        rings.push(flip_ring(&tx, ring, slot_count, slot, generation, skip_reconcile).await?);
    }
    promote_ledger(&tx).await?;
    tx.commit()
        .await
        .map_err(|e| Error::db("committing the flip", e))?;
    Ok(FlipOutcome::Flipped {
        rings,
        forced: force,
    })
}

/// One ring of the flip, in its transaction: the ledger backfilled from
/// the columns (`slot_count`, `slot`, `generation`) and checked to end
/// where they do with no gap, unless the seeded defect skips that.
async fn flip_ring(
    tx: &Transaction<'_>,
    ring: &'static str,
    slot_count: i32,
    slot: i32,
    generation: i64,
    skip_reconcile: bool,
) -> Result<RingFlip> {
    let mut backfilled = 0;
    if !skip_reconcile {
        backfilled =
            super::rotation_ledger::backfill(tx, ring, slot_count, generation, false).await?;
    }
    let sql = format!(
        "SELECT slot, generation FROM awa.{ring}_ring_rotations ORDER BY generation DESC LIMIT 1"
    );
    let (ledger_slot, ledger_generation): (i32, i64) = tx
        .query_opt(&sql, &[])
        .await
        .map_err(|e| Error::db(format!("reading the {ring} ledger"), e))?
        .map(|r| (r.get(0), r.get(1)))
        .unwrap_or((-1, -1));
    if !skip_reconcile {
        let gaps = super::rotation_ledger::ledger_gaps(tx, ring, slot_count).await?;
        if (ledger_slot, ledger_generation) != (slot, generation) || gaps > 0 {
            return Err(Error::Refused(format!(
                "flip verification failed for the {ring} ring: ledger ends at (slot {ledger_slot}, generation {ledger_generation}) \
                 with {gaps} missing generations in its last wrap, columns are at (slot {slot}, generation {generation}); nothing was changed"
            )));
        }
    }
    Ok(RingFlip {
        ring: ring.to_owned(),
        columns_slot: slot,
        columns_generation: generation,
        ledger_slot,
        ledger_generation,
        backfilled,
    })
}
