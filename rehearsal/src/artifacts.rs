//! Artifacts: turn the plan's artifact declarations into binaries that run.
//!
//! Every source is checked before any build starts (a typo in a release
//! version, a tampered archive or an image on the process backend must not
//! cost a five-minute compile first); then each distinct binary is built
//! once, whatever number of artifacts share it:
//!
//! - `build = "workspace"`: `cargo build --release -p awa-runtime --bin awa`
//!   in the repository, with the git commit and dirty flag recorded;
//! - the same with `failpoint = "..."`: a separate build with
//!   `--features failpoints` into `target/failpoints` (the failpoint is armed
//!   per process with `AWA_FAILPOINTS`, so defective candidates share it);
//! - `release = "X.Y.Z"`: the archive listed in `artifacts/manifest.toml`,
//!   digest-verified and built by `awa_harness::release` (cached by digest
//!   under `target/releases`, reported as `cached` when it was);
//! - `image = "..."`: refused: the process backend runs binaries; on the
//!   docker backend image artifacts are resolved by `crate::image` and
//!   never reach this module.
//!
//! Each resolved artifact knows its binary, the sha256 of that binary and
//! the version the binary itself reports (`awa --version`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use awa_harness::release::{self, ReleaseError};

use crate::matrix::{Artifact, ArtifactSource, BuildSource, Version};

/// The schema version of the expand migration when the manifest does not say.
pub const DEFAULT_EXPAND_VERSION: i32 = 3;

/// One artifact, ready to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The matrix's name (`previous`, `current`, ...).
    pub name: String,
    /// What `awa --version` printed (`0.6.2`).
    pub version: String,
    /// Where it came from, for the report.
    pub source: String,
    /// sha256 (hex) of the binary.
    pub digest: String,
    /// `built` or `cached`.
    pub obtained: String,
    /// The binary to start.
    pub binary: PathBuf,
    /// The seeded defect to arm with `AWA_FAILPOINTS`, if any.
    pub failpoint: Option<String>,
    /// Its image, on the docker backend (built, reused or pulled).
    pub image: Option<crate::vocab::image::ImageInfo>,
}

/// The repository's state, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GitInfo {
    /// `git rev-parse HEAD`, or empty outside a git checkout.
    pub commit: String,
    /// `git status --porcelain` printed anything.
    pub dirty: bool,
}

impl GitInfo {
    /// The first 7 hex digits, for the report folder's name.
    pub fn short(&self) -> &str {
        &self.commit[..self.commit.len().min(7)]
    }
}

/// Every artifact of a run, resolved.
#[derive(Clone, Debug)]
pub struct Resolution {
    /// By matrix name.
    pub artifacts: BTreeMap<String, Resolved>,
    /// The repository's commit and dirty flag.
    pub git: GitInfo,
    /// The schema version of the expand migration (`artifacts/manifest.toml`).
    pub expand_version: i32,
}

/// Why an artifact could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// No checkout of this workspace was found to build from.
    #[error(
        "no awa-runtime workspace found above {} (looked for awa-runtime/Cargo.toml beside artifacts/manifest.toml); run rehearse inside a checkout of the repository, or pass --matrix-file with the matrix.toml of one",
        start.display()
    )]
    NoWorkspace {
        /// Where the search started.
        start: PathBuf,
    },
    /// The tree the user is in is this workspace but has no release manifest.
    #[error(
        "{}/artifacts/manifest.toml is missing: this copy of the repository cannot say which releases exist or check their archives; restore artifacts/manifest.toml (and the archives it lists) from the release branch. rehearse never builds from another checkout",
        root.display()
    )]
    ManifestMissing {
        /// The tree's root.
        root: PathBuf,
    },
    /// An image source on the process backend.
    #[error(
        "artifact \"{name}\" is an image ({reference}), which the process backend cannot run; \
         image artifacts need --backend docker (or auto where an engine answers); or use release = \"X.Y.Z\" or build = \"workspace\""
    )]
    ImageUnsupported {
        /// The artifact.
        name: String,
        /// Its image reference.
        reference: String,
    },
    /// A failpoint on something other than a workspace build.
    #[error(
        "artifact \"{name}\" arms failpoint \"{failpoint}\", but only a workspace build has failpoints"
    )]
    FailpointNeedsWorkspace {
        /// The artifact.
        name: String,
        /// The failpoint.
        failpoint: String,
    },
    /// `--workspace-binary` names no file (bad input).
    #[error(
        "--workspace-binary {}: no such file; give the path of an awa binary built from this workspace",
        binary.display()
    )]
    Prebuilt {
        /// The path given.
        binary: PathBuf,
    },
    /// The manifest is unreadable, or does not list the version (bad input).
    #[error("artifact \"{name}\": {source}")]
    Release {
        /// The artifact.
        name: String,
        /// What `awa_harness::release` said.
        #[source]
        source: ReleaseError,
    },
    /// A release archive does not match its manifest digest (bad input).
    #[error("artifact \"{name}\": {source}")]
    Digest {
        /// The artifact.
        name: String,
        /// The mismatch, naming the file.
        #[source]
        source: ReleaseError,
    },
    /// A build failed (infrastructure: the compiler, the disk, the network).
    #[error("building artifact \"{name}\" failed: {detail}")]
    Build {
        /// The artifact.
        name: String,
        /// What failed, with the tail of the compiler's output.
        detail: String,
    },
    /// The binary would not say its version.
    #[error("artifact \"{name}\": {} --version failed: {detail}", binary.display())]
    Version {
        /// The artifact.
        name: String,
        /// The binary.
        binary: PathBuf,
        /// Why.
        detail: String,
    },
}

