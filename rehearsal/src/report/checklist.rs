//! ADR-041 §9 against this run: for each item of matrix.toml's
//! `[[checklist]]`, the cells of the run that cover it and their
//! verdicts. The report opens with it, so a reader sees in one table
//! whether the release is covered, and the run says in its first lines
//! which items no passing cell covered.

use crate::observe::Verdict;

use super::model::RunReport;

/// One checklist item as this run covered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row<'a> {
    /// The item, as the ADR words it.
    pub item: &'a str,
    /// The covering cells that ran, by id (`fence@pg18`), with their verdicts.
    pub ran: Vec<(&'a str, Verdict)>,
    /// Whether a covering cell passed.
    pub status: Status,
}

/// Whether a run covered an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// A cell that covers it passed.
    Covered,
    /// Cells that cover it ran, and none passed.
    NotPassed,
    /// None of the cells that cover it ran (another selection, a share).
    NotRun,
}

impl Status {
    /// The word the tables show.
    pub fn word(self) -> &'static str {
        match self {
            Status::Covered => "covered",
            Status::NotPassed => "NOT COVERED: no covering cell passed",
            Status::NotRun => "not covered: its cells did not run here",
        }
    }
}

/// The run's checklist, in matrix.toml's order (empty: none declared).
pub fn rows(r: &RunReport) -> Vec<Row<'_>> {
    r.run
        .header
        .checklist
        .iter()
        .map(|item| {
            let ran: Vec<(&str, Verdict)> = r
                .cells
                .iter()
                .filter(|c| {
                    let base = c.name.split_once('@').map_or(c.name.as_str(), |(b, _)| b);
                    item.cells.iter().any(|n| n == base)
                })
                .map(|c| (c.name.as_str(), c.verdict))
                .collect();
            let passed = |v: &Verdict| *v == Verdict::Pass;
            let status = if item.all {
                let every_ran = item.cells.iter().all(|n| {
                    ran.iter()
                        .any(|(id, _)| id.split_once('@').map_or(*id, |(b, _)| b) == n)
                });
                if ran.iter().any(|(_, v)| !passed(v)) {
                    Status::NotPassed
                } else if every_ran {
                    Status::Covered
                } else {
                    Status::NotRun
                }
            } else if ran.iter().any(|(_, v)| passed(v)) {
                Status::Covered
            } else if ran.is_empty() {
                Status::NotRun
            } else {
                Status::NotPassed
            };
            Row {
                item: &item.item,
                ran,
                status,
            }
        })
        .collect()
}

/// The first-lines warning: how many items no passing cell covered, and
/// which; `None` when every item is covered or none is declared.
pub fn uncovered_line(r: &RunReport) -> Option<String> {
    let rows = rows(r);
    let missing: Vec<&str> = rows
        .iter()
        .filter(|row| row.status != Status::Covered)
        .map(|row| row.item)
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "ADR-041 §9: {} of {} items not covered by a passing cell of this run: {}",
        missing.len(),
        rows.len(),
        missing.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn an_item_is_covered_only_by_a_passing_cell_of_this_run() {
        let mut r = fixture::report();
        // migrate-first passed, fence failed; hard-kill-rescue did not run.
        let rows = rows(&r);
        assert_eq!(rows[0].status, Status::Covered, "{rows:?}");
        assert_eq!(
            rows[0].ran,
            vec![("migrate-first", Verdict::Pass), ("fence", Verdict::Fail)]
        );
        assert_eq!(rows[1].status, Status::NotRun);
        let line = uncovered_line(&r).expect("one item is not covered");
        assert!(
            line.starts_with("ADR-041 §9: 1 of 2 items not covered") && line.contains("hard kills"),
            "{line}"
        );

        r.cells[0].verdict = Verdict::Inconclusive;
        assert_eq!(rows_of(&r)[0], Status::NotPassed);
    }

    #[test]
    fn an_item_that_needs_all_its_cells_is_covered_only_when_each_passed() {
        let mut r = fixture::report();
        r.run.header.checklist[0].all = true;
        assert_eq!(rows_of(&r)[0], Status::NotPassed, "fence failed");
        r.cells[1].verdict = Verdict::Pass;
        assert_eq!(rows_of(&r)[0], Status::Covered);
        r.cells.remove(1);
        assert_eq!(rows_of(&r)[0], Status::NotRun, "fence did not run");
    }

    #[test]
    fn a_cell_on_two_servers_covers_by_its_name() {
        let r = fixture::on_two_servers();
        let rows = rows(&r);
        assert_eq!(rows[0].status, Status::Covered);
        assert!(
            rows[0]
                .ran
                .iter()
                .any(|(id, _)| *id == "migrate-first@pg18")
        );
    }

    fn rows_of(r: &RunReport) -> Vec<Status> {
        rows(r).into_iter().map(|row| row.status).collect()
    }
}
