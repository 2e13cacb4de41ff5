//! Driver: executes cell plans against real processes and a real
//! PostgreSQL, and records what happened as [`Observations`].
//!
//! The third pipeline stage, wired into `rehearse run` by `pipeline.rs`
//! (which resolves the artifacts before it, and records and reports its
//! events after it). [`run::execute`] runs a whole plan: it starts
//! PostgreSQL and runs the cells (`--jobs` at a time); through the
//! [`cell::Reconcile`] seam the pipeline gives it, each cell's findings
//! are read from its database and each finished cell is judged, its
//! verdict sent right after it. A cell ([`cell::run_cell`]) gets a
//! database of its own, is prepared (N-1 schema, cron schedule, banked
//! backlog), then executes its steps in order, each a timeline
//! [`Phase`]; a final drain and stop, the cron window and reconciliation
//! close it.
//!
//! Inside: `cell` (one cell's phases in order; it lends each step a
//! `StepCtx` and dispatches), `step_ctx` (what a step may touch: the
//! cell's state, its database, the plan and the fleet through a handle),
//! `steps` (one file per step kind, setup among them, `steps/mod.rs`
//! dispatching; none names the cell), `procs` (starting, stopping and
//! killing processes; the fleet's seats), `effect` (proof that a suspend,
//! resume or kill took effect), `state` (the cell's state,
//! owned in one place: seats, armed faults, suspensions, observations),
//! `ledger` (what the fleet reported, and waiting on it),
//! `migration_hold` (the lock that keeps a paused migration open while
//! runtimes start inside it), `probe` (the driver's own SQL: asserts,
//! fence digests, live jobs), `database` (the throwaway cluster or an
//! external server), `credential` (the password a cell's runtimes of the
//! release under test carry, in turn in each shape of DSN), `env` (the
//! `AWA_*` environment), `waited` (a wait
//! as messages say it), `run`. The cell's time budget is `cell/budget.rs`.
//!
//! Outcomes a step can have: it did what the plan says (`ok`, or
//! `refused` where a refusal was required); it found the product not
//! doing what the plan requires (a step failure: recorded in
//! [`Observations::step_failures`] and the phase, the cell goes on, and a
//! `pass` cell fails); or the harness itself could not go on ([`Abort`]:
//! the cell stops and is inconclusive).
//!
//! [`Observations`]: crate::observe::Observations
//! [`Observations::step_failures`]: crate::observe::Observations::step_failures
//! [`Phase`]: crate::observe::Phase

pub mod cell;
pub mod credential;
pub mod database;
mod effect;
pub mod env;
pub mod ledger;
mod migration_hold;
pub mod probe;
mod procs;
pub mod run;
mod state;
mod step_ctx;
mod steps;
mod waited;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::artifacts::Resolved;
use crate::fleet::Fleet;
use crate::observe::StepOutcome;
use crate::stream::Events;

pub use awa_runtime::error::{EXIT_BLOCKED, EXIT_ERROR, EXIT_OK, EXIT_REFUSED};
pub use ledger::{Cancel, Interrupted};

/// Everything a cell shares with the rest of the run.
#[derive(Clone)]
pub struct CellContext {
    /// The backend that starts processes.
    pub fleet: Arc<dyn Fleet>,
    /// Resolved artifacts by matrix name.
    pub artifacts: Arc<BTreeMap<String, Resolved>>,
    /// The run's report folder (logs go under `logs/<cell>/`).
    pub report_dir: PathBuf,
    /// The run's id (the report folder's name).
    pub run_id: String,
    /// Where databases are created.
    pub server: database::Server,
    /// `--keep`: leave databases and clusters behind.
    pub keep: bool,
    /// Set when the run is interrupted.
    pub cancel: Cancel,
    /// Schema version of the expand migration: below it, a flip-aware
    /// binary's refusal is the expected binary-first outcome.
    pub expand_version: i32,
    /// Where the cell's events go.
    pub events: Events,
    /// Which try of the cell this is (1 for the first; see `--retries`).
    pub attempt: u32,
    /// When a cell's monitor last found it starving (the run's gate).
    pub starving: Arc<crate::monitor::Starving>,
}

/// What tells a later try's things apart from the first's (databases,
/// containers): empty for the first try, `{sep}tryN` after it.
pub(crate) fn try_tag(attempt: u32, sep: char) -> String {
    match attempt {
        0 | 1 => String::new(),
        n => format!("{sep}try{n}"),
    }
}

/// Why a cell stopped before its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Abort {
    /// Ctrl-C or SIGTERM to rehearse.
    Interrupted,
    /// The cell's time budget ran out; what it was waiting for.
    OverBudget(String),
    /// The harness could not go on (a binary would not start, PostgreSQL did not come back).
    Harness(String),
    /// The product failed where the cell cannot go on (the build under
    /// rehearsal did not install on an empty database that answers): the
    /// step failure is recorded, and the cell fails without reconciling
    /// a database its steps never got to use.
    Failed(String),
}

impl From<Interrupted> for Abort {
    fn from(_: Interrupted) -> Self {
        Abort::Interrupted
    }
}

/// What a step did: its phase outcome and a sentence for the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    /// How it ended (a step failure recorded meanwhile makes it `failed`).
    pub outcome: StepOutcome,
    /// What happened, for humans.
    pub detail: String,
}

impl Done {
    /// A step that did what it should.
    pub fn ok(detail: impl Into<String>) -> Done {
        Done {
            outcome: StepOutcome::Ok,
            detail: detail.into(),
        }
    }

    /// A step with another outcome.
    pub fn with(outcome: StepOutcome, detail: impl Into<String>) -> Done {
        Done {
            outcome,
            detail: detail.into(),
        }
    }
}
