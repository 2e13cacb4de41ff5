//! `rehearse verify DIR`: a run folder re-checked offline, as the evidence
//! a release carries (ADR-041 §9).
//!
//! Nothing here touches a database or runs a process. The folder's files
//! are read against each other (plan.json's own digest and consistency,
//! report.json against plan.json, report.html's record of report.json's
//! sha256), every planned cell must have a verdict, and each cell's
//! recorded terminal history (`history/<cell>.json.gz`) is judged again by
//! the exactly-once rules ([`crate::reconcile::recorded`]): the findings
//! they make must be the ones report.json records, and with them the
//! cell's verdict must come out as recorded.
//!
//! What is wrong falls in two kinds, which [`Verification::outcome`] and
//! the command's exit code keep apart: a folder that is not a run or
//! whose files disagree (missing, unreadable, edited: exit 2), and a
//! history that does not bear the recorded verdict out (exit 1).

use std::collections::BTreeMap;
use std::path::Path;

use crate::matrix::FindingRule;
use crate::observe::{Finding, Verdict};
use crate::planfile::{PLAN_JSON, PlanFile};
use crate::reconcile::history;
use crate::reconcile::recorded;
use crate::report::{self, CellReport};

/// One thing verify found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The folder is not a run, or its files are missing, unreadable or
    /// disagree with each other.
    Evidence(String),
    /// A cell's recorded history does not bear out its recorded findings
    /// or verdict.
    Disagreement {
        /// The cell.
        cell: String,
        /// The rule (`None`: the verdict as a whole).
        rule: Option<FindingRule>,
        /// What differs, naming the jobs.
        what: String,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Evidence(what) => write!(f, "evidence: {what}"),
            Problem::Disagreement {
                cell,
                rule: Some(rule),
                what,
            } => write!(f, "cell {cell}, rule {}: {what}", rule.name()),
            Problem::Disagreement {
                cell,
                rule: None,
                what,
            } => write!(f, "cell {cell}, verdict: {what}"),
        }
    }
}

/// What verify found in a run folder.
#[derive(Clone, Debug, Default)]
pub struct Verification {
    /// Every problem, files first, then cell by cell.
    pub problems: Vec<Problem>,
    /// Cells whose history was judged again.
    pub cells_checked: usize,
    /// Terminal records those histories hold.
    pub terminal_records: usize,
}

/// How a verification ended, for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything holds.
    Holds,
    /// A history disagrees with its verdict or findings.
    Disagrees,
    /// The folder is not a run folder, or its files disagree.
    BadEvidence,
}

impl Verification {
    /// The worst problem's kind.
    pub fn outcome(&self) -> Outcome {
        if self
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Evidence(_)))
        {
            Outcome::BadEvidence
        } else if self.problems.is_empty() {
            Outcome::Holds
        } else {
            Outcome::Disagrees
        }
    }
}

/// Verify the run folder `dir`.
pub fn verify(dir: &Path) -> Verification {
    let mut v = Verification::default();
    let evidence = |v: &mut Verification, what: String| v.problems.push(Problem::Evidence(what));
    if !dir.is_dir() {
        evidence(&mut v, format!("{} is not a folder", dir.display()));
        return v;
    }
    let report_path = dir.join(report::REPORT_JSON);
    let run = match report::read_json(&report_path) {
        Ok(run) => run,
        Err(e) => {
            evidence(
                &mut v,
                format!(
                    "{} is not a run folder: {}",
                    dir.display(),
                    awa_runtime::error::chain(&e)
                ),
            );
            return v;
        }
    };
    let plan_path = dir.join(PLAN_JSON);
    match PlanFile::read(&plan_path) {
        Ok(plan) => {
            for problem in crate::evidence::against_plan(&run, &plan) {
                evidence(&mut v, problem);
            }
            if run.run.end.interrupted {
                let judged: Vec<&str> = run.cells.iter().map(|c| c.name.as_str()).collect();
                let unjudged: Vec<&str> = (plan.plan.cells.iter())
                    .map(|c| c.name.as_str())
                    .filter(|c| !judged.contains(c))
                    .collect();
                if !unjudged.is_empty() {
                    v.problems.push(Problem::Disagreement {
                        cell: unjudged.join(", "),
                        rule: None,
                        what: "planned but never judged: the run was interrupted".to_owned(),
                    });
                }
            }
        }
        Err(e) => evidence(&mut v, awa_runtime::error::chain(&e)),
    }
    check_rendered(dir, &report_path, &mut v);
    for cell in &run.cells {
        check_cell(dir, cell, &mut v);
    }
    v
}

