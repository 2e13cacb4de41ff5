//! Whose failure a failed `awa migrate` is: the product's (the cell
//! fails) or the harness's (it is inconclusive). Both the setup step and
//! the fresh-install schema check ask.

/// Whose failure a failed `awa migrate` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Whose {
    /// The build under rehearsal's: the cell fails.
    Product,
    /// The harness's, or nobody can tell: the cell is inconclusive.
    Harness,
}

/// A fresh install (the current build's `awa migrate` of an empty
/// database) that ran to its own exit (`code`; not killed, not timed
/// out) and failed while the database `answers` is the product's
/// failure: nothing but the build under rehearsal acted on that
/// database. The N-1 schema prepared by an older release, a migrate the
/// harness had to kill, or a database that does not answer stay the
/// harness's (the run could not judge the release).
pub(super) fn fresh_install_failure(fresh: bool, code: Option<i32>, answers: bool) -> Whose {
    if fresh && code.is_some() && answers {
        Whose::Product
    } else {
        Whose::Harness
    }
}
