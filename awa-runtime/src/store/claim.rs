//! Claim: take ready entries, write a claim receipt and a run lease, and
//! record the handler run, all in one statement. Since 0.7 a claim's
//! deadline is written as a compact claim batch (`awa.claim_batches`),
//! not on the lease: a 0.6 leader does not scan it, so deadline rescue of
//! such claims waits for a 0.7 leader (the documented ADR-041 limitation).

use crate::error::{Error, Result};
use tokio_postgres::{Client, ToStatement};

/// A claimed attempt.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub job_id: i64,
    pub kind: String,
    pub queue: String,
    pub args: serde_json::Value,
    pub priority: i16,
    /// This attempt's number (1 for the first run).
    pub attempt: i32,
    pub max_attempts: i32,
    /// The run lease; completion must present it.
    pub run_lease: i64,
    pub deadline_ms: Option<i32>,
}

/// The claim statement. Joins go through `= ANY (ARRAY(...))` so the
/// generic plan of the prepared statement keeps to index scans.
/// (Prepare it once per connection on hot paths).
///
/// The execution's `started_at` is `clock_timestamp()`, read after the
/// statement's snapshot. `now()` is the transaction's start, taken at the
/// Bind, before the plan's locks are held (a prune holds a ring partition
/// `ACCESS EXCLUSIVE`; a busy machine deschedules the backend while it
/// plans); a promotion that commits in between is visible to the
/// snapshot, so `now()` could put the start of a retry, a snooze or a
/// scheduled job before its `run_at` though it was claimable only after
/// it (`tests/claim_clock.rs`; the 0.6 releases record `now()`).
///
/// The lease's first heartbeat and the claim batch's deadline are read
/// from the same clock, for the same reason: a claim that waited longer
/// than `stale_after` for a held ring partition (a frozen leader's prune,
/// a flip) wrote, with `now()`, a lease already stale on arrival and a
/// deadline already spent, and the leader rescued the healthy attempt it
/// had just started (found by `flip-blocked-by-suspended-leader`: a claim
/// that waited 9 s behind a suspended 0.6.2 leader, rescued "heartbeat"
/// 137 ms after it started).
pub const CLAIM: &str = "
WITH picked AS (
    SELECT job_id FROM awa.queue_entries
    WHERE queue = $1
    ORDER BY priority DESC, job_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), taken AS (
    DELETE FROM awa.queue_entries WHERE job_id = ANY (ARRAY(SELECT job_id FROM picked)) RETURNING job_id
), j AS (
    UPDATE awa.jobs SET state = 'running', attempt = jobs.attempt + 1, run_lease = jobs.run_lease + 1
    WHERE jobs.job_id = ANY (ARRAY(SELECT job_id FROM taken)) AND jobs.state = 'available'
    RETURNING jobs.job_id, jobs.kind, jobs.queue, jobs.args::text AS args, jobs.priority,
              jobs.attempt, jobs.max_attempts, jobs.run_lease, jobs.deadline_ms
), cc AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('claim')),
lc AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('lease')),
r AS (
    INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id)
    SELECT cc.slot, cc.generation, j.job_id, j.run_lease, j.attempt, $3 FROM j, cc
), l AS (
    -- First heartbeat and deadline from the clock after the snapshot,
    -- as `started_at` below: not stale or spent on arrival.
    INSERT INTO awa.leases (slot, generation, job_id, run_lease, attempt, instance_id, heartbeat_at)
    SELECT lc.slot, lc.generation, j.job_id, j.run_lease, j.attempt, $3, clock_timestamp() FROM j, lc
), b AS (
    -- Deadlines go to one compact claim-batch row per distinct deadline.
    INSERT INTO awa.claim_batches (instance_id, deadline_at, job_ids, run_leases)
    SELECT $3, clock_timestamp() + j.deadline_ms * interval '1 millisecond', array_agg(j.job_id), array_agg(j.run_lease)
    FROM j WHERE j.deadline_ms IS NOT NULL GROUP BY j.deadline_ms
), e AS (
    -- The attempt starts when the claim could first see the job: the
    -- clock after the statement's snapshot, not now(), the transaction's
    -- start, which precedes it by however long the claim waited for its
    -- plan's locks or the CPU (see `CLAIM`).
    INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, started_at)
    SELECT j.job_id, j.run_lease, j.attempt, $3, $4, clock_timestamp() FROM j
)
SELECT job_id, kind, queue, args, priority, attempt, max_attempts, run_lease, deadline_ms FROM j";

/// Claim up to `limit` ready jobs from `queue` for `instance_id`.
pub async fn claim(
    client: &Client,
    queue: &str,
    limit: i64,
    instance_id: &str,
    version: &str,
) -> Result<Vec<Claimed>> {
    claim_with(client, CLAIM, queue, limit, instance_id, version).await
}

/// [`claim`] with the statement given (`CLAIM`, or it prepared).
pub async fn claim_with<S: ToStatement + ?Sized>(
    client: &Client,
    stmt: &S,
    queue: &str,
    limit: i64,
    instance_id: &str,
    version: &str,
) -> Result<Vec<Claimed>> {
    let rows = client
        .query(stmt, &[&queue, &limit, &instance_id, &version])
        .await
        .map_err(|e| Error::db("claiming jobs", e))?;
    Ok(rows
        .iter()
        .map(|r| Claimed {
            job_id: r.get(0),
            kind: r.get(1),
            queue: r.get(2),
            args: serde_json::from_str(r.get::<_, &str>(3)).unwrap_or(serde_json::Value::Null),
            priority: r.get(4),
            attempt: r.get(5),
            max_attempts: r.get(6),
            run_lease: r.get(7),
            deadline_ms: r.get(8),
        })
        .collect())
}
