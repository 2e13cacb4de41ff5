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
/// `1.2`: `digest`, the sha256 of the rest of the file ([`content_digest`]),
/// required from 1.2 on: an edited or truncated plan is refused; and
/// `checklist`, matrix.toml's `[[checklist]]`.
pub const PLAN_FORMAT: &str = "1.2";

/// The key of the whole file's digest in plan.json.
const DIGEST_KEY: &str = "digest";

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

    /// Pretty JSON with a final newline, carrying the digest of its content.
    pub fn to_json(&self) -> String {
        let mut value = serde_json::to_value(self).expect("a plan always encodes");
        let digest = content_digest(&value);
        if let Some(object) = value.as_object_mut() {
            object.insert(DIGEST_KEY.to_owned(), digest.into());
        }
        let mut text = serde_json::to_string_pretty(&value).expect("a plan always encodes");
        text.push('\n');
        text
    }

    /// What is wrong with this plan on its own terms: a cell planned twice,
    /// an artifact a cell uses with no pinned digest (or one that is not a
    /// sha256), a step or database naming an artifact its cell does not
    /// declare. A replay of such a plan would not rehearse what it says.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for cell in &self.plan.cells {
            let name = &cell.name;
            if !seen.insert(name.as_str()) {
                problems.push(format!("cell {name} is planned twice"));
            }
            for artifact in cell.artifacts.keys() {
                match self.artifacts.iter().find(|a| &a.name == artifact) {
                    None => problems.push(format!(
                        "cell {name} uses artifact {artifact}, which has no pinned digest"
                    )),
                    Some(pinned) if !is_sha256(&pinned.digest) => problems.push(format!(
                        "artifact {artifact} is pinned to {:?}, which is not a sha256 digest",
                        pinned.digest
                    )),
                    Some(_) => {}
                }
            }
            let declared = |a: &str| cell.artifacts.contains_key(a);
            if !declared(&cell.database.migrated_by) {
                problems.push(format!(
                    "cell {name}: its database is migrated by artifact {}, which the cell does not declare",
                    cell.database.migrated_by
                ));
            }
            for (i, step) in cell.steps.iter().enumerate() {
                for artifact in crate::plan::artifacts_named(step) {
                    if !declared(artifact) {
                        problems.push(format!(
                            "cell {name} step {} ({}) names artifact {artifact}, which the cell does not declare",
                            i + 1,
                            step.name()
                        ));
                    }
                }
            }
        }
        problems
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
        let Some(format) = value
            .get("plan_format")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
        else {
            return Err(invalid("no plan_format".into()));
        };
        let format = format.as_str();
        let major = |v: &str| v.split_once('.').map(|(m, _)| m.to_owned());
        if major(format).is_none() || major(format) != major(PLAN_FORMAT) {
            return Err(invalid(format!(
                "plan_format {format}, this rehearse reads {PLAN_FORMAT}"
            )));
        }
        let minor = format
            .split_once('.')
            .and_then(|(_, m)| m.parse::<u32>().ok())
            .unwrap_or(0);
        let mut value = value;
        let recorded = value.as_object_mut().and_then(|o| o.remove(DIGEST_KEY));
        match recorded {
            Some(recorded) => {
                let now = content_digest(&value);
                if recorded.as_str() != Some(now.as_str()) {
                    return Err(invalid(format!(
                        "its content does not match its digest (recorded {recorded}, content {now}): it was edited or damaged after the run wrote it"
                    )));
                }
            }
            None if minor >= 2 => {
                return Err(invalid(format!(
                    "plan_format {format} carries a digest of its content, and this file has none"
                )));
            }
            None => {}
        }
        let file: PlanFile = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        let problems = file.problems();
        if !problems.is_empty() {
            return Err(invalid(problems.join("; ")));
        }
        Ok(file)
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

