//! PostgreSQL for the cells: the throwaway cluster, or a server given by URL.
//!
//! Every cell gets a database of its own, so cells can run side by side.
//! A cell that crashes PostgreSQL (`pg_crash`) gets a throwaway cluster of
//! its own as well: an immediate-mode stop of a shared server would
//! crash every cell running beside it. With `--database-url` rehearse does
//! not control the server, so such a cell is inconclusive, saying why.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use awa_harness::pgtemp::{Cluster, PgError};
use tokio::sync::Mutex;

use super::credential::{CellPassword, DsnShape};
use crate::fleet::Watch;

/// Longest identifier PostgreSQL keeps.
const MAX_IDENT: usize = 63;

/// Why the cells' PostgreSQL could not do what a cell or the run asked.
/// Each message is one line, as the caller puts it into its own sentence.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The server did not answer the connection, or refused it (as
    /// [`connect`] words it, with the server's SQLSTATE).
    #[error("{0}")]
    Connect(crate::pg::ConnectError),
    /// The throwaway cluster (the shared one or a cell's own) failed.
    #[error(transparent)]
    Cluster(#[from] PgError),
    /// A setting of the server could not be read.
    #[error("could not read {setting} of {server}: {error}")]
    Show {
        /// The setting (`server_version_num`).
        setting: &'static str,
        /// The server's URL, redacted.
        server: String,
        /// What the client said.
        error: tokio_postgres::Error,
    },
    /// `server_version_num` was not a number.
    #[error("server_version_num {num:?} of {server} is not a number: {error}")]
    NotANumber {
        /// What the server answered.
        num: String,
        /// The server's URL, redacted.
        server: String,
        /// Why it did not parse.
        error: std::num::ParseIntError,
    },
    /// The cell's database could not be created on an external server.
    #[error("could not create database {name} on {server}: {error}")]
    Create {
        /// The database's name.
        name: String,
        /// The server's URL, redacted.
        server: String,
        /// What the server said.
        error: tokio_postgres::Error,
    },
    /// The URL of the cell's database could not be built ([`with_database`]'s message).
    #[error("{0}")]
    Url(String),
    /// `pg_crash` on a server rehearse does not control.
    #[error("this cell's PostgreSQL is not controlled by rehearse")]
    NotControlled,
    /// `pg_crash` after the cell's cluster was already lost.
    #[error("this cell's PostgreSQL cluster is gone")]
    ClusterGone,
    /// Killing the cell's cluster failed.
    #[error("crashing PostgreSQL failed: {0}")]
    Crash(PgError),
    /// The task that killed the cell's cluster failed.
    #[error("crashing PostgreSQL failed: {0}")]
    CrashTask(tokio::task::JoinError),
    /// The cell's cluster did not restart after the crash.
    #[error("PostgreSQL did not come back after the crash: {0}")]
    Restart(PgError),
}

/// Where the cells' databases live.
#[derive(Clone)]
pub enum Server {
    /// A throwaway cluster rehearse started (and stops).
    Throwaway {
        /// The cluster the cells share.
        cluster: Arc<Mutex<Cluster>>,
        /// Its binaries, for the private clusters of `pg_crash` cells:
        /// the same major as the shared one.
        bindir: PathBuf,
    },
    /// A server rehearse only connects to (`--database-url`).
    External {
        /// The URL as given.
        url: String,
    },
}

impl Server {
    /// `SHOW server_version`.
    pub async fn version(&self) -> Result<String, DatabaseError> {
        match self {
            Server::Throwaway { cluster, .. } => Ok(cluster.lock().await.server_version().await?),
            Server::External { url } => show(url, "server_version").await,
        }
    }
}

/// One setting of the server at `url`, as text (`SHOW` takes no parameters:
/// `setting` is one of our constants).
async fn show(url: &str, setting: &'static str) -> Result<String, DatabaseError> {
    let client = connect(url).await.map_err(DatabaseError::Connect)?;
    client
        .query_one(&format!("SHOW {setting}"), &[])
        .await
        .and_then(|r| r.try_get::<_, String>(0))
        .map_err(|error| DatabaseError::Show {
            setting,
            server: redact(url),
            error,
        })
}

