//! How a seeded defect was caught, as reconciliation judges it and the
//! event stream, the selftest score and the report carry it.

use serde::{Deserialize, Serialize};

/// How a `detect` cell's run measured against its named rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detection {
    /// The named rule produced a finding.
    ByName,
    /// Something went wrong (other rules' findings, step failures), but
    /// not what the cell names.
    AsOther,
    /// Nothing was found and every step did what the plan required.
    NotCaught,
}
