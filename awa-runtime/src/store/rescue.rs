//! Rescue by the maintenance leader: attempts past their deadline
//! (deadline rescue, from compact claim batches and from 0.6 leases), attempts of a runtime whose heartbeat is stale or
//! gone (crash rescue), and attempts whose own heartbeat is stale
//! (heartbeat rescue). A rescued attempt is closed with a rescue outcome
//! and its job re-queued, or dead-lettered when its attempts are spent.

use super::finish::{DEAD_LETTER, close_claim};
use crate::error::{Error, Result};
use tokio_postgres::Client;

const FIND: &str = "
SELECT m.job_id, m.run_lease, 'deadline'
FROM awa.claim_batches cb
CROSS JOIN LATERAL unnest(cb.job_ids, cb.run_leases) AS m(job_id, run_lease)
JOIN awa.jobs j ON j.job_id = m.job_id AND j.run_lease = m.run_lease AND j.state = 'running'
WHERE cb.deadline_at < now()
UNION ALL
SELECT l.job_id, l.run_lease,
       CASE WHEN l.deadline_at IS NOT NULL AND l.deadline_at < now() THEN 'deadline'
            WHEN ri.instance_id IS NULL OR ri.heartbeat_at < now() - $1::float8 * interval '1 millisecond' THEN 'crash'
            ELSE 'heartbeat' END
FROM awa.leases l
LEFT JOIN awa.runtime_instances ri ON ri.instance_id = l.instance_id
WHERE (l.deadline_at IS NOT NULL AND l.deadline_at < now())
   OR l.heartbeat_at < now() - $1::float8 * interval '1 millisecond'
   OR ri.instance_id IS NULL
   OR ri.heartbeat_at < now() - $1::float8 * interval '1 millisecond'
LIMIT 500";

const REQUEUE: &str = concat!(
    "WITH j AS (
    UPDATE awa.jobs SET state = 'available'
    WHERE job_id = $1 AND run_lease = $2 AND state = 'running' AND attempt < max_attempts
    RETURNING job_id, run_lease, attempt, queue, priority, kind, $3::text AS outcome
), qc AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
, q AS (
    INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
    SELECT qc.slot, qc.generation, j.job_id, j.queue, j.priority, j.attempt FROM j, qc
)",
    close_claim!("false")
);

/// Claim batches none of whose attempts is still running.
const DROP_SPENT_BATCHES: &str = "
DELETE FROM awa.claim_batches cb WHERE NOT EXISTS (
    SELECT 1 FROM unnest(cb.job_ids, cb.run_leases) AS m(job_id, run_lease)
    JOIN awa.jobs j ON j.job_id = m.job_id AND j.run_lease = m.run_lease AND j.state = 'running')";

const DROP_LEASE: &str = "DELETE FROM awa.leases WHERE job_id = $1 AND run_lease = $2";

/// Why an attempt was rescued; the word is the `rescued` event's `reason`
/// and the closure's `rescued_<word>` outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RescueReason {
    /// Past its deadline.
    Deadline,
    /// Its runtime's heartbeat is stale or the runtime is gone.
    Crash,
    /// Its own heartbeat is stale.
    Heartbeat,
}

impl RescueReason {
    /// The word in events and outcomes.
    pub fn word(self) -> &'static str {
        match self {
            RescueReason::Deadline => "deadline",
            RescueReason::Crash => "crash",
            RescueReason::Heartbeat => "heartbeat",
        }
    }

    /// The reason `FIND` selected.
    fn from_found(word: &str) -> Option<RescueReason> {
        [
            RescueReason::Deadline,
            RescueReason::Crash,
            RescueReason::Heartbeat,
        ]
        .into_iter()
        .find(|r| r.word() == word)
    }
}

impl std::fmt::Display for RescueReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// One rescued attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescued {
    pub job_id: i64,
    pub run_lease: i64,
    /// Which rescue took it.
    pub reason: RescueReason,
    /// True when the job was dead-lettered instead of re-queued.
    pub dead: bool,
}

/// Rescue every attempt that needs it; `stale_ms` is the heartbeat age
/// after which an attempt or a runtime counts as gone.
pub async fn rescue(client: &mut Client, stale_ms: f64) -> Result<Vec<Rescued>> {
    let found = client
        .query(FIND, &[&stale_ms])
        .await
        .map_err(|e| Error::db("finding attempts to rescue", e))?;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in found {
        let (job_id, run_lease, found): (i64, i64, String) = (row.get(0), row.get(1), row.get(2));
        let Some(reason) = RescueReason::from_found(&found) else {
            return Err(Error::Db {
                context: "finding attempts to rescue".into(),
                detail: format!("the query gave an unknown reason {found:?}"),
                transient: false,
                sqlstate: None,
            });
        };
        if !seen.insert((job_id, run_lease)) {
            continue;
        }
        let outcome = format!("rescued_{reason}");
        let tx = client
            .transaction()
            .await
            .map_err(|e| Error::db("rescuing an attempt", e))?;
        let requeued = tx
            .query(REQUEUE, &[&job_id, &run_lease, &outcome])
            .await
            .map_err(|e| Error::db("rescuing an attempt", e))?
            .len();
        let mut dead = false;
        if requeued == 0 {
            let why = format!("attempts exhausted: {reason} rescue");
            dead = !tx
                .query(DEAD_LETTER, &[&job_id, &run_lease, &outcome, &why])
                .await
                .map_err(|e| Error::db("dead-lettering a rescued attempt", e))?
                .is_empty();
        }
        // An orphan lease (its attempt already closed) is just dropped.
        tx.execute(DROP_LEASE, &[&job_id, &run_lease])
            .await
            .map_err(|e| Error::db("dropping a rescued lease", e))?;
        tx.commit()
            .await
            .map_err(|e| Error::db("committing a rescue", e))?;
        if requeued > 0 || dead {
            out.push(Rescued {
                job_id,
                run_lease,
                reason,
                dead,
            });
        }
    }
    client
        .execute(DROP_SPENT_BATCHES, &[])
        .await
        .map_err(|e| Error::db("dropping spent claim batches", e))?;
    Ok(out)
}
