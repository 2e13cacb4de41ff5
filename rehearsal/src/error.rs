//! The library's one error type: what failed, in a lowercase fragment.
//!
//! `main` prints it with its chain of causes and maps it to an exit
//! code through `exit::for_error`.

use crate::artifacts::ArtifactError;
use crate::matrix::LoadError;
use crate::plan::SelectError;

/// Everything that can stop a `rehearse` command before it reaches a verdict.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The matrix file could not be found, read or validated.
    #[error(transparent)]
    Matrix(#[from] LoadError),
    /// `--matrix` or `--cell` named something the matrix does not have.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// A flag value clap accepted but we cannot use.
    #[error("invalid {flag}: {message}")]
    BadFlag {
        /// The flag, as typed (`--database-url`).
        flag: &'static str,
        /// What is wrong and what would be valid.
        message: String,
    },
    /// The current directory is unreadable, so matrix.toml cannot be searched for.
    #[error("failed to read the current directory")]
    CurrentDir(#[source] std::io::Error),
    /// Writing to stdout or stderr failed (a closed pipe, a full disk).
    #[error("failed to write output")]
    Output(#[source] std::io::Error),
    /// A plan or listing could not be encoded as JSON.
    #[error("failed to encode JSON output")]
    Json(#[source] serde_json::Error),
    /// An artifact could not be made ready: a bad source (an image on the
    /// process backend, an unlisted release, a tampered archive) or a failed build.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// `--backend docker` and no engine answers (infrastructure).
    #[error(transparent)]
    Engine(#[from] crate::image::EngineError),
    /// An image could not be built, resolved, pulled or started.
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    /// The fleet's lifecycle (removing leftovers, shutting down) failed.
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetError),
    /// No PostgreSQL to run against: the server binaries are missing, the
    /// throwaway cluster would not start, or `--database-url` does not answer.
    #[error("no PostgreSQL to run the cells against: {0}")]
    Postgres(String),
    /// A PostgreSQL major the cells are to run on (`--postgres`,
    /// `[postgres] servers`, `--cell NAME@pgN`) is not installed: bad
    /// input, found before anything starts; the message says how to install it.
    #[error("{0}")]
    MissingServer(String),
    /// `rehearse replay`: a plan.json that cannot be read, or whose
    /// artifacts changed since it ran (bad input, nothing started).
    #[error(transparent)]
    PlanFile(Box<crate::planfile::PlanFileError>),
    /// `rehearse mutate` could not generate its mutants.
    #[error(transparent)]
    Mutate(#[from] crate::mutate::MutateError),
    /// The harness failed outside any cell (the async runtime, the report folder).
    #[error("{0}")]
    Harness(String),
}

impl Error {
    /// True when stdout's reader went away (`rehearse plan --json | head -1`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The error and its causes, one per line, secrets redacted, for stderr.
    pub fn chain(&self) -> String {
        format!(
            "error: {}",
            awa_runtime::error::chain_joined(self, "\n  caused by: ")
        )
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Output(e)
    }
}

impl From<crate::planfile::PlanFileError> for Error {
    fn from(e: crate::planfile::PlanFileError) -> Self {
        Error::PlanFile(Box::new(e))
    }
}

impl From<crate::driver::run::RunError> for Error {
    fn from(e: crate::driver::run::RunError) -> Self {
        use crate::driver::run::RunError;
        match e {
            RunError::Harness(message) => Error::Harness(message),
            RunError::Postgres(message) => Error::Postgres(message),
        }
    }
}

impl From<crate::mutate::SessionError> for Error {
    fn from(e: crate::mutate::SessionError) -> Self {
        use crate::mutate::SessionError;
        match e {
            SessionError::Output(source) => Error::Output(source),
            SessionError::Harness(message) => Error::Harness(message),
        }
    }
}

impl From<crate::vocab::flag::BadFlag> for Error {
    fn from(e: crate::vocab::flag::BadFlag) -> Self {
        Error::BadFlag {
            flag: e.flag,
            message: e.message,
        }
    }
}

impl From<crate::plan::PlanError> for Error {
    fn from(e: crate::plan::PlanError) -> Self {
        use crate::plan::PlanError;
        match e {
            PlanError::Select(e) => Error::Select(e),
            PlanError::Flag(e) => e.into(),
            PlanError::Matrix(e) => Error::Matrix(e),
        }
    }
}
