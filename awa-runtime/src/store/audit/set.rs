//! The audit set: the jobs the caller expects, streamed into a session
//! temp table that every other audit read joins against, with the jobs
//! cron fired added from `awa.cron_fires`.

use crate::error::{Error, Result};
use crate::workload::Mode;
use serde::Serialize;
use std::pin::pin;
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

/// A job the caller expects the storage to account for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditJob {
    pub job_id: i64,
    pub mode: Mode,
    pub max_attempts: i32,
    /// Its enqueue may or may not have committed: it may be absent, but
    /// never terminal twice.
    pub uncertain: bool,
    /// An operator cancelled it while it was live (`awa job cancel`
    /// answered `was_live`): its designed end is `cancelled`, on whatever
    /// attempt it had reached.
    pub cancelled: bool,
}

/// The temp table of expected jobs; `cron` marks the fired jobs the load
/// adds from `awa.cron_fires`.
const CREATE_AUDIT_SET: &str = "
DROP TABLE IF EXISTS pg_temp.audit_jobs;
CREATE TEMP TABLE audit_jobs (
    job_id       bigint NOT NULL,
    mode         text NOT NULL,
    max_attempts int NOT NULL,
    uncertain    boolean NOT NULL,
    cancelled    boolean NOT NULL DEFAULT false,
    cron         boolean NOT NULL DEFAULT false
)";
const COPY_AUDIT_SET: &str =
    "COPY audit_jobs (job_id, mode, max_attempts, uncertain, cancelled) FROM STDIN (FORMAT binary)";
/// Cron-fired jobs come from the leader, not a producer: each fire is an
/// expected job of the schedule's mode (`complete` when it names none).
const INDEX_AND_ADD_CRON: &str = "
ALTER TABLE audit_jobs ADD PRIMARY KEY (job_id);
INSERT INTO audit_jobs (job_id, mode, max_attempts, uncertain, cron)
SELECT f.job_id, coalesce(s.args->>'mode', 'complete'), coalesce(s.max_attempts, 3), false, true
FROM awa.cron_fires f LEFT JOIN awa.cron_schedules s ON s.name = f.name
ON CONFLICT (job_id) DO UPDATE SET cron = true;
ANALYZE audit_jobs";
const AUDIT_SET_SIZE: &str =
    "SELECT count(*) FILTER (WHERE NOT cron), count(*) FILTER (WHERE cron) FROM audit_jobs";

/// Rows in the audit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AuditSetSize {
    /// Jobs the caller gave.
    pub given: i64,
    /// Jobs added from `awa.cron_fires`.
    pub cron_fires: i64,
}

/// Create the session temp table `audit_jobs`, stream `jobs` into it with
/// one binary COPY (memory stays flat however many there are), add every
/// cron-fired job, index and analyze it. Each `job_id` must appear once.
/// Replaces an audit set loaded earlier in the session.
pub async fn load_audit_set(
    client: &Client,
    jobs: impl IntoIterator<Item = AuditJob>,
) -> Result<AuditSetSize> {
    client
        .batch_execute(CREATE_AUDIT_SET)
        .await
        .map_err(|e| Error::db("creating the audit set", e))?;
    let sink = client
        .copy_in(COPY_AUDIT_SET)
        .await
        .map_err(|e| Error::db("starting to copy the audit set", e))?;
    let mut writer = pin!(BinaryCopyInWriter::new(
        sink,
        &[Type::INT8, Type::TEXT, Type::INT4, Type::BOOL, Type::BOOL]
    ));
    for job in jobs {
        writer
            .as_mut()
            .write(&[
                &job.job_id,
                &job.mode.name(),
                &job.max_attempts,
                &job.uncertain,
                &job.cancelled,
            ])
            .await
            .map_err(|e| Error::db("copying the audit set", e))?;
    }
    writer
        .as_mut()
        .finish()
        .await
        .map_err(|e| Error::db("copying the audit set", e))?;
    client
        .batch_execute(INDEX_AND_ADD_CRON)
        .await
        .map_err(|e| {
            Error::db(
                "indexing the audit set (is a job id given twice?) and adding cron fires",
                e,
            )
        })?;
    let row = client
        .query_one(AUDIT_SET_SIZE, &[])
        .await
        .map_err(|e| Error::db("counting the audit set", e))?;
    Ok(AuditSetSize {
        given: row.get(0),
        cron_fires: row.get(1),
    })
}
