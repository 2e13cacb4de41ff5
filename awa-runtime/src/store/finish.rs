//! Closing an attempt: complete, fail, cancel, retry, snooze, dead-letter,
//! release, and the operator's cancel. Every statement is guarded by
//! `(job_id, run_lease)` so a stale worker's result loses cleanly.
//!
//! Closure evidence goes to the claim ring's current slot, read through
//! the authority-aware resolver (0.6 read the columns directly here,
//! which is why the flip must fence them).

use crate::error::{Error, Result};
use tokio_postgres::{Client, ToStatement};

pub use crate::outcome::Outcome;

/// The tail every close shares: given a CTE `j` of closed attempts
/// (job_id, run_lease, attempt, queue, priority, kind, outcome), append closure
/// evidence, release the lease and finish the execution row; returns the
/// closed (job_id, run_lease) pairs.
macro_rules! close_claim {
    ($terminal:literal) => {
        concat!(
            "
, cs AS (SELECT slot AS current_slot, generation FROM awa.flip_aware_ring_cursor('claim'))
, c AS (
    INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
    SELECT cs.current_slot, cs.generation, j.job_id, j.run_lease, j.attempt, j.outcome, ",
            $terminal,
            ", j.queue, j.priority, j.kind FROM j, cs
)
, l AS (DELETE FROM awa.leases x USING j WHERE x.job_id = j.job_id AND x.run_lease = j.run_lease)
, e AS (
    UPDATE awa.executions x SET finished_at = now(), outcome = j.outcome
    FROM j WHERE x.job_id = j.job_id AND x.run_lease = j.run_lease AND x.finished_at IS NULL
)
SELECT j.job_id, j.run_lease FROM j"
        )
    };
}
pub(crate) use close_claim;

/// Terminal outcomes of a batch of attempts, one statement.
pub const TERMINAL: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[]) AS t(job_id, run_lease, outcome))
, j AS (
    DELETE FROM awa.jobs USING input i
    WHERE jobs.job_id = i.job_id AND jobs.run_lease = i.run_lease AND jobs.state = 'running'
    RETURNING jobs.job_id, jobs.run_lease, jobs.attempt, jobs.queue, jobs.priority, jobs.kind, i.outcome
)",
    close_claim!("true")
);

/// The seeded defect: the guard forgets the run lease, so a stale
/// worker's result closes whatever attempt of the job is running now, and
/// the closure names the stale lease.
const TERMINAL_ANY_LEASE: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[]) AS t(job_id, run_lease, outcome))
, j AS (
    DELETE FROM awa.jobs USING input i
    WHERE jobs.job_id = i.job_id AND jobs.state = 'running'
    RETURNING jobs.job_id, i.run_lease, jobs.attempt, jobs.queue, jobs.priority, jobs.kind, i.outcome
)",
    close_claim!("true")
);

/// The seeded defect: the guard forgets the run lease and the record
/// takes the closed attempt's own lease, so a stale worker's result
/// closes the attempt running now as if that attempt had produced it.
const TERMINAL_NEWER_ATTEMPT: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[]) AS t(job_id, run_lease, outcome))
, j AS (
    DELETE FROM awa.jobs USING input i
    WHERE jobs.job_id = i.job_id AND jobs.state = 'running'
    RETURNING jobs.job_id, jobs.run_lease, jobs.attempt, jobs.queue, jobs.priority, jobs.kind, i.outcome
)",
    close_claim!("true")
);

/// The terminal statement this build runs ([`TERMINAL`], unless a seeded
/// defect replaces it).
pub fn terminal_statement() -> &'static str {
    if crate::failpoint::armed(crate::failpoint::FINISH_IGNORES_RUN_LEASE) {
        TERMINAL_ANY_LEASE
    } else if crate::failpoint::armed(crate::failpoint::FINISH_CLOSES_NEWER_ATTEMPT) {
        TERMINAL_NEWER_ATTEMPT
    } else {
        TERMINAL
    }
}

