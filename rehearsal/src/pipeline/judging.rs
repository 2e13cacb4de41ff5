//! What the driver is handed to judge a cell and to try it again:
//! reconciliation over the cell's database (the verdict sent right after
//! each finished cell, so the stream arrives judged), and `--retries`'
//! another try for a cell left inconclusive for the harness's own reasons.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use super::RunArgs;
use crate::driver::cell::{Reconcile, Reconciled, Retry, Unretryable};
use crate::observe::{Observations, Verdict};
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
    ) -> Pin<Box<dyn Future<Output = Result<Reconciled, String>> + Send + 'a>> {
        Box::pin(async move {
            let client = crate::pg::connect(database_url)
                .await
                .map_err(|e| format!("reconciliation could not connect: {e}"))?;
            let recorded = crate::reconcile::reconcile_recorded(&client, plan, observations)
                .await
                .map_err(|e| awa_runtime::error::chain(&e))?;
            // The evidence is part of the verdict: a cell whose history
            // cannot be kept is not judged.
            let file = crate::reconcile::history::path(&self.dir, &plan.name);
            crate::reconcile::history::write(&file, &recorded.history)
                .map_err(|e| format!("could not record the terminal history: {e}"))?;
            Ok(Reconciled {
                findings: recorded.findings,
                doubts: recorded.doubts,
            })
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
    fn again(
        &self,
        judged: &RunEvent,
        unretryable: Option<Unretryable>,
        attempt: u32,
    ) -> Option<String> {
        if attempt >= self.tries {
            return None;
        }
        match judged {
            RunEvent::CellJudged {
                verdict: Verdict::Inconclusive,
                harness_error: Some(why),
                ..
            } => retryable(why, unretryable),
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
/// does not change; the driver says which (`unretryable`).
fn retryable(why: &str, unretryable: Option<Unretryable>) -> Option<String> {
    match unretryable {
        Some(Unretryable::Interrupted | Unretryable::NoDatabase | Unretryable::ServerLacks) => None,
        None => Some(why.to_owned()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict on a cell, inconclusive for `why` when it says one.
    fn judged(verdict: Verdict, why: Option<&str>) -> RunEvent {
        RunEvent::CellJudged {
            index: 0,
            cell: "c".into(),
            verdict,
            detection: None,
            reason: String::new(),
            harness_error: why.map(str::to_owned),
            reached: Vec::new(),
        }
    }

    /// `--retries` with `tries` tries in all, over a one-cell matrix.
    fn retry(tries: u32) -> RetryInconclusive {
        let matrix = crate::matrix::parse(
            "matrix.toml",
            r#"
[artifacts.current]
build = "workspace"
[workload]
rate_per_s = 10
mix = { complete = 1 }
[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "60s"
[[cell]]
name = "c"
about = "one worker"
fresh_install = true
steps = [{ fleet = "current", workers = 1 }]
"#,
        )
        .expect("a valid matrix");
        RetryInconclusive {
            matrix: Arc::new(matrix),
            seed: 1,
            tries,
        }
    }

    #[test]
    fn the_drivers_kind_not_the_words_decides_what_is_tried_again() {
        let over = "over its budget of 90s, stopped in step 3 (drain): 12 jobs left";
        for kind in [
            Unretryable::Interrupted,
            Unretryable::NoDatabase,
            Unretryable::ServerLacks,
        ] {
            assert_eq!(retryable(over, Some(kind)), None, "{kind:?}");
        }
        assert_eq!(retryable(over, None).as_deref(), Some(over));
        // Words like an interruption's, from a try the driver calls retryable.
        let like = "interrupted reads: the hold's client lost its connection";
        assert_eq!(retryable(like, None).as_deref(), Some(like));
    }

    #[test]
    fn only_an_inconclusive_try_with_a_harness_error_and_tries_left_goes_again() {
        let why = "the cell did not reach what it exists for: mixed_claims (only 0.7.0 workers started attempts)";
        let r = retry(2);
        let inconclusive = judged(Verdict::Inconclusive, Some(why));
        assert_eq!(r.again(&inconclusive, None, 1).as_deref(), Some(why));
        assert_eq!(r.again(&inconclusive, None, 2), None, "no try left");
        assert_eq!(
            r.again(&inconclusive, Some(Unretryable::Interrupted), 1),
            None
        );
        assert_eq!(r.again(&judged(Verdict::Inconclusive, None), None, 1), None);
        assert_eq!(r.again(&judged(Verdict::Fail, Some(why)), None, 1), None);
    }
}
