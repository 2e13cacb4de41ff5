//! Local images of built binaries: a root filesystem with no base image,
//! imported through the Docker API (what `docker import` does), tagged and
//! labelled so a later run can tell whether the tag still holds the same
//! source.
//!
//! An image already present under its tag with the same source digest is
//! reused. A tag that holds another source is refused (a release tag must
//! never silently change), except for tags of the current build, which
//! are replaced: a work tree changes, and even one commit built in two
//! checkouts gives two binaries. Containers start from the image id, so a
//! tag replaced by another run cannot change what a running rehearsal runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;

use super::engine::Engine;
use super::rootfs::{self, BINARY_PATH, USER_ID};
use super::{ImageError, ImageInfo, Obtained, labels};

/// What an image is built from.
#[derive(Clone, Debug)]
pub struct BuildRequest {
    /// The matrix artifact (for messages).
    pub artifact: String,
    /// The `awa` binary.
    pub binary: PathBuf,
    /// `awa-runtime`.
    pub repository: String,
    /// `0.6.2`, `0.7.0-c861534-dirty`, ...
    pub tag: String,
    /// What the binary reports (`awa --version`).
    pub version: String,
    /// Where the binary came from, in words (`artifacts/awa-runtime-0.6.2.crate`).
    pub source: String,
    /// `sha256:...` of that source: the archive for a release, the binary for a workspace build.
    pub source_digest: String,
    /// `sha256:...` of the binary.
    pub binary_digest: String,
    /// The git commit, for workspace builds.
    pub revision: Option<String>,
    /// A tag whose source may change (an uncommitted tree): replaced, not refused.
    pub mutable_tag: bool,
}

impl BuildRequest {
    /// `awa-runtime:0.6.2`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.repository, self.tag)
    }

    fn labels(&self) -> Vec<(&'static str, String)> {
        let mut l = vec![
            (labels::TITLE, self.repository.clone()),
            (labels::VERSION, self.version.clone()),
            (labels::SOURCE, self.source.clone()),
            (labels::SOURCE_DIGEST, self.source_digest.clone()),
            (labels::BINARY_DIGEST, self.binary_digest.clone()),
        ];
        if let Some(rev) = &self.revision {
            l.push((labels::REVISION, rev.clone()));
        }
        l
    }
}

/// The `changes` that make an imported root filesystem a runnable image.
fn changes(req: &BuildRequest) -> Vec<String> {
    let mut c = vec![
        format!("ENTRYPOINT [\"{BINARY_PATH}\"]"),
        format!("USER {USER_ID}:{USER_ID}"),
        "WORKDIR /tmp".to_owned(),
    ];
    for (key, value) in req.labels() {
        let value = value.replace('\\', "\\\\").replace('"', "\\\"");
        c.push(format!("LABEL {key}=\"{value}\""));
    }
    c
}

/// Makes sure `req.reference()` is an image of `req.binary`: reused, or built.
pub async fn ensure(engine: &Engine, req: &BuildRequest) -> Result<ImageInfo, ImageError> {
    let reference = req.reference();
    if let Some(found) = super::inspect(engine, &reference).await? {
        let digest = found.labels.get(labels::SOURCE_DIGEST).cloned();
        if digest.as_deref() == Some(req.source_digest.as_str()) {
            return Ok(ImageInfo {
                obtained: Obtained::Reused,
                ..found.info(&reference)
            });
        }
        if !req.mutable_tag {
            return Err(ImageError::TagConflict {
                artifact: req.artifact.clone(),
                reference,
                found: digest.unwrap_or_else(|| "no source digest label".into()),
                expected: req.source_digest.clone(),
            });
        }
    }
    build(engine, req).await
}

async fn build(engine: &Engine, req: &BuildRequest) -> Result<ImageInfo, ImageError> {
    let started = Instant::now();
    let reference = req.reference();
    let binary = req.binary.clone();
    let fs = tokio::task::spawn_blocking(move || rootfs::assemble(&binary))
        .await
        .map_err(|e| ImageError::Engine {
            artifact: req.artifact.clone(),
            action: "assembling the root filesystem",
            detail: e.to_string(),
        })?
        .map_err(|source| ImageError::Rootfs {
            artifact: req.artifact.clone(),
            source,
        })?;
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(req.repository.clone()),
        tag: Some(req.tag.clone()),
        changes: changes(req),
        message: Some(format!("rehearse: awa {} from {}", req.version, req.source)),
        ..Default::default()
    };
    let mut stream =
        engine
            .docker
            .create_image(Some(options), Some(bollard::body_full(fs.tar.into())), None);
    while let Some(item) = stream.next().await {
        item.map_err(|e| ImageError::Engine {
            artifact: req.artifact.clone(),
            action: "importing the root filesystem",
            detail: e.to_string(),
        })?;
    }
    let found = super::inspect(engine, &reference)
        .await?
        .ok_or_else(|| ImageError::Engine {
            artifact: req.artifact.clone(),
            action: "importing the root filesystem",
            detail: format!("the engine reported success but has no {reference}"),
        })?;
    Ok(ImageInfo {
        obtained: Obtained::Built,
        build_ms: Some(started.elapsed().as_millis() as u64),
        libraries: fs
            .libraries
            .iter()
            .map(|l| l.path.display().to_string())
            .collect(),
        ..found.info(&reference)
    })
}

