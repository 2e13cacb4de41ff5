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
use crate::workload::Mode;
use serde::Serialize;
use std::pin::pin;
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

/// How many ids an [`Offenders`] list keeps.
pub const MAX_IDS: usize = 20;

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
}

const FEATURES: &str = "
SELECT to_regclass('awa.ring_cursor_authority') IS NOT NULL,
       to_regclass('awa.queue_terminal_rollup_deltas') IS NOT NULL,
       to_regclass('awa.queue_ring_rotations') IS NOT NULL
         AND to_regclass('awa.claim_ring_rotations') IS NOT NULL
         AND to_regclass('awa.lease_ring_rotations') IS NOT NULL";

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
    })
}

// ---------------------------------------------------------------------
// The audit set
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// Designed terminals
// ---------------------------------------------------------------------

/// Whether the handler behaves differently on attempt 1 than on later
/// attempts (`workload::run` matches on `attempt == 1`). When attempt 1
/// is interrupted, that designed first step never happens. Public so a
/// recorded history is judged by the same contract (rehearse verify).
pub fn first_attempt_differs(mode: Mode) -> bool {
    match mode {
        Mode::RetryOnce | Mode::SnoozeOnce | Mode::OverrunDeadline => true,
        Mode::Complete
        | Mode::FailTerminal
        | Mode::ExhaustRetries
        | Mode::CancelSelf
        | Mode::Sleep
        | Mode::Scheduled => false,
    }
}

/// Whether the designed first attempt snoozes, which raises the job's
/// `max_attempts` by one (`finish::SNOOZE`).
pub fn first_attempt_raises_max(mode: Mode) -> bool {
    match mode {
        Mode::SnoozeOnce => true,
        Mode::Complete
        | Mode::RetryOnce
        | Mode::FailTerminal
        | Mode::ExhaustRetries
        | Mode::CancelSelf
        | Mode::Sleep
        | Mode::OverrunDeadline
        | Mode::Scheduled => false,
    }
}

/// The designed terminals as a SQL `VALUES` list, generated from
/// [`Mode::ALL`] and [`Mode::designed_terminal`] so it cannot drift from
/// the workload. Columns: `(mode, state, attempt_base, attempt_per_max,
/// first_differs, raises_max)`; the designed attempt is
/// `attempt_base + attempt_per_max * max_attempts`.
pub fn designed_values() -> String {
    // Two probes tell a constant attempt from one pinned to the cap.
    const PROBE: i32 = 1_000;
    let rows: Vec<String> = Mode::ALL
        .iter()
        .map(|&mode| {
            let (state, at_probe) = mode.designed_terminal(PROBE);
            let (state_next, at_next) = mode.designed_terminal(PROBE + 1);
            assert_eq!(
                state,
                state_next,
                "the designed state of {} depends on max_attempts",
                mode.name()
            );
            let per_max = at_next - at_probe;
            assert!(
                per_max == 0 || per_max == 1,
                "designed attempt of {} is not constant or max_attempts",
                mode.name()
            );
            let base = at_probe - per_max * PROBE;
            format!(
                "('{}', '{state}', {base}, {per_max}, {}, {})",
                mode.name(),
                first_attempt_differs(mode),
                first_attempt_raises_max(mode)
            )
        })
        .collect();
    format!("VALUES {}", rows.join(", "))
}

// ---------------------------------------------------------------------
// Jobs: lost, duplicate, wrong state or attempt, double execution
// ---------------------------------------------------------------------

