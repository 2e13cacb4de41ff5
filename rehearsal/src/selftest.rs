//! `rehearse selftest`: does the rehearsal catch what it exists to catch?
//!
//! The seeded-defect set is the runtime's own failpoint list
//! (`awa_runtime::failpoint::ALL`); each failpoint's cell is named
//! `defect-<failpoint with dashes>` and expects one named finding. A
//! defect counts as caught only when its cell found that finding by name
//! (a failpoint without a cell, or whose cell was not run, is not caught).
//! Beside them a clean selection must pass, or the rehearsal cries wolf.
//! The score is computed from the run's cell reports (`Score::of`, in
//! `report::score`, the stage that has them), so `rehearse report`
//! re-renders it as it was.

use serde::{Deserialize, Serialize};

use crate::observe::Verdict;
use crate::reconcile::Detection;
use crate::vocab::RunOutcome;

/// The named matrix of the seeded-defect cells.
pub const DEFECTS_MATRIX: &str = "defects";
/// The named matrix of clean cells run beside them.
pub const CLEAN_MATRIX: &str = "smoke";

/// The cell that exposes `failpoint`: `defect-<failpoint with dashes>`.
pub fn cell_for(failpoint: &str) -> String {
    format!("defect-{}", failpoint.replace('_', "-"))
}

/// How one seeded defect fared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefectScore {
    /// The runtime's failpoint name.
    pub failpoint: String,
    /// Its cell (`defect-...`), whether or not it exists.
    pub cell: String,
    /// The rule its cell expects (`None`: no such cell ran).
    pub expected: Option<String>,
    /// Caught by name, as something else, not caught; `None` when the
    /// cell did not run or was inconclusive.
    pub detection: Option<Detection>,
    /// The cell's verdict (`None`: it did not run).
    pub verdict: Option<Verdict>,
    /// The phase of the first finding of the expected rule, when caught.
    pub phase: Option<String>,
    /// The cell's verdict reason, or why there is none.
    pub reason: String,
}

impl DefectScore {
    /// Caught by its named finding.
    pub fn caught(&self) -> bool {
        self.detection == Some(Detection::ByName)
    }
}

/// The score of a selftest run (`report.json`'s `selftest`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Score {
    /// One entry per seeded defect, in the runtime's order.
    pub defects: Vec<DefectScore>,
    /// The clean cells run.
    pub clean_run: usize,
    /// How many of them passed.
    pub clean_passed: usize,
    /// Clean cells that did not pass, with their verdict reasons.
    pub clean_failures: Vec<(String, String)>,
}

impl Score {
    /// Defects caught by name.
    pub fn caught(&self) -> usize {
        self.defects.iter().filter(|d| d.caught()).count()
    }

    /// Exit status: all met only when every defect was caught by name and
    /// every clean cell passed; inconclusive when nothing failed but some
    /// cell could not be judged.
    pub fn outcome(&self) -> RunOutcome {
        let judged_badly = self.defects.iter().any(|d| {
            matches!(d.detection, Some(Detection::AsOther | Detection::NotCaught))
                || d.verdict.is_none()
        });
        let clean_failed = self
            .clean_failures
            .iter()
            .any(|(_, reason)| !reason.starts_with("inconclusive"));
        if judged_badly || clean_failed {
            RunOutcome::CellFailed
        } else if self.caught() < self.defects.len() || self.clean_passed < self.clean_run {
            RunOutcome::Inconclusive
        } else {
            RunOutcome::AllMet
        }
    }

    /// `seeded defects caught by name: 6/7; clean cells passed: 3/3`.
    pub fn headline(&self) -> String {
        format!(
            "seeded defects caught by name: {}/{}; clean cells passed: {}/{}",
            self.caught(),
            self.defects.len(),
            self.clean_passed,
            self.clean_run
        )
    }