impl ArtifactError {
    /// True when the cause is the input (matrix, manifest, archives), not the machine.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ArtifactError::NoWorkspace { .. }
                | ArtifactError::ManifestMissing { .. }
                | ArtifactError::ImageUnsupported { .. }
                | ArtifactError::FailpointNeedsWorkspace { .. }
                | ArtifactError::Release { .. }
                | ArtifactError::Digest { .. }
                | ArtifactError::Prebuilt { .. }
        )
    }
}

/// The repository rehearse builds from and writes reports into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repo {
    /// Its root (holds `Cargo.toml`, `artifacts/`, `awa-runtime/`).
    pub root: PathBuf,
}

impl Repo {
    /// The first of `starts` (or their ancestors) that is this workspace
    /// (has `awa-runtime/Cargo.toml`). Its `artifacts/manifest.toml` must
    /// exist: a copy without it is refused, never replaced by the
    /// checkout this binary was compiled in.
    pub fn find(starts: &[&Path]) -> Result<Repo, ArtifactError> {
        let is_tree = |d: &Path| d.join("awa-runtime").join("Cargo.toml").is_file();
        for start in starts {
            if let Some(root) = start.ancestors().find(|d| is_tree(d)) {
                if !root.join("artifacts").join("manifest.toml").is_file() {
                    return Err(ArtifactError::ManifestMissing {
                        root: root.to_owned(),
                    });
                }
                return Ok(Repo {
                    root: root.to_owned(),
                });
            }
        }
        Err(ArtifactError::NoWorkspace {
            start: starts
                .first()
                .map_or_else(PathBuf::new, |p| p.to_path_buf()),
        })
    }

    /// `artifacts/`.
    pub fn artifacts(&self) -> PathBuf {
        self.root.join("artifacts")
    }

    /// Where release builds are cached.
    pub fn release_work(&self) -> PathBuf {
        self.root.join("target").join("releases")
    }

    /// Where reports go.
    pub fn reports(&self) -> PathBuf {
        self.root.join("reports")
    }

    /// The git commit and dirty flag (empty commit when git is unavailable).
    pub fn git(&self) -> GitInfo {
        let run = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(&self.root)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        };
        match run(&["rev-parse", "HEAD"]) {
            Some(commit) => GitInfo {
                commit: commit.trim().to_owned(),
                dirty: run(&["status", "--porcelain"]).is_some_and(|s| !s.trim().is_empty()),
            },
            None => GitInfo::default(),
        }
    }
}

/// The distinct builds a set of artifacts needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum WorkspaceBuild {
    Plain,
    Failpoints,
}

/// Resolves `artifacts` (the union over the selected cells), reporting
/// progress as one line per action through `progress`: every source is
/// checked before anything is built, then each distinct binary is
/// obtained once and inspected.
pub fn resolve(
    repo: &Repo,
    artifacts: &BTreeMap<String, Artifact>,
    progress: &mut dyn FnMut(String),
) -> Result<Resolution, ArtifactError> {
    resolve_with(repo, artifacts, None, progress)
}

