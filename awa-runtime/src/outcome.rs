//! How an attempt ends, in the words every layer shares: what a handler
//! asks for ([`Outcome`]), which the store closes the attempt with, and
//! what became of the attempt as the `finished` event says it
//! ([`AttemptOutcome`]). A leaf: the workload's handler answers with an
//! `Outcome` and the store records one without either importing the
//! other, nor the store the events.

use serde::{Deserialize, Serialize};

/// What a handler asks for at the end of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done.
    Completed,
    /// Failed for good.
    Failed,
    /// The handler cancelled the job.
    Cancelled,
    /// Run again after a backoff, or dead-letter when attempts are spent.
    Retry { backoff_ms: f64, reason: String },
    /// Run again later without spending an attempt.
    Snooze { ms: f64 },
}

impl Outcome {
    /// What the `finished` event says of it once recorded.
    pub fn attempt_outcome(&self) -> AttemptOutcome {
        match self {
            Outcome::Completed => AttemptOutcome::Completed,
            Outcome::Failed => AttemptOutcome::Failed,
            Outcome::Cancelled => AttemptOutcome::Cancelled,
            Outcome::Retry { .. } => AttemptOutcome::Retry,
            Outcome::Snooze { .. } => AttemptOutcome::Snoozed,
        }
    }

    /// The word used in closures, executions and events.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Retry { .. } => "retry",
            Outcome::Snooze { .. } => "snoozed",
        }
    }
}

/// What became of an attempt, as `finished` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// Done.
    Completed,
    /// Failed for good.
    Failed,
    /// The handler cancelled its job.
    Cancelled,
    /// Re-queued for another attempt.
    Retry,
    /// Put back to run later, the attempt not counted as spent.
    Snoozed,
    /// Retries were spent: dead-lettered.
    DeadLettered,
    /// The attempt no longer held its job (rescued, cancelled, superseded): nothing was written.
    Stale,
}
