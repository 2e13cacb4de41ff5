//! Horizon-gated folds (ADR-040), run by the leader on its rollup tick:
//! drain `queue_terminal_rollup_deltas` into `queue_terminal_rollups`
//! (clamped at zero) and trim each ring ledger to one wrap. They stand
//! down only while another backend genuinely pins the MVCC horizon, so
//! the versions they delete are reclaimable at once.

use super::Ring;
use crate::error::{Error, Result};
use crate::failpoint;
use tokio_postgres::Client;

/// A backend pins the horizon when it is idle in a transaction that holds
/// a write xid (nothing bounds the hold), or holds a snapshot in a
/// transaction open longer than `MVCC_HORIZON_PIN_MIN_AGE` (5 s). The
/// transient xmin of ordinary statements does not count.
const PINNED: &str = "
SELECT pid, state, (extract(epoch FROM now() - xact_start) * 1000)::bigint
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'
  AND ((state LIKE 'idle in transaction%' AND backend_xid IS NOT NULL)
       OR (backend_xmin IS NOT NULL AND xact_start < now() - interval '5 seconds'))";
/// The seeded defect: any live `backend_xmin` stands the folds down.
const ANY_XMIN: &str = "
SELECT pid, state, (extract(epoch FROM now() - xact_start) * 1000)::bigint
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'
  AND backend_xmin IS NOT NULL";

const FOLD_DELTAS: &str = "
WITH d AS (DELETE FROM awa.queue_terminal_rollup_deltas RETURNING queue, priority, state, count)
INSERT INTO awa.queue_terminal_rollups (queue, priority, state, count)
SELECT queue, priority, state, GREATEST(0, sum(count))::bigint FROM d GROUP BY 1, 2, 3
ON CONFLICT (queue, priority, state) DO UPDATE SET count = GREATEST(0, queue_terminal_rollups.count + excluded.count)";

/// What a fold tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "fold", rename_all = "snake_case")]
pub enum Folded {
    /// Deltas drained and ledgers trimmed.
    Done {
        delta_rows: u64,
        ledger_rows_trimmed: u64,
    },
    /// A backend pins the horizon: nothing deleted.
    StoodDown { pinned_by: Vec<i32> },
}

/// Backends that pin the horizon now (under the seeded defect: any with
/// a live `backend_xmin`).
pub async fn pinning_backends(client: &Client) -> Result<Vec<i32>> {
    let sql = if failpoint::armed(failpoint::FOLD_ANY_XMIN) {
        ANY_XMIN
    } else {
        PINNED
    };
    let rows = client
        .query(sql, &[])
        .await
        .map_err(|e| Error::db("checking the MVCC horizon", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Run both folds unless the horizon is pinned.
pub async fn fold(client: &mut Client) -> Result<Folded> {
    let pinned_by = pinning_backends(client).await?;
    if !pinned_by.is_empty() {
        return Ok(Folded::StoodDown { pinned_by });
    }
    let tx = client
        .transaction()
        .await
        .map_err(|e| Error::db("starting a fold", e))?;
    let delta_rows = tx
        .execute(FOLD_DELTAS, &[])
        .await
        .map_err(|e| Error::db("folding rollup deltas", e))?;
    let mut trimmed = 0;
    for ring in Ring::ALL {
        let r = ring.name();
        let sql = format!(
            "DELETE FROM awa.{r}_ring_rotations
             WHERE generation <= (SELECT max(generation) FROM awa.{r}_ring_rotations) - (SELECT slot_count FROM awa.{r}_ring_state)"
        );
        trimmed += tx
            .execute(&sql, &[])
            .await
            .map_err(|e| Error::db(format!("trimming the {r} ledger"), e))?;
    }
    tx.commit()
        .await
        .map_err(|e| Error::db("committing a fold", e))?;
    Ok(Folded::Done {
        delta_rows,
        ledger_rows_trimmed: trimmed,
    })
}