/// [`resolve`], with `prebuilt` (`run --workspace-binary`) taken as the
/// plain workspace build instead of building one: a candidate built
/// elsewhere, such as `rehearse mutate`'s build of a mutant. Failpoint
/// builds are still built here.
pub fn resolve_with(
    repo: &Repo,
    artifacts: &BTreeMap<String, Artifact>,
    prebuilt: Option<&Path>,
    progress: &mut dyn FnMut(String),
) -> Result<Resolution, ArtifactError> {
    let artifacts_dir = repo.artifacts();
    let manifest = check_sources(&artifacts_dir, artifacts)?;
    let expand_version = match &manifest {
        Some(m) => m.expand_migration_version,
        None => release::load_manifest(&artifacts_dir)
            .map(|m| m.expand_migration_version)
            .unwrap_or(DEFAULT_EXPAND_VERSION),
    };
    let mut workspace = BTreeMap::new();
    if let Some(binary) = prebuilt {
        if !binary.is_file() {
            return Err(ArtifactError::Prebuilt {
                binary: binary.to_owned(),
            });
        }
        workspace.insert(
            WorkspaceBuild::Plain,
            (
                binary.to_owned(),
                format!("prebuilt {} (--workspace-binary)", binary.display()),
            ),
        );
    }
    let mut resolved = BTreeMap::new();
    let git = repo.git();
    for (name, artifact) in artifacts {
        let obtained = match &artifact.source {
            ArtifactSource::Image(_) => unreachable!("refused by check_sources"),
            ArtifactSource::Release(version) => {
                let manifest = manifest.as_ref().expect("loaded for every release");
                obtain_release(repo, manifest, name, version, progress)?
            }
            ArtifactSource::Build(BuildSource::Workspace) => {
                obtain_workspace(repo, &git, &mut workspace, name, artifact, progress)?
            }
        };
        let r = inspect(name, artifact, obtained)?;
        progress(format!(
            "artifact {name}: awa {}, {}, sha256 {}",
            r.version,
            r.obtained,
            &r.digest[..12]
        ));
        resolved.insert(name.clone(), r);
    }
    Ok(Resolution {
        artifacts: resolved,
        git,
        expand_version,
    })
}

/// A binary obtained for an artifact: where it is, what it was made
/// from, and whether it was built or cached.
struct Obtained {
    binary: PathBuf,
    source: String,
    obtained: String,
}

/// Checks every source before anything is built: images are refused,
/// failpoints need the workspace build, each release is listed in the
/// manifest and its archive matches its digest. Returns the manifest
/// when a release needed it.
/// Every source of `artifacts` checked (the manifest, each archive's
/// SHA-256) without building anything: what must hold before any other
/// part of a run starts.
pub fn check(repo: &Repo, artifacts: &BTreeMap<String, Artifact>) -> Result<(), ArtifactError> {
    check_sources(&repo.artifacts(), artifacts).map(drop)
}

fn check_sources(
    artifacts_dir: &Path,
    artifacts: &BTreeMap<String, Artifact>,
) -> Result<Option<release::Manifest>, ArtifactError> {
    let mut manifest = None;
    for (name, artifact) in artifacts {
        match &artifact.source {
            ArtifactSource::Image(reference) => {
                return Err(ArtifactError::ImageUnsupported {
                    name: name.clone(),
                    reference: reference.to_string(),
                });
            }
            ArtifactSource::Release(version) => {
                if let Some(fp) = &artifact.failpoint {
                    return Err(ArtifactError::FailpointNeedsWorkspace {
                        name: name.clone(),
                        failpoint: fp.clone(),
                    });
                }
                if manifest.is_none() {
                    manifest = Some(release::load_manifest(artifacts_dir).map_err(|source| {
                        ArtifactError::Release {
                            name: name.clone(),
                            source,
                        }
                    })?);
                }
                let m = manifest.as_ref().expect("just loaded");
                let entry = m
                    .release(&version.to_string(), artifacts_dir)
                    .map_err(|source| ArtifactError::Release {
                        name: name.clone(),
                        source,
                    })?;
                release::verify(artifacts_dir, entry).map_err(|source| match source {
                    ReleaseError::Digest { .. } => ArtifactError::Digest {
                        name: name.clone(),
                        source,
                    },
                    other => ArtifactError::Release {
                        name: name.clone(),
                        source: other,
                    },
                })?;
            }
            ArtifactSource::Build(BuildSource::Workspace) => {}
        }
    }
    Ok(manifest)
}