const RETRY: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'scheduled', run_at = now() + $4::float8 * interval '1 millisecond'
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running' AND attempt < max_attempts
    RETURNING job_id, run_lease, attempt, queue, priority, kind, $3::text AS outcome
)",
    close_claim!("false")
);

const SNOOZE: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'scheduled', run_at = now() + $4::float8 * interval '1 millisecond',
                        max_attempts = max_attempts + 1
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running'
    RETURNING job_id, run_lease, attempt, queue, priority, kind, $3::text AS outcome
)",
    close_claim!("false")
);

/// Exhausted attempts: the dead letter is the terminal record.
pub(crate) const DEAD_LETTER: &str = concat!(
    "WITH j AS (
    DELETE FROM awa.jobs WHERE job_id = $1 AND run_lease = $2 AND state = 'running' AND attempt >= max_attempts
    RETURNING job_id, run_lease, attempt, queue, priority, kind, args, $3::text AS outcome
), d AS (
    INSERT INTO awa.dead_letters (job_id, kind, queue, priority, args, attempt, run_lease, reason)
    SELECT job_id, kind, queue, priority, args, attempt, run_lease, $4 FROM j
)",
    close_claim!("false")
);

/// Back to ready without consuming an attempt (graceful shutdown).
const RELEASE: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'available', attempt = attempt - 1
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running'
    RETURNING job_id, run_lease, attempt + 1 AS attempt, queue, priority, kind, attempt AS next_attempt,
              'released'::text AS outcome
), qc AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
, q AS (
    INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
    SELECT qc.slot, qc.generation, j.job_id, j.queue, j.priority, j.next_attempt FROM j, qc
)",
    close_claim!("false")
);

/// The seeded defect: the attempt goes back to ready with its number
/// kept, so its next claim spends one more.
const RELEASE_SPENDING: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'available'
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running'
    RETURNING job_id, run_lease, attempt, queue, priority, kind, attempt AS next_attempt,
              'released'::text AS outcome
), qc AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
, q AS (
    INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
    SELECT qc.slot, qc.generation, j.job_id, j.queue, j.priority, j.next_attempt FROM j, qc
)",
    close_claim!("false")
);

const CANCEL_BY_OPERATOR: &str = concat!(
    "WITH j AS (
    DELETE FROM awa.jobs WHERE job_id = $1
    RETURNING job_id, run_lease, attempt, queue, priority, kind, 'cancelled'::text AS outcome
), qe AS (DELETE FROM awa.queue_entries WHERE job_id = $1)",
    close_claim!("true")
);

/// The seeded defect's test: the job is running.
const IS_RUNNING: &str = "SELECT 1 FROM awa.jobs WHERE job_id = $1 AND state = 'running'";

const MARK_STALE: &str = "UPDATE awa.executions x SET finished_at = now(), outcome = 'stale'
FROM unnest($1::int8[], $2::int8[]) AS t(job_id, run_lease)
WHERE x.job_id = t.job_id AND x.run_lease = t.run_lease AND x.finished_at IS NULL";

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

