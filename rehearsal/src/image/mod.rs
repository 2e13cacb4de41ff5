//! Container images of the runtime: built locally with no base image,
//! resolved in a registry by release line and pulled by digest, published.
//!
//! - [`rootfs`]: the binary, the shared objects it links, `/etc/passwd`
//!   and `/etc/hosts`, as a root filesystem tar;
//! - [`build`]: that tar imported through the Docker API, tagged
//!   `awa-runtime:<version>` (releases) or `awa-runtime:<version>-<sha>[-dirty]`
//!   (the current build), labelled with version, source and source digest,
//!   reused when the same source is already there;
//! - [`registry`]: the registry HTTP API (tags, manifest digests), the
//!   newest release on a line at or above a floor, credentials;
//! - [`pull`] and [`publish`]: bollard's pull by digest and push;
//! - [`engine`]: the connection (`DOCKER_HOST`).
//!
//! `rehearse artifacts` (build, publish, list, prune outside a run) is
//! `commands::images`.

pub mod build;
pub mod credentials;
pub mod engine;
pub mod publish;
pub mod pull;
pub mod registry;
pub mod resolve;
pub mod rootfs;
pub mod start_check;

use std::collections::HashMap;

pub use crate::vocab::image::{ImageInfo, Obtained, Reference};
pub use engine::{Engine, EngineError};

/// The repository local images are tagged in.
pub const REPOSITORY: &str = "awa-runtime";

/// The labels rehearse reads and writes on images.
pub mod labels {
    /// OCI: the image's title.
    pub const TITLE: &str = "org.opencontainers.image.title";
    /// OCI: the version of the packaged software (`0.6.2`).
    pub const VERSION: &str = "org.opencontainers.image.version";
    /// OCI: where the software came from.
    pub const SOURCE: &str = "org.opencontainers.image.source";
    /// OCI: the source revision (git commit of a workspace build).
    pub const REVISION: &str = "org.opencontainers.image.revision";
    /// The digest of the source (release archive, or workspace binary): what reuse compares.
    pub const SOURCE_DIGEST: &str = "io.rehearse.source.digest";
    /// The digest of the `awa` binary inside.
    pub const BINARY_DIGEST: &str = "io.rehearse.binary.digest";
}

/// What can go wrong with an image. Every message names the artifact.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The engine refused or failed a request.
    #[error("artifact \"{artifact}\": {action} failed: {detail}")]
    Engine {
        /// The artifact.
        artifact: String,
        /// What was being done.
        action: &'static str,
        /// The engine's words.
        detail: String,
    },
    /// The root filesystem could not be assembled.
    #[error("artifact \"{artifact}\": cannot assemble its image")]
    Rootfs {
        /// The artifact.
        artifact: String,
        /// Why.
        #[source]
        source: rootfs::RootfsError,
    },
    /// The tag exists with another source (bad input: never overwritten silently).
    #[error(
        "artifact \"{artifact}\": the local image {reference} holds another source (source digest {found}, expected {expected}); \
         a release tag never changes, so remove the stale image (docker image rm {reference}) and run again"
    )]
    TagConflict {
        /// The artifact.
        artifact: String,
        /// The tag.
        reference: String,
        /// The label found.
        found: String,
        /// The digest of the source this run has.
        expected: String,
    },
    /// The registry was asked and answered with something we cannot use (bad input).
    #[error("artifact \"{artifact}\": {message}")]
    Selection {
        /// The artifact.
        artifact: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The registry could not be reached or failed (infrastructure).
    #[error("artifact \"{artifact}\": registry {registry}: {message}")]
    Registry {
        /// The artifact.
        artifact: String,
        /// `HOST:PORT`.
        registry: String,
        /// What happened.
        message: String,
    },
    /// A digest did not match what was pinned or announced (bad input: refuse to run it).
    #[error(
        "artifact \"{artifact}\": digest mismatch for {reference}: expected {expected}, got {actual}; \
         the registry does not serve the image that was pinned; check the reference or republish"
    )]
    DigestMismatch {
        /// The artifact.
        artifact: String,
        /// The reference.
        reference: String,
        /// What was expected.
        expected: String,
        /// What was found.
        actual: String,
    },
    /// The image's binary does not start (bad input: the image is broken).
    #[error(
        "artifact \"{artifact}\": the image {reference} does not run `awa --version`: {detail}; \
         rebuild or republish it (rehearse artifacts build)"
    )]
    WontStart {
        /// The artifact.
        artifact: String,
        /// The image.
        reference: String,
        /// What happened.
        detail: String,
    },
}

impl ImageError {
    /// True when the input (matrix, registry content, local tags) is at fault, not the machine.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ImageError::TagConflict { .. }
                | ImageError::Selection { .. }
                | ImageError::DigestMismatch { .. }
                | ImageError::WontStart { .. }
        )
    }
}

/// What an inspect of a present image gives.
#[derive(Clone, Debug)]
pub struct Found {
    /// Engine id.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// Labels.
    pub labels: HashMap<String, String>,
    /// `name@sha256:...` entries.
    pub repo_digests: Vec<String>,
}

impl Found {
    /// The report entry of this image under `reference`.
    pub fn info(&self, reference: &str) -> ImageInfo {
        ImageInfo {
            reference: reference.to_owned(),
            id: self.id.clone(),
            digest: self
                .repo_digests
                .first()
                .and_then(|d| d.split_once('@'))
                .map(|(_, d)| d.to_owned()),
            tag: Some(reference.to_owned()).filter(|r| !r.contains('@')),
            obtained: Obtained::Reused,
            size: self.size,
            build_ms: None,
            libraries: Vec::new(),
            version: self.labels.get(labels::VERSION).cloned(),
        }
    }
}

/// Inspects `reference`: `None` when the engine has no such image.
pub async fn inspect(engine: &Engine, reference: &str) -> Result<Option<Found>, ImageError> {
    match engine.docker.inspect_image(reference).await {
        Ok(image) => Ok(Some(Found {
            id: image.id.unwrap_or_default(),
            size: image.size.unwrap_or_default().max(0) as u64,
            labels: image.config.and_then(|c| c.labels).unwrap_or_default(),
            repo_digests: image.repo_digests.unwrap_or_default(),
        })),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(ImageError::Engine {
            artifact: reference.to_owned(),
            action: "inspecting the image",
            detail: e.to_string(),
        }),
    }
}
