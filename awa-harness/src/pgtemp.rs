//! A throwaway PostgreSQL cluster for the runtime's tests and for the
//! `rehearse` orchestrator.
//!
//! [`Cluster::start`] runs `initdb` into a fresh directory under
//! [`std::env::temp_dir`] and starts `postgres` as a direct child of this
//! process on a free loopback port. Dropping the [`Cluster`] shuts the server
//! down immediately and removes the directory, also when the owner panics.
//!
//! Design notes (the "why"):
//!
//! * `postgres` is spawned directly rather than through `pg_ctl`, because
//!   `pg_ctl` daemonizes the server: it ends up a child of PID 1, we cannot
//!   reap it, and after a kill it lingers as a zombie. As our own child we
//!   can signal it, `wait()` for it, and know for certain that it is gone.
//! * Durability against machine crashes is switched off (`fsync=off`,
//!   `full_page_writes=off`): the cluster is disposable, and a crash test
//!   kills processes, not the machine, so the OS page cache survives anyway.
//! * `synchronous_commit` deliberately stays `on`. With `off`, a commit is
//!   acknowledged before its WAL leaves PostgreSQL's shared memory, so
//!   [`Cluster::crash`] or [`Cluster::stop_immediate`] within ~600 ms of a
//!   commit silently loses it, and crash tests would report lost work that
//!   the runtime did commit. With `fsync=off`, `on` only costs a `write()`
//!   into the page cache per commit (measured: about 3% on pgbench).
//! * PostgreSQL refuses to run as root, so when we are root `initdb` and
//!   `postgres` run as the `postgres` system user (or `nobody`).
//! * Signals are sent with `kill(2)` (through nix) to process ids we started (or that
//!   we found as children of the postmaster we started), never via a shell.
//!
//! This file holds the [`Cluster`] and its errors; beside it, `discover`
//! finds the server binaries, `launch` brings a cluster's server up and
//! waits until it answers, `process` signals and kills the postmaster's
//! process tree, and `run_as` picks the unprivileged user when we are root.

use std::fs;
use std::io::{self, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio_postgres::Client;

mod discover;
mod launch;
mod process;
mod run_as;

use launch::{LaunchError, connect};
use process::{kill_tree, send_signal};
use run_as::{RunAs, check_traversable, first_blocked, run_as};

pub use discover::{
    BINDIR_ENV, Found, Installation, LEGACY_BINDIR_ENV, Origin, Problem, Search, VENV_ENV,
    WHEEL_MAJOR, install_hint, wheel_install_command, wheel_venv,
};

/// How long to wait for the server to accept a real query after spawning it.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval while waiting for readiness.
const READY_POLL: Duration = Duration::from_millis(20);
/// Upper bound for one readiness connection attempt, so a half-started server
/// cannot stall the poll loop.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an immediate shutdown may take before we fall back to SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Poll interval while waiting for processes to exit.
const EXIT_POLL: Duration = Duration::from_millis(10);
/// One first attempt plus three retries with a fresh port, because the port
/// we picked may be taken by someone else before the server binds it.
const START_ATTEMPTS: usize = 4;
/// Lines of `postgres.log` quoted in startup errors.
const LOG_TAIL_LINES: usize = 20;
/// Lines of `initdb` output quoted in initdb errors.
const INITDB_TAIL_LINES: usize = 40;
/// Longest identifier PostgreSQL keeps without truncating (NAMEDATALEN - 1).
const MAX_IDENT_LEN: usize = 63;

/// Everything that can go wrong while running a throwaway cluster.
///
/// Messages say what failed and what to do about it, because they end up
/// verbatim in test failures and in orchestrator reports.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The server binaries could not be found; the message names what is
    /// missing and how to install it.
    #[error("{0}")]
    NotInstalled(String),

    /// We are root, and there is no unprivileged user to run PostgreSQL as
    /// (PostgreSQL refuses to run as root).
    #[error(
        "running as root, but neither a `postgres` nor a `nobody` system user exists to run \
         PostgreSQL as (it refuses to run as root); create a `postgres` user \
         (Debian: `apt-get install postgresql` does) or run as a non-root user"
    )]
    NoUnprivilegedUser,

    /// A filesystem or process operation failed.
    #[error("could not {what}: {source}")]
    Io {
        /// What we were trying to do, phrased to follow "could not".
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// `initdb` ran but failed.
    #[error(
        "initdb failed ({status}) for {data_dir}; fix the cause in its output below or point \
         REHEARSE_PG_BINDIR at a working PostgreSQL installation:\n{output}"
    )]
    Initdb {
        /// The data directory initdb was asked to create.
        data_dir: PathBuf,
        /// How initdb exited.
        status: String,
        /// The tail of initdb's combined stdout and stderr.
        output: String,
    },

    /// `postgres` exited during startup or never became ready.
    #[error(
        "postgres failed to start on 127.0.0.1:{port}: {reason}; fix the cause shown in the \
         last lines of {log}:\n{tail}"
    )]
    Start {
        /// The port the server was asked to listen on.
        port: u16,
        /// What went wrong (exit status, timeout, ...).
        reason: String,
        /// Path of the server log.
        log: PathBuf,
        /// The last lines of the server log.
        tail: String,
    },

    /// A database name was rejected before it reached the server.
    #[error(
        "invalid database name {0:?}: use 1 to 63 characters from lowercase ASCII letters, \
         digits and underscores"
    )]
    InvalidName(String),

    /// An operation needed a running server, but it has been stopped.
    #[error("the throwaway postgres server is not running; call restart() first")]
    NotRunning,

    /// A query or connection to the throwaway server failed.
    #[error("could not {what}: {source}")]
    Sql {
        /// What we were trying to do, phrased to follow "could not".
        what: String,
        /// The client error.
        #[source]
        source: tokio_postgres::Error,
    },
}

