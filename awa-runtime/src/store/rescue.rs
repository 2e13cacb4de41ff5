//! Rescue by the maintenance leader: attempts past their deadline
//! (deadline rescue, from compact claim batches and from 0.6 leases), attempts of a runtime whose heartbeat is stale or
//! gone (crash rescue), and attempts whose own heartbeat is stale
//! (heartbeat rescue). A rescued attempt is closed with a rescue outcome
//! and its job re-queued, or dead-lettered when its attempts are spent.

use super::finish::close_claim;
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

/// The seeded defect: [`FIND`], and the healthy first run of every tenth
/// job, its lease's heartbeat fresh, as a heartbeat rescue.
const FIND_WITH_HEALTHY: &str = "
SELECT job_id, run_lease, reason FROM (
    SELECT m.job_id, m.run_lease, 'deadline' AS reason
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
       OR (l.job_id % 10 = 0 AND l.run_lease = 1)
) found
LIMIT 500";

/// The statement that finds what to rescue ([`FIND`], unless a seeded
/// defect replaces it).
fn find_statement() -> &'static str {
    if crate::failpoint::armed(crate::failpoint::RESCUE_HEALTHY_ATTEMPTS) {
        FIND_WITH_HEALTHY
    } else {
        FIND
    }
}

/// The job rows of one rescue pass (`$1` job ids, `$2` run leases),
/// locked up front in job order. Workers close and heartbeat in their own
/// order, so a pass can still meet one in a deadlock; PostgreSQL then
/// rolls one side back, and the leader tries its pass again at the next
/// tick (`maintenance::rescue_pass`).
const LOCK: &str = "
SELECT j.job_id FROM awa.jobs j
JOIN unnest($1::int8[], $2::int8[]) AS i(job_id, run_lease)
  ON j.job_id = i.job_id AND j.run_lease = i.run_lease
WHERE j.state = 'running'
ORDER BY j.job_id
FOR UPDATE OF j";

/// Re-queue the pass's attempts that have attempts left.
const REQUEUE: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[]) AS t(job_id, run_lease, outcome))
, j AS (
    UPDATE awa.jobs SET state = 'available' FROM input i
    WHERE jobs.job_id = i.job_id AND jobs.run_lease = i.run_lease AND jobs.state = 'running'
      AND jobs.attempt < jobs.max_attempts
    RETURNING jobs.job_id, jobs.run_lease, jobs.attempt, jobs.queue, jobs.priority, jobs.kind, i.outcome
), qc AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
, q AS (
    INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
    SELECT qc.slot, qc.generation, j.job_id, j.queue, j.priority, j.attempt FROM j, qc
)",
    close_claim!("false")
);

/// The seeded defect: the job goes back to `available` without a ready
/// entry, where no claim looks.
const REQUEUE_WITHOUT_ENTRY: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[]) AS t(job_id, run_lease, outcome))
, j AS (
    UPDATE awa.jobs SET state = 'available' FROM input i
    WHERE jobs.job_id = i.job_id AND jobs.run_lease = i.run_lease AND jobs.state = 'running'
      AND jobs.attempt < jobs.max_attempts
    RETURNING jobs.job_id, jobs.run_lease, jobs.attempt, jobs.queue, jobs.priority, jobs.kind, i.outcome
)",
    close_claim!("false")
);

/// The re-queue statement this build runs ([`REQUEUE`], unless a seeded
/// defect replaces it).
fn requeue_statement() -> &'static str {
    if crate::failpoint::armed(crate::failpoint::RESCUE_REQUEUES_WITHOUT_ENTRY) {
        REQUEUE_WITHOUT_ENTRY
    } else {
        REQUEUE
    }
}

/// Dead-letter the pass's attempts that spent their last attempt (`$4`
/// the reasons).
const DEAD_LETTER: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[]) AS t(job_id, run_lease, outcome, reason))
, j AS (
    DELETE FROM awa.jobs USING input i
    WHERE jobs.job_id = i.job_id AND jobs.run_lease = i.run_lease AND jobs.state = 'running'
      AND jobs.attempt >= jobs.max_attempts
    RETURNING jobs.job_id, jobs.run_lease, jobs.attempt, jobs.queue, jobs.priority, jobs.kind, jobs.args,
              i.outcome, i.reason
), d AS (
    INSERT INTO awa.dead_letters (job_id, kind, queue, priority, args, attempt, run_lease, reason)
    SELECT job_id, kind, queue, priority, args, attempt, run_lease, reason FROM j
)",
    close_claim!("false")
);

