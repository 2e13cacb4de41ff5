//! `rehearse artifacts build|publish|list|prune`: the runtime's images outside a run,
//! a subcommand over `image`'s stage (and the docker fleet that removes
//! what a run left), so it sits with the other subcommands.
//!
//! `build` makes (or reuses) the image of every release listed in
//! `artifacts/manifest.toml` (each archive SHA-256-checked and built by
//! `awa_harness::release`) and of the current workspace build. `publish`
//! does the release images and pushes them to a registry, printing the
//! digest the registry serves for each. `list` shows the local runtime
//! images and, with `--registry`, the registry's tags with their digests
//! and the release each one is. `prune` removes the images rehearse made
//! or pulled (they carry its source-digest label), keeping the release
//! images of the manifest unless asked.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use bollard::models::ImageSummary;
use bollard::query_parameters::ListImagesOptions;

use crate::Error;
use crate::artifacts::{self, Repo};
use crate::fleet::{DockerFleet, Fleet};
use crate::image::registry::{Registry, RegistryError};
use crate::image::{
    Engine, ImageError, ImageInfo, REPOSITORY, credentials, labels, publish, resolve,
};
use crate::matrix::{Artifact, ArtifactSource, BuildSource, CURRENT, Version};
use crate::vocab::RunOutcome;

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Harness(format!("could not start the async runtime: {e}")))
}

/// The artifacts `build` makes images of: every release, plus the current build.
fn every_artifact(repo: &Repo, with_current: bool) -> Result<BTreeMap<String, Artifact>, Error> {
    let manifest = awa_harness::release::load_manifest(&repo.artifacts()).map_err(|source| {
        artifacts::ArtifactError::Release {
            name: "manifest".into(),
            source,
        }
    })?;
    let mut wanted = BTreeMap::new();
    for release in &manifest.releases {
        let version: Version = release.version.parse().map_err(|why| {
            Error::Harness(format!(
                "artifacts/manifest.toml lists version {:?}, which is not a release version: {why}",
                release.version
            ))
        })?;
        wanted.insert(
            format!("release_{}", release.version.replace('.', "_")),
            Artifact {
                source: ArtifactSource::Release(version),
                failpoint: None,
            },
        );
    }
    if with_current {
        wanted.insert(
            CURRENT.to_owned(),
            Artifact {
                source: ArtifactSource::Build(BuildSource::Workspace),
                failpoint: None,
            },
        );
    }
    Ok(wanted)
}

/// Builds (or reuses) the images; returns them by artifact name.
fn build_images(
    repo: &Repo,
    runtime: &tokio::runtime::Runtime,
    engine: &Engine,
    with_current: bool,
    err: &mut dyn Write,
) -> Result<BTreeMap<String, (String, ImageInfo)>, Error> {
    let wanted = every_artifact(repo, with_current)?;
    let mut progress = |line: String| {
        let _ = writeln!(err, "{line}");
    };
    let mut resolution = artifacts::resolve(repo, &wanted, &mut progress)?;
    let manifest = awa_harness::release::load_manifest(&repo.artifacts()).ok();
    let fleet = DockerFleet::new(
        engine.clone(),
        &format!("artifacts-{}", std::process::id()),
        false,
    );
    let made = runtime.block_on(resolve::images_for_run(
        engine,
        &wanted,
        &mut resolution.artifacts,
        manifest.as_ref(),
        &resolution.git,
        fleet.run_labels("", "probe"),
        &mut progress,
    ));
    let _ = runtime.block_on(fleet.shutdown());
    made?;
    Ok(resolution
        .artifacts
        .into_iter()
        .filter_map(|(name, r)| Some((name, (r.version, r.image?))))
        .collect())
}

fn print_image(out: &mut dyn Write, info: &ImageInfo) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<36} {:<7} {}  {:>6.1} MB{}",
        info.reference,
        info.obtained.to_string(),
        &info.id[..info.id.len().min(19)],
        info.size as f64 / 1e6,
        info.build_ms
            .map(|ms| format!("  in {:.1} s", ms as f64 / 1000.0))
            .unwrap_or_default()
    )
}

