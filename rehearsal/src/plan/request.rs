//! One request, one finished plan: what a command asks of this stage.
//!
//! A run's plan is more than its cells drawn by the seed: each cell is
//! copied once per PostgreSQL major it runs on ([`super::majors`]), the
//! copies are cut to a `--partition` share ([`super::share`]), the plan
//! records the checksum of the matrix file it came from, and its replay
//! line repeats every flag that shaped it. [`Request::expand`] does all of
//! it, in that order, so each part is written once: `rehearse plan`,
//! `run`, `--repeat` and `selftest` make a [`Request`] and get a finished
//! [`Plan`], and nothing above this stage rewrites one.
//!
//! The majors and the share live in the plan because they are planning:
//! which cells run, under which ids, with which choices. What only a
//! higher stage can do is done there and handed down in the request:
//! reading the `--durations` report (`partition`, above the report) and
//! finding each major's server (`pipeline::locate_servers`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::majors::{Choice, list};
use super::share::{Partition, cut};
use super::{Plan, SelectError, Selection, plan_cells, replay_command, shell_quote};
use crate::matrix::{LoadError, Matrix};
use crate::vocab::flag::BadFlag;
use crate::vocab::major::Major;
use crate::vocab::partition::Strategy;
use crate::vocab::stress::Stress;

/// Everything that shapes a run's plan, as the command line gave it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `--matrix` and `--cell` as typed: a cell may name its major
    /// (`fence@pg18`), and the replay line repeats them so.
    pub selection: Selection,
    /// The run seed every random choice derives from.
    pub seed: u64,
    /// `--postgres`: the majors every cell not named with one runs on
    /// (empty: the matrix's `[postgres] servers`).
    pub postgres: Vec<Major>,
    /// `--partition`: the share of the selection (after the majors
    /// multiplied it) to plan.
    pub partition: Option<Partition>,
    /// `--durations`: the cell times that balance a `duration` share.
    pub durations: Option<Durations>,
    /// The matrix file the matrix was loaded from: the plan records the
    /// checksum of its bytes (`None`: planned from text, no checksum).
    pub matrix_path: Option<PathBuf>,
    /// `--matrix-file` as given: the replay line names the file only then.
    pub matrix_file: Option<PathBuf>,
    /// How the replay line asks for the cells again.
    pub replay_as: ReplayAs,
    /// `--from-registry NAME=REPOSITORY`, repeated by the replay line.
    pub from_registry: Vec<(String, String)>,
    /// `--stress`: the load the run ran beside, repeated by the replay line.
    pub stress: Option<Stress>,
}

/// `--durations FILE`, read: the report's cell times by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Durations {
    /// The file as given, for the plan's record and the replay line.
    pub file: PathBuf,
    /// Wall time of each cell by id, in ms.
    pub cells: BTreeMap<String, u64>,
}

/// How a replay line asks for a plan's cells again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayAs {
    /// `rehearse [--matrix NAME] [--cell NAME]... --seed S`, and every
    /// flag that shaped the plan.
    #[default]
    Selection,
    /// `rehearse selftest --seed S`: the subcommand picks its cells.
    Selftest,
}

/// Why a request could not be planned: all bad input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `--matrix` or `--cell` named something the matrix does not have.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// `--postgres` or `--cell NAME@pgN` that cannot be planned.
    #[error(transparent)]
    Flag(#[from] BadFlag),
    /// The matrix file could not be read again for its checksum.
    #[error(transparent)]
    Matrix(#[from] LoadError),
}

impl Request {
    /// The finished plan: the selection's cells drawn with the seed, each
    /// once per major it runs on, cut to the share, with the matrix
    /// file's checksum and the line that replays exactly this plan.
    pub fn expand(&self, matrix: &Matrix) -> Result<Plan, PlanError> {
        let (choice, names) = Choice::new(&self.postgres, &self.selection.cells, &matrix.servers)?;
        let selection = Selection {
            matrix: self.selection.matrix.clone(),
            cells: names,
        };
        let cells = choice.multiply_cells(plan_cells(matrix, &selection, self.seed)?);
        let matrix_checksum = match &self.matrix_path {
            Some(path) => checksum(path)?,
            None => String::new(),
        };
        let (cells, partition) = match self.partition {
            None => (cells, None),
            Some(p) => {
                let none = BTreeMap::new();
                let durations = self.durations.as_ref();
                let (cells, info) = cut(
                    cells,
                    p,
                    durations.map_or(&none, |d| &d.cells),
                    durations.map(|d| d.file.as_path()),
                );
                (cells, Some(info))
            }
        };
        Ok(Plan {
            seed: self.seed,
            selection,
            replay: self.replay(),
            cells,
            matrix_checksum,
            partition,
            schedule: matrix.schedule,
            checklist: matrix.checklist.clone(),
        })
    }

    /// The command that replays the plan: the selection as typed
    /// (`--cell fence@pg18` kept), `--postgres` when it was given, the
    /// run's conditions, then the share, which `rehearse merge` cuts off.
    fn replay(&self) -> String {
        let mut line = match self.replay_as {
            ReplayAs::Selection => {
                replay_command(&self.selection, self.seed, self.matrix_file.as_deref())
            }
            ReplayAs::Selftest => selftest_replay(self.seed, self.matrix_file.as_deref()),
        };
        if !self.postgres.is_empty() {
            line.push_str(" --postgres ");
            line.push_str(&list(&self.postgres));
        }
        for (name, reference) in &self.from_registry {
            line.push_str(&format!(" --from-registry {name}={reference}"));
        }
        // The load beside the run, so a replay reproduces the conditions.
        if let Some(stress) = self.stress {
            line.push_str(&format!(" --stress {stress}"));
        }
        if let Some(p) = self.partition {
            line.push_str(&format!(" --partition {p}"));
            if let Some(durations) = self
                .durations
                .as_ref()
                .filter(|_| p.strategy == Strategy::Duration)
            {
                line.push_str(" --durations ");
                line.push_str(&shell_quote(&durations.file.display().to_string()));
            }
        }
        line
    }
}

/// `rehearse [--matrix-file FILE] selftest --seed S`.
fn selftest_replay(seed: u64, matrix_file: Option<&Path>) -> String {
    let file = matrix_file
        .map(|f| format!("--matrix-file {} ", shell_quote(&f.display().to_string())))
        .unwrap_or_default();
    format!("rehearse {file}selftest --seed {seed}")
}

/// sha256 (hex) of the matrix file's bytes: partial runs and replays
/// check they planned from the same file.
fn checksum(path: &Path) -> Result<String, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(awa_harness::release::sha256_hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selftest_replay_names_the_subcommand() {
        assert_eq!(selftest_replay(5, None), "rehearse selftest --seed 5");
        assert_eq!(
            selftest_replay(5, Some(Path::new("my matrix.toml"))),
            "rehearse --matrix-file 'my matrix.toml' selftest --seed 5"
        );
    }
}
