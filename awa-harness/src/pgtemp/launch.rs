//! Bringing a cluster's server up: its directory prepared, `initdb`,
//! `postgres` spawned with the throwaway settings, and waiting until it
//! answers queries as our own server (not another cluster that won the
//! port).

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Instant;

use tokio_postgres::{Client, NoTls};

use super::process::kill_tree;
use super::run_as::chown_tree;
use super::{
    CONNECT_TIMEOUT, Cluster, INITDB_TAIL_LINES, LOG_TAIL_LINES, PgError, READY_POLL,
    READY_TIMEOUT, io_err, quote_guc_list_item, tail_lines, tail_of_file,
};

/// Ways a launch can fail: `Exited` is worth retrying on another port
/// (typically the port was taken), `Fatal` is not.
pub(super) enum LaunchError {
    Exited(PgError),
    Fatal(PgError),
}

impl Cluster {
    /// Creates the log file and, when root, hands the dir to the PostgreSQL
    /// user, which needs to write its socket there.
    pub(super) fn prepare_dir(&self) -> Result<(), PgError> {
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

    pub(super) async fn initdb(&self) -> Result<(), PgError> {
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
    pub(super) async fn launch(&mut self) -> Result<(), LaunchError> {
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

pub(super) enum NotReady {
    Exited(ExitStatus),
    TimedOut(String),
    Io(io::Error),
}

pub(super) async fn connect(port: u16, dbname: &str) -> Result<Client, tokio_postgres::Error> {
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
// A String: the start keeps the last probe's words for its timeout message; it retries whatever failed.
pub(super) async fn probe(port: u16, data_dir: &Path) -> Result<(), String> {
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
pub(super) async fn wait_ready(
    child: &mut Child,
    port: u16,
    data_dir: &Path,
) -> Result<(), NotReady> {
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
