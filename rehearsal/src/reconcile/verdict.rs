//! A cell's verdict: its findings and step failures against its
//! expectation, with the reason in words.
//!
//! - `pass` is met when nothing was found and every step did what the
//!   plan required.
//! - `detect = "rule"` is met only by a finding of that rule. A run that
//!   found nothing, or that went wrong only in other ways (other rules'
//!   findings, step failures), fails, and the reason names what it got
//!   instead: `expected mixed_discipline, got none`, `expected
//!   flip_unverified, got lost and 2 step failures`. A seeded defect
//!   rarely breaks only one thing, so findings of other rules beside the
//!   named one are listed but do not fail the cell.
//! - A harness error (or a fault that did not fire) makes any cell
//!   inconclusive: the run could not judge the release either way.

use crate::matrix::{Expectation, FindingRule};
use crate::observe::{Finding, Verdict};

pub use crate::vocab::detection::Detection;

/// A cell's verdict and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// Whether the cell met its expectation.
    pub verdict: Verdict,
    /// For a `detect` cell that reached a verdict: how the defect was caught.
    pub detection: Option<Detection>,
    /// One line: `caught by name: mixed_discipline (step 6, flip)`,
    /// `expected pass, got lost`, `expected X, got none`, ...
    pub reason: String,
}

/// Judges a cell's run against `expect`. `harness_error` (the harness
/// failed, or a fault the plan relies on did not fire) makes it
/// inconclusive whatever was found.
pub fn judge(
    expect: &Expectation,
    findings: &[Finding],
    step_failures: &[String],
    harness_error: Option<&str>,
) -> Judgement {
    if let Some(why) = harness_error {
        return Judgement {
            verdict: Verdict::Inconclusive,
            detection: None,
            reason: format!("inconclusive: {why}"),
        };
    }
    match expect {
        Expectation::Pass => {
            let got = got(findings, step_failures, None);
            match got {
                None => Judgement {
                    verdict: Verdict::Pass,
                    detection: None,
                    reason: "nothing found; every step did what the plan required".into(),
                },
                Some(got) => Judgement {
                    verdict: Verdict::Fail,
                    detection: None,
                    reason: format!("expected pass, got {got}"),
                },
            }
        }
        Expectation::Detect(rule) => detect(*rule, findings, step_failures),
    }
}

/// [`judge`]'s verdict alone.
pub fn verdict(
    expect: &Expectation,
    findings: &[Finding],
    step_failures: &[String],
    harness_error: Option<&str>,
) -> Verdict {
    judge(expect, findings, step_failures, harness_error).verdict
}

fn detect(rule: FindingRule, findings: &[Finding], step_failures: &[String]) -> Judgement {
    let name = rule.name();
    if let Some(first) = findings.iter().find(|f| f.rule == rule) {
        let mut reason = format!("caught by name: {name} ({})", first.phase);
        if let Some(also) = got(findings, step_failures, Some(rule)) {
            reason.push_str(&format!("; also {also}"));
        }
        return Judgement {
            verdict: Verdict::Pass,
            detection: Some(Detection::ByName),
            reason,
        };
    }
    let (detection, got) = match got(findings, step_failures, None) {
        Some(got) => (Detection::AsOther, got),
        None => (Detection::NotCaught, "none".to_owned()),
    };
    Judgement {
        verdict: Verdict::Fail,
        detection: Some(detection),
        reason: format!("expected {name}, got {got}"),
    }
}

