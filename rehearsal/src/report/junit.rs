//! `junit.xml`: one testcase per cell, so CI systems show cells as tests.
//!
//! A failed cell is a `<failure>` (the product is wrong) carrying its
//! findings; an inconclusive one is an `<error>` (the harness is wrong)
//! carrying the harness error. What a passing cell proved goes to its
//! `system-out`, where CI shows it on demand.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use crate::matrix::Expectation;
use crate::observe::{Verdict, thousands};

use super::model::{CellReport, RunReport};
use super::text::first_ids;

/// The report, suite, and default classname.
const NAME: &str = "rehearse";

/// Renders `junit.xml`.
pub fn render_junit(r: &RunReport) -> String {
    let classname = r.run.header.matrix.as_deref().unwrap_or(NAME);
    let mut suite = TestSuite::new(NAME);
    suite.set_time(Duration::from_millis(r.run.end.wall_ms));
    suite.add_properties([
        Property::new("run_id", r.run.header.run_id.as_str()),
        Property::new("seed", r.run.header.seed.to_string()),
        Property::new("replay", r.run.header.replay.as_str()),
        Property::new("git_commit", r.run.header.git_commit.as_str()),
        Property::new("git_dirty", r.run.header.git_dirty.to_string()),
        Property::new("postgres_version", r.run.header.postgres_version.as_str()),
        Property::new("backend", r.run.header.backend.as_str()),
        Property::new("format_version", r.format_version.as_str()),
    ]);
    suite.add_test_cases(r.cells.iter().map(|cell| test_case(cell, classname)));
    let mut report = Report::new(NAME);
    report.set_time(Duration::from_millis(r.run.end.wall_ms));
    report.add_test_suite(suite);
    report
        .to_string()
        .expect("serializing JUnit XML into memory cannot fail: writes to a Vec are infallible")
}

fn test_case(cell: &CellReport, classname: &str) -> TestCase {
    let status = match cell.verdict {
        Verdict::Pass => TestCaseStatus::success(),
        Verdict::Fail => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_type("finding")
                .set_message(failure_message(cell))
                .set_description(findings_text(cell));
            status
        }
        Verdict::Inconclusive => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_type("harness").set_message(
                cell.harness_error
                    .as_deref()
                    .unwrap_or("the harness could not reach a verdict"),
            );
            status
        }
    };
    let mut case = TestCase::new(cell.name.as_str(), status);
    case.set_classname(classname);
    case.set_time(Duration::from_millis(cell.elapsed_ms));
    let mut out = String::new();
    if !cell.about.is_empty() {
        out.push_str(&format!("{}\n", cell.about));
    }
    out.push_str(&format!("expected: {}\n", cell.expect));
    for line in &cell.proved {
        out.push_str(&format!("proved: {line}\n"));
    }
    if cell.verdict == Verdict::Pass && !cell.findings.is_empty() {
        out.push_str(&findings_text(cell));
        out.push('\n');
    }
    case.set_system_out(out);
    case
}

/// One line: what was expected and what was found instead.
fn failure_message(cell: &CellReport) -> String {
    let found = if cell.findings.is_empty() {
        "no findings".to_owned()
    } else {
        let rules: Vec<String> = cell
            .findings
            .iter()
            .map(|f| format!("{} ({})", f.rule.name(), thousands(f.count)))
            .collect();
        rules.join(", ")
    };
    match cell.expect {
        Expectation::Pass if !cell.step_failures.is_empty() => {
            let n = cell.step_failures.len() as u64;
            format!("{} failed; found {found}", crate::observe::count(n, "step"))
        }
        Expectation::Pass => format!("expected no findings; found {found}"),
        Expectation::Detect(rule) => format!("expected finding {}; found {found}", rule.name()),
    }
}

