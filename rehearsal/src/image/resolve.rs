//! Artifacts as images, for the docker backend: every binary artifact
//! becomes a local image (built or reused), and every image artifact is
//! resolved in its registry and pulled by digest. Each is then probed
//! (`awa --version` in a container), which gives its version and refuses
//! an image whose binary does not start.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use awa_harness::release::Manifest;

use super::build::{self, BuildRequest};
use super::credentials;
use super::registry::{LineQuery, Registry, RegistryError};
use super::{Engine, ImageError, ImageInfo, REPOSITORY, Reference, pull, start_check};
use crate::artifacts::{GitInfo, Resolved};
use crate::matrix::{Artifact, ArtifactSource, BuildSource, ImageLine, ImageSource};

/// The image of a binary artifact: its tag, labels and reuse rule.
pub fn build_request(
    name: &str,
    artifact: &Artifact,
    resolved: &Resolved,
    manifest: Option<&Manifest>,
    git: &GitInfo,
) -> BuildRequest {
    let binary_digest = format!("sha256:{}", resolved.digest);
    let base = BuildRequest {
        artifact: name.to_owned(),
        binary: resolved.binary.clone(),
        repository: REPOSITORY.to_owned(),
        tag: String::new(),
        version: resolved.version.clone(),
        source: resolved.source.clone(),
        source_digest: binary_digest.clone(),
        binary_digest,
        revision: None,
        mutable_tag: false,
    };
    match &artifact.source {
        ArtifactSource::Release(version) => {
            let entry =
                manifest.and_then(|m| m.releases.iter().find(|r| r.version == version.to_string()));
            let (repository, tag) = entry
                .and_then(|e| e.image.split_once(':'))
                .map(|(r, t)| (r.to_owned(), t.to_owned()))
                .unwrap_or_else(|| (REPOSITORY.to_owned(), version.to_string()));
            BuildRequest {
                repository,
                tag,
                source: entry.map_or_else(
                    || format!("release {version}"),
                    |e| format!("artifacts/{}", e.archive),
                ),
                source_digest: entry.map_or(base.source_digest.clone(), |e| {
                    format!("sha256:{}", e.sha256)
                }),
                ..base
            }
        }
        ArtifactSource::Build(BuildSource::Workspace) | ArtifactSource::Image(_) => {
            let mut tag = resolved.version.clone();
            if git.commit.is_empty() {
                tag.push_str("-local");
            } else {
                tag.push_str(&format!("-{}", git.short()));
            }
            if git.dirty {
                tag.push_str("-dirty");
            }
            if artifact.failpoint.is_some() {
                tag.push_str("-failpoints");
            }
            BuildRequest {
                tag,
                source: if git.commit.is_empty() {
                    "workspace".to_owned()
                } else {
                    format!(
                        "workspace at {}{}",
                        git.commit,
                        if git.dirty { " (dirty)" } else { "" }
                    )
                },
                revision: Some(git.commit.clone()).filter(|c| !c.is_empty()),
                // The same commit built in two checkouts is two binaries
                // (paths and metadata hashes differ), so the current
                // build's tag follows the binary; release tags never move.
                mutable_tag: true,
                ..base
            }
        }
    }
}

/// `image` is the name asked for (`127.0.0.1:5000/awa-runtime`).
fn registry_error(artifact: &str, registry: &str, image: &str, e: RegistryError) -> ImageError {
    match e {
        RegistryError::Tampered {
            reference,
            announced,
            actual,
        } => ImageError::DigestMismatch {
            artifact: artifact.to_owned(),
            reference: if reference.starts_with("sha256:") {
                format!("{image}@{reference}")
            } else {
                format!("{image}:{reference}")
            },
            expected: announced,
            actual,
        },
        e if e.is_infrastructure() => ImageError::Registry {
            artifact: artifact.to_owned(),
            registry: registry.to_owned(),
            message: e.to_string(),
        },
        e => ImageError::Selection {
            artifact: artifact.to_owned(),
            message: format!("registry {registry}: {e}"),
        },
    }
}

