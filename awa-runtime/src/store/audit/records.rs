//! Terminal records against the executions that produced them: each
//! must be the outcome of its job's last run, and that run's own.

use super::Offenders;
use crate::error::{Error, Result};
use tokio_postgres::Client;

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