/// One pass over every audited job. Per job it gathers the terminal
/// records (unpruned terminal closures, the prune archive, dead letters),
/// the live row and the executions, then derives the terminal the runtime
/// must have produced:
///
/// - an attempt ended by rescue (`rescued_*`) or never finished (NULL
///   outcome) spends an attempt number; a `released` one gives it back
///   (`finish::RELEASE`), a `stale` one lost its race and spent nothing;
/// - expected attempt = designed attempt + spent interruptions, less one
///   when attempt 1 was interrupted and the mode's designed first step
///   (retry, snooze, deadline overrun) therefore never ran;
/// - a mode designed to end at the cap (`exhaust_retries`) ends there
///   whatever was interrupted;
/// - past the cap (`max_attempts`, plus one after a snooze) the job is
///   dead-lettered by rescue: `('failed', cap)`;
/// - a mode the handler does not know fails its first attempt;
/// - a job an operator cancelled while it was live ends `cancelled`,
///   whatever its mode: anything else is `cancel_ignored`;
/// - run by run, each claim takes the attempt after the run before it,
///   but after a `released` run the same attempt again (a graceful stop
///   gives the number back, `finish::RELEASE`, in 0.6 and 0.7 alike): a
///   run numbered otherwise is `misnumbered`, whatever the job's end (a
///   mode that ends at the cap hides a spent release in its terminal).
///
/// Shape, for a million jobs: every input streams in job-id order (the
/// audit set's and `executions`' primary keys, a sorted aggregate of the
/// terminal records) into merge joins, run under [`JOB_AUDIT_PLANNER`];
/// million-entry hash tables cost more here than they save. The
/// `OFFSET 0` fences keep each derived column computed once per row
/// rather than inlined into every expression that uses it. The full join
/// with the terminal records comes last, so the left joins keep the audit
/// set's order; its unmatched rows are terminal records nobody reported.
///
/// `{designed}` is replaced by [`designed_values`].
pub const JOB_AUDIT: &str = r"
WITH designed (mode, state, attempt_base, attempt_per_max, first_differs, raises_max) AS ({designed}),
term AS (
    SELECT job_id, count(*)::int AS records, min(state) AS state, max(attempt) AS attempt
    FROM (SELECT job_id, outcome AS state, attempt FROM awa.claim_closures WHERE terminal
          UNION ALL SELECT job_id, state, attempt FROM awa.terminal_archive
          UNION ALL SELECT job_id, 'failed', attempt FROM awa.dead_letters) t
    GROUP BY job_id
),
ex AS (
    SELECT job_id, count(*)::int AS runs,
           count(*) FILTER (WHERE outcome = 'completed')::int AS completions,
           count(*) FILTER (WHERE outcome LIKE 'rescued\_%' OR outcome IS NULL)::int AS interrupted,
           count(*) FILTER (WHERE outcome = 'released')::int AS released,
           count(*) FILTER (WHERE outcome = 'stale')::int AS stale,
           bool_or(attempt = 1 AND (outcome LIKE 'rescued\_%' OR outcome IS NULL)) AS first_interrupted,
           count(*) FILTER (WHERE attempt <> due_attempt)::int AS misnumbered,
           (array_agg(format('run lease %s ran attempt %s after run lease %s ended %s on attempt %s, so it was due attempt %s',
                             run_lease, attempt, run_lease - 1, coalesce(prev_outcome, 'never'), prev_attempt, due_attempt)
                      ORDER BY run_lease) FILTER (WHERE attempt <> due_attempt))[1] AS misnumbered_how
    FROM (
        SELECT r.*,
               CASE WHEN prev_lease = run_lease - 1
                    THEN prev_attempt + 1 - (prev_outcome IS NOT DISTINCT FROM 'released')::int END AS due_attempt
        FROM (
            SELECT job_id, run_lease, attempt, outcome,
                   lag(run_lease) OVER w AS prev_lease, lag(attempt) OVER w AS prev_attempt,
                   lag(outcome) OVER w AS prev_outcome
            FROM awa.executions
            WINDOW w AS (PARTITION BY job_id ORDER BY run_lease)
        ) r
    ) runs
    GROUP BY job_id
),
audited AS (
    SELECT a.job_id, a.uncertain, a.cron, a.cancelled, a.mode, a.max_attempts, j.state AS live_state,
           x.runs, x.completions, x.interrupted, x.released, x.stale, x.first_interrupted,
           x.misnumbered, x.misnumbered_how
    FROM audit_jobs a
    LEFT JOIN ex x ON x.job_id = a.job_id
    LEFT JOIN awa.jobs j ON j.job_id = a.job_id
),
facts AS (
    SELECT coalesce(a.job_id, t.job_id) AS job_id,
           a.job_id IS NOT NULL AS audited,
           coalesce(a.uncertain, false) AS uncertain,
           coalesce(a.cron, false) AS cron,
           coalesce(a.cancelled, false) AS op_cancelled,
           a.mode, a.max_attempts, a.live_state,
           coalesce(a.runs, 0) AS runs,
           coalesce(a.completions, 0) AS completions,
           coalesce(a.interrupted, 0) AS interrupted,
           coalesce(a.released, 0) AS released,
           coalesce(a.stale, 0) AS stale,
           coalesce(a.first_interrupted, false) AS first_interrupted,
           coalesce(a.misnumbered, 0) AS misnumbered, a.misnumbered_how,
           coalesce(t.records, 0) AS records, t.state, t.attempt
    FROM audited a
    FULL JOIN term t ON t.job_id = a.job_id
    OFFSET 0
),
planned AS (
    SELECT f.*,
           coalesce(d.state, 'failed') AS designed_state,
           CASE WHEN d.attempt_per_max = 1 THEN f.max_attempts
                ELSE coalesce(d.attempt_base, 1) + f.interrupted - (coalesce(d.first_differs, false) AND f.first_interrupted)::int
           END AS planned_attempt,
           f.max_attempts + (coalesce(d.raises_max, false) AND NOT f.first_interrupted)::int AS cap
    FROM facts f
    LEFT JOIN designed d ON d.mode = f.mode
    OFFSET 0
),
judged AS (
    SELECT p.*,
           CASE WHEN planned_attempt > cap THEN 'failed' ELSE designed_state END AS expected_state,
           least(planned_attempt, cap) AS expected_attempt
    FROM planned p
    OFFSET 0
),
flagged AS (
    SELECT j.*,
           audited AND NOT uncertain AND records = 0 AND live_state IS NULL AS lost,
           records > 1 AS duplicate,
           audited AND records = 1 AND NOT op_cancelled AND state <> expected_state AS wrong_state,
           audited AND records = 1 AND NOT op_cancelled AND state = expected_state AND attempt <> expected_attempt AS wrong_attempt,
           audited AND records = 1 AND op_cancelled AND state <> 'cancelled' AS cancel_ignored,
           audited AND misnumbered > 0 AS misnumbered_runs,
           completions > 1 AS double_completion,
           audited AND records >= 1 AND runs > attempt + stale + released AS excess_runs
    FROM judged j
    OFFSET 0
)
SELECT
    count(*) FILTER (WHERE audited) AS audited,
    count(*) FILTER (WHERE uncertain) AS uncertain,
    count(*) FILTER (WHERE uncertain AND (records > 0 OR live_state IS NOT NULL)) AS uncertain_found,
    count(*) FILTER (WHERE cron) AS cron,
    coalesce(sum(records) FILTER (WHERE audited), 0)::bigint AS terminal,
    count(*) FILTER (WHERE live_state IS NOT NULL) AS live,
    count(*) FILTER (WHERE NOT audited) AS unaccounted,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE NOT audited))[1:20] AS unaccounted_ids,
    coalesce(sum(interrupted + released) FILTER (WHERE audited), 0)::bigint AS interrupted_runs,
    coalesce(sum(stale) FILTER (WHERE audited), 0)::bigint AS stale_runs,

    count(*) FILTER (WHERE lost) AS lost,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE lost))[1:20] AS lost_ids,
    (array_agg(format('job %s (%s)', job_id, mode)
        ORDER BY job_id) FILTER (WHERE lost))[1] AS lost_example,

    count(*) FILTER (WHERE duplicate) AS duplicate,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE duplicate))[1:20] AS duplicate_ids,
    (array_agg(format('job %s (%s) has %s terminal records', job_id, coalesce(mode, 'not audited'), records)
        ORDER BY job_id) FILTER (WHERE duplicate))[1] AS duplicate_example,

    count(*) FILTER (WHERE wrong_state) AS wrong_state,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE wrong_state))[1:20] AS wrong_state_ids,
    (array_agg(format('job %s (%s, max_attempts %s, %s interrupted attempt(s)) ended (%s, %s), expected (%s, %s)',
        job_id, mode, max_attempts, interrupted, state, attempt, expected_state, expected_attempt)
        ORDER BY job_id) FILTER (WHERE wrong_state))[1] AS wrong_state_example,

    count(*) FILTER (WHERE wrong_attempt) AS wrong_attempt,
    array_agg(job_id ORDER BY job_id) FILTER (WHERE wrong_attempt) AS wrong_attempt_ids,
    (array_agg(format('job %s (%s, max_attempts %s, %s interrupted attempt(s)) ended (%s, %s), expected (%s, %s)',
        job_id, mode, max_attempts, interrupted, state, attempt, expected_state, expected_attempt)
        ORDER BY job_id) FILTER (WHERE wrong_attempt))[1] AS wrong_attempt_example,

    count(*) FILTER (WHERE misnumbered_runs) AS misnumbered,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE misnumbered_runs))[1:20] AS misnumbered_ids,
    (array_agg(format('job %s (%s): %s', job_id, mode, misnumbered_how)
        ORDER BY job_id) FILTER (WHERE misnumbered_runs))[1] AS misnumbered_example,

    count(*) FILTER (WHERE cancel_ignored) AS cancel_ignored,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE cancel_ignored))[1:20] AS cancel_ignored_ids,
    (array_agg(format('job %s (%s) was cancelled by an operator while live but ended (%s, %s) after %s execution(s), %s completed',
        job_id, mode, state, attempt, runs, completions)
        ORDER BY job_id) FILTER (WHERE cancel_ignored))[1] AS cancel_ignored_example,

    count(*) FILTER (WHERE double_completion) AS double_completion,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE double_completion))[1:20] AS double_completion_ids,
    (array_agg(format('job %s (%s) has %s executions that completed', job_id, coalesce(mode, 'not audited'), completions)
        ORDER BY job_id) FILTER (WHERE double_completion))[1] AS double_completion_example,

    count(*) FILTER (WHERE excess_runs) AS excess_runs,
    (array_agg(job_id ORDER BY job_id) FILTER (WHERE excess_runs))[1:20] AS excess_runs_ids,
    (array_agg(format('job %s (%s) ran %s times but ended on attempt %s (%s released, %s stale)',
        job_id, mode, runs, attempt, released, stale)
        ORDER BY job_id) FILTER (WHERE excess_runs))[1] AS excess_runs_example
