//! `hold`: let the fleet run as it is.

use super::super::cell::Cell;
use super::super::{Abort, Done};
use crate::matrix::HoldStep;

impl Cell<'_> {
    /// `hold`: sleep for the duration (interrupted by Ctrl-C).
    pub(super) async fn hold(&mut self, s: &HoldStep) -> Result<Done, Abort> {
        self.cancel().sleep(s.duration.to_std()).await?;
        Ok(Done::ok(format!("held {}", s.duration)))
    }
}
