//! Cron: every fire time of a window yields exactly one job, terminal at
//! most once.

use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

/// Every fire time of every window (`from_ms < t <= to_ms`, multiples of
/// `every_ms`) that did not yield exactly one job with at most one
/// terminal record. A fire's claimants are its `cron_fires` row and any
/// job whose args name the same schedule and fire time (live or
/// dead-lettered: only those keep their args).
pub const CRON_AUDIT: &str = "
WITH w AS (SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[]) AS w(name, every_ms, from_ms, to_ms)),
due AS (
    SELECT DISTINCT w.name, t.fire_ms
    FROM w, generate_series((floor(w.from_ms::numeric / w.every_ms)::bigint + 1) * w.every_ms,
                      floor(w.to_ms::numeric / w.every_ms)::bigint * w.every_ms, w.every_ms) AS t(fire_ms)
),
claimants AS (
    SELECT f.name, f.fire_ms, f.job_id FROM awa.cron_fires f JOIN due USING (name, fire_ms)
    UNION
    SELECT j.args->>'cron', (j.args->>'fire_ms')::bigint, j.job_id FROM awa.jobs j WHERE j.args ? 'cron'
    UNION
    SELECT d.args->>'cron', (d.args->>'fire_ms')::bigint, d.job_id FROM awa.dead_letters d WHERE d.args ? 'cron'
),
term AS (
    SELECT job_id, count(*) AS records
    FROM (SELECT job_id FROM awa.claim_closures WHERE terminal
          UNION ALL SELECT job_id FROM awa.terminal_archive
          UNION ALL SELECT job_id FROM awa.dead_letters) t
    WHERE job_id IN (SELECT job_id FROM claimants)
    GROUP BY job_id
)
SELECT d.name, d.fire_ms,
       coalesce(array_agg(c.job_id ORDER BY c.job_id) FILTER (WHERE c.job_id IS NOT NULL), '{}') AS job_ids,
       coalesce(max(t.records), 0) AS max_records
FROM due d
LEFT JOIN claimants c ON c.name = d.name AND c.fire_ms = d.fire_ms
LEFT JOIN term t ON t.job_id = c.job_id
GROUP BY d.name, d.fire_ms
HAVING count(c.job_id) <> 1 OR coalesce(max(t.records), 0) > 1
ORDER BY d.name, d.fire_ms";

/// A cron window to check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CronWindow {
    pub name: String,
    pub every_ms: i64,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// A fire time that did not yield exactly one job, terminal at most once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CronFault {
    pub name: String,
    pub fire_ms: i64,
    /// The jobs claiming this fire time (none: missed).
    pub job_ids: Vec<i64>,
    /// The most terminal records any of them has.
    pub max_records: i64,
}

/// Check every fire time of `windows`. Every `every_ms` must be positive.
pub async fn cron_faults(client: &Client, windows: &[CronWindow]) -> Result<Vec<CronFault>> {
    if windows.is_empty() {
        return Ok(vec![]);
    }
    let names: Vec<&str> = windows.iter().map(|w| w.name.as_str()).collect();
    let every: Vec<i64> = windows.iter().map(|w| w.every_ms).collect();
    let from: Vec<i64> = windows.iter().map(|w| w.from_ms).collect();
    let to: Vec<i64> = windows.iter().map(|w| w.to_ms).collect();
    let rows = client
        .query(CRON_AUDIT, &[&names, &every, &from, &to])
        .await
        .map_err(|e| Error::db("auditing cron fires", e))?;
    Ok(rows
        .iter()
        .map(|r| CronFault {
            name: r.get(0),
            fire_ms: r.get(1),
            job_ids: r.get(2),
            max_records: r.get(3),
        })
        .collect())
}