FROM flagged";

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

/// The per-job verdicts of [`JOB_AUDIT`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct JobAudit {
    /// Jobs in the audit set (given plus cron-fired).
    pub audited: i64,
    /// Of those, uncertain ones, and how many of them exist.
    pub uncertain: i64,
    pub uncertain_found: i64,
    /// Of those, cron-fired ones.
    pub cron: i64,
    /// Terminal records of audited jobs.
    pub terminal: i64,
    /// Audited jobs with a live row.
    pub live: i64,
    /// Jobs with terminal records that nobody reported (a producer killed
    /// between its commit and its `accepted` line leaves these).
    pub unaccounted: Offenders,
    /// Executions of audited jobs that rescue, release or a crash ended
    /// (or never ended): runs that interruptions explain.
    pub interrupted_runs: i64,
    /// Executions whose result lost to a newer run lease.
    pub stale_runs: i64,
    /// Accepted (not uncertain) jobs with neither a terminal record nor a live row.
    pub lost: Offenders,
    /// Jobs with more than one terminal record.
    pub duplicate: Offenders,
    /// Jobs whose one terminal state is not the expected one.
    pub wrong_state: Offenders,
    /// Jobs in the expected state on another attempt than expected.
    pub wrong_attempt: Offenders,
    /// Jobs a run of which took another attempt number than the run
    /// before it leaves it (one more, or the same after a release).
    pub misnumbered: Offenders,
    /// Jobs an operator cancelled while they were live that did not end
    /// cancelled (they are judged by this, not by their mode's design).
    pub cancel_ignored: Offenders,
    /// Jobs with more than one execution that completed.
    pub double_completion: Offenders,
    /// Terminal jobs with more executions than attempts, releases and
    /// stale runs explain.
    pub excess_runs: Offenders,
}

/// The planner settings [`JOB_AUDIT`] is written for, for the rest of the
/// transaction (outside one, `SET LOCAL` changes nothing).
pub const JOB_AUDIT_PLANNER: &str =
    "SET LOCAL enable_hashagg = off; SET LOCAL enable_hashjoin = off";
/// Back to the planner's defaults for whatever the transaction runs next.
const PLANNER_DEFAULTS: &str = "SET LOCAL enable_hashagg = on; SET LOCAL enable_hashjoin = on";

/// Judge every job of the audit set (and every terminal record outside
/// it). Run it in the transaction that loaded the audit set.
pub async fn audit_jobs(client: &Client) -> Result<JobAudit> {
    let sql = JOB_AUDIT.replace("{designed}", &designed_values());
    client
        .batch_execute(JOB_AUDIT_PLANNER)
        .await
        .map_err(|e| Error::db("setting the planner up for the job audit", e))?;
    let row = client
        .query_one(&sql, &[])
        .await
        .map_err(|e| Error::db("auditing jobs", e));
    client
        .batch_execute(PLANNER_DEFAULTS)
        .await
        .map_err(|e| Error::db("restoring the planner after the job audit", e))?;
    let row = row?;
    Ok(JobAudit {
        audited: row.get("audited"),
        uncertain: row.get("uncertain"),
        uncertain_found: row.get("uncertain_found"),
        cron: row.get("cron"),
        terminal: row.get("terminal"),
        live: row.get("live"),
        unaccounted: Offenders {
            count: row.get("unaccounted"),
            ids: row
                .get::<_, Option<Vec<i64>>>("unaccounted_ids")
                .unwrap_or_default(),
            example: None,
        },
        interrupted_runs: row.get("interrupted_runs"),
        stale_runs: row.get("stale_runs"),
        lost: Offenders::from_row(&row, "lost"),
        duplicate: Offenders::from_row(&row, "duplicate"),
        wrong_state: Offenders::from_row(&row, "wrong_state"),
        wrong_attempt: Offenders::from_row(&row, "wrong_attempt"),
        misnumbered: Offenders::from_row(&row, "misnumbered"),
        cancel_ignored: Offenders::from_row(&row, "cancel_ignored"),
        double_completion: Offenders::from_row(&row, "double_completion"),
        excess_runs: Offenders::from_row(&row, "excess_runs"),
    })
}

// ---------------------------------------------------------------------
// Stuck work
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// Ready work no claim can reach
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// Terminal records against the executions that produced them
// ---------------------------------------------------------------------