/// `rehearse artifacts build`.
pub fn build(repo: &Repo, out: &mut dyn Write, err: &mut dyn Write) -> Result<RunOutcome, Error> {
    let runtime = runtime()?;
    let engine = runtime.block_on(Engine::connect())?;
    writeln!(err, "{}", engine.describe())?;
    let images = build_images(repo, &runtime, &engine, true, err)?;
    for (_, info) in images.values() {
        print_image(out, info)?;
    }
    Ok(RunOutcome::AllMet)
}

/// `rehearse artifacts publish --registry HOST:PORT`.
pub fn publish(
    repo: &Repo,
    registry: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    check_registry(registry)?;
    let runtime = runtime()?;
    let creds = credentials::lookup(registry);
    // Before any image is built or probed: the registry answers (a new
    // registry has no repository yet, which is an answer).
    match runtime.block_on(Registry::new(registry, creds.clone()).tags(REPOSITORY)) {
        Ok(_) | Err(RegistryError::NotFound { .. }) => {}
        Err(e) => {
            return Err(ImageError::Registry {
                artifact: REPOSITORY.to_owned(),
                registry: registry.to_owned(),
                message: format!("{e}; nothing was built or tagged"),
            }
            .into());
        }
    }
    let engine = runtime.block_on(Engine::connect())?;
    writeln!(err, "{}", engine.describe())?;
    let images = build_images(repo, &runtime, &engine, false, err)?;
    for (version, info) in images.values() {
        let tag = info
            .tag
            .as_deref()
            .and_then(|t| t.rsplit_once(':'))
            .map_or(version.as_str(), |(_, t)| t)
            .to_owned();
        let mut progress = |line: String| {
            let _ = writeln!(err, "{line}");
        };
        let pushed = runtime.block_on(publish::push(
            &engine,
            registry,
            &tag,
            creds.as_ref(),
            &mut progress,
        ))?;
        writeln!(out, "{} {}", pushed.reference, pushed.digest)?;
    }
    Ok(RunOutcome::AllMet)
}

/// `rehearse artifacts list [--registry HOST:PORT]`.
pub fn list(
    repo: &Repo,
    registry: Option<&str>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    if let Some(r) = registry {
        check_registry(r)?;
    }
    let runtime = runtime()?;
    let engine = runtime.block_on(Engine::connect())?;
    writeln!(err, "{}", engine.describe())?;
    let images = rehearsal_images(&runtime, &engine)?;
    let local_digests = list_local(&images, out)?;
    let Some(host) = registry else {
        return Ok(RunOutcome::AllMet);
    };
    list_registry(repo, host, &runtime, &local_digests, out)?;
    Ok(RunOutcome::AllMet)
}

/// The images rehearse built or pulled: those with its source-digest label.
fn rehearsal_images(
    runtime: &tokio::runtime::Runtime,
    engine: &Engine,
) -> Result<Vec<ImageSummary>, Error> {
    let options = ListImagesOptions {
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![labels::SOURCE_DIGEST.to_owned()],
        )])),
        ..Default::default()
    };
    runtime
        .block_on(engine.docker.list_images(Some(options)))
        .map_err(|e| Error::Harness(format!("listing images failed: {e}")))
}

/// Lists the local images, one a line; returns each registry digest they
/// were pulled or pushed by, with the image's tags.
fn list_local(
    images: &[ImageSummary],
    out: &mut dyn Write,
) -> Result<Vec<(String, String)>, Error> {
    writeln!(out, "local images:")?;
    if images.is_empty() {
        writeln!(out, "  (none; rehearse artifacts build makes them)")?;
    }
    let mut local_digests: Vec<(String, String)> = Vec::new();
    for image in images {
        let label = |k: &str| image.labels.get(k).cloned().unwrap_or_default();
        let tags = if image.repo_tags.is_empty() {
            "(untagged)".to_owned()
        } else {
            image.repo_tags.join(", ")
        };
        writeln!(
            out,
            "  {tags}  {}  version {}  source {}  source digest {}",
            &image.id[..image.id.len().min(19)],
            label(labels::VERSION),
            label(labels::SOURCE),
            label(labels::SOURCE_DIGEST),
        )?;
        for d in &image.repo_digests {
            if let Some((_, digest)) = d.split_once('@') {
                local_digests.push((digest.to_owned(), tags.clone()));
            }
        }
    }
    Ok(local_digests)
}

