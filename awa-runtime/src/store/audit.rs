//! Audit reads: what reconciliation needs to judge a whole run at once,
//! as set-based SQL over every job rather than a query per job.
//!
//! The caller loads the jobs it expects (id, mode, max attempts) into a
//! session temp table with [`load_audit_set`]; every other read here
//! joins that table against the storage in one statement. The runtime's
//! own contract (which terminal `(state, attempt)` a mode is designed
//! for, how rescue, release and snooze move the attempt counter, where
//! terminal records live in either cursor representation) stays in this
//! crate, next to the code that writes it.
//!
//! Run the reads inside one `REPEATABLE READ` transaction so they all see
//! one snapshot; rolling it back also drops the temp table.
//!
//! One file per concern: the audit set ([`set`]), the per-job verdicts
//! ([`jobs`]), work left behind ([`stuck`](mod@stuck)), terminal records
//! against their runs ([`records`]), start times ([`timing`]), interrupted
//! attempts ([`interruptions`]), cron fires ([`cron_fires`]), operator
//! counts ([`counts`]), ring cursors ([`cursors`]) and placement
//! ([`placement`]); everything is re-exported here, so callers name
//! `store::audit::*`.
//!
//! ```no_run
//! # async fn demo(client: &tokio_postgres::Client) -> awa_runtime::error::Result<()> {
//! use awa_runtime::{store::audit, workload::Mode};
//! let jobs = [audit::AuditJob { job_id: 1, mode: Mode::Complete, max_attempts: 3, uncertain: false, cancelled: false }];
//! let features = audit::schema_features(client).await?;
//! audit::load_audit_set(client, jobs).await?;
//! let jobs = audit::audit_jobs(client).await?;
//! let counts = audit::terminal_counts(client, &features).await?;
//! assert!(jobs.lost.is_empty() && counts.iter().all(|c| c.truth == c.operator));
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

pub mod counts;
pub mod cron_fires;
pub mod cursors;
pub mod interruptions;
pub mod jobs;
pub mod placement;
pub mod records;
pub mod set;
pub mod stuck;
pub mod timing;

pub use counts::{StateCount, TERMINAL_COUNTS, TERMINAL_COUNTS_WITH_DELTAS, terminal_counts};
pub use cron_fires::{CRON_AUDIT, CronFault, CronWindow, cron_faults};
pub use cursors::{
    COLUMNS, FLIP_COMMIT_MARGIN_MS, LEDGERS, LateAttempt, Ledger, RingColumns,
    attempts_after_flip_by_pre_flip_binaries, authority, ledgers, min_flip_version, ring_columns,
};
pub use interruptions::{
    RESCUED_ATTEMPTS, RescuedAttempt, UNPROVEN_RESCUES, UnprovenRescue, rescued_attempts,
    unproven_rescues,
};
pub use jobs::{
    JOB_AUDIT, JOB_AUDIT_PLANNER, JobAudit, audit_jobs, designed_values, first_attempt_differs,
    first_attempt_raises_max,
};
pub use placement::{
    MISPLACED, MISPLACED_COLUMNS, Misplaced, PLACEMENT_RELEASE, PLACEMENT_ROLLBACK,
    PLACEMENT_SAVEPOINT, misplaced, misplaced_rows, misplaced_sql, read_misplaced, schema_lacks,
};
pub use records::{TERMINAL_MISMATCH, terminal_mismatches};
pub use set::{AuditJob, AuditSetSize, load_audit_set};
pub use stuck::{STUCK, Stuck, UNREACHABLE_READY, stuck, unreachable_ready};
pub use timing::{
    EARLY_START_TOLERANCE_MS, EARLY_STARTS, STARTS_AFTER_SNAPSHOT_SINCE, Waits, early_starts,
};

/// How many ids an [`Offenders`] list keeps.
pub const MAX_IDS: usize = 20;

/// Which optional (0.7) relations the schema has; the reads that need
/// them pick their query variant from this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SchemaFeatures {
    /// `awa.ring_cursor_authority` exists.
    pub authority: bool,
    /// `awa.queue_terminal_rollup_deltas` exists: operator counts add it.
    pub rollup_deltas: bool,
    /// `awa.{ring}_ring_rotations` exist.
    pub ledgers: bool,
    /// The rings' singleton cursor columns (`current_slot`, `generation`)
    /// exist: a contract migration drops them.
    pub cursor_columns: bool,
}

const FEATURES: &str = "
SELECT to_regclass('awa.ring_cursor_authority') IS NOT NULL,
       to_regclass('awa.queue_terminal_rollup_deltas') IS NOT NULL,
       to_regclass('awa.queue_ring_rotations') IS NOT NULL
         AND to_regclass('awa.claim_ring_rotations') IS NOT NULL
         AND to_regclass('awa.lease_ring_rotations') IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass('awa.queue_ring_state')
                 AND attname = 'current_slot' AND NOT attisdropped)";

/// Read which optional relations exist.
pub async fn schema_features(client: &Client) -> Result<SchemaFeatures> {
    let row = client
        .query_one(FEATURES, &[])
        .await
        .map_err(|e| Error::db("probing the schema for 0.7 relations", e))?;
    Ok(SchemaFeatures {
        authority: row.get(0),
        rollup_deltas: row.get(1),
        ledgers: row.get(2),
        cursor_columns: row.get(3),
    })
}

/// Jobs that broke one check: how many, the first [`MAX_IDS`] ids in id
/// order, and an account of the first one.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Offenders {
    pub count: i64,
    pub ids: Vec<i64>,
    pub example: Option<String>,
}

impl Offenders {
    /// No offender.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn from_row(row: &tokio_postgres::Row, name: &str) -> Offenders {
        Offenders {
            count: row.get(name),
            ids: row
                .get::<_, Option<Vec<i64>>>(format!("{name}_ids").as_str())
                .unwrap_or_default(),
            example: row.get(format!("{name}_example").as_str()),
        }
    }
}
