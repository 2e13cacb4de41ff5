//! Interrupted attempts: the rescue of every attempt the caller killed,
//! and every attempt a rescue closed, for the caller to hold against the
//! faults it injected.

use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

/// For each killed attempt `(job_id, attempt, run_lease)`: its execution
/// must have been closed by rescue, and the job must have run the next
/// attempt, or have been dead-lettered by that rescue (its last attempt).
/// An attempt the killed process closed itself (a normal outcome: the
/// close committed, the `finished` line died with the process) was not
/// interrupted; the `(job_id, run_lease)` guard means no one else can
/// write a normal outcome for it. Returns the attempts where rescue is
/// not proven.
pub const UNPROVEN_RESCUES: &str = r"
WITH k AS (SELECT DISTINCT * FROM unnest($1::int8[], $2::int4[], $3::int8[]) AS k(job_id, attempt, run_lease))
SELECT k.job_id, k.attempt, k.run_lease, e.outcome,
       EXISTS (SELECT 1 FROM awa.executions n WHERE n.job_id = k.job_id AND n.attempt = k.attempt + 1) AS next_attempt,
       EXISTS (SELECT 1 FROM awa.dead_letters d
               WHERE d.job_id = k.job_id AND d.attempt = k.attempt AND d.run_lease = k.run_lease) AS dead_lettered
FROM k LEFT JOIN awa.executions e ON e.job_id = k.job_id AND e.run_lease = k.run_lease
WHERE NOT coalesce(e.outcome IN ('completed', 'failed', 'cancelled', 'retry', 'snoozed', 'dead_lettered'), false)
  AND NOT (coalesce(e.outcome LIKE 'rescued\_%', false)
           AND (EXISTS (SELECT 1 FROM awa.executions n WHERE n.job_id = k.job_id AND n.attempt = k.attempt + 1)
                OR EXISTS (SELECT 1 FROM awa.dead_letters d
                           WHERE d.job_id = k.job_id AND d.attempt = k.attempt AND d.run_lease = k.run_lease)))
ORDER BY k.job_id, k.run_lease";

/// A killed attempt whose rescue the storage does not prove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnprovenRescue {
    pub job_id: i64,
    pub attempt: i32,
    pub run_lease: i64,
    /// The execution's outcome (`None`: no such execution, or never closed).
    pub outcome: Option<String>,
    /// The job ran attempt `attempt + 1`.
    pub next_attempt: bool,
    /// That attempt was dead-lettered.
    pub dead_lettered: bool,
}

/// Check the rescue of every killed attempt `(job_id, attempt, run_lease)`.
pub async fn unproven_rescues(
    client: &Client,
    killed: &[(i64, i32, i64)],
) -> Result<Vec<UnprovenRescue>> {
    if killed.is_empty() {
        return Ok(vec![]);
    }
    let jobs: Vec<i64> = killed.iter().map(|k| k.0).collect();
    let attempts: Vec<i32> = killed.iter().map(|k| k.1).collect();
    let leases: Vec<i64> = killed.iter().map(|k| k.2).collect();
    let rows = client
        .query(UNPROVEN_RESCUES, &[&jobs, &attempts, &leases])
        .await
        .map_err(|e| Error::db("checking the rescue of killed attempts", e))?;
    Ok(rows
        .iter()
        .map(|r| UnprovenRescue {
            job_id: r.get(0),
            attempt: r.get(1),
            run_lease: r.get(2),
            outcome: r.get(3),
            next_attempt: r.get(4),
            dead_lettered: r.get(5),
        })
        .collect())
}

/// Every attempt of an audited job that a rescue closed, with the runtime
/// that ran it and the job's mode: what the caller holds against the
/// faults it injected. A lost lease whose run was really aborted is one
/// of these too (the rescue closed its execution); one its own close
/// recorded, or an operator's cancel took, is not an interruption.
pub const RESCUED_ATTEMPTS: &str = r"
SELECT e.job_id, e.run_lease, e.attempt, substr(e.outcome, 9), e.instance_id, a.mode,
       (extract(epoch FROM e.finished_at) * 1000)::int8, e.version
FROM awa.executions e JOIN audit_jobs a ON a.job_id = e.job_id
WHERE e.outcome LIKE 'rescued\_%'
ORDER BY e.job_id, e.run_lease";

/// An attempt a rescue closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RescuedAttempt {
    pub job_id: i64,
    pub run_lease: i64,
    pub attempt: i32,
    /// `deadline`, `crash` or `heartbeat` (`rescued_<reason>`).
    pub reason: String,
    /// The runtime that ran it.
    pub instance_id: String,
    /// The job's mode, as the audit set has it.
    pub mode: String,
    /// When the rescue closed it, Unix ms by the database's clock (the
    /// closing transaction's start).
    pub finished_at_unix_ms: Option<i64>,
    /// The version of the binary that ran it.
    pub version: String,
}

/// Every rescued attempt of an audited job ([`RESCUED_ATTEMPTS`]). Run it
/// in the transaction that loaded the audit set.
pub async fn rescued_attempts(client: &Client) -> Result<Vec<RescuedAttempt>> {
    let rows = client
        .query(RESCUED_ATTEMPTS, &[])
        .await
        .map_err(|e| Error::db("reading rescued attempts", e))?;
    Ok(rows
        .iter()
        .map(|r| RescuedAttempt {
            job_id: r.get(0),
            run_lease: r.get(1),
            attempt: r.get(2),
            reason: r.get(3),
            instance_id: r.get(4),
            mode: r.get(5),
            finished_at_unix_ms: r.get(6),
            version: r.get(7),
        })
        .collect())
}
