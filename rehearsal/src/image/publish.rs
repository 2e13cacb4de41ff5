//! Pushing local images to a registry, so a run can then resolve N-1 by
//! its release line and pull it by digest exactly as production does.

use bollard::query_parameters::{PushImageOptions, TagImageOptions};
use futures_util::StreamExt;

use super::credentials::Credentials;
use super::engine::Engine;
use super::registry::Registry;
use super::{ImageError, REPOSITORY};

/// One pushed image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// `127.0.0.1:5000/awa-runtime:0.6.2`.
    pub reference: String,
    /// The manifest digest the registry serves for it.
    pub digest: String,
}

/// Tags local `awa-runtime:TAG` as `REGISTRY/awa-runtime:TAG`, pushes it,
/// and reads back the digest the registry serves.
pub async fn push(
    engine: &Engine,
    registry: &str,
    tag: &str,
    credentials: Option<&Credentials>,
    progress: &mut dyn FnMut(String),
) -> Result<Published, ImageError> {
    let local = format!("{REPOSITORY}:{tag}");
    let remote = format!("{registry}/{REPOSITORY}");
    let fail = |action: &'static str, detail: String| ImageError::Engine {
        artifact: local.clone(),
        action,
        detail,
    };
    engine
        .docker
        .tag_image(
            &local,
            Some(TagImageOptions {
                repo: Some(remote.clone()),
                tag: Some(tag.to_owned()),
            }),
        )
        .await
        .map_err(|e| fail("tagging for the registry", e.to_string()))?;
    let pushed = push_tagged(
        engine,
        registry,
        tag,
        credentials,
        &local,
        &remote,
        progress,
    )
    .await;
    if pushed.is_err() {
        // The tag for this registry was ours: a push that failed leaves none.
        let _ = engine
            .docker
            .remove_image(
                &format!("{remote}:{tag}"),
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
    }
    pushed
}

/// [`push`] once the image is tagged `remote:tag`.
async fn push_tagged(
    engine: &Engine,
    registry: &str,
    tag: &str,
    credentials: Option<&Credentials>,
    local: &str,
    remote: &str,
    progress: &mut dyn FnMut(String),
) -> Result<Published, ImageError> {
    let creds = credentials.map(|c| c.for_engine(registry));
    let mut stream = engine.docker.push_image(
        remote,
        Some(PushImageOptions {
            tag: Some(tag.to_owned()),
            ..Default::default()
        }),
        creds,
    );
    let mut pushed_digest = None;
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| ImageError::Registry {
            artifact: local.to_owned(),
            registry: registry.to_owned(),
            message: format!("push of {remote}:{tag} failed: {e}"),
        })?;
        let Some(status) = info.status else { continue };
        if let Some((_, rest)) = status.split_once("digest: ") {
            pushed_digest = rest.split_whitespace().next().map(str::to_owned);
        }
        if !status.starts_with("Pushing") && !status.is_empty() {
            progress(format!("publish {remote}:{tag}: {status}"));
        }
    }
    let served = Registry::new(registry, credentials.cloned())
        .manifest_digest(REPOSITORY, tag)
        .await
        .map_err(|e| ImageError::Registry {
            artifact: local.to_owned(),
            registry: registry.to_owned(),
            message: e.to_string(),
        })?;
    if let Some(pushed) = pushed_digest
        && pushed != served
    {
        return Err(ImageError::DigestMismatch {
            artifact: local.to_owned(),
            reference: format!("{remote}:{tag}"),
            expected: pushed,
            actual: served,
        });
    }
    Ok(Published {
        reference: format!("{remote}:{tag}"),
        digest: served,
    })
}
