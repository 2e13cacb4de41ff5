//! The events `awa` prints on stdout, one JSON object per line: the
//! runtime's own contract ([`awa_runtime::events`]), so this harness reads
//! exactly what the runtime writes, with no copy to drift.
//!
//! Every line is a [`Parsed`]: an [`Event`] of the contract, an
//! [`Parsed::Unknown`] event of a newer release (counted, kept in the
//! log, never an error), or a [`Parsed::Garbled`] line (the contract says
//! stdout carries only events, so the driver logs it and never guesses).

pub use awa_runtime::events::{
    Accepted, AttemptOutcome, Event, Finished, FlipCheck, Flipped, Migrated, Parsed, Rescued,
    Started, parse,
};
pub use awa_runtime::store::lock_wait::Blocked;
