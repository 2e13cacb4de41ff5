//! What a mutate run found: each mutant's status and result, and each
//! clean cell's run. The runner fills them in and the report reads them,
//! so they sit below both.

use serde::{Deserialize, Serialize};

use super::Mutant;
use super::child::CellOutcome;

/// A mutant's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Status {
    /// A cell failed on it.
    Killed {
        /// The cell that failed (`-`: the build would not start at all).
        cell: String,
        /// The rule (or step failure) the cell's report gives first.
        rule: String,
    },
    /// Every cell passed (or was inconclusive).
    Survived,
    /// It does not build.
    Unviable {
        /// The compiler's first error.
        error: String,
    },
    /// A cell ran past its budget.
    Timeout {
        /// The cell.
        cell: String,
        /// Its budget, in seconds.
        budget_s: u64,
    },
}

impl Status {
    /// The word the report uses.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Killed { .. } => "killed",
            Status::Survived => "survived",
            Status::Unviable { .. } => "unviable",
            Status::Timeout { .. } => "timeout",
        }
    }
}

/// One mutant's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutantResult {
    /// The mutant.
    pub mutant: Mutant,
    /// Its unified diff.
    pub diff: String,
    /// Its outcome.
    #[serde(flatten)]
    pub status: Status,
    /// The cells run, in order.
    pub cells: Vec<CellOutcome>,
    /// Its build's time, ms.
    pub build_ms: u64,
    /// Build and cells, ms.
    pub elapsed_ms: u64,
}

/// The clean run of one cell: its time and whether it can judge mutants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanCell {
    /// How it went on the unmutated build.
    pub outcome: CellOutcome,
    /// Whether it passed there (only those judge mutants).
    pub usable: bool,
}