/// Every terminal record (unpruned terminal closure, archive row, dead
/// letter) must be the outcome of the job's last run: an execution with
/// the record's `(job_id, run_lease)` exists, ran the record's attempt,
/// is the job's newest run lease, and (but for dead letters, which a
/// rescue or a spent retry writes) ended in the record's state. A stale
/// worker's result that lands after a rescue fails one of these: it names
/// an old lease, or pairs it with the newer attempt. Executions are keyed
/// by `(job_id, run_lease)`, so each record costs one index probe. The
/// `cancelled` record of a job the audit set says an operator cancelled
/// while live is the operator's, not a run's (its run, if any, lost to
/// it): it is not judged here.
///
/// A record must also be its run's own: the run that owns the record's
/// lease may have reported that lease lost (`$1` job ids, `$2` their run
/// leases: attempts whose worker said `lease_lost`, or that its close
/// lost, and never that its close was recorded). A late result that
/// closes the job's newer attempt and writes that attempt's lease passes
/// every check above, but the run owning the lease disowns it. Dead
/// letters a rescue wrote (their execution ended `rescued_*`) are the
/// leader's, not a run's. Run it in the transaction that loaded the
/// audit set.
pub const TERMINAL_MISMATCH: &str = r"
WITH t AS (
    SELECT job_id, run_lease, attempt, outcome AS state, 'ring' AS source FROM awa.claim_closures WHERE terminal
    UNION ALL SELECT job_id, run_lease, attempt, state, 'archive' FROM awa.terminal_archive
    UNION ALL SELECT job_id, run_lease, attempt, 'failed', 'dead_letter' FROM awa.dead_letters
), operator AS (
    SELECT job_id FROM audit_jobs WHERE cancelled
), disowned AS (
    SELECT DISTINCT * FROM unnest($1::int8[], $2::int8[]) AS d(job_id, run_lease)
), judged AS (
    SELECT t.job_id, t.run_lease, t.attempt, t.state, t.source, e.attempt AS run_attempt, e.outcome AS run_outcome,
           (SELECT max(x.run_lease) FROM awa.executions x WHERE x.job_id = t.job_id) AS last_lease,
           e.job_id IS NOT NULL AS ran,
           d.job_id IS NOT NULL AS disowned
    FROM t LEFT JOIN awa.executions e ON e.job_id = t.job_id AND e.run_lease = t.run_lease
    LEFT JOIN disowned d ON d.job_id = t.job_id AND d.run_lease = t.run_lease
    WHERE NOT (t.state = 'cancelled' AND t.job_id IN (SELECT job_id FROM operator))
    OFFSET 0
), wrong AS (
    SELECT job_id,
           CASE
               WHEN NOT ran THEN format('job %s: its %s record (%s, attempt %s) names run lease %s, which no execution of the job ran',
                                        job_id, source, state, attempt, run_lease)
               WHEN run_attempt <> attempt THEN format('job %s: its %s record (%s) says attempt %s, but run lease %s ran attempt %s',
                                        job_id, source, state, attempt, run_lease, run_attempt)
               WHEN run_lease <> last_lease THEN format('job %s: its %s record (%s, attempt %s) names run lease %s, but the job last ran under run lease %s',
                                        job_id, source, state, attempt, run_lease, last_lease)
               WHEN source <> 'dead_letter' AND run_outcome IS DISTINCT FROM state THEN format(
                                        'job %s: its %s record says %s (attempt %s), but the execution of run lease %s ended %s',
                                        job_id, source, state, attempt, run_lease, coalesce(run_outcome, 'never'))
               WHEN disowned AND NOT (source = 'dead_letter' AND coalesce(run_outcome LIKE 'rescued\_%', false)) THEN format(
                                        'job %s: its %s record (%s, attempt %s) names run lease %s, whose own run reported that lease lost: another result closed it',
                                        job_id, source, state, attempt, run_lease)
           END AS why
    FROM judged
)
SELECT count(DISTINCT job_id) AS mismatched,
       (array_agg(DISTINCT job_id ORDER BY job_id))[1:20] AS mismatched_ids,
       (array_agg(why ORDER BY job_id))[1] AS mismatched_example
FROM wrong WHERE why IS NOT NULL";

/// Jobs whose terminal record does not match the execution that should
/// have produced it ([`TERMINAL_MISMATCH`]); `disowned` lists the
/// attempts `(job_id, run_lease)` whose own run reported them lost.
pub async fn terminal_mismatches(client: &Client, disowned: &[(i64, i64)]) -> Result<Offenders> {
    let jobs: Vec<i64> = disowned.iter().map(|d| d.0).collect();
    let leases: Vec<i64> = disowned.iter().map(|d| d.1).collect();
    let row = client
        .query_one(TERMINAL_MISMATCH, &[&jobs, &leases])
        .await
        .map_err(|e| Error::db("checking terminal records against executions", e))?;
    Ok(Offenders::from_row(&row, "mismatched"))
}

// ---------------------------------------------------------------------
// Timing of the job contract: nothing starts before it is due
// ---------------------------------------------------------------------

/// How much earlier than due an attempt may start and still count as on
/// time: rounding only. The clocks are the database's own (`run_at`,
/// `finished_at` and `started_at` are all read from the server), and a
/// claim by [`STARTS_AFTER_SNAPSHOT_SINCE`] or later records its start
/// after its snapshot, which sees a job only once a promotion whose
/// `now()` had reached its `run_at` committed. Before, `started_at` was the
/// claim's `now()`, its transaction's start, taken before its plan held
/// its locks: clean quiet runs (migrate-first, binary-first) started
/// retries and snoozes 51 to 59 ms "early" by it, more than the 50 ms this
/// used to allow, with the promotions all on time.
pub const EARLY_START_TOLERANCE_MS: f64 = 1.0;

/// The first runtime version whose claim records an attempt's start
/// after the claim's snapshot (`clock_timestamp()`; see
/// `store::claim::CLAIM`). The releases before it record `now()`, the
/// claim's transaction start, which comes before the snapshot by however
/// long the claim waited for its locks or the CPU, without bound: a clean
/// all-0.6.1 stretch of path-through-stepping-stone started two retries
/// 55 ms "early" by it. Their starts say nothing about due times, so
/// [`EARLY_STARTS`] judges only the attempts that versions from this one
/// on claimed; a promotion that ignores `run_at` (every runtime's workers
/// claim what the leader promotes) shows in those.
pub const STARTS_AFTER_SNAPSHOT_SINCE: [i32; 3] = [0, 7, 0];