/// report.md and report.html are there, and report.html was rendered from
/// this very report.json (it records its sha256).
fn check_rendered(dir: &Path, report_path: &Path, v: &mut Verification) {
    for file in [report::REPORT_MD, report::REPORT_HTML] {
        if !dir.join(file).is_file() {
            v.problems
                .push(Problem::Evidence(format!("{file} is missing")));
        }
    }
    let (Ok(json), Ok(html)) = (
        std::fs::read(report_path),
        std::fs::read_to_string(dir.join(report::REPORT_HTML)),
    ) else {
        return;
    };
    let sha = awa_harness::release::sha256_hex(&json);
    if !html.contains(&sha) {
        v.problems.push(Problem::Evidence(format!(
            "report.json's sha256 is {sha}, which {} does not record: report.json changed after the report was rendered",
            report::REPORT_HTML
        )));
    }
}

/// One cell's history judged again and held against its recorded findings
/// and verdict.
fn check_cell(dir: &Path, cell: &CellReport, v: &mut Verification) {
    let file = history::path(dir, &cell.name);
    if !file.exists() {
        // A cell the harness could not reconcile has no history; any other must.
        if cell.verdict != Verdict::Inconclusive {
            v.problems.push(Problem::Evidence(format!(
                "cell {} has a verdict ({}) but no terminal history at {}",
                cell.name,
                verdict_text(cell.verdict),
                file.display()
            )));
        }
        return;
    }
    let history = match history::read_file(&file) {
        Ok(h) => h,
        Err(e) => {
            v.problems.push(Problem::Evidence(e.to_string()));
            return;
        }
    };
    if history.cell != cell.name {
        v.problems.push(Problem::Evidence(format!(
            "{} is the history of cell {}, not {}",
            file.display(),
            history.cell,
            cell.name
        )));
        return;
    }
    if cell.verdict == Verdict::Inconclusive {
        // An inconclusive cell's findings may be another try's than the
        // history on file (a retry the harness cut short before it
        // reconciled); its verdict rests on the harness, not on them.
        return;
    }
    v.cells_checked += 1;
    v.terminal_records += history.terminals.job.len();
    let derived = recorded::findings(&history);
    v.problems
        .extend(compare(&cell.name, &cell.findings, &derived));
    let mut findings: Vec<Finding> = (cell.findings.iter())
        .filter(|f| !from_history(f))
        .cloned()
        .collect();
    findings.extend(derived);
    let judgement = crate::reconcile::judge(
        &cell.plan.expect,
        &findings,
        &cell.step_failures,
        cell.harness_error.as_deref(),
    );
    if judgement.verdict != cell.verdict {
        v.problems.push(Problem::Disagreement {
            cell: cell.name.clone(),
            rule: None,
            what: format!(
                "the recorded history makes it {} ({}), the report says {}",
                verdict_text(judgement.verdict),
                judgement.reason,
                verdict_text(cell.verdict)
            ),
        });
    }
}

/// A verdict as the reports spell it.
fn verdict_text(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::Inconclusive => "INCONCLUSIVE",
    }
}

/// Whether `finding` is one the recorded history judges.
fn from_history(finding: &Finding) -> bool {
    recorded::is_recorded(finding.rule) && finding.phase == "reconcile"
}

