//! `plan.json`: the plan a run executed, written into its folder, so
//! `rehearse replay DIR/plan.json` reruns exactly that plan (every step
//! with its resolved timing and target, the seed) without re-deriving it
//! from a matrix file that may have changed since.
//!
//! Beside the plan (the fields of `rehearse plan --json`, the matrix
//! checksum and the partition among them) it pins each artifact's digest
//! as that run resolved it: a replay whose artifacts no longer match is
//! refused before anything starts, because it would rehearse other code.
//! A seed reproduces the plan, not the timing: the same steps run against
//! the same binaries, but when a process gets to each step is the
//! machine's business.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifacts::Resolution;
use crate::plan::Plan;

/// The file in a run folder that holds the executed plan.
pub const PLAN_JSON: &str = "plan.json";

/// The plan.json format this build writes (`MAJOR.MINOR`; a reader takes
/// any minor of its major). `1.0`: the plan, `plan_format`, `artifacts`.
/// `1.1`: `schedule` (matrix.toml's `[schedule]`, the estimate `--jobs
/// auto` packs by without a report of the cells; the default when absent).
pub const PLAN_FORMAT: &str = "1.1";

/// What plan.json holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanFile {
    /// [`PLAN_FORMAT`] when written.
    pub plan_format: String,
    /// The plan, as `rehearse plan --json` prints it.
    #[serde(flatten)]
    pub plan: Plan,
    /// Each artifact the run resolved, with the digest of what ran.
    pub artifacts: Vec<PinnedArtifact>,
}

/// An artifact as the recorded run resolved it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedArtifact {
    /// The matrix's name for it (`previous`).
    pub name: String,
    /// What its binary reported (`0.6.2`).
    pub version: String,
    /// Where it came from (`workspace build`, `release 0.6.2 (...)`).
    pub source: String,
    /// sha256 (hex) of the binary or image that ran.
    pub digest: String,
}

/// Why a plan.json cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    /// Missing or unreadable.
    #[error("failed to read {}; pass the plan.json of a run folder (reports/<run>/plan.json)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not a plan.json, or a newer major format.
    #[error("{} is not a plan.json this rehearse reads ({why}); pass the plan.json a run wrote", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// An artifact's digest differs from the recorded one.
    #[error(
        "artifact {name} has changed since {}: the plan ran sha256 {planned}, this checkout resolves sha256 {now} ({source_now}); check out the commit and release archives the plan ran (report.json names the commit), or start a fresh run with its replay line",
        file.display()
    )]
    DigestChanged {
        /// The plan.json.
        file: PathBuf,
        /// The artifact.
        name: String,
        /// The recorded digest.
        planned: String,
        /// What it resolves to now.
        now: String,
        /// Where it came from now.
        source_now: String,
    },
    /// An artifact of the plan is not resolved at all now.
    #[error("artifact {name} of {} was not resolved by this checkout; replay it where its artifacts exist", file.display())]
    Missing {
        /// The plan.json.
        file: PathBuf,
        /// The artifact.
        name: String,
    },
}

impl PlanFile {
    /// The plan with the digests `resolution` resolved for it.
    pub fn of(plan: &Plan, resolution: &Resolution) -> PlanFile {
        PlanFile {
            plan_format: PLAN_FORMAT.to_owned(),
            plan: plan.clone(),
            artifacts: resolution
                .artifacts
                .values()
                .map(|a| PinnedArtifact {
                    name: a.name.clone(),
                    version: a.version.clone(),
                    source: a.source.clone(),
                    digest: a.digest.clone(),
                })
                .collect(),
        }
    }