/// Every execution that started before it was due, by the database's
/// clock:
///
/// - a scheduled job (`$1` ids, `$2` their `run_at` in Unix ms, as the
///   producer wrote it) before its `run_at`;
/// - the run after a `retry` before the closing `finished_at` plus the
///   backoff of that attempt (`$3`: the backoff of attempt 1, 2, ... in
///   ms; later attempts wait the last);
/// - the run after a `snoozed` before the closing `finished_at` plus the
///   snooze (`$4`, ms).
///
/// A retry or snooze writes `run_at = now() + wait` in the statement that
/// writes the attempt's `finished_at = now()`, and promotion makes a job
/// claimable only once `run_at <= now()`, so on a correct runtime the next
/// run's `started_at` (read by its claim after the snapshot that saw the
/// promotion) is never earlier, whatever the load; `$5` is
/// [`EARLY_START_TOLERANCE_MS`]. Only runs claimed by a runtime of
/// version `$6` ([`STARTS_AFTER_SNAPSHOT_SINCE`]) or later are judged.
/// The next run is the next run lease (each claim takes one more).
pub const EARLY_STARTS: &str = r"
WITH s AS (SELECT * FROM unnest($1::int8[], $2::int8[]) AS s(job_id, run_at_ms)),
due AS (
    SELECT e.job_id, e.run_lease, e.attempt, e.started_at,
           to_timestamp(s.run_at_ms / 1000.0) AS due_at, 'its run_at'::text AS what
    FROM s JOIN awa.executions e ON e.job_id = s.job_id
    WHERE coalesce((regexp_match(e.version, '^(\d+)\.(\d+)\.(\d+)'))::int[] >= $6::int[], false)
    UNION ALL
    SELECT n.job_id, n.run_lease, n.attempt, n.started_at,
           p.finished_at + w.ms * interval '1 millisecond',
           CASE p.outcome
               WHEN 'retry' THEN format('the %s ms backoff after attempt %s''s retry ended', round(w.ms::numeric, 1), p.attempt)
               ELSE format('the %s ms snooze of attempt %s ended', round(w.ms::numeric, 1), p.attempt)
           END
    FROM awa.executions p
    JOIN awa.executions n ON n.job_id = p.job_id AND n.run_lease = p.run_lease + 1
    CROSS JOIN LATERAL (
        SELECT CASE p.outcome
                   WHEN 'retry' THEN ($3::float8[])[least(greatest(p.attempt, 1), cardinality($3::float8[]))]
                   ELSE $4::float8
               END AS ms
    ) w
    WHERE p.outcome IN ('retry', 'snoozed') AND p.finished_at IS NOT NULL
      AND coalesce((regexp_match(n.version, '^(\d+)\.(\d+)\.(\d+)'))::int[] >= $6::int[], false)
),
early AS (
    SELECT d.*, extract(epoch FROM d.due_at - d.started_at) * 1000 AS early_ms
    FROM due d
    WHERE d.started_at < d.due_at - $5::float8 * interval '1 millisecond'
)
SELECT count(DISTINCT job_id) AS early,
       (array_agg(DISTINCT job_id ORDER BY job_id))[1:20] AS early_ids,
       (array_agg(format('job %s attempt %s (run lease %s) started %s ms before %s',
                         job_id, attempt, run_lease, round(early_ms::numeric, 1), what)
                  ORDER BY job_id, run_lease))[1] AS early_example
FROM early";

/// The waits the workers were configured with, which the job contract
/// holds every retry and snooze to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// The retry backoff's base (`AWA_RETRY_BACKOFF`), doubled per attempt
    /// by [`crate::workload::retry_backoff_ms`].
    pub retry_backoff: std::time::Duration,
    /// The snooze (`AWA_SNOOZE`).
    pub snooze: std::time::Duration,
}

/// Jobs that started an attempt before it was due ([`EARLY_STARTS`]):
/// `scheduled` lists the scheduled jobs with their `run_at` (Unix ms).
pub async fn early_starts(
    client: &Client,
    scheduled: &[(i64, i64)],
    waits: &Waits,
) -> Result<Offenders> {
    let ids: Vec<i64> = scheduled.iter().map(|s| s.0).collect();
    let run_at: Vec<i64> = scheduled.iter().map(|s| s.1).collect();
    let backoff: Vec<f64> = (1..=crate::workload::BACKOFF_DOUBLES_UNTIL)
        .map(|attempt| crate::workload::retry_backoff_ms(waits.retry_backoff, attempt))
        .collect();
    let snooze = waits.snooze.as_secs_f64() * 1000.0;
    let row = client
        .query_one(
            EARLY_STARTS,
            &[
                &ids,
                &run_at,
                &backoff,
                &snooze,
                &EARLY_START_TOLERANCE_MS,
                &STARTS_AFTER_SNAPSHOT_SINCE.to_vec(),
            ],
        )
        .await
        .map_err(|e| Error::db("checking attempt starts against their due times", e))?;
    Ok(Offenders::from_row(&row, "early"))
}

// ---------------------------------------------------------------------
// Rescue of killed attempts
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// Interruptions and their causes
// ---------------------------------------------------------------------

/// Every attempt of an audited job that a rescue closed, with the runtime
/// that ran it and the job's mode: what the caller holds against the
/// faults it injected. A lost lease whose run was really aborted is one
/// of these too (the rescue closed its execution); one its own close
/// recorded, or an operator's cancel took, is not an interruption.
pub const RESCUED_ATTEMPTS: &str = r"
SELECT e.job_id, e.run_lease, e.attempt, substr(e.outcome, 9), e.instance_id, a.mode
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
        })
        .collect())
}

// ---------------------------------------------------------------------
// Cron
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// Operator counts
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// Rings: authority, poisoned columns, ledgers
// ---------------------------------------------------------------------

const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority";

/// The ring-cursor authority (`columns` or `ledger`), `None` before the
/// expand migration.
pub async fn authority(client: &Client, features: &SchemaFeatures) -> Result<Option<String>> {
    if !features.authority {
        return Ok(None);
    }
    let row = client
        .query_opt(AUTHORITY, &[])
        .await
        .map_err(|e| Error::db("reading the ring-cursor authority", e))?;
    Ok(row.map(|r| r.get(0)))
}

