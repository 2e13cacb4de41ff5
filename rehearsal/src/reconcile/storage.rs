//! The database side of reconciliation: one snapshot, the audit set, and
//! every read, each a set-based statement of `awa_runtime::store::audit`.
//!
//! Memory stays flat in the number of jobs: the accepted jobs are streamed
//! to the server by COPY straight from the observations, and only the
//! order in which to send them (four bytes a job) and their parsed modes
//! (one byte a job) are held on the side.

use awa_runtime::error::Error as DbError;
use awa_runtime::store::audit::{
    self, AuditJob, AuditSetSize, CronFault, CronWindow, JobAudit, LateAttempt, Ledger, Misplaced,
    RingColumns, StateCount, Stuck, UnprovenRescue,
};
use awa_runtime::workload::Mode;
use tokio_postgres::Client;

use super::ReconcileError;
use crate::observe::{AcceptedJob, Observations, SchemaVersionRow};

/// The snapshot every read shares; sort memory for the million-row
/// aggregates (server side, this transaction only); no JIT, whose compile
/// time (over a second for the job audit) is never won back here.
const BEGIN: &str =
    "BEGIN ISOLATION LEVEL REPEATABLE READ; SET LOCAL work_mem = '256MB'; SET LOCAL jit = off";
/// `awa.schema_version` as it ends, `applied_at` in microseconds.
const SCHEMA_VERSIONS: &str = "SELECT version, (extract(epoch FROM applied_at) * 1000000)::int8 \
     FROM awa.schema_version ORDER BY version";
/// Nothing reconciliation does is kept: the temp table goes with it.
const ROLLBACK: &str = "ROLLBACK";

/// What the observations ask of the database, checked before it is touched.
pub(super) struct Input<'o> {
    accepted_jobs: &'o [AcceptedJob],
    uncertain_jobs: &'o [AcceptedJob],
    /// Indexes into `accepted_jobs ++ uncertain_jobs`, ordered by job id,
    /// each id once (an id reported both ways counts as accepted).
    order: Vec<u32>,
    /// The parsed mode of each job, by the same index.
    modes: Vec<Mode>,
    /// Distinct accepted ids.
    pub(super) accepted: usize,
    killed: Vec<(i64, i32, i64)>,
    windows: Vec<CronWindow>,
    /// Accepted scheduled jobs and their `run_at` (Unix ms).
    scheduled: Vec<(i64, i64)>,
    /// Jobs an operator cancelled while they were live: cancelled is their
    /// designed end.
    cancelled: std::collections::BTreeSet<i64>,
    /// Attempts whose own run reported them lost: (job_id, run_lease).
    disowned: Vec<(i64, i64)>,
    /// The windows as the driver recorded them, for the history.
    cron_windows: &'o [crate::observe::CronWindow],
}

