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

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio_postgres::{Client, NoTls};

mod discover;

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
// Running as an unprivileged user when we are root
// ---------------------------------------------------------------------------

/// The unprivileged user `initdb` and `postgres` run as when we are root.
#[derive(Clone, Copy, Debug)]
struct RunAs {
    uid: u32,
    gid: u32,
}

fn run_as() -> Result<Option<RunAs>, PgError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    ["postgres", "nobody"]
        .into_iter()
        .filter_map(lookup_user)
        .find(|user| user.uid != 0)
        .map(Some)
        .ok_or(PgError::NoUnprivilegedUser)
}

/// Looks a user up in the password database (nix uses `getpwnam_r`, the
/// re-entrant form: tests start clusters from many threads at once).
fn lookup_user(name: &str) -> Option<RunAs> {
    let user = nix::unistd::User::from_name(name).ok()??;
    Some(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

/// Checks that `user` can traverse every ancestor of `base`, so that a
/// TMPDIR such as /root/tmp yields a clear error instead of a confusing
/// initdb failure.
fn check_traversable(base: &Path, user: RunAs) -> Result<(), PgError> {
    match first_blocked(base, user) {
        None => Ok(()),
        Some(dir) => Err(io_err(
            format!(
                "use temp dir {} because uid {} (PostgreSQL's user, since it refuses to run \
                 as root) cannot enter {}; set TMPDIR to a world-accessible directory such \
                 as /tmp",
                base.display(),
                user.uid,
                dir.display()
            ),
            io::Error::from(io::ErrorKind::PermissionDenied),
        )),
    }
}

/// The outermost directory on the way to `path` (itself included) that
/// `user` may not enter, if any.
fn first_blocked(path: &Path, user: RunAs) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|dir| {
        let meta = fs::metadata(dir).ok()?;
        let mode = meta.permissions().mode();
        let ok = mode & 0o001 != 0
            || (std::os::unix::fs::MetadataExt::uid(&meta) == user.uid && mode & 0o100 != 0)
            || (std::os::unix::fs::MetadataExt::gid(&meta) == user.gid && mode & 0o010 != 0);
        (!ok).then(|| dir.to_path_buf())
    })
}

/// Hands `path` and everything below it to `user`, making directories
/// readable so the files can be inspected after [`Cluster::keep`].
fn chown_tree(path: &Path, user: RunAs) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))?;
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        let mode = meta.permissions().mode() | 0o755;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
        for entry in fs::read_dir(path)? {
            chown_tree(&entry?.path(), user)?;
        }
    }
    Ok(())
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

/// Sends `sig` to `pid`; callers only pass pids of processes we started
/// or found as their children.
fn send_signal(pid: i32, sig: Signal) -> io::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).map_err(io::Error::from)
}

/// A process identity that survives pid reuse: pid plus start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PidStart {
    pid: i32,
    start_time: u64,
}

/// Parsed fields of `/proc/<pid>/stat`: (state, ppid, start time).
fn read_stat(pid: i32) -> Option<(char, i32, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or
    // parentheses, so parse from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state), fields[1] field 4 (ppid), fields[19]
    // field 22 (starttime).
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, ppid, start))
}

/// Live children of `ppid`, found by scanning `/proc/*/stat`.
fn children_of(ppid: i32) -> Vec<PidStart> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| match read_stat(pid) {
            Some((state, parent, start_time)) if parent == ppid && state != 'Z' => {
                Some(PidStart { pid, start_time })
            }
            _ => None,
        })
        .collect()
}

/// True once `proc` has exited (gone, a zombie, or its pid reused).
fn is_gone(proc: PidStart) -> bool {
    match read_stat(proc.pid) {
        None => true,
        Some((state, _, start_time)) => state == 'Z' || start_time != proc.start_time,
    }
}

/// Waits (bounded) until every process in `procs` has exited, so that a
/// following restart does not find the old shared memory still attached.
fn wait_all_gone(procs: &[PidStart], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while procs.iter().any(|p| !is_gone(*p)) && Instant::now() < deadline {
        std::thread::sleep(EXIT_POLL);
    }
}

