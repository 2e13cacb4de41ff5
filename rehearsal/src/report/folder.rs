//! The run's report folder: where it is and what gets written into it.

use std::path::{Path, PathBuf};

use super::json::{ReportError, to_json};
use super::model::RunReport;
use super::{render_html, render_junit, render_markdown};

/// The machine-readable report, the source of every other file.
pub const REPORT_JSON: &str = "report.json";
/// The summary to attach to a release.
pub const REPORT_MD: &str = "report.md";
/// One testcase per cell, for CI.
pub const JUNIT_XML: &str = "junit.xml";
/// The page with a timeline per cell.
pub const REPORT_HTML: &str = "report.html";

/// `reports_root/<UTC time>-<short sha>`, e.g. `reports/20261130T014512Z-3f2a9c1`;
/// without a commit (not a git checkout), just the time.
pub fn report_dir(reports_root: &Path, started_at_utc: &str, short_sha: &str) -> PathBuf {
    if short_sha.is_empty() {
        reports_root.join(started_at_utc)
    } else {
        reports_root.join(format!("{started_at_utc}-{short_sha}"))
    }
}

/// Writes report.json, report.md, junit.xml and report.html into `dir`
/// (created if missing). Each file is written whole and renamed into
/// place, so an interrupted write never leaves half a report.
pub fn write_all(dir: &Path, report: &RunReport) -> Result<(), ReportError> {
    let report = &redacted(report)?;
    create(dir)?;
    write_file(dir, REPORT_JSON, &to_json(report)?)?;
    render_all(dir, report)
}

/// Writes the files rendered from report.json (report.md, junit.xml,
/// report.html), leaving report.json itself untouched: what
/// `rehearse report DIR` does. report.html carries the sha256 of the
/// report.json in `dir`, as its bytes are.
pub fn render_all(dir: &Path, report: &RunReport) -> Result<(), ReportError> {
    let report = &redacted(report)?;
    create(dir)?;
    write_file(dir, REPORT_MD, &render_markdown(report))?;
    write_file(dir, JUNIT_XML, &render_junit(report))?;
    let json_sha256 = std::fs::read(dir.join(REPORT_JSON))
        .ok()
        .map(|bytes| awa_harness::release::sha256_hex(&bytes));
    write_file(
        dir,
        REPORT_HTML,
        &render_html(report, json_sha256.as_deref()),
    )
}

/// The report with every string in it (keys too) passed through
/// [`awa_runtime::redact::redact`]: whatever a command line, a step or an
/// error message carried, no secret reaches a file, including fields
/// added later.
fn redacted(report: &RunReport) -> Result<RunReport, ReportError> {
    let value = serde_json::to_value(report).map_err(ReportError::Encode)?;
    serde_json::from_value(redact_value(value)).map_err(ReportError::Encode)
}

/// `value` with every string in it (keys too) redacted.
pub(super) fn redact_value(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(awa_runtime::redact::redact(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(redact_value).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (awa_runtime::redact::redact(&k), redact_value(v)))
                .collect(),
        ),
        other => other,
    }
}

fn create(dir: &Path) -> Result<(), ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Write {
        path: dir.to_owned(),
        source,
    })
}

fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), ReportError> {
    let path = dir.join(name);
    let partial = dir.join(format!(".{name}.partial"));
    let error = |source| ReportError::Write {
        path: path.clone(),
        source,
    };
    std::fs::write(&partial, text).map_err(error)?;
    std::fs::rename(&partial, &path).map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{fixture, read_json};

    #[test]
    fn the_folder_is_named_by_time_and_commit() {
        assert_eq!(
            report_dir(Path::new("reports"), "20261130T014512Z", "3f2a9c1"),
            Path::new("reports/20261130T014512Z-3f2a9c1")
        );
        assert_eq!(
            report_dir(Path::new("/r"), "20261130T014512Z", ""),
            Path::new("/r/20261130T014512Z")
        );
    }

    #[test]
    fn write_all_writes_four_files_that_read_back() {
        let dir = fixture::Scratch::new("write-all");
        let target = dir.path().join("reports").join("20261130T014512Z-3f2a9c1");
        let report = fixture::report();
        write_all(&target, &report).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&target)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["junit.xml", "report.html", "report.json", "report.md"]
        );
        assert_eq!(read_json(&target.join(REPORT_JSON)).unwrap(), report);
        let md = std::fs::read_to_string(target.join(REPORT_MD)).unwrap();
        assert_eq!(md, render_markdown(&report));
        // report.html names the hash of the report.json beside it.
        let json = std::fs::read(target.join(REPORT_JSON)).unwrap();
        let html = std::fs::read_to_string(target.join(REPORT_HTML)).unwrap();
        let sum = awa_harness::release::sha256_hex(&json);
        assert_eq!(sum.len(), 64);
        assert!(html.contains(&format!("<code class=\"digest\">{sum}</code>")));
    }

    #[test]
    fn no_file_of_the_report_holds_a_password_wherever_the_model_carried_it() {
        let dir = fixture::Scratch::new("secrets");
        let mut report = fixture::report();
        report.run.header.command_line =
            "rehearse --database-url 'postgres://u:Sekr1t-cmd@h/db' --cell fence".into();
        report.cells[0].verdict_reason =
            "could not connect to postgres://u@h/db?password=Sekr1t-reason".into();
        report.cells[0].about = "host=h password=Sekr1t-kv dbname=d".into();
        write_all(dir.path(), &report).unwrap();
        for name in [REPORT_JSON, REPORT_MD, JUNIT_XML, REPORT_HTML] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(!text.contains("Sekr1t"), "{name} holds a password:\n{text}");
        }
        let written = read_json(&dir.path().join(REPORT_JSON)).unwrap();
        assert_eq!(
            written.run.header.command_line,
            "rehearse --database-url 'postgres://u:***@h/db' --cell fence"
        );
        assert_eq!(written.cells[0].about, "host=h password=*** dbname=d");
        // Re-rendering from report.json (`rehearse report DIR`) redacts too.
        render_all(dir.path(), &report).unwrap();
        let md = std::fs::read_to_string(dir.path().join(REPORT_MD)).unwrap();
        assert!(!md.contains("Sekr1t"), "{md}");
    }

    #[test]
    fn an_unwritable_folder_names_the_path() {
        let dir = fixture::Scratch::new("unwritable");
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "").unwrap();
        let error = write_all(&file.join("sub"), &fixture::report()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("failed to write {}", file.join("sub").display())
        );
    }
}
