//! PostgreSQL majors as matrix.toml, the plan and the report name them;
//! finding each major's server is `servers`' work.

use serde::{Deserialize, Serialize};

/// The oldest and newest major `--postgres` accepts.
const MAJORS: std::ops::RangeInclusive<u32> = 10..=99;

/// A PostgreSQL major version (`18`), as a cell runs on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Major(pub u32);

impl std::fmt::Display for Major {
    /// `pg18`, the word cell ids and summary columns use.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pg{}", self.0)
    }
}

impl Major {
    /// `18` or `pg18` -> `Major(18)`; a usage error names what is valid.
    // A String: clap (`--postgres`), the matrix's diagnostics and --cell's refusal print it as it is.
    pub fn parse(text: &str) -> Result<Major, String> {
        let digits = text.trim().strip_prefix("pg").unwrap_or(text.trim());
        match digits.parse::<u32>() {
            Ok(n) if MAJORS.contains(&n) => Ok(Major(n)),
            _ => Err(format!(
                "\"{text}\" is not a PostgreSQL major; expected a number from {} to {}, like 15 or 18",
                MAJORS.start(),
                MAJORS.end()
            )),
        }
    }
}
