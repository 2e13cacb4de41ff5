//! What reconciliation (or the monitor) found wrong, and the verdict a
//! cell gets.

use serde::{Deserialize, Serialize};

use crate::matrix::FindingRule;

/// Something reconciliation (or the monitor) found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: FindingRule,
    /// The phase in which it was found or to which it points (`reconcile`
    /// when only the end state shows it).
    pub phase: String,
    /// What is wrong, in one sentence.
    pub message: String,
    /// The first 20 job ids (or row keys) concerned.
    pub ids: Vec<i64>,
    /// How many in all.
    pub count: u64,
    /// When it was seen, in ms from the cell's start, where its rule
    /// knows (the sample that showed a breach, a stall's start, the kill
    /// a rescue follows); `None` for what only the end state shows. The
    /// timeline pins a finding here, else at its phase. Added in report
    /// format 1.13.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

/// A rule the harness could not judge a cell on: the evidence the rule
/// needed was not there to read (a monitor that had no reading where it
/// mattered). A verdict that rests on the rule cannot stand: a pass (or
/// a miss of the rule) is inconclusive instead. Added in report format
/// 1.28.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doubt {
    /// The rule left unjudged.
    pub rule: FindingRule,
    /// What was missing, in one sentence.
    pub why: String,
}

impl Finding {
    /// The finding, seen `at_ms` from the cell's start.
    pub fn at(mut self, at_ms: u64) -> Finding {
        self.at_ms = Some(at_ms);
        self
    }
}

/// A cell's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The cell met its expectation (no findings for `pass`; the required
    /// finding for `detect`).
    Pass,
    /// It did not.
    Fail,
    /// The harness could not run it (no PostgreSQL, a binary that would
    /// not start, cut short by Ctrl-C).
    Inconclusive,
}

#[cfg(test)]
impl Finding {
    /// A finding of `rule` with nothing else filled in (tests of verdicts).
    pub fn of(rule: FindingRule) -> Finding {
        Finding {
            rule,
            phase: "reconcile".into(),
            message: String::new(),
            ids: vec![],
            count: 1,
            at_ms: None,
        }
    }
}
