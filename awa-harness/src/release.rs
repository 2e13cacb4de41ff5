//! Frozen releases: `artifacts/manifest.toml` lists each released archive
//! (the `.crate` that `cargo package` produced) with its SHA-256. A
//! release is verified against its digest, unpacked, and built with
//! `cargo build --release --locked` against the lock file it carries, so
//! the archive (not today's crate versions) decides what the old binary
//! is. Builds are cached by digest.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The manifest of released archives.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The schema version of the 0.7 expand migration, fixed when the 0.6
    /// line was cut so that 0.6.2 can recognise it.
    pub expand_migration_version: i32,
    /// Every release, oldest first.
    #[serde(rename = "release")]
    pub releases: Vec<Release>,
}

/// One released archive.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    pub version: String,
    /// File name under `artifacts/`.
    pub archive: String,
    /// Lowercase hex SHA-256 of the archive.
    pub sha256: String,
    /// The image tag the docker backend gives it.
    pub image: String,
    /// One line on what the release is for.
    pub purpose: String,
}

/// A release binary ready to run.
#[derive(Debug, Clone)]
pub struct Built {
    pub version: String,
    pub binary: PathBuf,
    pub sha256: String,
    /// True when the build came from the cache.
    pub cached: bool,
}

/// What can go wrong with a release.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid manifest: {detail}")]
    Manifest { path: PathBuf, detail: String },
    #[error("release {version} is not listed in {manifest}; listed: {listed}")]
    Unknown {
        version: String,
        manifest: PathBuf,
        listed: String,
    },
    #[error(
        "{path} does not match its manifest digest: expected sha256 {expected}, found {actual}; released archives are never edited, so either the manifest entry or the archive was changed: restore artifacts/manifest.toml to the digest the release was cut with, or, if this is a new archive, cut a new patch release with its own manifest entry"
    )]
    Digest {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("building release {version} from {archive} failed ({step}): {detail}")]
    Build {
        version: String,
        archive: PathBuf,
        step: &'static str,
        detail: String,
    },
}

