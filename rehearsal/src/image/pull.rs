//! Pulling an image by digest, as production does: the engine fetches
//! `NAME@sha256:...`, and rehearse refuses to go on unless the engine
//! holds exactly that digest afterwards.

use std::time::Instant;

use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;

use super::credentials::Credentials;
use super::engine::Engine;
use super::{ImageError, ImageInfo, Obtained, Reference};

/// Reduces the engine's pull progress to one line per layer state change
/// (`3f4c1a2b: Pull complete`), dropping the byte counters.
pub fn progress_line(id: Option<&str>, status: Option<&str>) -> Option<String> {
    let status = status?.trim();
    if status.is_empty() || status.starts_with("Downloading") || status.starts_with("Extracting") {
        return None;
    }
    Some(match id {
        Some(id) if !id.is_empty() && !status.contains(id) => format!("{id}: {status}"),
        _ => status.to_owned(),
    })
}

/// Pulls `name@digest` (or finds it present) and checks the engine holds that digest.
pub async fn by_digest(
    engine: &Engine,
    artifact: &str,
    reference: &Reference,
    digest: &str,
    credentials: Option<&Credentials>,
    progress: &mut dyn FnMut(String),
) -> Result<ImageInfo, ImageError> {
    let pinned = reference.pinned(digest);
    let mut obtained = Obtained::Reused;
    let started = Instant::now();
    if super::inspect(engine, &pinned).await?.is_none() {
        obtained = Obtained::Pulled;
        let options = CreateImageOptions {
            from_image: Some(pinned.clone()),
            ..Default::default()
        };
        let creds =
            credentials.map(|c| c.for_engine(reference.registry.as_deref().unwrap_or_default()));
        let mut stream = engine.docker.create_image(Some(options), None, creds);
        let mut announced = None;
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| ImageError::Registry {
                artifact: artifact.to_owned(),
                registry: reference
                    .registry
                    .clone()
                    .unwrap_or_else(|| "(local)".into()),
                message: format!("the engine could not pull {pinned}: {e}"),
            })?;
            if let Some(d) = info
                .status
                .as_deref()
                .and_then(|s| s.strip_prefix("Digest: "))
            {
                announced = Some(d.trim().to_owned());
            }
            if let Some(line) = progress_line(info.id.as_deref(), info.status.as_deref()) {
                progress(format!("artifact {artifact}: pull {line}"));
            }
        }
        if let Some(announced) = announced
            && announced != digest
        {
            return Err(ImageError::DigestMismatch {
                artifact: artifact.to_owned(),
                reference: pinned,
                expected: digest.to_owned(),
                actual: announced,
            });
        }
    }
    let found = super::inspect(engine, &pinned)
        .await?
        .ok_or_else(|| ImageError::Engine {
            artifact: artifact.to_owned(),
            action: "pulling the image",
            detail: format!("the engine reported success but has no {pinned}"),
        })?;
    let wanted = format!("{}@{digest}", reference.name());
    if !found.repo_digests.iter().any(|d| d == &wanted) {
        return Err(ImageError::DigestMismatch {
            artifact: artifact.to_owned(),
            reference: pinned,
            expected: digest.to_owned(),
            actual: found.repo_digests.join(", "),
        });
    }
    Ok(ImageInfo {
        reference: pinned.clone(),
        digest: Some(digest.to_owned()),
        tag: reference
            .tag
            .as_ref()
            .map(|t| format!("{}:{t}", reference.name())),
        obtained,
        build_ms: (obtained == Obtained::Pulled).then(|| started.elapsed().as_millis() as u64),
        ..found.info(&pinned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_keeps_state_changes_only() {
        assert_eq!(
            progress_line(Some("3f4c1a2b"), Some("Pull complete")).as_deref(),
            Some("3f4c1a2b: Pull complete")
        );
        assert_eq!(progress_line(Some("3f4c1a2b"), Some("Downloading")), None);
        assert_eq!(progress_line(None, Some("Extracting  12MB/40MB")), None);
        assert_eq!(
            progress_line(Some("sha256:ab"), Some("Pulling from awa-runtime")).as_deref(),
            Some("sha256:ab: Pulling from awa-runtime")
        );
        assert_eq!(progress_line(None, None), None);
    }
}
