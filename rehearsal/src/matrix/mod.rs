//! matrix.toml: the declarative ADR-041 matrix, parsed and validated.
//!
//! The pipeline's first stage. [`parse`] turns the file's text into a
//! [`Matrix`] or into [`Diagnostics`] listing every problem with its
//! file, line, column, cell and step; nothing downstream ever sees an
//! unvalidated matrix. [`find`] locates the file the way the CLI does.
//!
//! Inside: `raw` (the file's shape, with spans), `step` (steps by hand),
//! `validate` (the checks), `fleet` (which processes run after each step),
//! `model` (the validated types), `duration`, `diagnostic`.

mod diagnostic;
mod duration;
mod fleet;
mod model;
mod raw;
mod step;
mod validate;

use std::path::{Path, PathBuf};

use toml::de::DeTable;

pub use diagnostic::{Diagnostic, Diagnostics, Location};
pub use duration::{Duration, DurationError};
pub use model::*;
pub use step::{MAX_AFTER_STARTED, MAX_PRODUCERS, MAX_WORKERS};
pub use validate::{MAX_BACKLOG, MAX_RATE_PER_S, MAX_WEIGHT};

pub(crate) use diagnostic::did_you_mean;
pub(crate) use fleet::FleetModel;

use diagnostic::Sink;

/// The file name looked for when no `--matrix-file` is given.
pub const FILE_NAME: &str = "matrix.toml";

/// The environment variable naming a matrix file when none is found by walking up.
pub const FILE_ENV: &str = "REHEARSE_MATRIX_FILE";

/// Why a matrix could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No `--matrix-file`, no matrix.toml in the directory or its parents, no env var.
    #[error(
        "no {FILE_NAME} found in {} or any parent directory, and {FILE_ENV} is not set; pass --matrix-file PATH",
        start.display()
    )]
    NotFound {
        /// Where the search started.
        start: PathBuf,
    },
    /// The file could not be read.
    #[error("failed to read matrix file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid matrix.
    #[error("invalid matrix file ({} {}); nothing was started\n{diagnostics}", diagnostics.len(), if diagnostics.len() == 1 { "problem" } else { "problems" })]
    Invalid {
        /// Every problem, located.
        diagnostics: Diagnostics,
    },
}

/// Parses and validates matrix text; `file` names it in messages.
///
/// Every problem is reported, not only the first; a syntax error stops
/// before the semantic checks (they would only echo it).
pub fn parse(file: &str, text: &str) -> Result<Matrix, Diagnostics> {
    let mut sink = Sink::new(file, text);
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for err in &syntax {
            sink.toml(err, "");
        }
        return Err(sink.finish());
    }
    let raw = raw::read(root, &mut sink);
    match validate::validate(raw, &mut sink) {
        Some(matrix) if !sink.has_errors() => Ok(matrix),
        _ => Err(sink.finish()),
    }
}

/// Reads and validates the matrix file at `path`.
pub fn load(path: &Path) -> Result<Matrix, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&path.display().to_string(), &text)
        .map_err(|diagnostics| LoadError::Invalid { diagnostics })
}

/// Finds the matrix file: `explicit` if given, else the nearest `matrix.toml`
/// in `start` or a parent (the repository root), else `env_fallback`.
pub fn find(
    explicit: Option<&Path>,
    start: &Path,
    env_fallback: Option<&Path>,
) -> Result<PathBuf, LoadError> {
    if let Some(path) = explicit {
        return Ok(path.to_owned());
    }
    if let Some(dir) = start.ancestors().find(|dir| dir.join(FILE_NAME).is_file()) {
        return Ok(dir.join(FILE_NAME));
    }
    env_fallback
        .map(Path::to_owned)
        .ok_or_else(|| LoadError::NotFound {
            start: start.to_owned(),
        })
}

#[cfg(test)]
mod tests;