/// Kills the postmaster `child` and all its children with SIGKILL and reaps
/// the postmaster.
///
/// The postmaster is frozen with SIGSTOP first, so that while we list its
/// children from `/proc` it can neither fork new ones nor reap killed ones
/// (keeping their pids from being reused). SIGKILL works on a stopped process.
fn kill_tree(child: &mut Child) -> Result<(), PgError> {
    let pid = child.id() as i32;
    if child
        .try_wait()
        .map_err(|e| io_err(format!("check postmaster pid {pid}"), e))?
        .is_some()
    {
        return Ok(());
    }
    // Not yet reaped, so the pid is still ours and signalling it is safe.
    send_signal(pid, Signal::SIGSTOP)
        .map_err(|e| io_err(format!("stop postmaster pid {pid}"), e))?;
    let children = children_of(pid);
    for proc in &children {
        // A child may already be exiting; failure to signal it is harmless.
        let _ = send_signal(proc.pid, Signal::SIGKILL);
    }
    send_signal(pid, Signal::SIGKILL)
        .map_err(|e| io_err(format!("kill postmaster pid {pid}"), e))?;
    child
        .wait()
        .map_err(|e| io_err(format!("reap postmaster pid {pid}"), e))?;
    wait_all_gone(&children, STOP_TIMEOUT);
    Ok(())
}

/// Ways a launch can fail: `Exited` is worth retrying on another port
/// (typically the port was taken), `Fatal` is not.
enum LaunchError {
    Exited(PgError),
    Fatal(PgError),
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