/// Lists the registry's tags of the runtime's repository: each one's
/// digest, the release it is, and the local image of that digest.
fn list_registry(
    repo: &Repo,
    host: &str,
    runtime: &tokio::runtime::Runtime,
    local_digests: &[(String, String)],
    out: &mut dyn Write,
) -> Result<(), Error> {
    let manifest = awa_harness::release::load_manifest(&repo.artifacts()).ok();
    let client = Registry::new(host, credentials::lookup(host));
    let registry_error = |e: RegistryError| {
        Error::Image(ImageError::Registry {
            artifact: REPOSITORY.to_owned(),
            registry: host.to_owned(),
            message: e.to_string(),
        })
    };
    let tags = runtime
        .block_on(client.tags(REPOSITORY))
        .map_err(registry_error)?;
    writeln!(out, "registry {host}/{REPOSITORY}:")?;
    if tags.is_empty() {
        writeln!(
            out,
            "  (no tags; rehearse artifacts publish --registry {host} pushes the releases)"
        )?;
    }
    for tag in tags {
        let digest = runtime
            .block_on(client.manifest_digest(REPOSITORY, &tag))
            .map_err(registry_error)?;
        let release = manifest
            .as_ref()
            .and_then(|m| m.releases.iter().find(|r| r.version == tag))
            .map_or_else(
                || "not a listed release".to_owned(),
                |r| format!("release {} (artifacts/{})", r.version, r.archive),
            );
        let local = local_digests
            .iter()
            .find(|(d, _)| *d == digest)
            .map(|(_, tags)| format!(", local {tags}"))
            .unwrap_or_default();
        writeln!(out, "  {tag}  {digest}  {release}{local}")?;
    }
    Ok(())
}

fn check_registry(registry: &str) -> Result<(), Error> {
    crate::image::registry::check_host(registry).map_err(|message| Error::BadFlag {
        flag: "--registry",
        message,
    })
}

/// `name:tag` without its tag (`127.0.0.1:5000/awa-runtime:0.6.2` -> `127.0.0.1:5000/awa-runtime`).
fn repository_of(tag: &str) -> &str {
    match tag.rsplit_once(':') {
        Some((repo, t)) if !t.contains('/') => repo,
        _ => tag,
    }
}

/// What a prune does with one local reference.
#[derive(Debug, PartialEq, Eq)]
enum PruneChoice {
    /// A release image of the manifest (kept unless `--all`).
    Release,
    /// Another repository than `--repository`.
    Elsewhere,
    /// Removed.
    Remove,
}

/// Whether to remove `tag` (`None`: an untagged image, named by its id).
fn prune_choice(
    tag: Option<&str>,
    releases: &[String],
    all: bool,
    repository: Option<&str>,
) -> PruneChoice {
    match tag {
        Some(t) if repository.is_some_and(|r| repository_of(t) != r) => PruneChoice::Elsewhere,
        Some(t) if !all && releases.iter().any(|r| r == t) => PruneChoice::Release,
        // An untagged image belongs to no repository: only a prune of them all takes it.
        None if repository.is_some() => PruneChoice::Elsewhere,
        _ => PruneChoice::Remove,
    }
}