/// sha256 (hex) of a plan.json's content without its digest: the
/// compact JSON of the value, whose object keys serde_json keeps sorted.
fn content_digest(value: &serde_json::Value) -> String {
    awa_harness::release::sha256_hex(value.to_string().as_bytes())
}

/// A digest as artifacts are pinned: 64 hex digits, bare (a binary) or
/// after `sha256:` (an image).
fn is_sha256(digest: &str) -> bool {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One edit of a file's content.
    type Tamper = fn(&mut PlanFile);
    use crate::artifacts::Resolved;
    use std::collections::BTreeMap;

    /// `current` pinned to `digest`; `previous` (which the cells also
    /// use) to a digest of its own.
    fn resolution(digest: &str) -> Resolution {
        let resolved = |name: &str, version: &str, digest: &str| Resolved {
            name: name.into(),
            version: version.into(),
            source: "workspace build".into(),
            digest: digest.into(),
            obtained: "cached".into(),
            binary: "target/release/awa".into(),
            failpoint: None,
            image: None,
        };
        Resolution {
            artifacts: BTreeMap::from([
                ("current".to_owned(), resolved("current", "0.7.0", digest)),
                (
                    "previous".to_owned(),
                    resolved("previous", "0.6.2", &"e".repeat(64)),
                ),
            ]),
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
        assert_eq!(value["artifacts"][0]["name"], "current");
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

    /// A plan.json edited by hand: the digest catches any edit; with the
    /// digest made to match, the plan's own checks still catch each.
    #[test]
    fn a_tampered_plan_is_refused_naming_what_is_wrong() {
        let plan = plan();
        let good = PlanFile::of(&plan, &resolution(&"a".repeat(64)));
        let path = Path::new("r/plan.json");
        PlanFile::parse(path, &good.to_json()).unwrap();

        // Any edit to the text breaks the digest.
        let text = good.to_json();
        let seed = |n: u64| format!("\"seed\": {n}");
        let edited = text.replacen(&seed(plan.seed), &seed(plan.seed + 1), 1);
        assert_ne!(edited, text, "the seed was edited");
        let error = PlanFile::parse(path, &edited).unwrap_err().to_string();
        assert!(error.contains("does not match its digest"), "{error}");
        let mut value: serde_json::Value = serde_json::from_str(&good.to_json()).unwrap();
        value.as_object_mut().unwrap().remove(DIGEST_KEY);
        let error = PlanFile::parse(path, &value.to_string())
            .unwrap_err()
            .to_string();
        assert!(error.contains("has none"), "{error}");

        // Re-signed tampering: the plan's own checks.
        let cases: Vec<(&str, Tamper)> = vec![
            ("has no pinned digest", |f| f.artifacts.clear()),
            ("is not a sha256 digest", |f| {
                f.artifacts[0].digest = String::new()
            }),
            ("is planned twice", |f| {
                let again = f.plan.cells[0].clone();
                f.plan.cells.push(again);
            }),
            (
                "names artifact nowhere, which the cell does not declare",
                |f| {
                    let step = f.plan.cells[0]
                        .steps
                        .iter_mut()
                        .find(|s| matches!(s, crate::matrix::Step::Fleet(_)))
                        .expect("a fleet step");
                    if let crate::matrix::Step::Fleet(fleet) = step {
                        fleet.artifact = "nowhere".into();
                    }
                },
            ),
        ];
        for (why, tamper) in cases {
            let mut file = good.clone();
            tamper(&mut file);
            let error = PlanFile::parse(path, &file.to_json())
                .unwrap_err()
                .to_string();
            assert!(error.contains(why), "{why}: {error}");
            assert!(
                error.starts_with("r/plan.json is not a plan.json"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_plan_of_format_1_1_without_a_digest_is_still_read() {
        let file = PlanFile::of(&plan(), &resolution(&"a".repeat(64)));
        let mut value = serde_json::to_value(&file).unwrap();
        value["plan_format"] = "1.1".into();
        PlanFile::parse(Path::new("old/plan.json"), &value.to_string()).unwrap();
    }
}
