//! The per-job audit: each job of the audit set against the terminal its
//! mode was designed for (lost, duplicate, wrong state or attempt,
//! misnumbered runs, double execution), in one set-based statement.

use super::Offenders;
use crate::error::{Error, Result};
use crate::workload::Mode;
use serde::Serialize;
use tokio_postgres::Client;

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
}