/// The compat cursor columns and per-slot generations, read through
/// `to_jsonb` so a schema without them (dropped columns read as NULL)
/// still answers.
pub const COLUMNS: &str = "
WITH st AS (
    SELECT 'queue' AS ring, to_jsonb(s) AS j FROM awa.queue_ring_state s
    UNION ALL SELECT 'claim', to_jsonb(s) FROM awa.claim_ring_state s
    UNION ALL SELECT 'lease', to_jsonb(s) FROM awa.lease_ring_state s
), sl AS (
    SELECT 'queue' AS ring, slot, to_jsonb(s)->>'generation' AS generation FROM awa.queue_ring_slots s
    UNION ALL SELECT 'claim', slot, to_jsonb(s)->>'generation' FROM awa.claim_ring_slots s
    UNION ALL SELECT 'lease', slot, to_jsonb(s)->>'generation' FROM awa.lease_ring_slots s
)
SELECT st.ring, (st.j->>'current_slot')::int, (st.j->>'generation')::bigint,
       coalesce((SELECT array_agg(sl.slot ORDER BY sl.slot) FROM sl
                 WHERE sl.ring = st.ring AND sl.generation IS NOT NULL AND sl.generation::bigint <> -1), '{}')
FROM st ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], st.ring)";

/// One ring's compat columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RingColumns {
    pub ring: String,
    /// `None` when the column does not exist.
    pub current_slot: Option<i32>,
    pub generation: Option<i64>,
    /// Slots whose legacy prune generation is not poisoned (-1).
    pub unpoisoned_slots: Vec<i32>,
}

impl RingColumns {
    /// Both cursor fields and every slot generation poisoned (or gone).
    pub fn poisoned(&self) -> bool {
        self.current_slot.is_none_or(|s| s == -1)
            && self.generation.is_none_or(|g| g == -1)
            && self.unpoisoned_slots.is_empty()
    }
}

/// The compat columns of the three rings.
pub async fn ring_columns(client: &Client) -> Result<Vec<RingColumns>> {
    let rows = client
        .query(COLUMNS, &[])
        .await
        .map_err(|e| Error::db("reading the ring cursor columns", e))?;
    Ok(rows
        .iter()
        .map(|r| RingColumns {
            ring: r.get(0),
            current_slot: r.get(1),
            generation: r.get(2),
            unpoisoned_slots: r.get(3),
        })
        .collect())
}

/// Per ring: the ledger's top, its gaps over the last wrap (missing
/// generations in `[max(0, top - slot_count + 1), top]`, as the flip
/// verifies them), rows whose slot is not `generation mod slot_count`,
/// and the highest generation any row of the ring carries (a row ahead
/// of the ledger was written by a cursor the ledger never had).
pub const LEDGERS: &str = "
WITH l AS (
    SELECT 'queue' AS ring, generation, slot FROM awa.queue_ring_rotations
    UNION ALL SELECT 'claim', generation, slot FROM awa.claim_ring_rotations
    UNION ALL SELECT 'lease', generation, slot FROM awa.lease_ring_rotations
), n AS (
    SELECT 'queue' AS ring, slot_count FROM awa.queue_ring_state
    UNION ALL SELECT 'claim', slot_count FROM awa.claim_ring_state
    UNION ALL SELECT 'lease', slot_count FROM awa.lease_ring_state
), top AS (SELECT ring, max(generation) AS top, count(*) AS n_rows FROM l GROUP BY ring),
written AS (
    SELECT 'queue' AS ring, max(generation) AS g FROM awa.queue_entries
    UNION ALL SELECT 'claim', max(generation) FROM awa.claim_receipts
    UNION ALL SELECT 'claim', max(generation) FROM awa.claim_closures
    UNION ALL SELECT 'lease', max(generation) FROM awa.leases
)
SELECT n.ring, n.slot_count, t.top, coalesce(t.n_rows, 0),
       CASE WHEN t.top IS NULL THEN 0 ELSE
           (t.top - greatest(0, t.top - n.slot_count + 1) + 1)
           - (SELECT count(*) FROM l WHERE l.ring = n.ring AND l.generation BETWEEN greatest(0, t.top - n.slot_count + 1) AND t.top)
       END AS gaps,
       (SELECT count(*) FROM l WHERE l.ring = n.ring AND l.slot <> l.generation % n.slot_count) AS misplaced,
       (SELECT max(w.g) FROM written w WHERE w.ring = n.ring) AS written
FROM n LEFT JOIN top t ON t.ring = n.ring
ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], n.ring)";

/// One ring's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ledger {
    pub ring: String,
    pub slot_count: i32,
    /// The max generation (`None`: the ledger is empty).
    pub top: Option<i64>,
    pub rows: i64,
    /// Generations missing over the last wrap.
    pub gaps: i64,
    /// Rows whose slot is not `generation mod slot_count`.
    pub misplaced: i64,
    /// The highest generation a row of the ring's tables carries.
    pub written: Option<i64>,
}

/// The three ledgers, `None` before the expand migration.
pub async fn ledgers(client: &Client, features: &SchemaFeatures) -> Result<Option<Vec<Ledger>>> {
    if !features.ledgers {
        return Ok(None);
    }
    let rows = client
        .query(LEDGERS, &[])
        .await
        .map_err(|e| Error::db("reading the ring ledgers", e))?;
    Ok(Some(
        rows.iter()
            .map(|r| Ledger {
                ring: r.get(0),
                slot_count: r.get(1),
                top: r.get(2),
                rows: r.get(3),
                gaps: r.get(4),
                misplaced: r.get(5),
                written: r.get(6),
            })
            .collect(),
    ))
}

// ---------------------------------------------------------------------
// The fence on the claim path: attempts pre-flip binaries started after it
// ---------------------------------------------------------------------

/// Attempts started more than [`FLIP_COMMIT_MARGIN_MS`] after the flip,
/// with the version of the binary that started each (one statement; the
/// caller keeps those below the schema's minimum flip version).
const ATTEMPTS_AFTER_FLIP: &str = "
SELECT e.job_id, e.run_lease, e.version,
       (extract(epoch FROM e.started_at - a.flipped_at) * 1000)::bigint,
       awa.ring_authority_min_flip_version()