    /// Pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a plan always encodes");
        text.push('\n');
        text
    }

    /// Reads a plan.json.
    pub fn read(path: &Path) -> Result<PlanFile, PlanFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Decodes plan.json text; `path` names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<PlanFile, PlanFileError> {
        let invalid = |why: String| PlanFileError::Invalid {
            path: path.to_owned(),
            why,
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let Some(format) = value.get("plan_format").and_then(|v| v.as_str()) else {
            return Err(invalid("no plan_format".into()));
        };
        let major = |v: &str| v.split_once('.').map(|(m, _)| m.to_owned());
        if major(format).is_none() || major(format) != major(PLAN_FORMAT) {
            return Err(invalid(format!(
                "plan_format {format}, this rehearse reads {PLAN_FORMAT}"
            )));
        }
        serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
    }

    /// Every pinned artifact the cells use, against what `resolution`
    /// resolved now; `only` limits the check to the artifacts resolved
    /// (images on docker are checked once they are made).
    pub fn check(&self, file: &Path, resolution: &Resolution) -> Result<(), PlanFileError> {
        for pinned in &self.artifacts {
            if !self
                .plan
                .cells
                .iter()
                .any(|c| c.artifacts.contains_key(&pinned.name))
            {
                continue;
            }
            let Some(now) = resolution.artifacts.get(&pinned.name) else {
                return Err(PlanFileError::Missing {
                    file: file.to_owned(),
                    name: pinned.name.clone(),
                });
            };
            if now.digest != pinned.digest {
                return Err(PlanFileError::DigestChanged {
                    file: file.to_owned(),
                    name: pinned.name.clone(),
                    planned: pinned.digest.clone(),
                    now: now.digest.clone(),
                    source_now: now.source.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::Resolved;
    use std::collections::BTreeMap;

    fn resolution(digest: &str) -> Resolution {
        Resolution {
            artifacts: BTreeMap::from([(
                "current".to_owned(),
                Resolved {
                    name: "current".into(),
                    version: "0.7.0".into(),
                    source: "workspace build".into(),
                    digest: digest.into(),
                    obtained: "cached".into(),
                    binary: "target/release/awa".into(),
                    failpoint: None,
                    image: None,
                },
            )]),
            git: Default::default(),
            expand_version: 3,
        }
    }

    fn plan() -> Plan {
        let matrix = crate::matrix::parse("m.toml", include_str!("../../matrix.toml")).unwrap();
        let selection = crate::plan::Selection {
            matrix: None,
            cells: vec!["fresh-install".into()],
        };
        crate::plan::expand(&matrix, &selection, u64::MAX - 3).unwrap()
    }

    #[test]
    fn a_plan_file_round_trips_and_is_a_superset_of_plan_json() {
        let mut plan = plan();
        plan.matrix_checksum = "c".repeat(64);
        let file = PlanFile::of(&plan, &resolution(&"a".repeat(64)));
        let text = file.to_json();
        assert_eq!(PlanFile::parse(Path::new("p.json"), &text).unwrap(), file);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let plan_json = serde_json::to_value(&plan).unwrap();
        for (key, v) in plan_json.as_object().unwrap() {
            assert_eq!(&value[key], v, "{key}");
        }
        assert_eq!(value["artifacts"][0]["digest"], "a".repeat(64));
        assert_eq!(value["plan_format"], PLAN_FORMAT);
    }

    #[test]
    fn a_changed_digest_names_the_artifact_both_digests_and_what_to_do() {
        let plan = plan();
        let file = PlanFile::of(&plan, &resolution(&"a".repeat(64)));
        file.check(Path::new("r/plan.json"), &resolution(&"a".repeat(64)))
            .unwrap();
        let error = file
            .check(Path::new("r/plan.json"), &resolution(&"b".repeat(64)))
            .unwrap_err()
            .to_string();
        for needle in [
            "artifact current has changed since r/plan.json",
            &format!("the plan ran sha256 {}", "a".repeat(64)),
            &format!("resolves sha256 {}", "b".repeat(64)),
            "check out the commit",
        ] {
            assert!(error.contains(needle), "{needle}: {error}");
        }
    }

    #[test]
    fn bad_plan_files_are_named() {
        for (text, why) in [
            ("", "EOF"),
            ("{}", "no plan_format"),
            ("{\"plan_format\": \"2.0\"}", "plan_format 2.0"),
            ("{\"plan_format\": \"1.0\"}", "missing field"),
        ] {
            let error = PlanFile::parse(Path::new("x/plan.json"), text)
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with("x/plan.json is not a plan.json"),
                "{error}"
            );
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }
}
