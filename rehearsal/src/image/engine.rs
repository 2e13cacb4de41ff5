//! The Docker engine connection: `DOCKER_HOST` (unix socket or plain TCP)
//! or the default socket, the API version negotiated down to the engine's,
//! and the answer to "is an engine there?" that `--backend auto` asks.

use bollard::Docker;

/// The environment variable that names the engine (`unix:///...`, `tcp://host:port`).
pub const DOCKER_HOST: &str = "DOCKER_HOST";

/// Why the engine cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No client could be built for the address (an unsupported scheme).
    #[error(
        "cannot use the Docker engine at {host}: {source}; set DOCKER_HOST to unix:///PATH or tcp://HOST:PORT"
    )]
    Address {
        /// `DOCKER_HOST` or the default socket.
        host: String,
        /// bollard's complaint.
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine did not answer.
    #[error(
        "no Docker engine answers at {host}: {source}; start it (`dockerd`), or point DOCKER_HOST at one, or use --backend process"
    )]
    Unreachable {
        /// `DOCKER_HOST` or the default socket.
        host: String,
        /// bollard's complaint.
        #[source]
        source: bollard::errors::Error,
    },
}

/// A connected engine and what it said about itself.
#[derive(Clone, Debug)]
pub struct Engine {
    /// The client, at the negotiated API version.
    pub docker: Docker,
    /// Where it is (`DOCKER_HOST`, or the default socket).
    pub host: String,
    /// The engine's version (`20.10.24+dfsg1`).
    pub version: String,
    /// The API version in use.
    pub api_version: String,
}

/// The address bollard will use.
pub fn host() -> String {
    std::env::var(DOCKER_HOST)
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned())
}

/// How long the engine may take to answer the first requests: an engine
/// that hangs must not hang `--backend auto`.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Engine {
    /// Connects, pings and negotiates the API version (within [`CONNECT_TIMEOUT`]).
    pub async fn connect() -> Result<Engine, EngineError> {
        match tokio::time::timeout(CONNECT_TIMEOUT, Engine::connect_now()).await {
            Ok(answer) => answer,
            Err(_) => Err(EngineError::Unreachable {
                host: host(),
                source: bollard::errors::Error::RequestTimeoutError,
            }),
        }
    }

    async fn connect_now() -> Result<Engine, EngineError> {
        let host = host();
        let docker = Docker::connect_with_host(&host).map_err(|source| match source {
            // bollard looks for the socket file first: no socket, no engine.
            bollard::errors::Error::SocketNotFoundError(_) => EngineError::Unreachable {
                host: host.clone(),
                source,
            },
            source => EngineError::Address {
                host: host.clone(),
                source,
            },
        })?;
        let unreachable = |source| EngineError::Unreachable {
            host: host.clone(),
            source,
        };
        let docker = docker.negotiate_version().await.map_err(unreachable)?;
        docker.ping().await.map_err(unreachable)?;
        let version = docker.version().await.map_err(unreachable)?;
        Ok(Engine {
            version: version.version.unwrap_or_else(|| "unknown".into()),
            api_version: docker.client_version().to_string(),
            docker,
            host,
        })
    }

    /// One line for the run header: `docker 20.10.24 (API 1.41) at unix:///...`.
    pub fn describe(&self) -> String {
        format!(
            "Docker engine {} (API {}) at {}",
            self.version, self.api_version, self.host
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_outlives_the_runtime_it_was_connected_in() {
        let first = tokio::runtime::Runtime::new().unwrap();
        let Ok(engine) = first.block_on(Engine::connect()) else {
            eprintln!("#### SKIPPED: no Docker engine answers ####");
            return;
        };
        drop(first);
        let second = tokio::runtime::Runtime::new().unwrap();
        for _ in 0..3 {
            second.block_on(engine.docker.ping()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