FROM awa.executions e, awa.ring_cursor_authority a
WHERE a.authority = 'ledger' AND a.flipped_at IS NOT NULL
  AND e.started_at > a.flipped_at + $1::float8 * interval '1 millisecond'
  AND e.version <> $2
ORDER BY e.job_id, e.run_lease";

/// How long after `flipped_at` (the flip's last statement) its commit may
/// still be invisible to a starting transaction. Attempts started within
/// it are not judged: they may have seen `columns` legitimately.
pub const FLIP_COMMIT_MARGIN_MS: f64 = 50.0;

/// An attempt a binary below the minimum flip version started after the
/// flip: the fence did not stop its claim path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LateAttempt {
    pub job_id: i64,
    pub run_lease: i64,
    pub version: String,
    /// Milliseconds after the flip.
    pub after_flip_ms: i64,
}

/// Attempts started after the flip by binaries that are not flip-aware
/// (empty before the flip, or before the expand migration).
pub async fn attempts_after_flip_by_pre_flip_binaries(
    client: &Client,
    features: &SchemaFeatures,
) -> Result<Vec<LateAttempt>> {
    if !features.authority {
        return Ok(vec![]);
    }
    let rows = client
        .query(
            ATTEMPTS_AFTER_FLIP,
            &[&FLIP_COMMIT_MARGIN_MS, &crate::version::VERSION],
        )
        .await
        .map_err(|e| Error::db("reading attempts started after the flip", e))?;
    Ok(rows
        .iter()
        .filter(|r| {
            let min = super::authority::parse_version(r.get::<_, &str>(4));
            let version = super::authority::parse_version(r.get::<_, &str>(2));
            match (version, min) {
                (Some(v), Some(min)) => v < min,
                // Unparseable versions are not flip-aware (fail closed).
                _ => true,
            }
        })
        .map(|r| LateAttempt {
            job_id: r.get(0),
            run_lease: r.get(1),
            version: r.get(2),
            after_flip_ms: r.get(3),
        })
        .collect())
}

// ---------------------------------------------------------------------
// Placement: every ring row in the slot its ring's cursor gives it
// ---------------------------------------------------------------------

/// Ready entries, claim receipts and closures, and leases whose
/// `(slot, generation)` is not one the ring's authoritative cursor could
/// have given them. Rotation advances slot and generation in lock-step
/// and never opens a slot that holds rows, so a row of slot `s` carries
/// the generation at which `s` was last opened: `G - ((G - s) mod n)` for
/// the cursor's generation `G` and `n` slots. Any other generation was
/// written by a cursor the ring never had (a misrouted entry, a stale or
/// wrong cursor), wherever a claimer happens to find it. Per ring and
/// kind of row: how many, the first ids, and the first offender. One
/// statement, one snapshot; rings whose cursor is poisoned (-1) are not
/// judged. This variant reads the authority: the ledger's top under
/// `ledger`, the singleton columns under `columns`.
pub const MISPLACED: &str = "
WITH cur AS (
    SELECT 'queue' AS ring, s.slot_count,
           CASE WHEN a.authority = 'ledger'
                THEN (SELECT r.generation FROM awa.queue_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
                ELSE s.generation END AS generation
    FROM awa.queue_ring_state s, awa.ring_cursor_authority a
    UNION ALL
    SELECT 'claim', s.slot_count,
           CASE WHEN a.authority = 'ledger'
                THEN (SELECT r.generation FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
                ELSE s.generation END
    FROM awa.claim_ring_state s, awa.ring_cursor_authority a
    UNION ALL
    SELECT 'lease', s.slot_count,
           CASE WHEN a.authority = 'ledger'
                THEN (SELECT r.generation FROM awa.lease_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
                ELSE s.generation END
    FROM awa.lease_ring_state s, awa.ring_cursor_authority a
), placed AS (
    SELECT 'queue' AS ring, 'ready entry' AS kind, job_id, slot, generation FROM awa.queue_entries
    UNION ALL SELECT 'claim', 'claim receipt', job_id, slot, generation FROM awa.claim_receipts
    UNION ALL SELECT 'claim', 'claim closure', job_id, slot, generation FROM awa.claim_closures
    UNION ALL SELECT 'lease', 'lease', job_id, slot, generation FROM awa.leases
), wrong AS (
    SELECT p.ring, p.kind, p.job_id, p.slot, p.generation, c.generation AS cursor,
           c.generation - ((c.generation - p.slot) % c.slot_count + c.slot_count) % c.slot_count AS expected
    FROM placed p JOIN cur c ON c.ring = p.ring
    WHERE c.generation >= 0
)
SELECT ring, kind, max(cursor), count(*),
       (array_agg(job_id ORDER BY job_id))[1:$1],
       (array_agg(job_id ORDER BY job_id))[1], (array_agg(slot ORDER BY job_id))[1],
       (array_agg(generation ORDER BY job_id))[1], (array_agg(expected ORDER BY job_id))[1]
FROM wrong WHERE generation <> expected
GROUP BY ring, kind
ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], ring), kind";

/// [`MISPLACED`] on a schema before the expand migration: the columns
/// are the only cursor.
pub const MISPLACED_COLUMNS: &str = "
WITH cur AS (
    SELECT 'queue' AS ring, slot_count, generation FROM awa.queue_ring_state
    UNION ALL SELECT 'claim', slot_count, generation FROM awa.claim_ring_state
    UNION ALL SELECT 'lease', slot_count, generation FROM awa.lease_ring_state
), placed AS (
    SELECT 'queue' AS ring, 'ready entry' AS kind, job_id, slot, generation FROM awa.queue_entries
    UNION ALL SELECT 'claim', 'claim receipt', job_id, slot, generation FROM awa.claim_receipts
    UNION ALL SELECT 'claim', 'claim closure', job_id, slot, generation FROM awa.claim_closures
    UNION ALL SELECT 'lease', 'lease', job_id, slot, generation FROM awa.leases
), wrong AS (
    SELECT p.ring, p.kind, p.job_id, p.slot, p.generation, c.generation AS cursor,
           c.generation - ((c.generation - p.slot) % c.slot_count + c.slot_count) % c.slot_count AS expected
    FROM placed p JOIN cur c ON c.ring = p.ring
    WHERE c.generation >= 0
)
SELECT ring, kind, max(cursor), count(*),
       (array_agg(job_id ORDER BY job_id))[1:$1],
       (array_agg(job_id ORDER BY job_id))[1], (array_agg(slot ORDER BY job_id))[1],
       (array_agg(generation ORDER BY job_id))[1], (array_agg(expected ORDER BY job_id))[1]
FROM wrong WHERE generation <> expected
GROUP BY ring, kind
ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], ring), kind";