/// The major version of the server at `url` (`server_version_num` 180006 -> 18).
pub async fn server_major(url: &str) -> Result<u32, DatabaseError> {
    let num = show(url, "server_version_num").await?;
    match num.trim().parse::<u32>() {
        Ok(n) => Ok(n / 10_000),
        Err(error) => Err(DatabaseError::NotANumber {
            num,
            server: redact(url),
            error,
        }),
    }
}

pub use crate::pg::connect;

/// Secrets hidden, for messages: the workspace's one redaction function.
pub use awa_runtime::redact::redact;

/// What a `--database-url` must look like, for messages.
const URL_SHAPE: &str = "postgres://USER@HOST:PORT/DATABASE";

/// The `sslmode` values libpq accepts.
const SSLMODES: [&str; 6] = [
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

/// The query parameters of a `--database-url` the PostgreSQL client
/// (tokio-postgres's connection string) accepts.
const URL_PARAMETERS: [&str; 19] = [
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// Checks a `--database-url` before anything starts: a `postgres://` or
/// `postgresql://` URL with one host (each cell's database is put in its
/// path). The message is redacted.
// A String: clap's value parser and preflight print it as it is, and no caller asks its kind.
pub fn check_url(url: &str) -> Result<(), String> {
    let bad = |why: String| redact(&format!("\"{url}\" {why}; expected {URL_SHAPE}"));
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(bad("is not a PostgreSQL URL".into()));
    }
    if url.contains('#') {
        return Err(bad(
            "has a '#', which ends a URL there (the rest is dropped); write a '#' in the password as %23".into(),
        ));
    }
    let parsed = url::Url::parse(url).map_err(|e| {
        bad(format!(
            "is not a valid URL ({e}; a user or password holding '@', ':', '/' or '?' must have it percent-encoded, e.g. '@' as %40)"
        ))
    })?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host".into()));
    }
    for (key, value) in parsed.query_pairs() {
        if !URL_PARAMETERS.contains(&key.as_ref()) {
            return Err(bad(format!(
                "has the parameter \"{key}\", which the PostgreSQL client does not know{}; it knows {}",
                crate::matrix::did_you_mean(&key, URL_PARAMETERS),
                URL_PARAMETERS.join(", ")
            )));
        }
        if key == "sslmode" && !SSLMODES.contains(&value.as_ref()) {
            return Err(bad(format!(
                "has sslmode={value}, which PostgreSQL does not know (one of {})",
                SSLMODES.join(", ")
            )));
        }
    }
    // Whatever else the client would refuse at connect time (a misspelt
    // parameter such as `sslmod`, a bad connect_timeout) is refused now,
    // before any build, in the client's own words.
    url.parse::<tokio_postgres::Config>()
        .map_err(|e| bad(format!("is not accepted by the PostgreSQL client ({e})")))?;
    Ok(())
}

/// `url` with its database replaced by `name` (user, password, host, port
/// and query parameters kept as written).
// A String: the URL passed check_url before anything started, so a caller only words it.
pub fn with_database(url: &str, name: &str) -> Result<String, String> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| redact(&format!("\"{url}\" is not a valid URL ({e})")))?;
    parsed.set_path(&format!("/{name}"));
    Ok(parsed.into())
}

/// `url` with its user replaced by `user` and no password (host, port,
/// database and query parameters kept as written): a role the harness
/// created on a server that lets it in without one (the throwaway
/// cluster trusts loopback connections).
// A String: the URL passed check_url before anything started, so a caller only words it.
pub fn with_user(url: &str, user: &str) -> Result<String, String> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| redact(&format!("\"{url}\" is not a valid URL ({e})")))?;
    parsed
        .set_username(user)
        .and_then(|()| parsed.set_password(None))
        .map_err(|()| redact(&format!("\"{url}\" takes no user name")))?;
    Ok(parsed.into())
}

/// `[a-z0-9_]` only, at most `max` bytes; dashes become underscores.
pub fn identifier(text: &str, max: usize) -> String {
    let mut id: String = text
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect();
    id.truncate(max);
    id
}

enum Kind {
    Shared,
    Private(Option<Cluster>),
    External { admin_url: String },
}

