//! `report.json`: encode, and decode with a check of the format version.
//!
//! The version is read before the body, so a file from a newer major
//! version is refused with a message that says so, rather than with
//! whatever field mismatch its new shape happens to cause first.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::model::{FORMAT_VERSION, RunReport};

/// What can go wrong reading or writing a report folder.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be read (missing, unreadable).
    #[error("failed to read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON, or not the shape of a report.
    #[error("{} is not a valid report.json", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde found, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The file has no `format_version`: something else called report.json.
    #[error("{} has no format_version: it is not a report.json written by rehearse", path.display())]
    NoVersion {
        /// The file.
        path: PathBuf,
    },
    /// `format_version` is not `MAJOR.MINOR`.
    #[error("{} has format_version \"{found}\"; expected MAJOR.MINOR, like \"{FORMAT_VERSION}\"", path.display())]
    BadVersion {
        /// The file.
        path: PathBuf,
        /// The version as written.
        found: String,
    },
    /// The file's major version is not the one this build reads.
    #[error(
        "{} is report format {found}, but this rehearse reads format {FORMAT_VERSION} \
         (any {major}.x); render it with a rehearse that reads format {found_major}.x",
        path.display(),
        major = major_of(FORMAT_VERSION)
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version as written.
        found: String,
        /// Its major number.
        found_major: u64,
    },
    /// A report file could not be written.
    #[error("failed to write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The report could not be encoded (a map with non-string keys; a bug).
    #[error("failed to encode report.json")]
    Encode(#[source] serde_json::Error),
}

/// `report.json` as written: pretty, with a final newline, keys in declaration order.
pub fn to_json(report: &RunReport) -> Result<String, ReportError> {
    let mut text = serde_json::to_string_pretty(report).map_err(ReportError::Encode)?;
    text.push('\n');
    Ok(text)
}

/// Reads a `report.json` written by this or any compatible version of rehearse.
pub fn read_json(path: &Path) -> Result<RunReport, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Read {
        path: path.to_owned(),
        source,
    })?;
    from_json(path, &text)
}

/// Decodes report.json text; `path` only names the file in errors.
pub fn from_json(path: &Path, text: &str) -> Result<RunReport, ReportError> {
    /// Just the version, read first.
    #[derive(Deserialize)]
    struct Probe {
        format_version: Option<String>,
    }
    let parse = |source| ReportError::Parse {
        path: path.to_owned(),
        source,
    };
    let probe: Probe = serde_json::from_str(text).map_err(parse)?;
    let Some(found) = probe.format_version else {
        return Err(ReportError::NoVersion {
            path: path.to_owned(),
        });
    };
    let Some((found_major, _minor)) = parse_version(&found) else {
        return Err(ReportError::BadVersion {
            path: path.to_owned(),
            found,
        });
    };
    if found_major != major_of(FORMAT_VERSION) {
        return Err(ReportError::UnsupportedVersion {
            path: path.to_owned(),
            found,
            found_major,
        });
    }
    serde_json::from_str(text).map_err(parse)
}

/// `"1.0"` -> `(1, 0)`; anything else -> `None`.
fn parse_version(text: &str) -> Option<(u64, u64)> {
    let (major, minor) = text.split_once('.')?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    Some((number(major)?, number(minor)?))
}

/// The major number of a well-formed version (of [`FORMAT_VERSION`], a constant).
fn major_of(version: &str) -> u64 {
    parse_version(version).map_or(0, |(major, _)| major)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn round_trips_and_keeps_the_top_level_keys() {
        let report = fixture::report();
        let text = to_json(&report).unwrap();
        let back = from_json(Path::new("report.json"), &text).unwrap();
        assert_eq!(back, report);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // serde_json's map sorts keys: check the set here and the written order below.
        assert_eq!(keys, ["artifacts", "cells", "format_version", "run"]);
        let at = |key: &str| text.find(&format!("\n  \"{key}\": ")).unwrap();
        assert!(
            at("format_version") < at("run")
                && at("run") < at("artifacts")
                && at("artifacts") < at("cells")
        );
        assert_eq!(value["format_version"], FORMAT_VERSION);
        assert_eq!(value["cells"][2]["verdict"], "inconclusive");
        assert_eq!(
            value["cells"][2]["expect"],
            serde_json::json!({"detect": "fence_breached"})
        );
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn a_newer_minor_version_is_read_ignoring_new_fields() {
        let mut value = serde_json::to_value(fixture::report()).unwrap();
        value["format_version"] = "1.7".into();
        value["signed_by"] = "release-bot".into();
        value["run"]["kernel"] = "6.1".into();
        let report = from_json(Path::new("r.json"), &value.to_string()).unwrap();
        assert_eq!(report.format_version, "1.7");
        assert_eq!(report.cells.len(), 3);
    }

    #[test]
    fn a_newer_major_version_is_refused_saying_so() {
        let mut value = serde_json::to_value(fixture::report()).unwrap();
        value["format_version"] = "2.0".into();
        value["cells"] = "changed shape".into();
        let error = from_json(Path::new("reports/x/report.json"), &value.to_string()).unwrap_err();
        assert!(matches!(
            error,
            ReportError::UnsupportedVersion { found_major: 2, .. }
        ));
        assert_eq!(
            error.to_string(),
            format!(
                "reports/x/report.json is report format 2.0, but this rehearse reads format {FORMAT_VERSION} \
                 (any 1.x); render it with a rehearse that reads format 2.x"
            )
        );
    }

    #[test]
    fn bad_inputs_name_the_file() {
        let path = Path::new("d/report.json");
        let like = format!(
            "d/report.json has format_version \"one\"; expected MAJOR.MINOR, like \"{FORMAT_VERSION}\""
        );
        let cases: [(&str, &str); 6] = [
            ("", "d/report.json is not a valid report.json"),
            (
                "{\"format_version\": \"1.0\",",
                "d/report.json is not a valid report.json",
            ),
            ("[1, 2]", "d/report.json is not a valid report.json"),
            (
                "{}",
                "d/report.json has no format_version: it is not a report.json written by rehearse",
            ),
            ("{\"format_version\": \"one\"}", &like),
            (
                "{\"format_version\": \"1.0\", \"run\": {}}",
                "d/report.json is not a valid report.json",
            ),
        ];
        for (text, message) in cases {
            let error = from_json(path, text).unwrap_err();
            assert_eq!(error.to_string(), message, "{text:?}");
        }
        let error = from_json(path, "{\"format_version\": \"1.0\", \"run\": {}}").unwrap_err();
        let cause = std::error::Error::source(&error).unwrap().to_string();
        assert!(cause.starts_with("missing field `run_id`"), "{cause}");
    }

    #[test]
    fn versions_parse_strictly() {
        for (text, parsed) in [
            ("1.0", Some((1, 0))),
            ("12.34", Some((12, 34))),
            ("1", None),
            ("1.", None),
            (".1", None),
            ("1.0.0", None),
            ("v1.0", None),
            ("1.-1", None),
            (" 1.0", None),
        ] {
            assert_eq!(parse_version(text), parsed, "{text:?}");
        }
        assert_eq!(major_of(FORMAT_VERSION), 1);
    }
}
