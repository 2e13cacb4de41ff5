//! How a command that ran to the end turned out: the report states it,
//! `exit` turns it into a code.

/// How a command that ran to the end turned out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every cell met its expectation.
    AllMet,
    /// Some cell failed.
    CellFailed,
    /// Some cell was inconclusive and none failed.
    Inconclusive,
}