/// Builds (or finds cached) the frozen release `version`, checked by
/// [`check_sources`].
fn obtain_release(
    repo: &Repo,
    manifest: &release::Manifest,
    name: &str,
    version: &Version,
    progress: &mut dyn FnMut(String),
) -> Result<Obtained, ArtifactError> {
    let artifacts_dir = repo.artifacts();
    let entry = manifest
        .release(&version.to_string(), &artifacts_dir)
        .expect("checked by check_sources");
    progress(format!("artifact {name}: release {version} ..."));
    let built =
        release::build(&artifacts_dir, entry, &repo.release_work()).map_err(
            |source| match source {
                ReleaseError::Digest { .. } => ArtifactError::Digest {
                    name: name.to_owned(),
                    source,
                },
                other => ArtifactError::Build {
                    name: name.to_owned(),
                    detail: other.to_string(),
                },
            },
        )?;
    Ok(Obtained {
        binary: built.binary,
        source: format!(
            "release {version} (artifacts/{}, sha256 {})",
            entry.archive, entry.sha256
        ),
        obtained: if built.cached { "cached" } else { "built" }.to_owned(),
    })
}

/// Builds the workspace's `awa` (plain or with failpoints), once per kind
/// for the whole run: `built` remembers what was built already.
fn obtain_workspace(
    repo: &Repo,
    git: &GitInfo,
    built: &mut BTreeMap<WorkspaceBuild, (PathBuf, String)>,
    name: &str,
    artifact: &Artifact,
    progress: &mut dyn FnMut(String),
) -> Result<Obtained, ArtifactError> {
    let kind = if artifact.failpoint.is_some() {
        WorkspaceBuild::Failpoints
    } else {
        WorkspaceBuild::Plain
    };
    let (binary, what) = match built.entry(kind) {
        std::collections::btree_map::Entry::Occupied(done) => done.get().clone(),
        std::collections::btree_map::Entry::Vacant(slot) => {
            let what = match kind {
                WorkspaceBuild::Plain => "workspace build",
                WorkspaceBuild::Failpoints => "workspace build with --features failpoints",
            };
            progress(format!(
                "artifact {name}: {what} (cargo build --release) ..."
            ));
            let binary = cargo_build(repo, kind).map_err(|detail| ArtifactError::Build {
                name: name.to_owned(),
                detail,
            })?;
            slot.insert((binary, what.to_owned())).clone()
        }
    };
    let mut source = what;
    if !git.commit.is_empty() {
        source.push_str(&format!(
            " at {}{}",
            git.short(),
            if git.dirty { " (dirty)" } else { "" }
        ));
    }
    Ok(Obtained {
        binary,
        source,
        obtained: "built".to_owned(),
    })
}

/// The digest and the self-reported version of an obtained binary.
fn inspect(name: &str, artifact: &Artifact, o: Obtained) -> Result<Resolved, ArtifactError> {
    let digest = release::sha256_file(&o.binary).map_err(|e| ArtifactError::Build {
        name: name.to_owned(),
        detail: e.to_string(),
    })?;
    let version = binary_version(&o.binary).map_err(|detail| ArtifactError::Version {
        name: name.to_owned(),
        binary: o.binary.clone(),
        detail,
    })?;
    Ok(Resolved {
        name: name.to_owned(),
        version,
        source: o.source,
        digest,
        obtained: o.obtained,
        binary: o.binary,
        failpoint: artifact.failpoint.clone(),
        image: None,
    })
}

// A String: its caller makes it ArtifactError::Build's detail, whatever went wrong.
fn cargo_build(repo: &Repo, kind: WorkspaceBuild) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--release", "-p", "awa-runtime", "--bin", "awa"])
        .current_dir(&repo.root);
    let target = match kind {
        WorkspaceBuild::Plain => match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => repo.root.join(dir),
            None => repo.root.join("target"),
        },
        WorkspaceBuild::Failpoints => {
            let dir = repo.root.join("target").join("failpoints");
            cmd.args(["--features", "failpoints", "--target-dir"])
                .arg(&dir);
            dir
        }
    };
    let out = cmd
        .output()
        .map_err(|e| format!("could not run {}: {e}", Path::new(&cargo).display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "cargo build --release -p awa-runtime{} exited with {}:\n{}",
            if kind == WorkspaceBuild::Failpoints {
                " --features failpoints"
            } else {
                ""
            },
            out.status,
            tail.join("\n")
        ));
    }
    let binary = target.join("release").join("awa");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "cargo succeeded but {} is missing",
            binary.display()
        ))
    }
}

