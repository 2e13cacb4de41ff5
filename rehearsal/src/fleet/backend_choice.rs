//! `--backend docker|process|auto`: which backend a run uses, and why.
//!
//! `auto` asks the engine (`DOCKER_HOST`, else the default socket) and
//! takes docker when it answers, process otherwise; the reason is printed
//! and goes into the report. `docker` without an answering engine stops
//! the run before anything is built.

use crate::image::{Engine, EngineError};
use crate::vocab::Backend;

/// The backend a run will use.
#[derive(Clone, Debug)]
pub struct Chosen {
    /// The engine, when the backend is docker.
    pub engine: Option<Engine>,
    /// One line: what was picked and why.
    pub reason: String,
}

impl Chosen {
    /// The backend's name as its fleet gives it and report.json records
    /// it, known before the fleet exists (the schedule reads it).
    pub fn backend(&self) -> &'static str {
        if self.engine.is_some() {
            "docker"
        } else {
            "process"
        }
    }
}

/// Resolves `--backend`.
pub async fn choose(backend: Backend) -> Result<Chosen, EngineError> {
    match backend {
        Backend::Process => Ok(Chosen {
            engine: None,
            reason: "backend process (--backend process)".into(),
        }),
        Backend::Docker => {
            let engine = Engine::connect().await?;
            Ok(Chosen {
                reason: format!("backend docker (--backend docker): {}", engine.describe()),
                engine: Some(engine),
            })
        }
        Backend::Auto => match Engine::connect().await {
            Ok(engine) => Ok(Chosen {
                reason: format!(
                    "backend auto: docker, because an engine answers: {}",
                    engine.describe()
                ),
                engine: Some(engine),
            }),
            Err(e) => Ok(Chosen {
                engine: None,
                reason: format!(
                    "backend auto: process, because no Docker engine answers at {} ({})",
                    crate::image::engine::host(),
                    std::error::Error::source(&e).map_or_else(|| e.to_string(), |c| c.to_string())
                ),
            }),
        },
    }
}
