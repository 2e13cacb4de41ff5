//! A check's result, as `assert` and the steps that hold a condition
//! (`settle`, `schema_check`) give it, and the harness's failure to look.

use super::super::Abort;
use super::super::probe::ProbeError;

/// A check's result: `Ok(what held)` or `Err(what did not)`.
// Strings: both sides are the check's sentence for the report, and Ok or Err is all a caller asks.
pub(super) type Held = Result<String, String>;

/// The harness could not read what a check looks at.
pub(super) fn unreadable(e: ProbeError) -> Abort {
    Abort::Harness(format!("the check could not read the database: {e}"))
}
