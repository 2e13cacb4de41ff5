//! Plan: a validated matrix, a selection and a seed become concrete cell plans.
//!
//! The second pipeline stage, and the last one that runs nothing. Every
//! random choice a cell makes (which worker a kill hits, how long after
//! its trigger it fires) is drawn here, from a splitmix64 stream seeded
//! with the (mixed) run seed and an FNV-1a hash of the cell's name: the same seed
//! gives the same plan on every machine and in every Rust release, and
//! adding a cell does not change another cell's choices. The plan is
//! what `rehearse plan` prints, what the driver executes, and what
//! report.json records, so a failing run can be replayed exactly.
//!
//! A command asks once, with a [`Request`] (selection, seed, majors,
//! share, matrix file), and gets the finished plan: cells copied per
//! PostgreSQL major ([`majors`]), cut to a `--partition` share
//! ([`share`]), with the matrix file's checksum and the replay line.
//!
//! This file holds the plan's types; its parts have a
//! file each: `selection` (which cells), `draw` (one cell's plan drawn
//! from the seed), `planned_step` (kills and suspensions resolved),
//! `splitmix` (the seeded streams), `replay_line` (the replay command and
//! shell quoting), `plan_text` (the plan for humans), beside `request`,
//! `majors` and `share`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::matrix::{
    Artifact, Expectation, IntendedDifference, Matrix, Timings, UpgradePath, Workload,
};

mod draw;
pub mod majors;
mod plan_text;
mod planned_step;
mod replay_line;
mod request;
mod selection;
pub mod share;
mod splitmix;

use draw::plan_cell;
pub use majors::{Choice, cell_id};
pub use plan_text::render;
pub use planned_step::{Pick, PlannedKill, PlannedStep, PlannedSuspend, artifacts_named};
pub use replay_line::replay_command;
pub(crate) use replay_line::{command_line, shell_quote};
pub use request::{Durations, PlanError, ReplayAs, Request};
pub use selection::{SelectError, Selection, select};
pub use share::Partition;
pub use splitmix::{SplitMix64, fnv1a64, random_seed, retry_seed};

/// Largest random delay, in milliseconds, added to a kill that does not wait for started jobs.
pub const MAX_JITTER_MS: u64 = 500;

/// A whole run's plan: the seed, what was selected, and every cell's concrete steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The run seed every random choice derives from.
    pub seed: u64,
    /// What was selected.
    pub selection: Selection,
    /// The command line that replays exactly this plan.
    pub replay: String,
    /// One plan per selected cell, in run order.
    pub cells: Vec<CellPlan>,
    /// sha256 (hex) of the matrix file's bytes the plan was expanded from
    /// (empty when planned from text). Added in report format 1.10.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub matrix_checksum: String,
    /// `--partition`: which share of the selection this plan is. Added in 1.10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<crate::vocab::partition::PartitionInfo>,
    /// matrix.toml's `[schedule]`: what `--jobs auto` packs by when no
    /// report covers these cells, kept with the plan so a replay packs
    /// as its run did (plan.json 1.1; the default before).
    #[serde(default)]
    pub schedule: crate::matrix::ScheduleEstimate,
    /// matrix.toml's `[[checklist]]` (ADR-041 §9 and the cells covering
    /// each item), whole: the report says which items this run's cells
    /// covered (plan.json 1.2; none before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checklist: Vec<crate::matrix::ChecklistItem>,
}

/// One cell, ready for the driver: nothing left to choose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellPlan {
    /// The cell's name.
    pub name: String,
    /// Its one-line description.
    pub about: String,
    /// The verdict it must reach.
    pub expect: Expectation,
    /// How its database starts.
    pub database: DatabaseSetup,
    /// Every artifact the cell uses, by name.
    pub artifacts: BTreeMap<String, Artifact>,
    /// The job load.
    pub workload: Workload,
    /// Runtime timings.
    pub timings: Timings,
    /// Steps with every random choice resolved.
    pub steps: Vec<PlannedStep>,
    /// The releases the cell walks, when it declares a path. Added in 1.6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<UpgradePath>,
    /// The schema differences `schema_matches_fresh` accepts (the
    /// matrix's `[schema]`), for a cell that asserts it. Added in 1.6.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_intended: Vec<IntendedDifference>,
    /// The PostgreSQL major it runs on (`--postgres`, `[postgres]
    /// servers`); `None`: the run's one server, whichever was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<crate::vocab::major::Major>,
    /// The interleavings the cell must reach (matrix.toml's `reach`).
    /// Added in report format 1.14.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<crate::matrix::Reach>,
}

/// How a cell's database is prepared before step 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseSetup {
    /// An empty database on the current schema (ledger authority from the start).
    pub fresh_install: bool,
    /// The artifact whose `awa migrate` prepares it.
    pub migrated_by: String,
}

/// The selected cells of `matrix` drawn with `seed`, for this crate's
/// tests: the selection alone, on no major in particular, whole, with no
/// checksum. Every plan outside tests comes finished from a [`Request`].
#[cfg(test)]
pub(crate) fn expand(
    matrix: &Matrix,
    selection: &Selection,
    seed: u64,
) -> Result<Plan, SelectError> {
    Ok(Plan {
        seed,
        selection: selection.clone(),
        replay: replay_command(selection, seed, None),
        cells: plan_cells(matrix, selection, seed)?,
        matrix_checksum: String::new(),
        partition: None,
        schedule: matrix.schedule,
        checklist: matrix.checklist.clone(),
    })
}

/// The plan of each selected cell, drawn with `seed`, in run order.
fn plan_cells(
    matrix: &Matrix,
    selection: &Selection,
    seed: u64,
) -> Result<Vec<CellPlan>, SelectError> {
    Ok(select(matrix, selection)?
        .into_iter()
        .map(|cell| plan_cell(matrix, cell, seed))
        .collect())
}

/// The plan of another try of `previous` (a cell of `matrix`, or of one
/// of its `NAME@pgN` copies) drawn with `seed`: every random choice
/// drawn again, its name and server kept. `None` when the matrix has no
/// such cell.
pub fn replan(matrix: &Matrix, previous: &CellPlan, seed: u64) -> Option<CellPlan> {
    let cell = matrix.cells.iter().find(|c| {
        c.name == previous.name
            || previous
                .name
                .strip_prefix(c.name.as_str())
                .is_some_and(|rest| rest.starts_with('@'))
    })?;
    let mut plan = plan_cell(matrix, cell, seed);
    plan.name.clone_from(&previous.name);
    plan.server = previous.server;
    Some(plan)
}

#[cfg(test)]
mod tests;
