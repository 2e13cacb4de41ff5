//! Closing an attempt: complete, fail, cancel, retry, snooze, dead-letter,
//! release, and the operator's cancel. Every statement is guarded by
//! `(job_id, run_lease)` so a stale worker's result loses cleanly.
//!
//! Closure evidence goes to the claim ring's current slot, read from the
//! `claim_ring_state` columns directly (the terminal-write path).

use crate::error::{Error, Result};
use tokio_postgres::Client;

/// The tail every close shares: given a CTE `j` of closed attempts
/// (job_id, run_lease, attempt, queue, priority, kind), append closure
/// evidence, release the lease and finish the execution row.
macro_rules! close_claim {
    ($outcome:literal, $terminal:literal) => {
        concat!(
            "
, cs AS (SELECT current_slot, generation FROM awa.claim_ring_state)
, c AS (
    INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
    SELECT cs.current_slot, cs.generation, j.job_id, j.run_lease, j.attempt, ",
            $outcome,
            ", ",
            $terminal,
            ", j.queue, j.priority, j.kind FROM j, cs
)
, l AS (DELETE FROM awa.leases x USING j WHERE x.job_id = j.job_id AND x.run_lease = j.run_lease)
, e AS (
    UPDATE awa.executions x SET finished_at = now(), outcome = ",
            $outcome,
            "
    FROM j WHERE x.job_id = j.job_id AND x.run_lease = j.run_lease AND x.finished_at IS NULL
)
SELECT count(*) FROM j"
        )
    };
}
pub(crate) use close_claim;

const TERMINAL: &str = concat!(
    "WITH j AS (
    DELETE FROM awa.jobs WHERE job_id = $1 AND run_lease = $2 AND state = 'running'
    RETURNING job_id, run_lease, attempt, queue, priority, kind
)",
    close_claim!("$3::text", "true")
);

const RETRY: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'scheduled', run_at = now() + $4::float8 * interval '1 millisecond'
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running' AND attempt < max_attempts
    RETURNING job_id, run_lease, attempt, queue, priority, kind
)",
    close_claim!("$3::text", "false")
);

const SNOOZE: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'scheduled', run_at = now() + $4::float8 * interval '1 millisecond',
                        max_attempts = max_attempts + 1
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running'
    RETURNING job_id, run_lease, attempt, queue, priority, kind
)",
    close_claim!("$3::text", "false")
);

/// Exhausted attempts: the dead letter is the terminal record.
pub(crate) const DEAD_LETTER: &str = concat!(
    "WITH j AS (
    DELETE FROM awa.jobs WHERE job_id = $1 AND run_lease = $2 AND state = 'running' AND attempt >= max_attempts
    RETURNING job_id, run_lease, attempt, queue, priority, kind, args
), d AS (
    INSERT INTO awa.dead_letters (job_id, kind, queue, priority, args, attempt, run_lease, reason)
    SELECT job_id, kind, queue, priority, args, attempt, run_lease, $4 FROM j
)",
    close_claim!("$3::text", "false")
);

/// Back to ready without consuming an attempt (graceful shutdown).
const RELEASE: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'available', attempt = attempt - 1
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running'
    RETURNING job_id, run_lease, attempt + 1 AS attempt, queue, priority, kind, attempt AS next_attempt
), qc AS (SELECT slot, generation FROM awa.ring_cursor('queue'))
, q AS (
    INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
    SELECT qc.slot, qc.generation, j.job_id, j.queue, j.priority, j.next_attempt FROM j, qc
)",
    close_claim!("'released'", "false")
);

const CANCEL_BY_OPERATOR: &str = concat!(
    "WITH j AS (
    DELETE FROM awa.jobs WHERE job_id = $1
    RETURNING job_id, run_lease, attempt, queue, priority, kind
), qe AS (DELETE FROM awa.queue_entries WHERE job_id = $1)",
    close_claim!("'cancelled'", "true")
);

const MARK_STALE: &str = "UPDATE awa.executions SET finished_at = now(), outcome = 'stale'
WHERE job_id = $1 AND run_lease = $2 AND finished_at IS NULL";

/// What a handler asks for at the end of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done.
    Completed,
    /// Failed for good.
    Failed,
    /// The handler cancelled the job.
    Cancelled,
    /// Run again after a backoff, or dead-letter when attempts are spent.
    Retry { backoff_ms: f64, reason: String },
    /// Run again later without spending an attempt.
    Snooze { ms: f64 },
}

impl Outcome {
    /// The word used in closures, executions and events.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Retry { .. } => "retry",
            Outcome::Snooze { .. } => "snoozed",
        }
    }
}

/// What became of a close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The outcome was recorded.
    Accepted,
    /// Retries were spent: the job was dead-lettered.
    DeadLettered,
    /// The attempt no longer holds the job (rescued, cancelled, or a
    /// newer run lease exists): nothing was written.
    Stale,
}

async fn count(client: &Client, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) -> Result<i64> {
    let row = client.query_one(sql, params).await.map_err(|e| Error::db("closing an attempt", e))?;
    Ok(row.get(0))
}

/// Close attempt `(job_id, run_lease)` with `outcome`.
pub async fn finish(client: &Client, job_id: i64, run_lease: i64, outcome: &Outcome) -> Result<Closed> {
    let word = outcome.word();
    let n = match outcome {
        Outcome::Completed | Outcome::Failed | Outcome::Cancelled => {
            count(client, TERMINAL, &[&job_id, &run_lease, &word]).await?
        }
        Outcome::Snooze { ms } => count(client, SNOOZE, &[&job_id, &run_lease, &word, ms]).await?,
        Outcome::Retry { backoff_ms, reason } => {
            let n = count(client, RETRY, &[&job_id, &run_lease, &word, backoff_ms]).await?;
            if n == 0 {
                let reason = format!("attempts exhausted: {reason}");
                if count(client, DEAD_LETTER, &[&job_id, &run_lease, &"dead_lettered", &reason]).await? > 0 {
                    return Ok(Closed::DeadLettered);
                }
            }
            n
        }
    };
    if n > 0 {
        return Ok(Closed::Accepted);
    }
    client
        .execute(MARK_STALE, &[&job_id, &run_lease])
        .await
        .map_err(|e| Error::db("recording a stale completion", e))?;
    Ok(Closed::Stale)
}

/// Put a claimed attempt back to ready without spending an attempt.
pub async fn release(client: &Client, job_id: i64, run_lease: i64) -> Result<bool> {
    Ok(count(client, RELEASE, &[&job_id, &run_lease]).await? > 0)
}

/// Cancel a job in any live state (`awa job cancel`). Returns false when
/// the job is not live (already terminal or unknown).
pub async fn cancel_by_operator(client: &Client, job_id: i64) -> Result<bool> {
    Ok(count(client, CANCEL_BY_OPERATOR, &[&job_id]).await? > 0)
}
