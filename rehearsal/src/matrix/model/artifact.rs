//! An artifact as the validated matrix holds it: where its binary or image
//! comes from, what is armed in it, and the release version it is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One runtime version the rehearsal can start: where it comes from, what is armed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Where the binary comes from.
    pub source: ArtifactSource,
    /// A seeded defect armed in this build (a "defective candidate"), if any.
    pub failpoint: Option<String>,
}

/// The single source of an artifact's binary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactSource {
    /// A frozen release archive listed in `artifacts/manifest.toml`.
    Release(Version),
    /// Built from this repository.
    Build(BuildSource),
    /// A container image, pulled by digest as production would.
    Image(ImageSource),
}

/// An image artifact: a reference (a tag or a digest), or a repository
/// plus a release line resolved in its registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSource {
    /// As written (`127.0.0.1:5000/awa-runtime`, `...@sha256:...`).
    pub reference: String,
    /// The release line to resolve among the registry's tags, if any.
    pub line: Option<ImageLine>,
}

/// `line = "0.6"`, `floor = "0.6.2"`, `prerelease = false`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageLine {
    /// The line's major version.
    pub major: u64,
    /// The line's minor version.
    pub minor: u64,
    /// The oldest acceptable release on the line.
    pub floor: Option<Version>,
    /// Whether a pre-release tag (`0.6.3-rc.1`) may be picked.
    pub prerelease: bool,
}

impl fmt::Display for ImageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reference)?;
        if let Some(line) = &self.line {
            write!(f, " line {}.{}", line.major, line.minor)?;
            if let Some(floor) = &line.floor {
                write!(f, " floor {floor}")?;
            }
            if line.prerelease {
                f.write_str(" with pre-releases")?;
            }
        }
        Ok(())
    }
}

/// What a `build = "..."` source builds; only the workspace today.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildSource {
    /// The workspace's `awa-runtime` crate.
    Workspace,
}

impl fmt::Display for ArtifactSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArtifactSource::Release(v) => write!(f, "release {v}"),
            ArtifactSource::Build(BuildSource::Workspace) => f.write_str("workspace build"),
            ArtifactSource::Image(r) => write!(f, "image {r}"),
        }
    }
}

impl fmt::Display for Artifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(fp) = &self.failpoint {
            write!(f, " with failpoint {fp}")?;
        }
        Ok(())
    }
}

/// A release version `X.Y.Z` (no pre-release or build suffix: releases are
/// plain), ordered by the semver rules.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(semver::Version);

impl Version {
    /// `major.minor.patch`.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Version(semver::Version::new(major, minor, patch))
    }

    /// The version under the semver rules (to compare with registry tags).
    pub fn as_semver(&self) -> &semver::Version {
        &self.0
    }
}

impl FromStr for Version {
    type Err = &'static str;

    /// Accepts exactly three dot-separated decimal numbers without leading zeros.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const PLAIN: &str = "a release version is three plain numbers, like \"0.6.2\"";
        if s.split('.').count() != 3 {
            return Err("a release version has three numbers, like \"0.6.2\"");
        }
        match semver::Version::parse(s) {
            Ok(v) if v.pre.is_empty() && v.build.is_empty() => Ok(Version(v)),
            Ok(_) => Err(PLAIN),
            Err(_) if s.split('.').any(|p| p.len() > 1 && p.starts_with('0')) => {
                Err("version numbers have no leading zeros")
            }
            Err(_) => Err(PLAIN),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}
