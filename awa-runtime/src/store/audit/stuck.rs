//! Work left behind: live rows and open claims, and ready jobs no claim
//! can reach.

use super::Offenders;
use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

/// Live rows and open claims (a receipt with no closure of the same run
/// lease). Prune truncates a slot's receipts and closures together, and
/// only once every claim of the slot is closed, so an unpruned receipt
/// without a closure is a claim nobody closed.
pub const STUCK: &str = "
WITH s AS (
    SELECT job_id, true AS live FROM awa.jobs
    UNION ALL
    SELECT r.job_id, false FROM awa.claim_receipts r
    WHERE NOT EXISTS (SELECT 1 FROM awa.claim_closures c WHERE c.job_id = r.job_id AND c.run_lease = r.run_lease)
)
SELECT count(DISTINCT job_id) AS stuck,
       (array_agg(DISTINCT job_id ORDER BY job_id))[1:20] AS stuck_ids,
       count(*) FILTER (WHERE live) AS live_rows,
       count(*) FILTER (WHERE NOT live) AS open_claims,
       (SELECT format('job %s is still %s (attempt %s)', job_id, state, attempt) FROM awa.jobs ORDER BY job_id LIMIT 1) AS live_example
FROM s";

/// Work left non-terminal.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Stuck {
    /// Jobs with a live row or an open claim.
    pub jobs: Offenders,
    pub live_rows: i64,
    pub open_claims: i64,
}

/// Every job left live or with an open claim, audited or not.
pub async fn stuck(client: &Client) -> Result<Stuck> {
    let row = client
        .query_one(STUCK, &[])
        .await
        .map_err(|e| Error::db("looking for stuck work", e))?;
    Ok(Stuck {
        jobs: Offenders {
            count: row.get("stuck"),
            ids: row
                .get::<_, Option<Vec<i64>>>("stuck_ids")
                .unwrap_or_default(),
            example: row.get("live_example"),
        },
        live_rows: row.get("live_rows"),
        open_claims: row.get("open_claims"),
    })
}

/// `available` jobs no claim can pick. A claim reads the ready entries of
/// its queue in every slot (no cursor, no generation: see
/// `store::claim::CLAIM`), so an available job is reachable exactly when
/// an entry of its own queue names it. The example says where the job's
/// entries sit instead (slot, generation, queue), if anywhere.
pub const UNREACHABLE_READY: &str = "
WITH u AS (
    SELECT j.job_id, j.queue, j.attempt FROM awa.jobs j
    WHERE j.state = 'available'
      AND NOT EXISTS (SELECT 1 FROM awa.queue_entries q WHERE q.job_id = j.job_id AND q.queue = j.queue)
)
SELECT count(*) AS unreachable,
       (array_agg(job_id ORDER BY job_id))[1:20] AS unreachable_ids,
       (SELECT format('job %s is available (attempt %s) with no ready entry in its queue %s, where claims look; %s',
                      f.job_id, f.attempt, f.queue,
                      coalesce((SELECT 'its entries: ' || string_agg(format('slot %s generation %s queue %s', q.slot, q.generation, q.queue),
                                                                    ', ' ORDER BY q.slot, q.generation)
                                FROM awa.queue_entries q WHERE q.job_id = f.job_id),
                               'it has no entry in any slot'))
        FROM u f ORDER BY f.job_id LIMIT 1) AS unreachable_example
FROM u";

/// Every `available` job no claim can reach ([`UNREACHABLE_READY`]).
pub async fn unreachable_ready(client: &Client) -> Result<Offenders> {
    let row = client
        .query_one(UNREACHABLE_READY, &[])
        .await
        .map_err(|e| Error::db("looking for ready jobs no claim can reach", e))?;
    Ok(Offenders::from_row(&row, "unreachable"))
}