/// Claim batches none of whose attempts is still running.
const DROP_SPENT_BATCHES: &str = "
DELETE FROM awa.claim_batches cb WHERE NOT EXISTS (
    SELECT 1 FROM unnest(cb.job_ids, cb.run_leases) AS m(job_id, run_lease)
    JOIN awa.jobs j ON j.job_id = m.job_id AND j.run_lease = m.run_lease AND j.state = 'running')";

/// The pass's leases, those of attempts closed already (orphans) too.
const DROP_LEASES: &str = "
DELETE FROM awa.leases l USING unnest($1::int8[], $2::int8[]) AS i(job_id, run_lease)
WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease";

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
///
/// One transaction for the whole pass, a statement per kind of step
/// (lock, re-queue, dead-letter, drop leases) rather than per attempt: a
/// new leader inherits every attempt of the runtimes that died before
/// it, and at one transaction of five round trips each, 50 attempts took
/// it 6 s on a loaded machine, all that time without rotation, cron or
/// promotion, while overrunning handlers waited on their rescue.
pub async fn rescue(client: &mut Client, stale_ms: f64) -> Result<Vec<Rescued>> {
    let found = client
        .query(find_statement(), &[&stale_ms])
        .await
        .map_err(|e| Error::db("finding attempts to rescue", e))?;
    let mut pass = Pass::default();
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
        if seen.insert((job_id, run_lease)) {
            pass.push(job_id, run_lease, reason);
        }
    }
    let out = if pass.job_ids.is_empty() {
        Vec::new()
    } else {
        pass.run(client).await?
    };
    client
        .execute(DROP_SPENT_BATCHES, &[])
        .await
        .map_err(|e| Error::db("dropping spent claim batches", e))?;
    Ok(out)
}

/// The attempts of one rescue pass, as the batch statements take them.
#[derive(Default)]
struct Pass {
    job_ids: Vec<i64>,
    run_leases: Vec<i64>,
    reasons: Vec<RescueReason>,
    outcomes: Vec<String>,
    why: Vec<String>,
}

impl Pass {
    fn push(&mut self, job_id: i64, run_lease: i64, reason: RescueReason) {
        self.job_ids.push(job_id);
        self.run_leases.push(run_lease);
        self.reasons.push(reason);
        self.outcomes.push(format!("rescued_{reason}"));
        self.why
            .push(format!("attempts exhausted: {reason} rescue"));
    }

    /// Closes every attempt of the pass in one transaction: re-queued, or
    /// dead-lettered when its attempts are spent; an orphan lease (its
    /// attempt already closed) is just dropped.
    async fn run(&self, client: &mut Client) -> Result<Vec<Rescued>> {
        let ids = (&self.job_ids, &self.run_leases);
        let tx = client
            .transaction()
            .await
            .map_err(|e| Error::db("rescuing attempts", e))?;
        tx.query(LOCK, &[ids.0, ids.1])
            .await
            .map_err(|e| Error::db("locking the jobs to rescue", e))?;
        let requeued = closed_ids(
            tx.query(requeue_statement(), &[ids.0, ids.1, &self.outcomes])
                .await
                .map_err(|e| Error::db("rescuing attempts", e))?,
        );
        let dead = closed_ids(
            tx.query(DEAD_LETTER, &[ids.0, ids.1, &self.outcomes, &self.why])
                .await
                .map_err(|e| Error::db("dead-lettering rescued attempts", e))?,
        );
        tx.execute(DROP_LEASES, &[ids.0, ids.1])
            .await
            .map_err(|e| Error::db("dropping rescued leases", e))?;
        tx.commit()
            .await
            .map_err(|e| Error::db("committing a rescue", e))?;
        Ok((0..self.job_ids.len())
            .filter_map(|i| {
                let key = (self.job_ids[i], self.run_leases[i]);
                let dead = dead.contains(&key);
                (dead || requeued.contains(&key)).then_some(Rescued {
                    job_id: key.0,
                    run_lease: key.1,
                    reason: self.reasons[i],
                    dead,
                })
            })
            .collect())
    }
}

/// The (job id, run lease) pairs a closing statement returned.
fn closed_ids(rows: Vec<tokio_postgres::Row>) -> std::collections::HashSet<(i64, i64)> {
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}