/// Read `artifacts/manifest.toml`.
pub fn load_manifest(artifacts: &Path) -> Result<Manifest, ReleaseError> {
    let path = artifacts.join("manifest.toml");
    let text = std::fs::read_to_string(&path).map_err(|source| ReleaseError::Read {
        path: path.clone(),
        source,
    })?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| ReleaseError::Manifest {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    if let Some(twice) = listed_twice(&manifest) {
        return Err(ReleaseError::Manifest {
            path,
            detail: format!(
                "release {twice} is listed more than once; keep the entry whose sha256 matches artifacts/awa-runtime-{twice}.crate"
            ),
        });
    }
    Ok(manifest)
}

/// The first version with more than one `[[release]]` entry: which of two
/// digests is the release would otherwise depend on the order of lookup.
fn listed_twice(manifest: &Manifest) -> Option<&str> {
    let mut seen = std::collections::BTreeSet::new();
    manifest
        .releases
        .iter()
        .map(|r| r.version.as_str())
        .find(|v| !seen.insert(*v))
}

impl Manifest {
    /// The entry of `version`.
    pub fn release(&self, version: &str, artifacts: &Path) -> Result<&Release, ReleaseError> {
        self.releases
            .iter()
            .find(|r| r.version == version)
            .ok_or_else(|| ReleaseError::Unknown {
                version: version.to_string(),
                manifest: artifacts.join("manifest.toml"),
                listed: self
                    .releases
                    .iter()
                    .map(|r| r.version.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// Lowercase hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String, ReleaseError> {
    let bytes = std::fs::read(path).map_err(|source| ReleaseError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(sha256_hex(&bytes))
}

/// Lowercase hex SHA-256 of `bytes`: the one digest format of the
/// workspace (manifest digests, binaries, migrations, state dumps).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// Check the archive against the manifest's digest; a mismatch is an
/// error, never a warning.
pub fn verify(artifacts: &Path, r: &Release) -> Result<PathBuf, ReleaseError> {
    let path = artifacts.join(&r.archive);
    let actual = sha256_file(&path)?;
    if actual != r.sha256 {
        return Err(ReleaseError::Digest {
            path,
            expected: r.sha256.clone(),
            actual,
        });
    }
    Ok(path)
}

/// Verify, unpack and build release `r` under `work` (a directory the
/// caller owns, e.g. `target/releases`), reusing a cached build of the
/// same digest. Builds of different releases share one cargo target
/// directory (dependencies compile once) and take turns under a file lock
/// so each copies out its own binary.
pub fn build(artifacts: &Path, r: &Release, work: &Path) -> Result<Built, ReleaseError> {
    let archive = verify(artifacts, r)?;
    let fail = |step: &'static str, detail: String| ReleaseError::Build {
        version: r.version.clone(),
        archive: archive.clone(),
        step,
        detail,
    };
    let cached_bin = work.join("bin").join(&r.sha256[..16]).join("awa");
    let built = |binary: PathBuf, cached: bool| Built {
        version: r.version.clone(),
        binary,
        sha256: r.sha256.clone(),
        cached,
    };
    if cached_bin.is_file() {
        return Ok(built(cached_bin, true));
    }
    std::fs::create_dir_all(work)
        .map_err(|e| fail("creating the release work directory", e.to_string()))?;
    let _lock = BuildLock::take(&work.join("build.lock"))
        .map_err(|e| fail("locking the release work directory", e.to_string()))?;
    if cached_bin.is_file() {
        // Built by someone else while we waited for the lock.
        return Ok(built(cached_bin, true));
    }
    let src = work.join("src").join(&r.sha256[..16]);
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src)
        .map_err(|e| fail("creating the unpack directory", e.to_string()))?;
    unpack(&archive, &src).map_err(|e| fail("unpacking", e.to_string()))?;
    let manifest = src
        .join(format!("awa-runtime-{}", r.version))
        .join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--locked",
            "--bin",
            "awa",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(work.join("target"))
        .env_remove("RUSTFLAGS")
        .output()
        .map_err(|e| fail("running cargo", e.to_string()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(fail(
            "cargo build --release --locked",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        ));
    }
    let fresh = work.join("target").join("release").join("awa");
    let dir = cached_bin.parent().expect("has a parent");
    std::fs::create_dir_all(dir)
        .map_err(|e| fail("creating the cache directory", e.to_string()))?;
    // Copy then rename, so a concurrent reader never sees half a binary.
    let tmp = dir.join(format!("awa.tmp.{}", std::process::id()));
    std::fs::copy(&fresh, &tmp).map_err(|e| fail("caching the binary", e.to_string()))?;
    std::fs::rename(&tmp, &cached_bin).map_err(|e| fail("caching the binary", e.to_string()))?;
    Ok(built(cached_bin, false))
}

/// Unpacks a `.crate` (a gzipped tar) into `dest`. `tar` refuses entries
/// that would land outside `dest` (absolute paths, `..`).
fn unpack(archive: &Path, dest: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(archive)?;
    tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file))).unpack(dest)
}

/// An exclusive file lock held until dropped (released by the kernel when
/// the file closes, also if the process dies).
struct BuildLock(
    #[expect(
        dead_code,
        reason = "held for its Drop, which closes the file and releases the lock"
    )]
    std::fs::File,
);

impl BuildLock {
    fn take(path: &Path) -> std::io::Result<BuildLock> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        f.lock()?;
        Ok(BuildLock(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_in(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("awa-manifest-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.toml"), text).unwrap();
        dir
    }

    const ENTRY: &str = "[[release]]\nversion = \"0.6.2\"\narchive = \"awa-runtime-0.6.2.crate\"\nsha256 = \"00\"\nimage = \"awa-runtime:0.6.2\"\npurpose = \"x\"\n";

    #[test]
    fn a_release_listed_twice_is_refused_naming_it() {
        let dir = manifest_in(
            "twice",
            &format!("expand_migration_version = 3\n{ENTRY}{ENTRY}"),
        );
        let err = load_manifest(&dir).unwrap_err().to_string();
        assert!(
            err.contains("release 0.6.2 is listed more than once"),
            "{err}"
        );
        let dir = manifest_in("once", &format!("expand_migration_version = 3\n{ENTRY}"));
        assert_eq!(load_manifest(&dir).unwrap().releases.len(), 1);
    }
}