/// One cell's database and the server it lives on.
pub struct CellDb {
    /// Its URL, without a password on a server rehearse started: what
    /// the harness connects with, and what runtimes of earlier releases
    /// get (see [`CellDb::dsn_for`]).
    pub url: String,
    /// Its name.
    pub name: String,
    /// The password its runtimes of the release under test carry, on a
    /// server rehearse started (which never asks for it).
    password: Option<CellPassword>,
    /// Passwords handed so far, to one-shot commands and to runtimes:
    /// each kind takes the shapes in turn.
    handed: [usize; 2],
    kind: Kind,
}

impl CellDb {
    /// Creates the cell's database; `private` starts a cluster for it alone.
    pub async fn create(
        server: &Server,
        cell: &str,
        tag: &str,
        run_id: &str,
        private: bool,
    ) -> Result<CellDb, DatabaseError> {
        match server {
            Server::Throwaway {
                cluster: shared,
                bindir,
            } => {
                // The try's tag after the cut: a long name keeps it.
                let name = format!("{}{tag}", identifier(cell, MAX_IDENT - tag.len()));
                if private {
                    let cluster = Cluster::start_in(bindir.clone()).await?;
                    let url = cluster.create_database(&name).await?;
                    Ok(CellDb {
                        url,
                        name,
                        password: Some(CellPassword::fresh()),
                        handed: [0; 2],
                        kind: Kind::Private(Some(cluster)),
                    })
                } else {
                    let url = shared.lock().await.create_database(&name).await?;
                    Ok(CellDb {
                        url,
                        name,
                        password: Some(CellPassword::fresh()),
                        handed: [0; 2],
                        kind: Kind::Shared,
                    })
                }
            }
            Server::External { url } => {
                let suffix = format!("{tag}_{}", identifier(run_id, 24));
                let name = format!(
                    "{}{suffix}",
                    identifier(&format!("rehearse_{cell}"), MAX_IDENT - suffix.len())
                );
                let admin = connect(url).await.map_err(DatabaseError::Connect)?;
                // The name is built from [a-z0-9_] only, never from raw input.
                admin
                    .batch_execute(&format!("CREATE DATABASE \"{name}\""))
                    .await
                    .map_err(|error| DatabaseError::Create {
                        name: name.clone(),
                        server: redact(url),
                        error,
                    })?;
                Ok(CellDb {
                    url: with_database(url, &name).map_err(DatabaseError::Url)?,
                    name,
                    // The URL as given: its server may ask for a password.
                    password: None,
                    handed: [0; 2],
                    kind: Kind::External {
                        admin_url: url.clone(),
                    },
                })
            }
        }
    }

    /// The DSN for a process about to start, and what its output is held
    /// to: for a process of the release under test on a server rehearse
    /// started, the cell's password in the next shape for its kind (a
    /// long-running `runtime` or a one-shot command; see `credential`), the
    /// password's words and the DSN as it must be printed; else
    /// [`CellDb::url`] and nothing.
    pub fn dsn_for(&mut self, under_test: bool, runtime: bool) -> (String, Watch) {
        match &self.password {
            Some(password) if under_test => {
                let turn = &mut self.handed[usize::from(runtime)];
                let shape = DsnShape::nth(*turn);
                *turn += 1;
                password.hand(&self.url, shape)
            }
            _ => (self.url.clone(), Watch::default()),
        }
    }

    /// Whether rehearse controls the server, so `pg_crash` can run.
    pub fn can_crash(&self) -> bool {
        matches!(self.kind, Kind::Private(_))
    }

    /// Immediate crash (SIGKILL to every server process) and restart with
    /// crash recovery; returns how long the server was gone, in ms.
    pub async fn crash_and_restart(&mut self) -> Result<u64, DatabaseError> {
        let Kind::Private(slot) = &mut self.kind else {
            return Err(DatabaseError::NotControlled);
        };
        let Some(mut cluster) = slot.take() else {
            return Err(DatabaseError::ClusterGone);
        };
        let start = Instant::now();
        // `crash` blocks while it kills and reaps; keep it off the runtime threads.
        let (cluster, crashed) = tokio::task::spawn_blocking(move || {
            let result = cluster.crash();
            (cluster, result)
        })
        .await
        .map_err(DatabaseError::CrashTask)?;
        let cluster = slot.insert(cluster);
        crashed.map_err(DatabaseError::Crash)?;
        cluster.restart().await.map_err(DatabaseError::Restart)?;
        Ok(start.elapsed().as_millis() as u64)
    }

