//! Enqueue: single and batch, with priority, `run_at` and max attempts.

use crate::error::{Error, Result};
use tokio_postgres::Client;

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Handler kind (`rehearsal` for the built-in workload).
    pub kind: String,
    /// Queue name.
    pub queue: String,
    /// Handler arguments (a JSON object).
    pub args: serde_json::Value,
    /// Higher runs first.
    pub priority: i16,
    /// Attempts before the job is dead-lettered.
    pub max_attempts: i32,
    /// Per-attempt deadline; `None` for none.
    pub deadline_ms: Option<i32>,
    /// Earliest start (Unix ms); `None` for now.
    pub run_at_ms: Option<i64>,
}

const RESERVE_IDS: &str = "SELECT nextval('awa.job_id_seq') FROM generate_series(1, $1::int)";

/// Insert the jobs and a ready entry for each one due now. Scheduled jobs
/// wait in `jobs` until the leader promotes them.
const INSERT_JOBS: &str = "
WITH input AS (
    SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::int4[], $7::int4[], $8::int8[])
        AS t(job_id, kind, queue, args, priority, max_attempts, deadline_ms, run_at_ms)
), j AS (
    INSERT INTO awa.jobs (job_id, kind, queue, args, priority, max_attempts, deadline_ms, state, run_at)
    SELECT job_id, kind, queue, args::jsonb, priority, max_attempts, deadline_ms,
           CASE WHEN run_at_ms IS NOT NULL AND to_timestamp(run_at_ms / 1000.0) > now()
                THEN 'scheduled' ELSE 'available' END,
           CASE WHEN run_at_ms IS NULL THEN now() ELSE to_timestamp(run_at_ms / 1000.0) END
    FROM input
    RETURNING job_id, queue, priority, state
), cur AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
SELECT cur.slot, cur.generation, j.job_id, j.queue, j.priority, 0 FROM j, cur WHERE j.state = 'available'";

/// The seeded defect [`crate::failpoint::ENQUEUE_MISROUTES_SLOT`]: the
/// ready entries go to the slot after the cursor's, at its generation.
const INSERT_JOBS_MISROUTED: &str = "
WITH input AS (
    SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::int4[], $7::int4[], $8::int8[])
        AS t(job_id, kind, queue, args, priority, max_attempts, deadline_ms, run_at_ms)
), j AS (
    INSERT INTO awa.jobs (job_id, kind, queue, args, priority, max_attempts, deadline_ms, state, run_at)
    SELECT job_id, kind, queue, args::jsonb, priority, max_attempts, deadline_ms,
           CASE WHEN run_at_ms IS NOT NULL AND to_timestamp(run_at_ms / 1000.0) > now()
                THEN 'scheduled' ELSE 'available' END,
           CASE WHEN run_at_ms IS NULL THEN now() ELSE to_timestamp(run_at_ms / 1000.0) END
    FROM input
    RETURNING job_id, queue, priority, state
), cur AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
SELECT (cur.slot + 1) % n.slot_count, cur.generation, j.job_id, j.queue, j.priority, 0
FROM j, cur, awa.queue_ring_state n WHERE j.state = 'available'";

/// Take `n` job ids from the sequence, so a producer knows the ids of a
/// batch even when the commit's acknowledgement is lost.
pub async fn reserve_ids(client: &Client, n: usize) -> Result<Vec<i64>> {
    let rows = client
        .query(RESERVE_IDS, &[&(n as i32)])
        .await
        .map_err(|e| Error::db("reserving job ids", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Insert `jobs` under the given ids in one statement (one commit).
pub async fn insert_with_ids(client: &Client, ids: &[i64], jobs: &[NewJob]) -> Result<()> {
    assert_eq!(ids.len(), jobs.len(), "one id per job");
    let kinds: Vec<&str> = jobs.iter().map(|j| j.kind.as_str()).collect();
    let queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
    let args: Vec<String> = jobs.iter().map(|j| j.args.to_string()).collect();
    let prios: Vec<i16> = jobs.iter().map(|j| j.priority).collect();
    let maxes: Vec<i32> = jobs.iter().map(|j| j.max_attempts).collect();
    let deadlines: Vec<Option<i32>> = jobs.iter().map(|j| j.deadline_ms).collect();
    let run_ats: Vec<Option<i64>> = jobs.iter().map(|j| j.run_at_ms).collect();
    let sql = if crate::failpoint::armed(crate::failpoint::ENQUEUE_MISROUTES_SLOT) {
        INSERT_JOBS_MISROUTED
    } else {
        INSERT_JOBS
    };
    client
        .execute(
            sql,
            &[
                &ids, &kinds, &queues, &args, &prios, &maxes, &deadlines, &run_ats,
            ],
        )
        .await
        .map_err(|e| Error::db("enqueueing jobs", e))?;
    Ok(())
}

/// Enqueue a batch and return the new ids, in input order.
pub async fn enqueue(client: &Client, jobs: &[NewJob]) -> Result<Vec<i64>> {
    let ids = reserve_ids(client, jobs.len()).await?;
    insert_with_ids(client, &ids, jobs).await?;
    Ok(ids)
}

/// Scheduled jobs (a future `run_at`, a retry backoff, a snooze) whose
/// time has come get a ready entry in the current queue slot.
const PROMOTE_DUE: &str = "
WITH due AS (
    UPDATE awa.jobs SET state = 'available'
    WHERE job_id IN (
        SELECT job_id FROM awa.jobs WHERE state = 'scheduled' AND run_at <= now()
        ORDER BY run_at LIMIT 2000 FOR UPDATE SKIP LOCKED)
    RETURNING job_id, queue, priority, attempt
), cur AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
SELECT cur.slot, cur.generation, due.job_id, due.queue, due.priority, due.attempt FROM due, cur";

/// The seeded defect: promotion forgets `run_at`, so scheduled jobs,
/// retries and snoozes become claimable at the next promotion tick.
const PROMOTE_ANY_TIME: &str = "
WITH due AS (
    UPDATE awa.jobs SET state = 'available'
    WHERE job_id IN (
        SELECT job_id FROM awa.jobs WHERE state = 'scheduled'
        ORDER BY run_at LIMIT 2000 FOR UPDATE SKIP LOCKED)
    RETURNING job_id, queue, priority, attempt
), cur AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
SELECT cur.slot, cur.generation, due.job_id, due.queue, due.priority, due.attempt FROM due, cur";

/// Promote due scheduled jobs; returns how many.
pub async fn promote_due(client: &Client) -> Result<u64> {
    let sql = if crate::failpoint::armed(crate::failpoint::PROMOTE_IGNORES_RUN_AT) {
        PROMOTE_ANY_TIME
    } else {
        PROMOTE_DUE
    };
    client
        .execute(sql, &[])
        .await
        .map_err(|e| Error::db("promoting scheduled jobs", e))
}
