//! Storage operations, one file per concern. Each operation is one
//! statement (data-modifying CTEs) or one short transaction, with its SQL
//! as named constants beside the code that runs it.
//!
//! Enqueue, promote, claim, rescue re-queue and (since 0.7) terminal
//! writes read ring cursors through the authority-aware SQL resolver
//! `awa.flip_aware_ring_cursor(ring)`; rotate and prune branch on the
//! authority themselves (`rings`). The legacy resolver
//! `awa.ring_cursor(ring)`, which 0.6 binaries call, refuses once the flip
//! has fenced them.

pub mod audit;
pub mod authority;
pub mod claim;
pub mod cron;
pub mod enqueue;
pub mod finish;
pub mod folds;
pub mod instances;
pub mod lock_wait;
pub mod read;
pub mod rescue;
pub mod rings;
mod rotation_ledger;

/// The three slot rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ring {
    /// Ready entries.
    Queue,
    /// Claim receipts and closure evidence.
    Claim,
    /// Run leases of attempts in flight.
    Lease,
}

impl Ring {
    /// All rings, in maintenance order.
    pub const ALL: [Ring; 3] = [Ring::Queue, Ring::Claim, Ring::Lease];

    /// The ring's name as `ring_cursor(ring)` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Ring::Queue => "queue",
            Ring::Claim => "claim",
            Ring::Lease => "lease",
        }
    }

    /// The partitioned tables whose child partitions make up the ring.
    pub fn tables(self) -> &'static [&'static str] {
        match self {
            Ring::Queue => &["queue_entries"],
            Ring::Claim => &["claim_receipts", "claim_closures"],
            Ring::Lease => &["leases"],
        }
    }
}