/// What went wrong, in words (`lost, stuck and 2 step failures`), leaving
/// out `except`; `None` when nothing did.
fn got(
    findings: &[Finding],
    step_failures: &[String],
    except: Option<FindingRule>,
) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for f in findings.iter().filter(|f| Some(f.rule) != except) {
        let name = f.rule.name().to_owned();
        if !parts.contains(&name) {
            parts.push(name);
        }
    }
    match step_failures.len() {
        0 => {}
        1 => parts.push("1 step failure".into()),
        n => parts.push(format!("{n} step failures")),
    }
    let last = parts.pop()?;
    Some(if parts.is_empty() {
        last
    } else {
        format!("{} and {last}", parts.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(rule: FindingRule) -> Finding {
        Finding::of(rule)
    }

    const MIXED: Expectation = Expectation::Detect(FindingRule::MixedDiscipline);

    #[test]
    fn caught_by_name() {
        let j = judge(&MIXED, &[finding(FindingRule::MixedDiscipline)], &[], None);
        assert_eq!(j.verdict, Verdict::Pass);
        assert_eq!(j.detection, Some(Detection::ByName));
        assert_eq!(j.reason, "caught by name: mixed_discipline (reconcile)");
        // Other damage beside it is listed, and does not fail the cell.
        let j = judge(
            &MIXED,
            &[
                finding(FindingRule::Lost),
                finding(FindingRule::MixedDiscipline),
            ],
            &["step 6 (flip): refused".into()],
            None,
        );
        assert_eq!(j.verdict, Verdict::Pass);
        assert_eq!(j.detection, Some(Detection::ByName));
        assert_eq!(
            j.reason,
            "caught by name: mixed_discipline (reconcile); also lost and 1 step failure"
        );
    }

    #[test]
    fn caught_as_something_else_fails_and_says_what() {
        let j = judge(
            &MIXED,
            &[
                finding(FindingRule::Lost),
                finding(FindingRule::Stuck),
                finding(FindingRule::Lost),
            ],
            &[],
            None,
        );
        assert_eq!(j.verdict, Verdict::Fail);
        assert_eq!(j.detection, Some(Detection::AsOther));
        assert_eq!(j.reason, "expected mixed_discipline, got lost and stuck");
        // Step failures alone are something else too.
        let failures = ["a".to_owned(), "b".to_owned()];
        let j = judge(&MIXED, &[], &failures, None);
        assert_eq!(j.verdict, Verdict::Fail);
        assert_eq!(j.detection, Some(Detection::AsOther));
        assert_eq!(j.reason, "expected mixed_discipline, got 2 step failures");
        let j = judge(
            &MIXED,
            &[finding(FindingRule::FenceBreached)],
            &failures,
            None,
        );
        assert_eq!(
            j.reason,
            "expected mixed_discipline, got fence_breached and 2 step failures"
        );
    }

    #[test]
    fn not_caught_fails() {
        let j = judge(&MIXED, &[], &[], None);
        assert_eq!(j.verdict, Verdict::Fail);
        assert_eq!(j.detection, Some(Detection::NotCaught));
        assert_eq!(j.reason, "expected mixed_discipline, got none");
    }

    #[test]
    fn inconclusive_stays_inconclusive() {
        for (expect, findings) in [
            (MIXED, vec![finding(FindingRule::MixedDiscipline)]),
            (MIXED, vec![]),
            (Expectation::Pass, vec![finding(FindingRule::Lost)]),
            (Expectation::Pass, vec![]),
        ] {
            let j = judge(&expect, &findings, &["x".into()], Some("no PostgreSQL"));
            assert_eq!(j.verdict, Verdict::Inconclusive, "{expect}");
            assert_eq!(j.detection, None);
            assert_eq!(j.reason, "inconclusive: no PostgreSQL");
        }
    }

    #[test]
    fn a_pass_cell_fails_on_any_finding_or_step_failure() {
        let j = judge(&Expectation::Pass, &[], &[], None);
        assert_eq!((j.verdict, j.detection), (Verdict::Pass, None));
        let j = judge(&Expectation::Pass, &[finding(FindingRule::Lost)], &[], None);
        assert_eq!(j.verdict, Verdict::Fail);
        assert_eq!(j.reason, "expected pass, got lost");
        let j = judge(
            &Expectation::Pass,
            &[],
            &["step 5 (migrate): refused".into()],
            None,
        );
        assert_eq!(j.verdict, Verdict::Fail);
        assert_eq!(j.reason, "expected pass, got 1 step failure");
    }
}