/// Finds the digest an image source names and pulls it by that digest.
pub async fn from_registry(
    engine: &Engine,
    name: &str,
    source: &ImageSource,
    progress: &mut dyn FnMut(String),
) -> Result<(ImageInfo, String), ImageError> {
    let Some(found) = locate(name, source, progress).await? else {
        return local_image(engine, name, source).await;
    };
    let info = pull::by_digest(
        engine,
        name,
        &found.wanted,
        &found.digest,
        found.credentials.as_ref(),
        progress,
    )
    .await?;
    Ok((
        info,
        format!(
            "image {} ({}), digest {}",
            found.wanted, found.how, found.digest
        ),
    ))
}

/// Asks the registry of every image artifact in `wanted` for what it
/// serves (tags, the digest to pull), pulling nothing: run before any
/// build, so an unreachable registry, a wrong repository or a line with
/// no release costs no build.
pub async fn check_registries(
    wanted: &BTreeMap<String, Artifact>,
    progress: &mut dyn FnMut(String),
) -> Result<(), ImageError> {
    for (name, artifact) in wanted {
        if let ArtifactSource::Image(source) = &artifact.source
            && let Some(found) = locate(name, source, progress).await?
        {
            progress(format!(
                "artifact {name}: {} ({}) answers with digest {}",
                found.wanted, found.how, found.digest
            ));
        }
    }
    Ok(())
}

/// What a registry serves for an image source.
struct Located {
    /// The reference, with the tag the lookup chose.
    wanted: Reference,
    /// The digest to pull.
    digest: String,
    /// How it was found (by line, tag or digest).
    how: &'static str,
    credentials: Option<credentials::Credentials>,
}

/// The digest an image source names, from its registry; `None` for a
/// reference with no registry (a local image).
async fn locate(
    name: &str,
    source: &ImageSource,
    progress: &mut dyn FnMut(String),
) -> Result<Option<Located>, ImageError> {
    let reference = Reference::parse(&source.reference).map_err(|why| ImageError::Selection {
        artifact: name.to_owned(),
        message: why,
    })?;
    let Some(host) = reference.registry.clone() else {
        return Ok(None);
    };
    let creds = credentials::lookup(&host);
    let lookup = Lookup {
        registry: Registry::new(&host, creds.clone()),
        reference: &reference,
        artifact: name,
        host: &host,
    };
    let (tag, digest, how) = if let Some(line) = &source.line {
        let (tag, digest) = lookup.by_line(line, progress).await?;
        (Some(tag), digest, "resolved by line")
    } else if let Some(pinned) = &reference.digest {
        let served = lookup.by_digest(pinned, &source.reference).await?;
        (reference.tag.clone(), served, "pinned by digest")
    } else {
        let tag = reference
            .tag
            .clone()
            .expect("validation: a tag, a digest or a line");
        let digest = lookup.digest_of(&tag).await?;
        (Some(tag), digest, "resolved by tag")
    };
    let mut wanted = reference.clone();
    wanted.tag = tag;
    Ok(Some(Located {
        wanted,
        digest,
        how,
        credentials: creds,
    }))
}

/// A reference with no registry: the engine must already have it.
async fn local_image(
    engine: &Engine,
    name: &str,
    source: &ImageSource,
) -> Result<(ImageInfo, String), ImageError> {
    let found = super::inspect(engine, &source.reference)
        .await?
        .ok_or_else(|| ImageError::Selection {
            artifact: name.to_owned(),
            message: format!(
                "no local image {}; build it (rehearse artifacts build) or name a registry",
                source.reference
            ),
        })?;
    Ok((
        found.info(&source.reference),
        format!("local image {}", source.reference),
    ))
}

/// An image artifact's reference, looked up in its registry.
struct Lookup<'a> {
    registry: Registry,
    reference: &'a Reference,
    artifact: &'a str,
    host: &'a str,
}