/// Labels of an image, as the engine reports them.
pub type Labels = HashMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tag: &str, binary: &str, digest: &str, mutable: bool) -> BuildRequest {
        BuildRequest {
            artifact: "test".into(),
            binary: binary.into(),
            repository: "rehearse-test".into(),
            tag: tag.into(),
            version: "0.0.0".into(),
            source: format!("test binary {binary}"),
            source_digest: digest.into(),
            binary_digest: digest.into(),
            revision: None,
            mutable_tag: mutable,
        }
    }

    async fn engine() -> Option<Engine> {
        match Engine::connect().await {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!(
                    "#### SKIPPED: no Docker engine answers ({e}); image tests did not run ####"
                );
                None
            }
        }
    }

    async fn remove(engine: &Engine, reference: &str) {
        let _ = engine
            .docker
            .remove_image(
                reference,
                Some(bollard::query_parameters::RemoveImageOptions {
                    force: true,
                    ..Default::default()
                }),
                None,
            )
            .await;
    }

    #[tokio::test]
    async fn an_image_is_reused_by_source_digest_and_a_stale_tag_is_refused_unless_mutable() {
        let Some(engine) = engine().await else { return };
        let tag = format!("reuse-{}", std::process::id());
        let first = request(&tag, "/bin/true", "sha256:aaaa", false);
        remove(&engine, &first.reference()).await;
        let built = ensure(&engine, &first).await.unwrap();
        assert_eq!(built.obtained, Obtained::Built);
        assert!(
            built.libraries.iter().any(|l| l.ends_with("libc.so.6")),
            "{built:?}"
        );
        let again = ensure(&engine, &first).await.unwrap();
        assert_eq!((again.obtained, &again.id), (Obtained::Reused, &built.id));
        // Same tag, another source: refused, naming the tag and what to do.
        let other = request(&tag, "/bin/false", "sha256:bbbb", false);
        let err = ensure(&engine, &other).await.unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("the local image rehearse-test:{tag} holds another source (source digest sha256:aaaa, expected sha256:bbbb)"))
                && text.contains(&format!("docker image rm rehearse-test:{tag}")),
            "{text}"
        );
        // A tag of an uncommitted tree is replaced instead.
        let dirty = request(&tag, "/bin/false", "sha256:bbbb", true);
        let replaced = ensure(&engine, &dirty).await.unwrap();
        assert_eq!(replaced.obtained, Obtained::Built);
        assert_ne!(replaced.id, built.id);
        remove(&engine, &first.reference()).await;
        remove(&engine, &built.id).await;
    }

    #[tokio::test]
    async fn an_image_whose_binary_will_not_start_is_refused_by_the_probe() {
        let Some(engine) = engine().await else { return };
        let tag = format!("wont-start-{}", std::process::id());
        // `false --version` exits 1: an awa that will not start.
        let req = request(&tag, "/bin/false", "sha256:cccc", true);
        let built = ensure(&engine, &req).await.unwrap();
        // The labels a run's probes carry, owner and host included, so a
        // rehearse running meanwhile on this engine keeps the probe as a
        // live run's (with the run label alone it removed it as a leftover).
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let labels = std::collections::HashMap::from([
            (
                "rehearse.run".to_owned(),
                format!("image-test-{}", std::process::id()),
            ),
            ("rehearse.pid".to_owned(), std::process::id().to_string()),
            ("rehearse.host".to_owned(), host.trim().to_owned()),
        ]);
        let err = super::super::start_check::version(&engine, "previous", &built, labels)
            .await
            .unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        assert!(
            err.to_string().starts_with(&format!(
                "artifact \"previous\": the image rehearse-test:{tag} does not run `awa --version`: exit code 1"
            )),
            "{err}"
        );
        remove(&engine, &req.reference()).await;
    }
}