async fn closed<S: ToStatement + ?Sized>(
    client: &Client,
    sql: &S,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<i64>> {
    let rows = client
        .query(sql, params)
        .await
        .map_err(|e| Error::db("closing an attempt", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

async fn mark_stale(client: &Client, stale: &[(i64, i64)]) -> Result<()> {
    if stale.is_empty() {
        return Ok(());
    }
    let jobs: Vec<i64> = stale.iter().map(|s| s.0).collect();
    let runs: Vec<i64> = stale.iter().map(|s| s.1).collect();
    client
        .execute(MARK_STALE, &[&jobs, &runs])
        .await
        .map_err(|e| Error::db("recording stale completions", e))?;
    Ok(())
}

/// Close attempt `(job_id, run_lease)` with `outcome`.
pub async fn finish(
    client: &Client,
    job_id: i64,
    run_lease: i64,
    outcome: &Outcome,
) -> Result<Closed> {
    Ok(finish_many(client, &[(job_id, run_lease, outcome.clone())]).await?[0])
}

/// Close a batch of attempts. Terminal outcomes go in one statement;
/// retries and snoozes (rarer) one statement each. Returns one `Closed`
/// per input, in order.
pub async fn finish_many(client: &Client, batch: &[(i64, i64, Outcome)]) -> Result<Vec<Closed>> {
    finish_many_with(client, terminal_statement(), batch).await
}

/// [`finish_many`] with the terminal statement given
/// ([`terminal_statement`], or it prepared).
pub async fn finish_many_with<S: ToStatement + ?Sized>(
    client: &Client,
    terminal_stmt: &S,
    batch: &[(i64, i64, Outcome)],
) -> Result<Vec<Closed>> {
    let mut result = vec![Closed::Stale; batch.len()];
    let terminal: Vec<usize> = (0..batch.len())
        .filter(|i| {
            matches!(
                batch[*i].2,
                Outcome::Completed | Outcome::Failed | Outcome::Cancelled
            )
        })
        .collect();
    if !terminal.is_empty() {
        let jobs: Vec<i64> = terminal.iter().map(|i| batch[*i].0).collect();
        let runs: Vec<i64> = terminal.iter().map(|i| batch[*i].1).collect();
        let words: Vec<&str> = terminal.iter().map(|i| batch[*i].2.word()).collect();
        let done = closed(client, terminal_stmt, &[&jobs, &runs, &words]).await?;
        for i in &terminal {
            if done.contains(&batch[*i].0) {
                result[*i] = Closed::Accepted;
            }
        }
    }
    for (i, (job_id, run_lease, outcome)) in batch.iter().enumerate() {
        let word = outcome.word();
        match outcome {
            Outcome::Completed | Outcome::Failed | Outcome::Cancelled => {}
            Outcome::Snooze { ms } => {
                if !closed(client, SNOOZE, &[job_id, run_lease, &word, ms])
                    .await?
                    .is_empty()
                {
                    result[i] = Closed::Accepted;
                }
            }
            Outcome::Retry { backoff_ms, reason } => {
                if !closed(client, RETRY, &[job_id, run_lease, &word, backoff_ms])
                    .await?
                    .is_empty()
                {
                    result[i] = Closed::Accepted;
                } else {
                    let reason = format!("attempts exhausted: {reason}");
                    if !closed(
                        client,
                        DEAD_LETTER,
                        &[job_id, run_lease, &"dead_lettered", &reason],
                    )
                    .await?
                    .is_empty()
                    {
                        result[i] = Closed::DeadLettered;
                    }
                }
            }
        }
    }
    let stale: Vec<(i64, i64)> = batch
        .iter()
        .zip(&result)
        .filter(|(_, c)| **c == Closed::Stale)
        .map(|(b, _)| (b.0, b.1))
        .collect();
    mark_stale(client, &stale).await?;
    Ok(result)
}

/// Put a claimed attempt back to ready without spending an attempt.
pub async fn release(client: &Client, job_id: i64, run_lease: i64) -> Result<bool> {
    let sql = if crate::failpoint::armed(crate::failpoint::RELEASE_SPENDS_ATTEMPT) {
        RELEASE_SPENDING
    } else {
        RELEASE
    };
    Ok(!closed(client, sql, &[&job_id, &run_lease])
        .await?
        .is_empty())
}

/// Cancel a job in any live state (`awa job cancel`). Returns false when
/// the job is not live (already terminal or unknown).
pub async fn cancel_by_operator(client: &Client, job_id: i64) -> Result<bool> {
    if crate::failpoint::armed(crate::failpoint::CANCEL_IGNORES_RUNNING) {
        let running = client
            .query_opt(IS_RUNNING, &[&job_id])
            .await
            .map_err(|e| Error::db("reading the job to cancel", e))?;
        if running.is_some() {
            return Ok(true);
        }
    }
    Ok(!closed(client, CANCEL_BY_OPERATOR, &[&job_id])
        .await?
        .is_empty())
}