/// Every finding, one line each: rule, phase, message, count, first ids.
fn findings_text(cell: &CellReport) -> String {
    let steps = cell
        .step_failures
        .iter()
        .map(|s| format!("step failure: {s}"));
    steps
        .chain(cell.findings.iter().map(|f| {
            format!(
                "{} in {}: {} ({} in all; first ids: {})",
                f.rule.name(),
                f.phase,
                f.message,
                thousands(f.count),
                first_ids(f)
            )
        }))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn one_testcase_per_cell_with_failure_and_error_where_due() {
        let xml = render_junit(&fixture::report());
        assert!(
            xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"),
            "{xml}"
        );
        assert_eq!(xml.matches("<testcase ").count(), 3, "{xml}");
        assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
        assert_eq!(xml.matches("<error ").count(), 1, "{xml}");
        assert!(!xml.contains("<script>"), "{xml}");
        assert!(
            xml.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{xml}"
        );

        let parsed = Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(parsed.tests, 3);
        assert_eq!(parsed.failures, 1);
        assert_eq!(parsed.errors, 1);
        let [suite] = parsed.test_suites.as_slice() else {
            panic!("one suite expected: {xml}")
        };
        assert_eq!(suite.name.as_str(), "rehearse");
        assert!(xml.contains("time=\"148.250\""), "{xml}");
        let names: Vec<&str> = suite.test_cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["migrate-first", "fence", "defect-fence"]);
        for case in &suite.test_cases {
            assert_eq!(case.classname.as_ref().map(|c| c.as_str()), Some("smoke"));
        }
        let [pass, fail, error] = [0, 1, 2].map(|i| &suite.test_cases[i]);
        assert!(pass.time.is_some());
        assert!(xml.contains("time=\"20.480\""), "{xml}");
        assert!(matches!(pass.status, TestCaseStatus::Success { .. }));
        let out = pass.system_out.as_ref().unwrap().as_str();
        assert!(
            out.contains("proved: step 6 (fence): previous (0.6.2) refused after the flip"),
            "{out}"
        );

        let TestCaseStatus::NonSuccess {
            kind: NonSuccessKind::Failure,
            message,
            description,
            ..
        } = &fail.status
        else {
            panic!("fence should fail: {:?}", fail.status)
        };
        assert_eq!(
            message.as_ref().unwrap().as_str(),
            "1 step failed; found lost (3), fence_breached (57)"
        );
        assert_eq!(
            description.as_ref().unwrap().as_str(),
            "step failure: step 12 (fence): previous-fence-1 exited 0; an N-1 binary must refuse after the flip\n\
             lost in reconcile: 3 accepted jobs have no terminal record (3 in all; first ids: 101, 102, 103)\n\
             fence_breached in fence: N-1 binary wrote <script>alert(1)</script> | a ring row \
             (57 in all; first ids: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, ...)"
        );

        let TestCaseStatus::NonSuccess {
            kind: NonSuccessKind::Error,
            message,
            ..
        } = &error.status
        else {
            panic!("defect-fence should be an error: {:?}", error.status)
        };
        assert_eq!(
            message.as_ref().unwrap().as_str(),
            "failed to start worker 1 of cell defect-fence: awa exited with code 127"
        );
    }

    #[test]
    fn without_a_matrix_the_classname_is_rehearse() {
        let mut report = fixture::report();
        report.run.header.matrix = None;
        let parsed = Report::deserialize_from_str(&render_junit(&report)).unwrap();
        let case = &parsed.test_suites[0].test_cases[0];
        assert_eq!(case.classname.as_ref().unwrap().as_str(), "rehearse");
    }

    #[test]
    fn a_detect_cell_that_missed_its_finding_says_which() {
        let mut report = fixture::report();
        let cell = &mut report.cells[2];
        cell.verdict = Verdict::Fail;
        cell.harness_error = None;
        let xml = render_junit(&report);
        assert!(
            xml.contains("message=\"expected finding fence_breached; found no findings\""),
            "{xml}"
        );
    }
}
