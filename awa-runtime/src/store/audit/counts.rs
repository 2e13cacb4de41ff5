//! Operator counts: terminal outcomes counted row by row beside what an
//! operator reads from the rollups.

use super::SchemaFeatures;
use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

/// True per-state terminal counts (row by row, as `read::TERMINAL_RECORDS`
/// lists them) beside the operator's (rollups of archived outcomes plus
/// unarchived closures plus dead letters), for a 0.6 schema.
pub const TERMINAL_COUNTS: &str = "
SELECT state, sum(truth)::bigint AS truth, sum(operator)::bigint AS operator FROM (
    SELECT outcome AS state, count(*) AS truth, count(*) AS operator FROM awa.claim_closures WHERE terminal GROUP BY 1
    UNION ALL SELECT state, count(*), 0 FROM awa.terminal_archive GROUP BY 1
    UNION ALL SELECT 'failed', count(*), count(*) FROM awa.dead_letters
    UNION ALL SELECT state, 0, sum(count) FROM awa.queue_terminal_rollups GROUP BY 1
) t GROUP BY state ORDER BY state";

/// [`TERMINAL_COUNTS`] for a 0.7 schema: the operator's counts add the
/// rollup deltas prune appended and the leader has not folded yet.
pub const TERMINAL_COUNTS_WITH_DELTAS: &str = "
SELECT state, sum(truth)::bigint AS truth, sum(operator)::bigint AS operator FROM (
    SELECT outcome AS state, count(*) AS truth, count(*) AS operator FROM awa.claim_closures WHERE terminal GROUP BY 1
    UNION ALL SELECT state, count(*), 0 FROM awa.terminal_archive GROUP BY 1
    UNION ALL SELECT 'failed', count(*), count(*) FROM awa.dead_letters
    UNION ALL SELECT state, 0, sum(count) FROM awa.queue_terminal_rollups GROUP BY 1
    UNION ALL SELECT state, 0, sum(count) FROM awa.queue_terminal_rollup_deltas GROUP BY 1
) t GROUP BY state ORDER BY state";

/// One terminal state counted both ways.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateCount {
    pub state: String,
    /// Terminal records, row by row.
    pub truth: i64,
    /// What an operator reads.
    pub operator: i64,
}

/// Per-state terminal counts, true and operator's, choosing the query
/// variant by whether the rollup deltas exist.
pub async fn terminal_counts(
    client: &Client,
    features: &SchemaFeatures,
) -> Result<Vec<StateCount>> {
    let sql = if features.rollup_deltas {
        TERMINAL_COUNTS_WITH_DELTAS
    } else {
        TERMINAL_COUNTS
    };
    let rows = client
        .query(sql, &[])
        .await
        .map_err(|e| Error::db("counting terminal outcomes", e))?;
    Ok(rows
        .iter()
        .map(|r| StateCount {
            state: r.get(0),
            truth: r.get(1),
            operator: r.get(2),
        })
        .collect())
}
