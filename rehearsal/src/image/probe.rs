//! Does an image's binary start? One throwaway container runs
//! `awa --version`; its output is the artifact's version, and an image
//! whose binary will not start is refused before any cell starts.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, LogsOptions, RemoveContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;

use super::engine::Engine;
use super::{ImageError, ImageInfo};

/// How long `awa --version` may take in a container.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `awa --version` in `image` (started by its id, so a tag moved
/// meanwhile by another run cannot swap it); returns what it printed on
/// stdout. `labels` mark the container as the run's, so an interrupted
/// probe is cleaned up with the rest.
pub async fn version(
    engine: &Engine,
    artifact: &str,
    image: &ImageInfo,
    labels: HashMap<String, String>,
) -> Result<String, ImageError> {
    let reference = image.reference.as_str();
    let wont_start = |detail: String| ImageError::WontStart {
        artifact: artifact.to_owned(),
        reference: reference.to_owned(),
        detail,
    };
    let engine_failed = |action: &'static str, e: bollard::errors::Error| ImageError::Engine {
        artifact: artifact.to_owned(),
        action,
        detail: e.to_string(),
    };
    let body = ContainerCreateBody {
        image: Some(image.id.clone()),
        cmd: Some(vec!["--version".into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = engine
        .docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .map_err(|e| engine_failed("creating the version probe", e))?;
    let id = created.id;
    let outcome = async {
        engine
            .docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| wont_start(e.to_string()))?;
        let mut wait = engine
            .docker
            .wait_container(&id, None::<WaitContainerOptions>);
        let code = match tokio::time::timeout(PROBE_TIMEOUT, wait.next()).await {
            Err(_) => return Err(wont_start(format!("no answer within {PROBE_TIMEOUT:?}"))),
            Ok(Some(Ok(status))) => status.status_code,
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => code,
            Ok(Some(Err(e))) => return Err(engine_failed("waiting for the version probe", e)),
            Ok(None) => return Err(wont_start("the wait ended without a status".into())),
        };
        let mut logs = engine.docker.logs(
            &id,
            Some(LogsOptions {
                stdout: true,
                stderr: true,
                ..Default::default()
            }),
        );
        let (mut out, mut err) = (String::new(), String::new());
        while let Some(Ok(chunk)) = logs.next().await {
            match chunk {
                bollard::container::LogOutput::StdOut { message } => {
                    out.push_str(&String::from_utf8_lossy(&message))
                }
                other => err.push_str(&String::from_utf8_lossy(&other.into_bytes())),
            }
        }
        if code != 0 {
            let said = err.trim();
            return Err(wont_start(if said.is_empty() {
                format!("exit code {code}, nothing on stderr")
            } else {
                format!("exit code {code}: {said}")
            }));
        }
        Ok(out)
    }
    .await;
    let _ = engine
        .docker
        .remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
    outcome
}