fn io_err(what: impl Into<String>, source: io::Error) -> PgError {
    PgError::Io {
        what: what.into(),
        source,
    }
}

// ---------------------------------------------------------------------------
// Binary discovery (the search itself is in `discover`)
// ---------------------------------------------------------------------------

/// Finds the directory holding the PostgreSQL server binaries `initdb` and
/// `postgres`: the first installation [`Search::from_env`] finds, of any
/// major (see [`discover`] for the order). Public so the orchestrator can
/// report which installation it uses.
pub fn find_bindir() -> Result<PathBuf, PgError> {
    Search::from_env().find(None).map(|i| i.bindir)
}

/// Names of the server binaries missing from `dir`.
fn missing_binaries(dir: &Path) -> Vec<&'static str> {
    ["initdb", "postgres"]
        .into_iter()
        .filter(|name| !is_executable(&dir.join(name)))
        .collect()
}

fn has_binaries(dir: &Path) -> bool {
    missing_binaries(dir).is_empty()
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// "16" -> [16], "9.6" -> [9, 6]; anything else is not a version directory.
fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// Creates a fresh, private (0700) `awa-pg-*` directory under the system
/// temp dir; removed when the handle drops, unless kept.
fn create_temp_dir() -> Result<tempfile::TempDir, PgError> {
    let base = std::env::temp_dir();
    // Short on purpose: the Unix socket lives in this dir, and socket
    // paths are limited to about 100 bytes.
    tempfile::Builder::new()
        .prefix("awa-pg-")
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(&base)
        .map_err(|e| {
            io_err(
                format!("create a temp dir under {} (check TMPDIR)", base.display()),
                e,
            )
        })
}

/// Picks a free loopback port by binding port 0 and releasing it. Someone
/// else may grab it before the server binds; [`Cluster::start`] retries.
fn pick_port() -> Result<u16, PgError> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| io_err("bind 127.0.0.1:0 to find a free port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| io_err("read the address of a probe socket", e))?
        .port();
    Ok(port)
}

/// The last `n` lines of a text file, for error messages.
fn tail_of_file(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => tail_lines(&String::from_utf8_lossy(&bytes), n),
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if tail.trim().is_empty() {
        "(empty)".to_string()
    } else {
        tail
    }
}

/// Quotes a value for a list-valued GUC such as `unix_socket_directories`,
/// so a path with commas or spaces stays one element.
fn quote_guc_list_item(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

// ---------------------------------------------------------------------------
// The cluster
// ---------------------------------------------------------------------------

/// A throwaway PostgreSQL cluster: a temp dir holding the data directory,
/// the Unix socket and `postgres.log`, and a `postgres` server running as
/// our direct child on a loopback port, with `trust` auth for user
/// `postgres`.
///
/// Dropping it shuts the server down immediately (SIGQUIT, SIGKILL
/// fallback), reaps it, and removes the temp dir; this also happens while
/// unwinding from a panic. Use [`Cluster::keep`] to leave it for debugging.
#[derive(Debug)]
pub struct Cluster {
    bindir: PathBuf,
    /// The path of `temp`, also once `temp` is gone.
    dir: PathBuf,
    /// Owns the temp dir: dropping it removes the dir. `None` once kept or removed.
    temp: Option<tempfile::TempDir>,
    port: u16,
    run_as: Option<RunAs>,
    /// The postmaster, while running. `None` after a stop or crash.
    child: Option<Child>,
    /// Set by `keep()`: Drop then leaves everything alone.
    kept: bool,
}

impl Cluster {
    /// Creates and starts a new cluster, returning once the server answers
    /// `SELECT 1` (an open port alone does not mean it accepts queries).
    ///
    /// If the server exits during startup, which usually means another
    /// process took the port we picked, it is retried on a new port up to
    /// three times. On failure the temp dir is removed; the error quotes the
    /// relevant log lines.
    pub async fn start() -> Result<Cluster, PgError> {
        Cluster::start_in(find_bindir()?).await
    }

    /// [`Cluster::start`] with the binaries of `bindir` (one
    /// [`Installation`] of the major a cell runs on).
    pub async fn start_in(bindir: PathBuf) -> Result<Cluster, PgError> {
        let run_as = run_as()?;
        if let Some(user) = run_as {
            check_traversable(&std::env::temp_dir(), user)?;
        }
        let temp = create_temp_dir()?;
        // From here on, Drop cleans up the dir if anything fails.
        let mut cluster = Cluster {
            bindir,
            dir: temp.path().to_owned(),
            temp: Some(temp),
            port: 0,
            run_as,
            child: None,
            kept: false,
        };
        cluster.prepare_dir()?;
        cluster.initdb().await?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            cluster.port = pick_port()?;
            match cluster.launch().await {
                Ok(()) => return Ok(cluster),
                Err(LaunchError::Exited(e)) => last_err = Some(e),
                Err(LaunchError::Fatal(e)) => return Err(e),
            }
        }
        Err(last_err.unwrap_or(PgError::NotRunning))
    }

    /// The loopback TCP port the server listens on; stable across
    /// [`Cluster::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding `initdb` and `postgres` in use, for reports.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The cluster's temp dir: `data/` (the data directory), the Unix
    /// socket and `postgres.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server log (stdout and stderr of every `postgres` we started),
    /// the first place to look when something goes wrong.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// The pid of the running postmaster, or `None` after a stop or crash.
    /// Lets tests and the orchestrator check that the process is really gone.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A connection URL for `dbname` as user `postgres` over TCP (no
    /// password: the cluster uses `trust` auth). `dbname` is inserted
    /// verbatim, so it should be a plain identifier.
    pub fn url(&self, dbname: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{dbname}", self.port)
    }

    /// Connects to `dbname` as `postgres`; the connection task is spawned on
    /// the current tokio runtime and ends when the client is dropped.
    pub async fn connect(&self, dbname: &str) -> Result<Client, PgError> {
        if self.child.is_none() {
            return Err(PgError::NotRunning);
        }
        connect(self.port, dbname)
            .await
            .map_err(|source| PgError::Sql {
                what: format!(
                    "connect to database {dbname:?} at 127.0.0.1:{} (server log: {})",
                    self.port,
                    self.log_path().display()
                ),
                source,
            })
    }

    /// Creates database `name` and returns its URL. Only names made of
    /// lowercase ASCII letters, digits and `_` (at most 63) are accepted, so
    /// the name needs no case folding, cannot be truncated by the server, and
    /// the URL needs no escaping; it is still double-quoted in the SQL so
    /// reserved words and leading digits work.
    pub async fn create_database(&self, name: &str) -> Result<String, PgError> {
        let valid = !name.is_empty()
            && name.len() <= MAX_IDENT_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(PgError::InvalidName(name.to_string()));
        }
        let client = self.connect("postgres").await?;
        client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .map_err(|source| self.sql_err(format!("create database {name:?}"), source))?;
        Ok(self.url(name))
    }

    /// The server's version string (`SHOW server_version`), for reports.
    pub async fn server_version(&self) -> Result<String, PgError> {
        let client = self.connect("postgres").await?;
        let row = client
            .query_one("SHOW server_version", &[])
            .await
            .map_err(|source| self.sql_err("run SHOW server_version".to_string(), source))?;
        row.try_get::<_, String>(0)
            .map_err(|source| self.sql_err("read the server_version value".to_string(), source))
    }

    /// Immediate shutdown: SIGQUIT to the postmaster, which tells its
    /// backends to quit without a checkpoint, then reap it. If it has not
    /// exited after 5 s, it and its children are SIGKILLed. The data dir is
    /// left in place; [`Cluster::restart`] brings the server back (with crash
    /// recovery). Does nothing if the server is not running.
    ///
    /// Blocks the calling thread for up to a few seconds.
    pub fn stop_immediate(&mut self) -> Result<(), PgError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let pid = child.id() as i32;
        let exited = |child: &mut Child| {
            child
                .try_wait()
                .map(|s| s.is_some())
                .map_err(|e| io_err(format!("check postmaster pid {pid}"), e))
        };
        if !exited(child)? {
            // Not yet reaped, so the pid is still ours.
            send_signal(pid, Signal::SIGQUIT)
                .map_err(|e| io_err(format!("send SIGQUIT to postmaster pid {pid}"), e))?;
            let deadline = Instant::now() + STOP_TIMEOUT;
            loop {
                if exited(child)? {
                    break;
                }
                if Instant::now() >= deadline {
                    kill_tree(child)?;
                    break;
                }
                std::thread::sleep(EXIT_POLL);
            }
        }
        self.child = None;
        Ok(())
    }

    /// Simulates a crash: SIGKILL to the postmaster and to every backend and
    /// auxiliary process it forked (found via `/proc/*/stat` before the
    /// postmaster dies, since `postmaster.pid` only names the postmaster),
    /// then reaps the postmaster. Nothing is removed, so a following
    /// [`Cluster::restart`] exercises crash recovery. Does nothing if the
    /// server is not running.
    pub fn crash(&mut self) -> Result<(), PgError> {
        if let Some(child) = self.child.as_mut() {
            kill_tree(child)?;
        }
        self.child = None;
        Ok(())
    }

    /// Starts the server again on the same port and data directory (after
    /// [`Cluster::crash`] this performs crash recovery) and waits until it
    /// answers queries. A still-running server is stopped immediately first.
    pub async fn restart(&mut self) -> Result<(), PgError> {
        self.stop_immediate()?;
        match self.launch().await {
            Ok(()) => Ok(()),
            Err(LaunchError::Exited(e) | LaunchError::Fatal(e)) => Err(e),
        }
    }

    /// Leaves the server running and the temp dir in place, for debugging,
    /// and returns the dir. The server is no longer managed: stop it with
    /// `pg_ctl -D <dir>/data stop -m immediate` and remove the dir yourself.
    pub fn keep(mut self) -> PathBuf {
        self.kept = true;
        self.temp.take().map(tempfile::TempDir::keep);
        self.dir.clone()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn sql_err(&self, what: String, source: tokio_postgres::Error) -> PgError {
        PgError::Sql {
            what: format!("{what} (server log: {})", self.log_path().display()),
            source,
        }
    }
}