/// Each rule whose recorded findings differ from the history's, with the
/// jobs (or fire times) on either side only.
fn compare(cell: &str, recorded_findings: &[Finding], derived: &[Finding]) -> Vec<Problem> {
    type Side = Vec<(u64, Vec<i64>)>;
    let mut by_rule: BTreeMap<FindingRule, (Side, Side)> = BTreeMap::new();
    for f in recorded_findings.iter().filter(|f| from_history(f)) {
        by_rule
            .entry(f.rule)
            .or_default()
            .0
            .push((f.count, f.ids.clone()));
    }
    for f in derived {
        by_rule
            .entry(f.rule)
            .or_default()
            .1
            .push((f.count, f.ids.clone()));
    }
    let mut out = Vec::new();
    for (rule, (mut said, mut shown)) in by_rule {
        said.sort();
        shown.sort();
        if said == shown {
            continue;
        }
        let ids = |side: &Side| -> Vec<i64> {
            let mut ids: Vec<i64> = side.iter().flat_map(|s| s.1.iter().copied()).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let (said_ids, shown_ids) = (ids(&said), ids(&shown));
        let only_shown: Vec<i64> = (shown_ids.iter())
            .filter(|i| !said_ids.contains(i))
            .copied()
            .collect();
        let only_said: Vec<i64> = (said_ids.iter())
            .filter(|i| !shown_ids.contains(i))
            .copied()
            .collect();
        let count = |side: &Side| side.iter().map(|s| s.0).sum::<u64>();
        let mut what = format!(
            "the recorded history shows {} offender(s), the report records {}",
            count(&shown),
            count(&said)
        );
        if !only_shown.is_empty() {
            what.push_str(&format!(
                "; only the history shows {}",
                ids_text(rule, &only_shown)
            ));
        }
        if !only_said.is_empty() {
            what.push_str(&format!(
                "; only the report records {}",
                ids_text(rule, &only_said)
            ));
        }
        out.push(Problem::Disagreement {
            cell: cell.to_owned(),
            rule: Some(rule),
            what,
        });
    }
    out
}

/// `job 7, job 9` (fire times for a missed cron fire).
fn ids_text(rule: FindingRule, ids: &[i64]) -> String {
    let what = if rule == FindingRule::CronMissedFire {
        "fire time"
    } else {
        "job"
    };
    ids.iter()
        .map(|i| format!("{what} {i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(rule: FindingRule, ids: &[i64]) -> Finding {
        Finding {
            rule,
            phase: "reconcile".into(),
            message: String::new(),
            ids: ids.to_vec(),
            count: ids.len() as u64,
            at_ms: None,
        }
    }

    #[test]
    fn equal_findings_agree_and_others_are_ignored() {
        let mut fence = finding(FindingRule::FenceBreached, &[1]);
        fence.phase = "flip".into();
        let recorded = [finding(FindingRule::Lost, &[3]), fence];
        assert_eq!(
            compare("c", &recorded, &[finding(FindingRule::Lost, &[3])]),
            []
        );
    }

    #[test]
    fn a_job_only_the_history_shows_is_named() {
        let problems = compare("c", &[], &[finding(FindingRule::Lost, &[42])]);
        assert_eq!(problems.len(), 1);
        let text = problems[0].to_string();
        assert!(
            text.starts_with("cell c, rule lost: ")
                && text.ends_with("only the history shows job 42"),
            "{text}"
        );
    }

    #[test]
    fn a_job_only_the_report_records_is_named() {
        let problems = compare(
            "c",
            &[finding(FindingRule::Duplicate, &[5, 6])],
            &[finding(FindingRule::Duplicate, &[5])],
        );
        assert!(
            problems[0]
                .to_string()
                .ends_with("only the report records job 6"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn the_worst_problem_sets_the_outcome() {
        let mut v = Verification::default();
        assert_eq!(v.outcome(), Outcome::Holds);
        v.problems.push(Problem::Disagreement {
            cell: "c".into(),
            rule: None,
            what: String::new(),
        });
        assert_eq!(v.outcome(), Outcome::Disagrees);
        v.problems.push(Problem::Evidence("x".into()));
        assert_eq!(v.outcome(), Outcome::BadEvidence);
    }

    #[test]
    fn a_folder_without_a_report_is_not_a_run() {
        let v = verify(&std::env::temp_dir().join("no-such-run-folder-for-verify"));
        assert_eq!(v.outcome(), Outcome::BadEvidence);
    }
}