    /// Creates the log file and, when root, hands the dir to the PostgreSQL
    /// user, which needs to write its socket there.
    fn prepare_dir(&self) -> Result<(), PgError> {
        let log = self.log_path();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| io_err(format!("create {}", log.display()), e))?;
        if let Some(user) = self.run_as {
            chown_tree(&self.dir, user).map_err(|e| {
                io_err(
                    format!(
                        "give {} to uid {} (PostgreSQL refuses to run as root)",
                        self.dir.display(),
                        user.uid
                    ),
                    e,
                )
            })?;
        }
        Ok(())
    }

    /// A command for one of the server binaries, running as the
    /// unprivileged user when we are root. std's `Command::uid` also drops
    /// supplementary groups when called as root, so no `setgroups` is needed.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bindir.join(program));
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        // These would otherwise silently redirect initdb or the server.
        for var in [
            "PGDATA",
            "PGPORT",
            "PGHOST",
            "PGOPTIONS",
            "PGCLIENTENCODING",
        ] {
            cmd.env_remove(var);
        }
        if let Some(user) = self.run_as {
            cmd.uid(user.uid).gid(user.gid);
        }
        cmd
    }

    async fn initdb(&self) -> Result<(), PgError> {
        let data_dir = self.data_dir();
        let mut cmd = self.command("initdb");
        cmd.args([
            "--no-sync",
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "-D",
        ])
        .arg(&data_dir);
        let program = self.bindir.join("initdb");
        // initdb takes a second or two; keep it off the async worker threads.
        let output = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .map_err(|e| io_err(format!("run {}", program.display()), io::Error::other(e)))?
            .map_err(|e| io_err(format!("run {}", program.display()), e))?;
        if output.status.success() {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Err(PgError::Initdb {
            data_dir,
            status: output.status.to_string(),
            output: tail_lines(&text, INITDB_TAIL_LINES),
        })
    }

    /// Spawns `postgres` on `self.port` and waits for readiness.
    async fn launch(&mut self) -> Result<(), LaunchError> {
        let mut child = self.spawn_postgres().map_err(LaunchError::Fatal)?;
        let result = wait_ready(&mut child, self.port, &self.data_dir()).await;
        match result {
            Ok(()) => {
                self.child = Some(child);
                Ok(())
            }
            Err(NotReady::Exited(status)) => Err(LaunchError::Exited(
                self.start_err(format!("postgres exited with {status}")),
            )),
            Err(NotReady::TimedOut(last)) => {
                // Leave no server behind; we are reporting failure.
                let _ = kill_tree(&mut child);
                Err(LaunchError::Fatal(self.start_err(format!(
                    "not ready after {} s (last attempt: {last})",
                    READY_TIMEOUT.as_secs()
                ))))
            }
            Err(NotReady::Io(e)) => {
                let _ = kill_tree(&mut child);
                Err(LaunchError::Fatal(io_err(
                    "check the postgres child process",
                    e,
                )))
            }
        }
    }

    fn start_err(&self, reason: String) -> PgError {
        let log = self.log_path();
        PgError::Start {
            port: self.port,
            reason,
            tail: tail_of_file(&log, LOG_TAIL_LINES),
            log,
        }
    }

    fn spawn_postgres(&self) -> Result<Child, PgError> {
        let log_path = self.log_path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| io_err(format!("open {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| io_err(format!("duplicate the handle of {}", log_path.display()), e))?;
        let mut socket_dirs = OsString::from("unix_socket_directories=");
        match self.dir.to_str() {
            Some(s) => socket_dirs.push(quote_guc_list_item(s)),
            None => socket_dirs.push(&self.dir),
        }
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-c")
            .arg("listen_addresses=127.0.0.1")
            .arg("-c")
            .arg(socket_dirs);
        for setting in [
            "fsync=off",
            // Not `off`: committed data must survive crash(); see module docs.
            "synchronous_commit=on",
            "full_page_writes=off",
            "max_connections=300",
            "shared_buffers=128MB",
            "log_min_messages=warning",
        ] {
            cmd.arg("-c").arg(setting);
        }
        cmd.stdout(log).stderr(log_err);
        cmd.spawn().map_err(|e| {
            io_err(
                format!("start {}", self.bindir.join("postgres").display()),
                e,
            )
        })
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

// ---------------------------------------------------------------------------
// Readiness
// ---------------------------------------------------------------------------

enum NotReady {
    Exited(ExitStatus),
    TimedOut(String),
    Io(io::Error),
}

async fn connect(port: u16, dbname: &str) -> Result<Client, tokio_postgres::Error> {
    // Sessions of this crate are flip-aware: they may enqueue after the
    // flip (see `db::connect` and the v3 migration's enqueue fence).
    let config = format!(
        "host=127.0.0.1 port={port} user=postgres dbname={dbname} options='-c awa.flip_aware=on'"
    );
    let (client, connection) = tokio_postgres::connect(&config, NoTls).await?;
    tokio::spawn(async move {
        // Errors surface through the client; the task just drives the socket.
        let _ = connection.await;
    });
    Ok(client)
}

/// One readiness probe: connect, run `SELECT 1`, and check that the server
/// answering is ours. Another cluster may have won a race for the port, and
/// answering its `SELECT 1` must not count as our server being ready.
async fn probe(port: u16, data_dir: &Path) -> Result<(), String> {
    let client = connect(port, "postgres").await.map_err(|e| e.to_string())?;
    let one: i32 = client
        .query_one("SELECT 1", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| e.to_string())?;
    if one != 1 {
        return Err(format!("SELECT 1 returned {one}"));
    }
    let theirs: String = client
        .query_one("SHOW data_directory", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| e.to_string())?;
    let same = Path::new(&theirs) == data_dir
        || fs::canonicalize(&theirs).ok() == fs::canonicalize(data_dir).ok();
    if same {
        Ok(())
    } else {
        Err(format!(
            "port {port} is served by another cluster ({theirs})"
        ))
    }
}

/// Polls every 20 ms, for up to 30 s, until the server answers queries,
/// failing early if the postmaster exits.
async fn wait_ready(child: &mut Child, port: u16, data_dir: &Path) -> Result<(), NotReady> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(NotReady::Exited(status)),
            Ok(None) => {}
            Err(e) => return Err(NotReady::Io(e)),
        }
        let last = match tokio::time::timeout(CONNECT_TIMEOUT, probe(port, data_dir)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        };
        if Instant::now() >= deadline {
            return Err(NotReady::TimedOut(last));
        }
        tokio::time::sleep(READY_POLL).await;
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

    #[test]
    fn stat_of_self_parses() {
        let me = std::process::id() as i32;
        let (state, ppid, _) = read_stat(me).expect("own /proc stat");
        assert_ne!(state, 'Z');
        assert!(ppid >= 0);
    }
}