impl Drop for Cluster {
    /// Stops the server immediately, reaps it and removes the temp dir,
    /// unless [`Cluster::keep`] was called. Never panics (it may run during
    /// unwinding, where a panic would abort); problems are reported on
    /// stderr instead.
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Err(e) = self.stop_immediate() {
            let _ = writeln!(
                io::stderr(),
                "awa pgtemp: stopping the throwaway server: {e}"
            );
            if let Some(child) = self.child.as_mut()
                && let Err(e) = kill_tree(child)
            {
                let _ = writeln!(
                    io::stderr(),
                    "awa pgtemp: killing the throwaway server: {e}"
                );
            }
        }
        if let Some(temp) = self.temp.take()
            && let Err(e) = temp.close()
            && e.kind() != io::ErrorKind::NotFound
        {
            let _ = writeln!(
                io::stderr(),
                "awa pgtemp: could not remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(parse_version("16"), Some(vec![16]));
        assert_eq!(parse_version("9.6"), Some(vec![9, 6]));
        assert_eq!(parse_version("common"), None);
        assert!(parse_version("16").unwrap() > parse_version("9.6").unwrap());
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("", 2), "(empty)");
    }

    #[test]
    fn guc_list_items_are_quoted() {
        assert_eq!(quote_guc_list_item("/tmp/a,b"), "\"/tmp/a,b\"");
        assert_eq!(quote_guc_list_item("x\"y"), "\"x\"\"y\"");
    }
}
