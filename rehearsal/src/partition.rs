//! `--partition STRATEGY:I/N`: a deterministic share of the selected cells,
//! so CI spreads one matrix over N machines and `rehearse merge` joins
//! the N partial reports into one verdict.
//!
//! The plan cuts the share (`plan::share`, re-exported here, which says
//! how each strategy places a cell); this module reads the report.json
//! `--durations` names, whose cell times balance a `duration` share.
//!
//! ```
//! use rehearsal::partition::{Partition, Strategy, shares};
//! use std::collections::BTreeMap;
//!
//! let p: Partition = "slice:2/3".parse().unwrap();
//! assert_eq!((p.strategy, p.index, p.count), (Strategy::Slice, 2, 3));
//! let cells: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
//! let all = shares(&cells, p.strategy, p.count, &BTreeMap::new());
//! assert_eq!(all, [vec![0, 1], vec![2], vec![3]]);
//! ```

use std::path::Path;

pub use crate::plan::share::{MAX_COUNT, Partition, shares};
pub use crate::vocab::partition::{PartitionInfo, Strategy};

/// Why `--durations FILE` could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DurationsError {
    /// What is wrong and what to do.
    pub message: String,
}

/// The report.json `--durations` names (of one run, or merged): its cell
/// times balance the shares.
pub fn read_durations(path: &Path) -> Result<crate::report::RunReport, DurationsError> {
    crate::report::read_json(path).map_err(|e| DurationsError {
        message: format!(
            "{}; pass the report.json of an earlier run of this matrix (a merged one works too), or leave --durations out to place cells by hash",
            awa_runtime::error::chain(&e)
        ),
    })
}
