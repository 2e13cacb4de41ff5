//! matrix.toml: the declarative ADR-041 matrix, parsed and validated.
//!
//! The pipeline's first stage. [`parse`] turns the file's text into a
//! [`Matrix`] or into [`Diagnostics`] listing every problem with its
//! file, line, column, cell and step; nothing downstream ever sees an
//! unvalidated matrix. [`find`] locates the file the way the CLI does.
//!
//! Inside: `raw` (the file's shape, with spans), `step` (steps by hand),
//! `validate` (the checks, one file per part of the file under
//! `validate/`), `roster` (which processes run after each step), `model`
//! (the validated types; artifacts, finding rules, step kinds, checks and
//! the steps' wording under `model/`), `duration`, `diagnostic`.

mod checklist;
mod diagnostic;
mod duration;
mod intended;
mod model;
mod path;
mod raw;
mod roster;
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
pub(crate) use roster::Roster;

use diagnostic::Problems;

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

/// What the matrix is checked against besides itself: the release
/// manifest of the tree it belongs to and the backend that will run it.
/// The runtime's failpoint list is always checked.
#[derive(Clone, Debug)]
pub struct Known {
    /// The release manifest; `None` skips the release check (no tree).
    pub manifest: Option<KnownManifest>,
    /// Whether the backend runs image artifacts.
    pub images: bool,
    /// The backend's name, for messages.
    pub backend: &'static str,
    /// `--from-registry NAME=REPOSITORY`: release artifacts taken from a
    /// registry instead of their archives.
    pub from_registry: Vec<(String, String)>,
}

impl Default for Known {
    /// No manifest to check against, images allowed.
    fn default() -> Self {
        Known {
            manifest: None,
            images: true,
            backend: "docker",
            from_registry: Vec::new(),
        }
    }
}

/// The releases `artifacts/manifest.toml` lists.
#[derive(Clone, Debug)]
pub struct KnownManifest {
    /// The manifest's path, for messages.
    pub path: String,
    /// Every listed version.
    pub releases: Vec<String>,
}

/// Parses and validates matrix text; `file` names it in messages.
///
/// Every problem is reported, not only the first; a syntax error stops
/// before the semantic checks (they would only echo it).
pub fn parse(file: &str, text: &str) -> Result<Matrix, Diagnostics> {
    parse_against(file, text, &Known::default())
}

/// [`parse`], also checking the matrix against `known`.
pub fn parse_against(file: &str, text: &str, known: &Known) -> Result<Matrix, Diagnostics> {
    let mut sink = Problems::new(file, text);
    if text.trim().is_empty() {
        sink.error(
            None,
            "",
            "the file is empty; a matrix needs [artifacts.current], [workload], [timings] and at least one [[cell]] (see the repository's matrix.toml)",
        );
        return Err(sink.finish());
    }
    let (root, syntax) = DeTable::parse_recoverable(text);
    // One message per cause: what the parser reports after recovering is
    // knock-on, so only the earliest error is shown, or, for an inline
    // table never closed (the parser only notices at the end of the
    // file), the line that opened it.
    if !syntax.is_empty() {
        let unclosed = syntax
            .iter()
            .any(|e| e.message().contains("unclosed inline table"));
        match unclosed.then(|| diagnostic::unclosed_brace(text)).flatten() {
            Some(at) => sink.error(
                Some(at..at),
                "",
                "this inline table `{` is not closed on its line; add the missing `}`",
            ),
            None => {
                let first = syntax
                    .iter()
                    .min_by_key(|e| e.span().map_or(usize::MAX, |s| s.start))
                    .expect("not empty");
                sink.syntax(first);
            }
        }
        return Err(sink.finish());
    }
    let raw = raw::read(root, &mut sink);
    match validate::validate(raw, known, &mut sink) {
        Some(matrix) if !sink.has_errors() => Ok(matrix),
        _ => Err(sink.finish()),
    }
}

/// Reads and validates the matrix file at `path`.
pub fn load(path: &Path) -> Result<Matrix, LoadError> {
    load_against(path, &Known::default())
}

/// [`load`], also checking the matrix against `known`.
pub fn load_against(path: &Path, known: &Known) -> Result<Matrix, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let file = path.display().to_string();
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            // Locate the first bad byte in the valid prefix before it.
            let at = e.utf8_error().valid_up_to();
            let prefix = String::from_utf8_lossy(&e.as_bytes()[..at]).into_owned();
            let mut sink = Problems::new(&file, &prefix);
            sink.error(
                Some(at..at),
                "",
                format!(
                    "byte {at} is not UTF-8; matrix.toml must be UTF-8 text (re-save it as UTF-8)"
                ),
            );
            return Err(LoadError::Invalid {
                diagnostics: sink.finish(),
            });
        }
    };
    parse_against(&file, &text, known).map_err(|diagnostics| LoadError::Invalid { diagnostics })
}

/// Finds the matrix file: `explicit` (`--matrix-file`, which clap also
/// fills from `$REHEARSE_MATRIX_FILE`) if given, else `env` (the variable
/// as read by the caller), else the nearest `matrix.toml` in `start` or a
/// parent (the repository root). A variable the user set wins over a file
/// that merely happens to lie above.
pub fn find(
    explicit: Option<&Path>,
    start: &Path,
    env: Option<&Path>,
) -> Result<PathBuf, LoadError> {
    if let Some(path) = explicit.or(env) {
        return Ok(path.to_owned());
    }
    start
        .ancestors()
        .find(|dir| dir.join(FILE_NAME).is_file())
        .map(|dir| dir.join(FILE_NAME))
        .ok_or_else(|| LoadError::NotFound {
            start: start.to_owned(),
        })
}

#[cfg(test)]
mod tests;