impl<'o> Input<'o> {
    /// Parse every mode and cron window; put the jobs in id order.
    pub(super) fn validate(cell: &str, obs: &'o Observations) -> Result<Input<'o>, ReconcileError> {
        let modes: Vec<Mode> = (obs.accepted.iter().chain(&obs.uncertain))
            .map(|job| job.mode)
            .collect();
        let total = u32::try_from(modes.len()).expect("fewer than 4 billion jobs in one cell");
        let id = |i: u32| {
            let i = i as usize;
            obs.accepted
                .get(i)
                .unwrap_or_else(|| &obs.uncertain[i - obs.accepted.len()])
                .job_id
        };
        let mut order: Vec<u32> = (0..total).collect();
        // Index breaks ties, so the accepted report of an id comes first.
        order.sort_unstable_by_key(|&i| (id(i), i));
        order.dedup_by_key(|i| id(*i));
        let accepted = order
            .iter()
            .filter(|&&i| (i as usize) < obs.accepted.len())
            .count();
        let windows = obs
            .cron
            .iter()
            .map(|w| {
                if w.every_ms <= 0 {
                    return Err(ReconcileError::BadCronWindow {
                        cell: cell.to_owned(),
                        name: w.name.clone(),
                        every_ms: w.every_ms,
                    });
                }
                Ok(CronWindow {
                    name: w.name.clone(),
                    every_ms: w.every_ms,
                    from_ms: w.from_ms,
                    to_ms: w.to_ms,
                })
            })
            .collect::<Result<_, _>>()?;
        let killed = obs
            .kills
            .iter()
            .flat_map(|k| &k.in_flight)
            .map(|f| (f.job_id, f.attempt, f.run_lease))
            .collect();
        let scheduled = obs
            .accepted
            .iter()
            .filter_map(|job| job.run_at_ms.map(|at| (job.job_id, at)))
            .collect();
        let cancelled = obs
            .cancels
            .iter()
            .filter(|c| c.was_live == Some(true))
            .map(|c| c.job_id)
            .collect();
        let disowned = obs
            .disowned_runs
            .iter()
            .map(|d| (d.job_id, d.run_lease))
            .collect();
        Ok(Input {
            disowned,
            scheduled,
            cancelled,
            accepted_jobs: &obs.accepted,
            uncertain_jobs: &obs.uncertain,
            order,
            modes,
            accepted,
            killed,
            windows,
            cron_windows: &obs.cron,
        })
    }

    /// The audit set, in id order.
    fn audit_jobs(&self) -> impl Iterator<Item = AuditJob> + '_ {
        let split = self.accepted_jobs.len();
        self.order.iter().map(move |&i| {
            let i = i as usize;
            let (job, uncertain) = match self.accepted_jobs.get(i) {
                Some(job) => (job, false),
                None => (&self.uncertain_jobs[i - split], true),
            };
            AuditJob {
                job_id: job.job_id,
                mode: self.modes[i],
                max_attempts: job.max_attempts,
                uncertain,
                cancelled: self.cancelled.contains(&job.job_id),
            }
        })
    }
}

/// Everything reconciliation read, as plain data.
#[derive(Debug, Default)]
pub(super) struct Storage {
    pub(super) set: AuditSetSize,
    pub(super) jobs: JobAudit,
    pub(super) stuck: Stuck,
    /// Available jobs no ready entry of their queue names.
    pub(super) unreachable: audit::Offenders,
    /// Terminal records that do not match the execution behind them.
    pub(super) mismatched: audit::Offenders,
    /// Jobs an attempt of which started before it was due.
    pub(super) early: audit::Offenders,
    pub(super) rescues: Vec<UnprovenRescue>,
    /// Every attempt of an audited job a rescue closed.
    pub(super) rescued: Vec<audit::RescuedAttempt>,
    pub(super) cron: Vec<CronFault>,
    pub(super) counts: Vec<StateCount>,
    /// `None` before the expand migration.
    pub(super) authority: Option<String>,
    /// The compat columns, read once the authority exists.
    pub(super) columns: Vec<RingColumns>,
    /// `None` before the expand migration.
    pub(super) ledgers: Option<Vec<Ledger>>,
    /// Attempts binaries below the minimum flip version started after the flip.
    pub(super) late_attempts: Vec<LateAttempt>,
    /// The oldest version the schema counts as flip-aware; `None` before
    /// the expand migration.
    pub(super) min_flip_version: Option<String>,
    /// `awa.schema_version` at the end.
    pub(super) schema_versions: Vec<SchemaVersionRow>,
    /// Ring rows outside the slot their ring's cursor gives them, at the end.
    pub(super) misplaced: Vec<Misplaced>,
    /// The rows the exactly-once rules judged, for the run folder.
    pub(super) history: super::history::History,
}

/// Why the reads stopped.
#[derive(Debug)]
pub(super) enum ReadError {
    /// No awa schema in the database.
    NoSchema,
    /// A statement failed.
    Db(DbError),
}

impl From<DbError> for ReadError {
    fn from(e: DbError) -> Self {
        ReadError::Db(e)
    }
}

/// Run every read in one snapshot, then roll it back, whatever happened.
pub(super) async fn read(
    client: &Client,
    cell: &str,
    input: &Input<'_>,
) -> Result<Storage, ReadError> {
    client
        .batch_execute(BEGIN)
        .await
        .map_err(|e| DbError::db("starting the reconciliation snapshot", e))?;
    let result = read_in_snapshot(client, cell, input).await;
    let ended = client
        .batch_execute(ROLLBACK)
        .await
        .map_err(|e| DbError::db("ending the reconciliation snapshot", e));
    let storage = result?;
    ended?;
    Ok(storage)
}