    /// The score as lines for the terminal: the headline, then one line
    /// per defect and per clean failure.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![self.headline()];
        for d in &self.defects {
            let mark = if d.caught() { "caught" } else { "MISSED" };
            let how = match (&d.expected, &d.phase) {
                (Some(rule), Some(phase)) if d.caught() => format!("by {rule} in {phase}"),
                _ => d.reason.clone(),
            };
            out.push(format!(
                "  {mark:<6} {:<28} {:<34} {how}",
                d.failpoint, d.cell
            ));
        }
        for (cell, reason) in &self.clean_failures {
            out.push(format!("  clean cell {cell} did not pass: {reason}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Expectation;
    use crate::matrix::FindingRule;
    use crate::observe::Finding;
    use crate::report::CellReport;

    fn cell(
        name: &str,
        expect: Expectation,
        verdict: Verdict,
        detection: Option<Detection>,
    ) -> CellReport {
        let mut c = crate::report::fixture::report().cells.remove(0);
        c.name = name.into();
        c.expect = expect;
        c.verdict = verdict;
        c.detection = detection;
        c.verdict_reason = format!("reason of {name}");
        c.findings = vec![];
        c
    }

    #[test]
    fn every_failpoint_is_scored_and_a_missing_cell_is_not_caught() {
        let mut caught = cell(
            "defect-a-b",
            Expectation::Detect(FindingRule::MixedDiscipline),
            Verdict::Pass,
            Some(Detection::ByName),
        );
        caught.findings = vec![Finding {
            phase: "flip".into(),
            ..Finding::of(FindingRule::MixedDiscipline)
        }];
        let other = cell(
            "defect-c",
            Expectation::Detect(FindingRule::FenceBreached),
            Verdict::Fail,
            Some(Detection::AsOther),
        );
        let clean = cell("migrate-first", Expectation::Pass, Verdict::Pass, None);
        let score = Score::of(&["a_b", "c", "d"], &[caught, other, clean]);
        assert_eq!(score.caught(), 1);
        assert_eq!(score.defects[0].phase.as_deref(), Some("flip"));
        assert_eq!(
            score.defects[0].expected.as_deref(),
            Some("mixed_discipline")
        );
        assert!(!score.defects[1].caught());
        assert_eq!(score.defects[2].cell, "defect-d");
        assert_eq!(score.defects[2].verdict, None);
        assert!(score.defects[2].reason.starts_with("no cell defect-d ran"));
        assert_eq!((score.clean_passed, score.clean_run), (1, 1));
        assert_eq!(
            score.headline(),
            "seeded defects caught by name: 1/3; clean cells passed: 1/1"
        );
        assert_eq!(score.outcome(), RunOutcome::CellFailed);
        let lines = score.lines();
        assert!(
            lines[1].contains("caught") && lines[1].ends_with("by mixed_discipline in flip"),
            "{}",
            lines[1]
        );
        assert!(lines[3].contains("MISSED"), "{}", lines[3]);
    }

    #[test]
    fn all_met_only_when_every_defect_is_caught_and_every_clean_cell_passes() {
        let defect = cell(
            "defect-a",
            Expectation::Detect(FindingRule::Lost),
            Verdict::Pass,
            Some(Detection::ByName),
        );
        let clean = cell("fence", Expectation::Pass, Verdict::Pass, None);
        assert_eq!(
            Score::of(&["a"], &[defect.clone(), clean.clone()]).outcome(),
            RunOutcome::AllMet
        );
        // A clean cell failing cries wolf: the selftest fails.
        let wolf = cell("fence", Expectation::Pass, Verdict::Fail, None);
        let score = Score::of(&["a"], &[defect.clone(), wolf]);
        assert_eq!(score.outcome(), RunOutcome::CellFailed);
        assert_eq!(
            score.clean_failures,
            [("fence".to_owned(), "reason of fence".to_owned())]
        );
        // An inconclusive defect cell leaves the selftest inconclusive.
        let mut unsure = cell(
            "defect-a",
            Expectation::Detect(FindingRule::Lost),
            Verdict::Inconclusive,
            None,
        );
        unsure.verdict_reason = "inconclusive: no PostgreSQL".into();
        assert_eq!(
            Score::of(&["a"], &[unsure, clean.clone()]).outcome(),
            RunOutcome::Inconclusive
        );
        // A defect cell that expects pass cannot catch anything.
        let wrong = cell("defect-a", Expectation::Pass, Verdict::Pass, None);
        assert_eq!(Score::of(&["a"], &[wrong, clean]).caught(), 0);
    }

    #[test]
    fn cells_are_named_after_their_failpoint() {
        assert_eq!(
            cell_for("fence_current_slot_only"),
            "defect-fence-current-slot-only"
        );
    }
}