/// The version a binary reports: the last word of `awa --version`.
// A String: its caller makes it ArtifactError::Version's detail, whatever went wrong.
pub fn binary_version(binary: &Path) -> Result<String, String> {
    let out = Command::new(binary)
        .arg("--version")
        .env_remove("AWA_DATABASE_URL")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_version_line(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        format!(
            "unexpected output {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The version of an `awa --version` line (`awa 0.6.2`): its last word,
/// when that is a semantic version.
pub fn parse_version_line(text: &str) -> Option<String> {
    let word = text.split_whitespace().last()?;
    semver::Version::parse(word).ok().map(|v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Version;

    #[test]
    fn version_lines() {
        assert_eq!(parse_version_line("awa 0.6.2\n").as_deref(), Some("0.6.2"));
        assert_eq!(parse_version_line("awa 0.7.0").as_deref(), Some("0.7.0"));
        assert_eq!(parse_version_line(""), None);
        assert_eq!(parse_version_line("awa\n"), None);
        assert_eq!(
            parse_version_line("awa 0.8.0-rc.1\n").as_deref(),
            Some("0.8.0-rc.1")
        );
        assert_eq!(parse_version_line("awa 0.7"), None);
        assert_eq!(parse_version_line("awa 7up"), None);
    }

    fn repo() -> Repo {
        Repo::find(&[Path::new(env!("CARGO_MANIFEST_DIR"))]).unwrap()
    }

    #[test]
    fn the_repository_is_found_from_inside_it() {
        let r = repo();
        assert!(r.artifacts().join("manifest.toml").is_file());
        let from_deep = Repo::find(&[&r.root.join("rehearsal").join("src")]).unwrap();
        assert_eq!(from_deep, r);
    }

    #[test]
    fn images_are_refused_before_anything_is_built() {
        let artifacts = BTreeMap::from([
            (
                "current".to_owned(),
                Artifact {
                    source: ArtifactSource::Build(BuildSource::Workspace),
                    failpoint: None,
                },
            ),
            (
                "previous".to_owned(),
                Artifact {
                    source: ArtifactSource::Image(crate::matrix::ImageSource {
                        reference: "registry:5000/awa-runtime:0.6.2".into(),
                        line: None,
                    }),
                    failpoint: None,
                },
            ),
        ]);
        let mut lines = Vec::new();
        let err = resolve(&repo(), &artifacts, &mut |l| lines.push(l)).unwrap_err();
        assert!(err.is_bad_input());
        assert!(
            err.to_string()
                .contains("image artifacts need --backend docker"),
            "{err}"
        );
        assert!(lines.is_empty(), "something started: {lines:?}");
    }

    #[test]
    fn an_unlisted_release_is_bad_input_naming_the_listed_ones() {
        let artifacts = BTreeMap::from([(
            "previous".to_owned(),
            Artifact {
                source: ArtifactSource::Release(Version::new(0, 5, 9)),
                failpoint: None,
            },
        )]);
        let err = resolve(&repo(), &artifacts, &mut |_| {}).unwrap_err();
        assert!(err.is_bad_input());
        let text = err.to_string();
        assert!(
            text.contains("release 0.5.9 is not listed") && text.contains("0.6.2"),
            "{text}"
        );
    }

    #[test]
    fn a_tampered_archive_is_bad_input_naming_the_file() {
        // A copy of the repository's artifacts with one byte of 0.6.2 flipped.
        let real = repo();
        let root = std::env::temp_dir().join(format!("rehearse-tamper-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("artifacts")).unwrap();
        std::fs::create_dir_all(root.join("awa-runtime")).unwrap();
        std::fs::write(root.join("awa-runtime/Cargo.toml"), "").unwrap();
        for entry in std::fs::read_dir(real.artifacts()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), root.join("artifacts").join(entry.file_name())).unwrap();
        }
        let archive = root.join("artifacts/awa-runtime-0.6.2.crate");
        let mut bytes = std::fs::read(&archive).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&archive, bytes).unwrap();
        let artifacts = BTreeMap::from([(
            "previous".to_owned(),
            Artifact {
                source: ArtifactSource::Release(Version::new(0, 6, 2)),
                failpoint: None,
            },
        )]);
        let tampered = Repo { root: root.clone() };
        let err = resolve(&tampered, &artifacts, &mut |_| {}).unwrap_err();
        assert!(matches!(err, ArtifactError::Digest { .. }), "{err}");
        assert!(err.is_bad_input());
        assert!(
            err.to_string().contains(&archive.display().to_string()),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
