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
    let probe = Probe {
        engine,
        artifact,
        reference: image.reference.as_str(),
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
        .map_err(|e| probe.engine_failed("creating the version probe", e))?;
    let id = created.id;
    let outcome = probe.run(&id).await;
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

/// One version probe: the image it runs, for the artifact it stands for.
struct Probe<'a> {
    engine: &'a Engine,
    artifact: &'a str,
    reference: &'a str,
}

impl Probe<'_> {
    /// The image's binary did not start, or did not answer.
    fn wont_start(&self, detail: String) -> ImageError {
        ImageError::WontStart {
            artifact: self.artifact.to_owned(),
            reference: self.reference.to_owned(),
            detail,
        }
    }

    /// The engine failed at `action`.
    fn engine_failed(&self, action: &'static str, e: bollard::errors::Error) -> ImageError {
        ImageError::Engine {
            artifact: self.artifact.to_owned(),
            action,
            detail: e.to_string(),
        }
    }

    /// Starts container `id`, waits for it and reads what it printed:
    /// its stdout when it exits 0.
    async fn run(&self, id: &str) -> Result<String, ImageError> {
        self.engine
            .docker
            .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| self.wont_start(e.to_string()))?;
        let code = self.exit_code(id).await?;
        let (out, err) = self.output(id).await;
        if code != 0 {
            let said = err.trim();
            return Err(self.wont_start(if said.is_empty() {
                format!("exit code {code}, nothing on stderr")
            } else {
                format!("exit code {code}: {said}")
            }));
        }
        Ok(out)
    }

    /// Container `id`'s exit code, waited for at most [`PROBE_TIMEOUT`].
    async fn exit_code(&self, id: &str) -> Result<i64, ImageError> {
        let mut wait = self
            .engine
            .docker
            .wait_container(id, None::<WaitContainerOptions>);
        match tokio::time::timeout(PROBE_TIMEOUT, wait.next()).await {
            Err(_) => Err(self.wont_start(format!("no answer within {PROBE_TIMEOUT:?}"))),
            Ok(Some(Ok(status))) => Ok(status.status_code),
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => {
                Ok(code)
            }
            Ok(Some(Err(e))) => Err(self.engine_failed("waiting for the version probe", e)),
            Ok(None) => Err(self.wont_start("the wait ended without a status".into())),
        }
    }

    /// Container `id`'s stdout and stderr, as far as the engine gives them.
    async fn output(&self, id: &str) -> (String, String) {
        let mut logs = self.engine.docker.logs(
            id,
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
        (out, err)
    }
}
