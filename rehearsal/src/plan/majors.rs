//! PostgreSQL majors as an axis of the plan: `--postgres 15,18` (or
//! `[postgres] servers = [15, 18]` in matrix.toml) plans every selected
//! cell once per major, and `--cell fence@pg18` one cell on one major.
//! The ids this gives (`fence@pg18` when a run covers more than one
//! major) are documented with the servers that run them, in `servers`.

use std::collections::{BTreeMap, BTreeSet};

use super::{CellPlan, Plan};
use crate::vocab::flag::BadFlag;
use crate::vocab::major::Major;

/// `fence@pg18` -> (`fence`, Some(18)); `fence` -> (`fence`, None).
pub fn split_cell(arg: &str) -> Result<(String, Option<Major>), BadFlag> {
    match arg.split_once('@') {
        None => Ok((arg.to_owned(), None)),
        Some((name, major)) => {
            let major = Major::parse(major).map_err(|e| BadFlag {
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
    ) -> Result<(Choice, Vec<String>), BadFlag> {
        if let Some(twice) = flag
            .iter()
            .enumerate()
            .find_map(|(i, m)| flag[..i].contains(m).then_some(m))
        {
            return Err(BadFlag {
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
                    return Err(BadFlag {
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
        self.majors_of_cells(&plan.cells)
    }

    fn majors_of_cells(&self, cells: &[CellPlan]) -> Vec<Major> {
        let all: BTreeSet<Major> = cells
            .iter()
            .flat_map(|c| self.majors_of(&c.name).iter().copied())
            .collect();
        all.into_iter().collect()
    }

    /// Each of `cells` once per major it runs on, in order (a cell's
    /// majors side by side); ids carry `@pgN` when the cells run on more
    /// than one major. Every copy keeps the cell's seeded choices, so the
    /// majors are compared on the same plan.
    pub(super) fn multiply_cells(&self, cells: Vec<CellPlan>) -> Vec<CellPlan> {
        let several = self.majors_of_cells(&cells).len() > 1;
        cells
            .into_iter()
            .flat_map(|cell| {
                let majors = self.majors_of(&cell.name).to_vec();
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
            .collect()
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
/// majors are compared on the same plan. (A run's plan is multiplied
/// inside [`super::Request::expand`]; this is the tests' way in.)
#[cfg(test)]
fn multiply(mut plan: Plan, choice: &Choice) -> Plan {
    plan.cells = choice.multiply_cells(plan.cells);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Selection;

    fn majors(list: &[u32]) -> Vec<Major> {
        list.iter().copied().map(Major).collect()
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
        let text = include_str!("../../../matrix.toml");
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
    fn a_major_listed_twice_is_refused() {
        let err = Choice::new(&majors(&[15, 18, 15]), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("PostgreSQL 15 twice"), "{err}");
        assert!(Choice::new(&majors(&[15, 18]), &[], &[]).is_ok());
    }
}
