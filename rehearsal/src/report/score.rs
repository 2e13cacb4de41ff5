//! The selftest score read from a run's cell reports: `Score::of` lives
//! here, beside the reports it reads, so `selftest` (below the report)
//! holds only the score's shape and its verdict.

use crate::matrix::Expectation;
use crate::observe::Verdict;
use crate::report::CellReport;
use crate::selftest::{DefectScore, Score, cell_for};
use crate::vocab::detection::Detection;

impl Score {
    /// Scores `cells` against the seeded defects `failpoints`; the clean
    /// cells are those expecting `pass`.
    pub fn of(failpoints: &[&str], cells: &[CellReport]) -> Score {
        let defects = failpoints.iter().map(|fp| defect(fp, cells)).collect();
        let clean: Vec<&CellReport> = cells
            .iter()
            .filter(|c| c.expect == Expectation::Pass)
            .collect();
        Score {
            defects,
            clean_run: clean.len(),
            clean_passed: clean.iter().filter(|c| c.verdict == Verdict::Pass).count(),
            clean_failures: clean
                .iter()
                .filter(|c| c.verdict != Verdict::Pass)
                .map(|c| (c.name.clone(), c.verdict_reason.clone()))
                .collect(),
        }
    }
}

fn defect(failpoint: &str, cells: &[CellReport]) -> DefectScore {
    let name = cell_for(failpoint);
    let Some(cell) = cells.iter().find(|c| c.name == name) else {
        return DefectScore {
            failpoint: failpoint.to_owned(),
            cell: name.clone(),
            expected: None,
            detection: None,
            verdict: None,
            phase: None,
            reason: format!("no cell {name} ran: a seeded defect without a cell is not caught"),
        };
    };
    let expected = match cell.expect {
        Expectation::Detect(rule) => Some(rule),
        Expectation::Pass => None,
    };
    let phase = expected.and_then(|rule| {
        cell.findings
            .iter()
            .find(|f| f.rule == rule)
            .map(|f| f.phase.clone())
    });
    let reason = if expected.is_none() {
        format!("{name} expects pass, not a named finding")
    } else {
        cell.verdict_reason.clone()
    };
    DefectScore {
        failpoint: failpoint.to_owned(),
        cell: name,
        expected: expected.map(|r| r.name().to_owned()),
        detection: if expected.is_some() {
            cell.detection
        } else {
            Some(Detection::NotCaught)
        },
        verdict: Some(cell.verdict),
        phase,
        reason,
    }
}
