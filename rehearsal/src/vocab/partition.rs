//! What a partitioned run is (`--partition STRATEGY:I/N`), as the plan,
//! the event stream and the reports record it; cutting a selection into
//! shares is `partition`'s work.

use serde::{Deserialize, Serialize};

/// How cells are assigned to shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// By a stable hash of the cell id.
    Hash,
    /// Contiguous runs in matrix order.
    Slice,
    /// Balanced by recorded durations, unknown cells by hash.
    Duration,
}

impl Strategy {
    /// The flag's word.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Hash => "hash",
            Strategy::Slice => "slice",
            Strategy::Duration => "duration",
        }
    }
}

/// What report.json and plan.json record of a partitioned run: enough for
/// `rehearse merge` to check that the partials cover the selection once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    /// How cells were assigned.
    pub strategy: Strategy,
    /// Which share this run is (1-based).
    pub index: u32,
    /// How many shares the selection was cut into.
    pub count: u32,
    /// Every cell of the whole selection (all shares), in matrix order.
    pub cells: Vec<String>,
    /// The report.json the durations came from (`duration` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durations: Option<String>,
}

impl PartitionInfo {
    /// `hash:1/4`.
    pub fn spec(&self) -> String {
        format!("{}:{}/{}", self.strategy.name(), self.index, self.count)
    }
}
