//! The timing of the job contract: no attempt starts before it is due
//! (its `run_at`, or the backoff or snooze of the attempt before it).

use super::Offenders;
use crate::error::{Error, Result};
use tokio_postgres::Client;

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
