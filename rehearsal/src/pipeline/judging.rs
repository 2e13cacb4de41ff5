//! What the driver is handed to judge a cell and to try it again:
//! reconciliation over the cell's database (the verdict sent right after
//! each finished cell, so the stream arrives judged), and `--retries`'
//! another try for a cell left inconclusive for the harness's own reasons.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use super::RunArgs;
use crate::driver::cell::{Reconcile, Retry};
use crate::observe::{Finding, Observations, Verdict};
use crate::plan::CellPlan;
use crate::stream::{CellRun, RunEvent};

/// Reconciliation over a cell's database, and the verdict on the finished
/// cell, as the driver asks for them; the terminal history it judged goes
/// into the run folder `dir` (`history/<cell>.json.gz`), for `rehearse verify`.
pub(super) struct DatabaseReconcile {
    pub(super) dir: PathBuf,
}

impl Reconcile for DatabaseReconcile {
    fn findings<'a>(
        &'a self,
        database_url: &'a str,
        plan: &'a CellPlan,
        observations: &'a Observations,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Finding>, String>> + Send + 'a>> {
        Box::pin(async move {
            let client = crate::pg::connect(database_url)
                .await
                .map_err(|e| format!("reconciliation could not connect: {e}"))?;
            let (findings, _, history) =
                crate::reconcile::reconcile_recorded(&client, plan, observations)
                    .await
                    .map_err(|e| awa_runtime::error::chain(&e))?;
            // The evidence is part of the verdict: a cell whose history
            // cannot be kept is not judged.
            let file = crate::reconcile::history::path(&self.dir, &plan.name);
            crate::reconcile::history::write(&file, &history)
                .map_err(|e| format!("could not record the terminal history: {e}"))?;
            Ok(findings)
        })
    }

    fn judged(&self, run: &CellRun) -> RunEvent {
        crate::reconcile::cell_judged(run)
    }
}

/// Another try for a cell the judgement leaves inconclusive for the
/// harness's own reasons, on a plan drawn again from the matrix with
/// the try's seed.
struct RetryInconclusive {
    matrix: Arc<crate::matrix::Matrix>,
    seed: u64,
    /// Tries in all: the first and `--retries` more.
    tries: u32,
}

impl Retry for RetryInconclusive {
    fn again(&self, judged: &RunEvent, attempt: u32) -> Option<String> {
        if attempt >= self.tries {
            return None;
        }
        match judged {
            RunEvent::CellJudged {
                verdict: Verdict::Inconclusive,
                harness_error,
                ..
            } => retryable(harness_error.as_deref()?),
            _ => None,
        }
    }

    fn replan(&self, plan: &CellPlan, attempt: u32) -> Option<(CellPlan, u64)> {
        let seed = crate::plan::retry_seed(self.seed, attempt);
        Some((crate::plan::replan(&self.matrix, plan, seed)?, seed))
    }
}

/// Whether a cell inconclusive for `why` is worth another try: not when
/// the run was interrupted or the cell could not start at all (no
/// database, a server without what the cell needs), which a new seed
/// does not change.
fn retryable(why: &str) -> Option<String> {
    const FINAL: [&str; 4] = [
        "interrupted",
        "could not create the cell's database",
        "pg_crash needs the throwaway PostgreSQL cluster",
        "interrupted before the cell started",
    ];
    (!FINAL.iter().any(|f| why.starts_with(f))).then(|| why.to_owned())
}

/// `--retries N` (with the matrix file the cells came from): an
/// inconclusive cell is tried again, up to N more times.
pub(super) fn retry_inconclusive(args: &RunArgs) -> Option<Arc<dyn Retry>> {
    args.matrix
        .clone()
        .filter(|_| args.retries > 0)
        .map(|matrix| {
            Arc::new(RetryInconclusive {
                matrix,
                seed: args.plan.seed,
                tries: args.retries + 1,
            }) as Arc<dyn Retry>
        })
}