/// `rehearse artifacts prune [--all] [--repository NAME]`: the images
/// rehearse built or pulled pile up on the engine run after run (every
/// commit of the current build is a tag); this removes them, but the
/// release images of the manifest (unless `--all`). An image a container
/// still uses (another run on the same engine) is left, and said so.
pub fn prune(
    repo: &Repo,
    all: bool,
    repository: Option<&str>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let runtime = runtime()?;
    let engine = runtime.block_on(Engine::connect())?;
    writeln!(err, "{}", engine.describe())?;
    let releases: Vec<String> = awa_harness::release::load_manifest(&repo.artifacts())
        .map(|m| m.releases.into_iter().map(|r| r.image).collect())
        .unwrap_or_default();
    let images = rehearsal_images(&runtime, &engine)?;
    let pruner = Pruner {
        runtime: &runtime,
        engine: &engine,
        releases: &releases,
        all,
        repository,
    };
    let (mut removed, mut freed, mut kept) = (0usize, 0u64, Vec::new());
    for image in &images {
        if pruner.prune(image, &mut kept, out)? {
            removed += 1;
            freed += image.size.max(0) as u64;
        }
    }
    writeln!(
        out,
        "pruned {}, {:.1} MB{}",
        crate::observe::count(removed as u64, "image"),
        freed as f64 / 1e6,
        if kept.is_empty() {
            String::new()
        } else {
            format!("; kept {}", kept.join(", "))
        }
    )?;
    Ok(RunOutcome::AllMet)
}

/// What `prune` was asked to remove, on which engine.
struct Pruner<'a> {
    runtime: &'a tokio::runtime::Runtime,
    engine: &'a Engine,
    /// The release images of the manifest.
    releases: &'a [String],
    /// `--all`.
    all: bool,
    /// `--repository`.
    repository: Option<&'a str>,
}

impl Pruner<'_> {
    /// Removes the references of `image` the prune takes (its id, when
    /// untagged), each said on `out`; what stays goes into `kept` with its
    /// reason. True when every reference went, so the image is gone.
    fn prune(
        &self,
        image: &ImageSummary,
        kept: &mut Vec<String>,
        out: &mut dyn Write,
    ) -> Result<bool, Error> {
        let tags: Vec<&str> = image
            .repo_tags
            .iter()
            .map(String::as_str)
            .filter(|t| *t != "<none>:<none>")
            .collect();
        let names: Vec<Option<&str>> = if tags.is_empty() {
            vec![None]
        } else {
            tags.into_iter().map(Some).collect()
        };
        let mut gone = 0;
        for name in &names {
            match prune_choice(*name, self.releases, self.all, self.repository) {
                PruneChoice::Elsewhere => continue,
                PruneChoice::Release => {
                    kept.push(format!(
                        "{} (a release; --all removes it)",
                        name.unwrap_or_default()
                    ));
                    continue;
                }
                PruneChoice::Remove => {}
            }
            let reference = name.unwrap_or(&image.id);
            match self.runtime.block_on(self.engine.docker.remove_image(
                reference,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )) {
                Ok(_) => {
                    gone += 1;
                    writeln!(out, "removed {reference}")?;
                }
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 409, ..
                }) => kept.push(format!("{reference} (in use by a container)")),
                Err(e) => {
                    return Err(Error::Harness(format!(
                        "removing image {reference} failed: {e}"
                    )));
                }
            }
        }
        Ok(gone == names.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_keeps_releases_and_other_repositories() {
        let releases = vec![
            "awa-runtime:0.6.1".to_owned(),
            "awa-runtime:0.6.2".to_owned(),
        ];
        let choice = |tag, all, repo| prune_choice(tag, &releases, all, repo);
        assert_eq!(
            choice(Some("awa-runtime:0.6.2"), false, None),
            PruneChoice::Release
        );
        assert_eq!(
            choice(Some("awa-runtime:0.6.2"), true, None),
            PruneChoice::Remove
        );
        assert_eq!(
            choice(Some("awa-runtime:0.7.0-ee2c458-dirty"), false, None),
            PruneChoice::Remove
        );
        assert_eq!(choice(None, false, None), PruneChoice::Remove);
        assert_eq!(
            choice(
                Some("awa-runtime:0.7.0-ee2c458"),
                false,
                Some("rehearse-test")
            ),
            PruneChoice::Elsewhere
        );
        assert_eq!(
            choice(None, false, Some("rehearse-test")),
            PruneChoice::Elsewhere
        );
        assert_eq!(
            choice(
                Some("127.0.0.1:5000/awa-runtime:0.6.2"),
                false,
                Some("127.0.0.1:5000/awa-runtime")
            ),
            PruneChoice::Remove
        );
        assert_eq!(
            repository_of("127.0.0.1:5000/awa-runtime"),
            "127.0.0.1:5000/awa-runtime"
        );
    }
}
