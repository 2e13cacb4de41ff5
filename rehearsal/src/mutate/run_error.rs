//! Why a mutate run could not go on: the work copy, the clean build, a
//! signal, a child run. Every part of the runner returns it.

use std::path::Path;

/// Why the runner could not go on (infrastructure, exit 3).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The work copy could not be made.
    #[error("could not prepare the mutation work copy in {path}: {source}")]
    Copy {
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The unmutated copy does not build.
    #[error("the unmutated workspace does not build in the work copy: {0}")]
    CleanBuild(String),
    /// SIGINT or SIGTERM to rehearse: what ran was stopped and waited for.
    #[error("interrupted by {signal}: the running cells were stopped")]
    Interrupted {
        /// Which signal.
        signal: &'static str,
    },
    /// A child run could not be started or gave no report.
    #[error("cell {cell}: {detail}")]
    Cell {
        /// The cell.
        cell: String,
        /// What happened.
        detail: String,
    },
}

pub(super) fn copy_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Copy {
        path: path.display().to_string(),
        source,
    }
}