async fn read_in_snapshot(
    client: &Client,
    cell: &str,
    input: &Input<'_>,
) -> Result<Storage, ReadError> {
    if awa_runtime::schema::current_version(client)
        .await?
        .is_none()
    {
        return Err(ReadError::NoSchema);
    }
    let features = audit::schema_features(client).await?;
    let set = audit::load_audit_set(client, input.audit_jobs()).await?;
    let authority = audit::authority(client, &features).await?;
    let mut history = super::history::read(client, cell, input.cron_windows).await?;
    history.disowned_runs = super::history::Runs {
        job: input.disowned.iter().map(|d| d.0).collect(),
        lease: input.disowned.iter().map(|d| d.1).collect(),
    };
    Ok(Storage {
        history,
        set,
        jobs: audit::audit_jobs(client).await?,
        stuck: audit::stuck(client).await?,
        unreachable: audit::unreachable_ready(client).await?,
        mismatched: audit::terminal_mismatches(client, &input.disowned).await?,
        early: audit::early_starts(client, &input.scheduled, &crate::driver::env::WAITS).await?,
        rescues: audit::unproven_rescues(client, &input.killed).await?,
        rescued: audit::rescued_attempts(client).await?,
        cron: audit::cron_faults(client, &input.windows).await?,
        counts: audit::terminal_counts(client, &features).await?,
        columns: if authority.is_some() {
            audit::ring_columns(client).await?
        } else {
            vec![]
        },
        authority,
        ledgers: audit::ledgers(client, &features).await?,
        late_attempts: audit::attempts_after_flip_by_pre_flip_binaries(client, &features).await?,
        min_flip_version: audit::min_flip_version(client, &features).await?,
        schema_versions: schema_versions(client).await?,
        misplaced: audit::misplaced(client, &features).await?,
    })
}

async fn schema_versions(client: &Client) -> Result<Vec<SchemaVersionRow>, DbError> {
    let rows = client
        .query(SCHEMA_VERSIONS, &[])
        .await
        .map_err(|e| DbError::db("reading schema_version", e))?;
    Ok(rows
        .iter()
        .map(|r| SchemaVersionRow {
            version: r.get(0),
            applied_at_us: r.get(1),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(job_id: i64, mode: &str) -> AcceptedJob {
        AcceptedJob {
            job_id,
            mode: Mode::parse(mode).expect("a mode"),
            max_attempts: 3,
            version: "0.7.0".into(),
            run_at_ms: None,
        }
    }

    #[test]
    fn audit_set_is_in_id_order_with_each_id_once_and_accepted_first() {
        let obs = Observations {
            accepted: vec![
                job(5, "complete"),
                job(2, "retry_once"),
                job(5, "complete"),
                job(9, "sleep"),
            ],
            uncertain: vec![job(9, "sleep"), job(1, "cancel_self")],
            ..Default::default()
        };
        let input = Input::validate("cell", &obs).unwrap();
        let got: Vec<(i64, Mode, bool)> = input
            .audit_jobs()
            .map(|j| (j.job_id, j.mode, j.uncertain))
            .collect();
        assert_eq!(
            got,
            [
                (1, Mode::CancelSelf, true),
                (2, Mode::RetryOnce, false),
                (5, Mode::Complete, false),
                (9, Mode::Sleep, false),
            ]
        );
        assert_eq!(input.accepted, 3);
    }

    #[test]
    fn empty_cron_intervals_are_refused_before_the_database() {
        let obs = Observations {
            cron: vec![crate::observe::CronWindow {
                name: "tick".into(),
                every_ms: 0,
                from_ms: 0,
                to_ms: 10,
            }],
            ..Default::default()
        };
        assert!(matches!(
            Input::validate("cell", &obs),
            Err(ReconcileError::BadCronWindow { every_ms: 0, .. })
        ));
    }
}