impl Lookup<'_> {
    fn fail(&self, e: RegistryError) -> ImageError {
        registry_error(self.artifact, self.host, &self.reference.name(), e)
    }

    /// The digest the registry serves for `tag` (or a digest).
    async fn digest_of(&self, tag: &str) -> Result<String, ImageError> {
        self.registry
            .manifest_digest(&self.reference.repository, tag)
            .await
            .map_err(|e| self.fail(e))
    }

    /// The newest tag of the release line (at or above its floor), and its digest.
    async fn by_line(
        &self,
        line: &ImageLine,
        progress: &mut dyn FnMut(String),
    ) -> Result<(String, String), ImageError> {
        let (name, reference, host) = (self.artifact, self.reference, self.host);
        let tags = self
            .registry
            .tags(&reference.repository)
            .await
            .map_err(|e| self.fail(e))?;
        let query = LineQuery {
            line: (line.major, line.minor),
            floor: line.floor.as_ref().map(|f| f.as_semver().clone()),
            prerelease: line.prerelease,
        };
        let tag = super::registry::select(&tags, &query).ok_or_else(|| ImageError::Selection {
            artifact: name.to_owned(),
            message: format!(
                "no release on line {}.{}{} among the tags of {} ({}); publish one (rehearse artifacts publish --registry {host}) or change line/floor",
                line.major,
                line.minor,
                line.floor.as_ref().map(|f| format!(" at or above {f}")).unwrap_or_default(),
                reference.name(),
                if tags.is_empty() { "none".to_owned() } else { tags.join(", ") },
            ),
        })?;
        progress(format!(
            "artifact {name}: {} line {}.{} -> tag {tag}",
            reference.name(),
            line.major,
            line.minor
        ));
        let digest = self.digest_of(&tag).await?;
        Ok((tag, digest))
    }

    /// The digest the registry serves for `pinned`, which must be `pinned`
    /// itself (`asked` is the reference as written).
    async fn by_digest(&self, pinned: &str, asked: &str) -> Result<String, ImageError> {
        let served = self.digest_of(pinned).await?;
        if served != pinned {
            return Err(ImageError::DigestMismatch {
                artifact: self.artifact.to_owned(),
                reference: asked.to_owned(),
                expected: pinned.to_owned(),
                actual: served,
            });
        }
        Ok(served)
    }
}

/// Every artifact of a run as an image: binary artifacts imported (or
/// reused), image artifacts pulled; each probed. `resolved` holds the
/// binary artifacts already built; image artifacts are added to it.
pub async fn images_for_run(
    engine: &Engine,
    wanted: &BTreeMap<String, Artifact>,
    resolved: &mut BTreeMap<String, Resolved>,
    manifest: Option<&Manifest>,
    git: &GitInfo,
    probe_labels: HashMap<String, String>,
    progress: &mut dyn FnMut(String),
) -> Result<(), ImageError> {
    // Binary artifacts sharing a binary share an image.
    let mut built: BTreeMap<String, ImageInfo> = BTreeMap::new();
    for (name, artifact) in wanted {
        if let ArtifactSource::Image(source) = &artifact.source {
            progress(format!("artifact {name}: image {source} ..."));
            let (info, how) = from_registry(engine, name, source, progress).await?;
            let out = start_check::version(engine, name, &info, probe_labels.clone()).await?;
            let version = crate::artifacts::parse_version_line(&out).ok_or_else(|| {
                ImageError::WontStart {
                    artifact: name.clone(),
                    reference: info.reference.clone(),
                    detail: format!("unexpected --version output {out:?}"),
                }
            })?;
            progress(format!(
                "artifact {name}: awa {version}, {}, {}",
                info.obtained,
                info.digest.as_deref().unwrap_or(&info.id)
            ));
            resolved.insert(
                name.clone(),
                Resolved {
                    name: name.clone(),
                    version,
                    source: how,
                    digest: info.digest.clone().unwrap_or_else(|| info.id.clone()),
                    obtained: info.obtained.to_string(),
                    binary: PathBuf::new(),
                    failpoint: artifact.failpoint.clone(),
                    image: Some(info),
                },
            );
            continue;
        }
        let entry = resolved
            .get(name)
            .cloned()
            .ok_or_else(|| ImageError::Engine {
                artifact: name.clone(),
                action: "making its image",
                detail: "its binary was not resolved".into(),
            })?;
        let request = build_request(name, artifact, &entry, manifest, git);
        let info = match built.get(&request.reference()) {
            Some(info) => info.clone(),
            None => {
                progress(format!(
                    "artifact {name}: image {} ...",
                    request.reference()
                ));
                let info = build::ensure(engine, &request).await?;
                start_check::version(engine, name, &info, probe_labels.clone()).await?;
                progress(format!(
                    "artifact {name}: image {} {}, id {}, {:.1} MB",
                    info.reference,
                    info.obtained,
                    &info.id,
                    info.size as f64 / 1e6
                ));
                built.insert(request.reference(), info.clone());
                info
            }
        };
        if let Some(r) = resolved.get_mut(name) {
            r.image = Some(info);
        }
    }
    Ok(())
}
