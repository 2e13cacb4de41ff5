//! A run folder's files read against each other: what `rehearse report`
//! (and `merge`) check before they render or join a run, so a report.json
//! that lost cells, or belongs to another run than the plan.json beside
//! it, is refused instead of read as a verdict.

use std::collections::BTreeSet;

use crate::planfile::PlanFile;
use crate::report::RunReport;

/// What in `report` disagrees with the `plan` of the same folder: another
/// seed or matrix checksum, another artifact digest, a cell reported that
/// was not planned or reported twice, and (unless the run says it was
/// interrupted, which its verdict already counts) a planned cell with no
/// report. Empty: they are one run.
pub fn against_plan(report: &RunReport, plan: &PlanFile) -> Vec<String> {
    let mut problems = Vec::new();
    let header = &report.run.header;
    if header.seed != plan.plan.seed {
        problems.push(format!(
            "report.json has seed {}, plan.json {}",
            header.seed, plan.plan.seed
        ));
    }
    if header.matrix_checksum != plan.plan.matrix_checksum {
        problems.push(format!(
            "report.json was planned from matrix sha256 {:?}, plan.json from {:?}",
            header.matrix_checksum, plan.plan.matrix_checksum
        ));
    }
    for pinned in &plan.artifacts {
        if let Some(ran) = report.artifacts.iter().find(|a| a.name == pinned.name)
            && ran.digest != pinned.digest
        {
            problems.push(format!(
                "artifact {} ran sha256 {} by report.json, {} by plan.json",
                pinned.name, ran.digest, pinned.digest
            ));
        }
    }
    let planned: Vec<&str> = plan.plan.cells.iter().map(|c| c.name.as_str()).collect();
    let mut reported = BTreeSet::new();
    for cell in &report.cells {
        if !reported.insert(cell.name.as_str()) {
            problems.push(format!("cell {} is reported twice", cell.name));
        }
        if !planned.contains(&cell.name.as_str()) {
            problems.push(format!(
                "cell {} is reported but was not planned",
                cell.name
            ));
        }
    }
    if !report.run.end.interrupted {
        let missing: Vec<&str> = planned
            .iter()
            .copied()
            .filter(|c| !reported.contains(c))
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{} of the {} planned cells have no report, and the run does not say it was interrupted: {}",
                missing.len(),
                planned.len(),
                missing.join(", ")
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One edit of a file's content.
    type Tamper = fn(&mut RunReport);
    use crate::report::fixture;

    #[test]
    fn a_report_and_its_own_plan_agree() {
        let (report, plan) = fixture::run_with_plan();
        assert_eq!(against_plan(&report, &plan), Vec::<String>::new());
    }

    #[test]
    fn each_disagreement_is_named() {
        let cases: Vec<(&str, Tamper)> = vec![
            ("have no report", |r| r.cells.clear()),
            ("reported but was not planned", |r| {
                r.cells[0].name = "renamed".into()
            }),
            ("reported twice", |r| {
                let again = r.cells[0].clone();
                r.cells.push(again);
            }),
            ("seed", |r| r.run.header.seed += 1),
            ("matrix sha256", |r| {
                r.run.header.matrix_checksum = "f".repeat(64)
            }),
            ("ran sha256", |r| r.artifacts[0].digest = "0".repeat(64)),
        ];
        for (why, tamper) in cases {
            let (mut report, plan) = fixture::run_with_plan();
            tamper(&mut report);
            let problems = against_plan(&report, &plan);
            assert!(
                problems.iter().any(|p| p.contains(why)),
                "{why}: {problems:?}"
            );
        }
    }

    #[test]
    fn an_interrupted_run_may_lack_cells_but_not_invent_them() {
        let (mut report, plan) = fixture::run_with_plan();
        report.run.end.interrupted = true;
        report.cells.truncate(1);
        assert_eq!(against_plan(&report, &plan), Vec::<String>::new());
    }
}
