//! Reconciliation: the exactly-once verdict of a cell.
//!
//! After drain, the driver hands over the cell's database and what it
//! observed. Reconciliation loads every accepted (and uncertain) job into
//! a temp table in one COPY, asks the runtime's own audit API
//! (`awa_runtime::store::audit`) to judge the whole set in a handful of
//! set-based statements, and turns the answers, together with what only
//! the observations show (fence runs, ring samples, flip output), into
//! [`Finding`]s. [`judge`] then compares them (and the steps' own
//! failures) with the cell's expectation.
//!
//! - `storage` is the database side: one snapshot, the audit set, the reads;
//! - `rules` turns job, cron and count audits into findings;
//! - `rings` judges the fence, the ring disciplines and the flip;
//! - `liveness` judges whether the rings kept rotating while they held rows;
//! - `placement` finds ready entries, claims and leases outside the slot
//!   their ring's cursor gives them (monitor ticks and the end state);
//! - `runaway` finds periodic loops of the runtime running far faster
//!   than their periods while the fleet stood idle;
//! - `growth` finds ledgers and deltas that grow without bound;
//! - `runtimes` reads how the runtimes ended and what the schema kept for N-1;
//!   `release_line` says which runtimes are of this release line (flip-aware);
//! - `leadership` finds a leader that stopped leading with no injected
//!   fault to explain it;
//! - `secrets` finds a runtime under test that printed a secret;
//! - `schema` finds `schema_version` rewritten and schema drift from a fresh install;
//! - `migrations` finds `schema_version` not recording each migration once,
//!   in order, by the one run that its `migrated` event says applied it;
//! - `refusals` finds refusals that came only after a good part of the
//!   runtimes' patience for transient failures (a refusal is prompt);
//! - `holders` finds a blocked flip naming a holder's transaction age the
//!   database's clock contradicts;
//! - `faults` says whether every fault step has evidence that it fired;
//! - `reach` says whether the cell reached the interleavings it declares;
//! - `starvation` says whether a timing-sensitive step ran starved past
//!   what the cell's timings tolerate (a failure then is inconclusive);
//! - `verdict` holds the findings and step failures against the expectation;
//! - `history` records the rows the exactly-once rules judged (the run
//!   folder keeps them), and `recorded` re-applies those rules to a
//!   recorded history without the database (`rehearse verify`).
//!
//! Both `rules` and `rings` are pure functions of plain data, so each rule
//! is tested without a database; `tests/reconcile.rs` runs the SQL.
//!
//! ```
//! use rehearsal::matrix::{Expectation, FindingRule};
//! use rehearsal::observe::{Finding, Verdict};
//! use rehearsal::reconcile::verdict;
//!
//! let lost = Finding {
//!     rule: FindingRule::Lost,
//!     phase: "reconcile".into(),
//!     message: "1 accepted job has no terminal record and no live row".into(),
//!     ids: vec![7],
//!     count: 1,
//!     at_ms: None,
//! };
//! assert_eq!(verdict(&Expectation::Pass, &[], &[], None), Verdict::Pass);
//! assert_eq!(verdict(&Expectation::Pass, &[lost.clone()], &[], None), Verdict::Fail);
//! assert_eq!(verdict(&Expectation::Detect(FindingRule::Lost), &[lost], &[], None), Verdict::Pass);
//! assert_eq!(verdict(&Expectation::Pass, &[], &[], Some("no PostgreSQL")), Verdict::Inconclusive);
//! ```

mod faults;
mod growth;
pub mod history;
mod holders;
mod judged;
mod leadership;
mod liveness;
mod migrations;
mod placement;
mod reach;
pub mod recorded;
mod refusals;
mod release_line;
mod rings;
mod rules;
mod runaway;
mod runtimes;
mod schema;
mod secrets;
mod starvation;
mod storage;
mod verdict;

pub use faults::unfired_faults;
pub use judged::{cell_judged, judged};
pub use reach::{Reached, reached, unreached};
pub use starvation::{Starved, starved};
pub use verdict::{Detection, Judgement, judge, verdict};

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::observe::{Doubt, Finding, Observations};
use crate::plan::CellPlan;

/// Why reconciliation could not reach a judgement (the cell is then
/// inconclusive: the harness failed, not the runtime).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The driver recorded a cron window that names no fire times.
    #[error(
        "cannot reconcile cell {cell}: cron window {name:?} has every_ms {every_ms}; \
         the interval must be positive"
    )]
    BadCronWindow {
        /// The cell.
        cell: String,
        /// The schedule.
        name: String,
        /// The interval recorded.
        every_ms: i64,
    },
    /// The cell's database has no awa schema at all.
    #[error(
        "cannot reconcile cell {cell}: its database has no awa schema; was it migrated before step 1?"
    )]
    NoSchema {
        /// The cell.
        cell: String,
    },
    /// A statement failed.
    #[error("failed to reconcile cell {cell}")]
    Database {
        /// The cell.
        cell: String,
        /// What failed, with the server's message.
        #[source]
        source: awa_runtime::error::Error,
    },
}