/// Rows of one kind in one ring that sit where no cursor put them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Misplaced {
    /// `queue`, `claim` or `lease`.
    pub ring: String,
    /// `ready entry`, `claim receipt`, `claim closure` or `lease`.
    pub kind: String,
    /// The ring's authoritative cursor generation at the snapshot.
    pub cursor: i64,
    /// How many rows.
    pub count: i64,
    /// The first [`MAX_IDS`] job ids, ascending.
    pub ids: Vec<i64>,
    /// The first offender: job id, its slot, its generation, and the
    /// generation that slot was last opened at.
    pub first: [i64; 4],
}

impl Misplaced {
    /// `ready entry of job 12 in slot 3 at generation 11, where slot 3 was last opened at generation 3`.
    pub fn describe_first(&self) -> String {
        let [job, slot, generation, expected] = self.first;
        format!(
            "{} of job {job} in slot {slot} at generation {generation}, where the {} ring's cursor \
             (generation {}) last opened slot {slot} at generation {expected}",
            self.kind, self.ring, self.cursor
        )
    }
}

/// The statement [`misplaced`] runs on a schema with `features`, for a
/// caller that reads it in a snapshot of its own (the rehearsal's
/// monitor); its one parameter is [`MAX_IDS`] as `int4`.
pub fn misplaced_sql(features: &SchemaFeatures) -> &'static str {
    if features.authority && features.ledgers {
        MISPLACED
    } else {
        MISPLACED_COLUMNS
    }
}

/// The rows of [`misplaced_sql`], read.
pub fn misplaced_rows(rows: &[tokio_postgres::Row]) -> Vec<Misplaced> {
    rows.iter()
        .map(|r| Misplaced {
            ring: r.get(0),
            kind: r.get(1),
            cursor: r.get(2),
            count: r.get(3),
            ids: r.get(4),
            first: [
                r.get::<_, i64>(5),
                i64::from(r.get::<_, i32>(6)),
                r.get::<_, i64>(7),
                r.get::<_, i64>(8),
            ],
        })
        .collect()
}

/// Every misplaced ring row, per ring and kind. A schema without the
/// columns placement reads (an expand that dropped them, which the schema
/// and N-1 rules name) has no placement to judge: none, not an error.
pub async fn misplaced(client: &Client, features: &SchemaFeatures) -> Result<Vec<Misplaced>> {
    read_misplaced(client, features)
        .await
        .map_err(|e| Error::db("reading ring rows outside their slots", e))
}

/// [`misplaced`] for a caller that keeps the driver's error: inside a
/// transaction the read runs under a savepoint, so a schema lacking what
/// it reads leaves the caller's transaction usable; outside one (the
/// savepoint refused with SQLSTATE 25P01) it runs on its own.
pub async fn read_misplaced(
    client: &Client,
    features: &SchemaFeatures,
) -> std::result::Result<Vec<Misplaced>, tokio_postgres::Error> {
    use tokio_postgres::error::SqlState;
    let in_transaction = match client.batch_execute(PLACEMENT_SAVEPOINT).await {
        Ok(()) => true,
        Err(e) if e.code() == Some(&SqlState::NO_ACTIVE_SQL_TRANSACTION) => false,
        Err(e) => return Err(e),
    };
    let read = client
        .query(misplaced_sql(features), &[&(MAX_IDS as i32)])
        .await;
    let (end, found) = match read {
        Ok(rows) => (PLACEMENT_RELEASE, misplaced_rows(&rows)),
        Err(e) if schema_lacks(&e) => (PLACEMENT_ROLLBACK, Vec::new()),
        Err(e) => return Err(e),
    };
    if in_transaction {
        client.batch_execute(end).await?;
    }
    Ok(found)
}

/// The savepoint [`misplaced`] reads under, so a schema that lacks what
/// it reads does not abort the caller's transaction.
pub const PLACEMENT_SAVEPOINT: &str = "SAVEPOINT placement";
/// [`PLACEMENT_SAVEPOINT`] kept: the read succeeded.
pub const PLACEMENT_RELEASE: &str = "RELEASE SAVEPOINT placement";
/// [`PLACEMENT_SAVEPOINT`] undone: the schema lacked what placement reads.
pub const PLACEMENT_ROLLBACK: &str = "ROLLBACK TO SAVEPOINT placement";

/// Whether `e` says the schema lacks a column or table the query names
/// (SQLSTATE 42703 or 42P01).
pub fn schema_lacks(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code()
        .is_some_and(|c| *c == SqlState::UNDEFINED_COLUMN || *c == SqlState::UNDEFINED_TABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn designed_values_cover_every_mode_once() {
        let values = designed_values();
        for mode in Mode::ALL {
            assert_eq!(
                values.matches(&format!("('{}',", mode.name())).count(),
                1,
                "{values}"
            );
        }
        assert!(
            values.contains("('exhaust_retries', 'failed', 0, 1, false, false)"),
            "{values}"
        );
        assert!(
            values.contains("('overrun_deadline', 'completed', 2, 0, true, false)"),
            "{values}"
        );
        assert!(
            values.contains("('snooze_once', 'completed', 2, 0, true, true)"),
            "{values}"
        );
        assert!(
            values.contains("('complete', 'completed', 1, 0, false, false)"),
            "{values}"
        );
    }

    #[test]
    fn poisoned_means_both_fields_and_every_slot() {
        let mut r = RingColumns {
            ring: "queue".into(),
            current_slot: Some(-1),
            generation: Some(-1),
            unpoisoned_slots: vec![],
        };
        assert!(r.poisoned());
        r.generation = Some(7);
        assert!(!r.poisoned(), "only current_slot poisoned");
        r.generation = None;
        assert!(r.poisoned(), "a dropped column cannot be written");
        r.unpoisoned_slots = vec![3];
        assert!(!r.poisoned());
    }
}