    /// Removes what the cell created, or keeps it (`--keep`); returns a note for the user.
    pub async fn finish(mut self, keep: bool) -> Option<String> {
        match &mut self.kind {
            Kind::Shared => None,
            Kind::Private(cluster) => {
                let cluster = cluster.take()?;
                if keep {
                    let dir = cluster.keep();
                    Some(format!(
                        "kept the cell's PostgreSQL cluster at {} ({})",
                        dir.display(),
                        redact(&self.url)
                    ))
                } else {
                    // Dropping stops and reaps the server: blocking work.
                    let _ = tokio::task::spawn_blocking(move || drop(cluster)).await;
                    None
                }
            }
            Kind::External { admin_url } => {
                if keep {
                    return Some(format!("kept database {}", self.name));
                }
                let result = async {
                    let admin = connect(admin_url).await.map_err(|e| e.to_string())?;
                    admin
                        .batch_execute(&format!(
                            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                            self.name
                        ))
                        .await
                        .map_err(|e| e.to_string())
                }
                .await;
                result
                    .err()
                    .map(|e| format!("could not drop database {}: {e}", self.name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_of_a_url_is_replaced() {
        for (url, want) in [
            ("postgres://u@h:5432/db", "postgres://u@h:5432/x"),
            (
                "postgres://u:p@h/db?sslmode=disable",
                "postgres://u:p@h/x?sslmode=disable",
            ),
            ("postgresql://h:1", "postgresql://h:1/x"),
            (
                "postgres://h?application_name=a",
                "postgres://h/x?application_name=a",
            ),
        ] {
            assert_eq!(with_database(url, "x").as_deref(), Ok(want), "{url}");
        }
    }

    #[test]
    fn the_user_of_a_url_is_replaced_and_its_password_dropped() {
        for (url, want) in [
            ("postgres://u@h:5432/db", "postgres://r@h:5432/db"),
            (
                "postgres://u:p@h/db?sslmode=disable",
                "postgres://r@h/db?sslmode=disable",
            ),
            ("postgresql://h:1/db", "postgresql://r@h:1/db"),
        ] {
            assert_eq!(with_user(url, "r").as_deref(), Ok(want), "{url}");
        }
    }

    #[test]
    fn server_urls_are_checked_before_anything_starts() {
        for good in [
            "postgres://u@h:5432/db",
            "postgresql://u:p%40ss@h/db?sslmode=disable",
            "postgres://h",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("mysql://u@h/db", "is not a PostgreSQL URL"),
            ("host=h user=u", "is not a PostgreSQL URL"),
            ("postgres://u@h:99999/db", "is not a valid URL"),
            ("postgres://u@h1:5432,h2:5432/db", "is not a valid URL"),
            ("postgres:///db", "names no host"),
            (
                "postgres://h/db?sslmod=require",
                "has the parameter \"sslmod\", which the PostgreSQL client does not know (did you mean \"sslmode\"?)",
            ),
            (
                "postgres://u:p#ss@h/db",
                "write a '#' in the password as %23",
            ),
            (
                "postgres://h/db?connect_timeout=soon",
                "not accepted by the PostgreSQL client",
            ),
        ] {
            let message = check_url(bad).unwrap_err();
            assert!(message.contains(why), "{bad}: {message}");
            assert!(message.ends_with("expected postgres://USER@HOST:PORT/DATABASE"));
        }
        let message = check_url("mysql://u:hunter2@h/db").unwrap_err();
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn identifiers_are_safe_and_short() {
        assert_eq!(identifier("migrate-first", 63), "migrate_first");
        assert_eq!(
            identifier("20261130T014512Z-3f2a9c1", 63),
            "20261130t014512z_3f2a9c1"
        );
        assert_eq!(identifier("a\"; DROP", 63), "a___drop");
        assert_eq!(identifier(&"x".repeat(100), 63).len(), 63);
    }
}