/// Figures reconciliation reports beside its findings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReconcileStats {
    /// Jobs producers reported `accepted` (each id once).
    pub accepted: u64,
    /// Jobs reported `uncertain` (their commit's fate unknown).
    pub uncertain: u64,
    /// Of those, how many turned out to exist.
    pub uncertain_found: u64,
    /// Jobs the cron leader fired (`awa.cron_fires`).
    pub cron_fires: u64,
    /// Terminal records of those jobs.
    pub terminal: u64,
    /// Terminal records of jobs nobody reported (a producer killed between
    /// its commit and its `accepted` line leaves these; not a finding).
    pub unaccounted_terminal: u64,
    /// Executions that a kill, a rescue or a graceful release interrupted:
    /// runs beyond one per attempt that interruptions explain.
    pub interrupted_executions: u64,
    /// Executions whose result lost to a newer run lease.
    pub stale_executions: u64,
    /// Wall time of reconciliation.
    pub elapsed_ms: u64,
}

/// Reconcile a drained cell: every rule over the cell's database and
/// observations. Give it a connection nothing else uses meanwhile, outside
/// a transaction: it opens its own snapshot and rolls it back, leaving
/// nothing behind. The findings alone: a caller that gives a verdict
/// wants the doubts too ([`reconcile_recorded`]).
pub async fn reconcile(
    client: &tokio_postgres::Client,
    plan: &CellPlan,
    obs: &Observations,
) -> Result<Vec<Finding>, ReconcileError> {
    Ok(reconcile_with_stats(client, plan, obs).await?.0)
}

/// [`reconcile`], with the figures the report prints beside the findings.
pub async fn reconcile_with_stats(
    client: &tokio_postgres::Client,
    plan: &CellPlan,
    obs: &Observations,
) -> Result<(Vec<Finding>, ReconcileStats), ReconcileError> {
    let recorded = reconcile_recorded(client, plan, obs).await?;
    Ok((recorded.findings, recorded.stats))
}

/// What [`reconcile_recorded`] gives: the findings, the rules the cell
/// could not be judged on, the report's figures and the terminal history.
pub struct Recorded {
    /// What is wrong.
    pub findings: Vec<Finding>,
    /// The rules the cell could not be judged on, for want of evidence.
    pub doubts: Vec<Doubt>,
    /// The report's figures.
    pub stats: ReconcileStats,
    /// The terminal history the exactly-once rules judged.
    pub history: history::History,
}

/// [`reconcile_with_stats`], with the terminal history the exactly-once
/// rules judged, read in the same snapshot (what the run folder keeps
/// for `rehearse verify`).
pub async fn reconcile_recorded(
    client: &tokio_postgres::Client,
    plan: &CellPlan,
    obs: &Observations,
) -> Result<Recorded, ReconcileError> {
    let started = Instant::now();
    let input = storage::Input::validate(&plan.name, obs)?;
    let mut storage = storage::read(client, &plan.name, &input)
        .await
        .map_err(|e| match e {
            storage::ReadError::NoSchema => ReconcileError::NoSchema {
                cell: plan.name.clone(),
            },
            storage::ReadError::Db(source) => ReconcileError::Database {
                cell: plan.name.clone(),
                source,
            },
        })?;
    let stale_ms = plan.timings.stale_after.as_millis();
    let mut findings = rules::findings(&storage, obs, stale_ms);
    let doubts: Vec<Doubt> = rules::interruption_doubt(&storage, obs, stale_ms)
        .into_iter()
        .collect();
    findings.extend(rings::findings(&storage, obs));
    findings.extend(liveness::findings(
        obs,
        liveness::stall_after_ms(&plan.timings),
    ));
    findings.extend(runaway::findings(obs, &runaway::Cadence::of(&plan.timings)));
    findings.extend(growth::findings(&storage, obs));
    findings.extend(placement::findings(&storage.misplaced, obs));
    findings.extend(runtimes::findings(&storage, obs));
    findings.extend(leadership::findings(obs));
    findings.extend(secrets::findings(obs));
    findings.extend(schema::findings(obs, &storage.schema_versions));
    findings.extend(migrations::findings(obs, &storage.schema_versions));
    findings.extend(holders::findings(obs));
    findings.extend(refusals::findings(
        obs,
        refusals::bound_ms(crate::driver::env::DB_PATIENCE),
    ));
    // Stable: within a rule, findings keep the order they were made in.
    findings.sort_by_key(|f| f.rule);
    let jobs = &storage.jobs;
    let stats = ReconcileStats {
        accepted: input.accepted as u64,
        uncertain: count(jobs.uncertain),
        uncertain_found: count(jobs.uncertain_found),
        cron_fires: count(storage.set.cron_fires),
        terminal: count(jobs.terminal),
        unaccounted_terminal: count(jobs.unaccounted.count),
        interrupted_executions: count(jobs.interrupted_runs),
        stale_executions: count(jobs.stale_runs),
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    Ok(Recorded {
        findings,
        doubts,
        stats,
        history: std::mem::take(&mut storage.history),
    })
}

/// The findings the monitor's ring samples alone can show (the MixedFleet
/// invariant sample by sample, and the samples around a flip), without a
/// database: what a test of the monitor checks its samples with.
pub fn sample_findings(obs: &Observations) -> Vec<Finding> {
    rings::sample_findings(obs)
}

/// A database count as a report figure (counts are never negative).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_lowercase_fragments_naming_the_cell() {
        let e = ReconcileError::BadCronWindow {
            cell: "migrate-first".into(),
            name: "tick".into(),
            every_ms: 0,
        };
        assert_eq!(
            e.to_string(),
            "cannot reconcile cell migrate-first: cron window \"tick\" has every_ms 0; the interval must be positive"
        );
        let e = ReconcileError::NoSchema {
            cell: "fence".into(),
        };
        assert!(
            e.to_string()
                .starts_with("cannot reconcile cell fence: its database has no awa schema")
        );
    }
}
