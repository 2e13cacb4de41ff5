//! The PostgreSQL servers of a run: a throwaway cluster per planned
//! major, or the server `--database-url` names, opened before the first
//! cell and stopped (or kept, `--keep`) after the last.

use std::collections::BTreeMap;
use std::sync::Arc;

use awa_harness::pgtemp::Cluster;
use tokio::sync::Mutex;

use super::super::database::{Server, connect, redact};
use super::RunError;
use crate::servers::{Major, ServerInfo, Spec};

/// The servers of a run, by the planned major of the cells they take.
pub(super) type Servers = BTreeMap<Option<Major>, Server>;

/// A throwaway cluster per spec, or the server `--database-url` names;
/// with what report.json records of each.
pub(super) async fn open_servers(specs: &[Spec]) -> Result<(Servers, Vec<ServerInfo>), RunError> {
    let mut servers = Servers::new();
    let mut infos = Vec::new();
    for spec in specs {
        let (server, bindir, origin) = match spec {
            Spec::Throwaway { install, .. } => {
                let cluster = Cluster::start_in(install.bindir.clone())
                    .await
                    .map_err(|e| RunError::Postgres(e.to_string()))?;
                let server = Server::Throwaway {
                    cluster: Arc::new(Mutex::new(cluster)),
                    bindir: install.bindir.clone(),
                };
                (
                    server,
                    Some(install.bindir.clone()),
                    install.origin.to_string(),
                )
            }
            Spec::External { url, .. } => {
                connect(url).await.map_err(|e| {
                    RunError::Postgres(format!("{e}; check --database-url {}", redact(url)))
                })?;
                let server = Server::External {
                    url: url.to_owned(),
                };
                (server, None, "--database-url".to_owned())
            }
        };
        let version = server
            .version()
            .await
            .unwrap_or_else(|e| format!("unknown ({e})"));
        infos.push(ServerInfo {
            major: spec.key(),
            version,
            bindir,
            origin,
        });
        servers.insert(spec.key(), server);
    }
    Ok((servers, infos))
}

/// Stops the throwaway cluster (or keeps it); returns a note for the user.
pub(super) fn stop_server(server: Server, keep: bool) -> Option<String> {
    let Server::Throwaway { cluster, .. } = server else {
        return None;
    };
    let cluster = Arc::try_unwrap(cluster).ok()?.into_inner();
    if keep {
        let dir = cluster.keep();
        Some(format!(
            "kept the throwaway PostgreSQL cluster at {} (stop it with: pg_ctl -D {}/data stop -m immediate)",
            dir.display(),
            dir.display()
        ))
    } else {
        drop(cluster);
        None
    }
}
