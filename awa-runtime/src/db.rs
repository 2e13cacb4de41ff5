//! Connections. Each long-running task owns one `Conn`, which reconnects
//! lazily after a transient failure (a server restart, a dropped socket).

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config, NoTls, Statement};

/// How this process's sessions present themselves to the server, set
/// once at start-up (a worker or producer, after it has its instance id).
#[derive(Debug, Clone)]
pub struct SessionIdentity {
    /// `runtime_instances.instance_id`, when the process is a runtime.
    pub instance_id: Option<String>,
    /// The server ends a session of ours that sits idle inside a
    /// transaction longer than this (a suspended or wedged process must
    /// not hold its locks without bound); zero disables.
    pub idle_in_transaction: Duration,
}

/// The default bound on a session idle inside a transaction.
pub const DEFAULT_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

static IDENTITY: OnceLock<SessionIdentity> = OnceLock::new();

/// Set the identity every later connection of this process uses. Only
/// the first call counts.
pub fn set_session_identity(identity: SessionIdentity) {
    let _ = IDENTITY.set(identity);
}

/// `awa <version> <instance_id>` (or `awa <version>`), cut to the 63
/// bytes the server keeps: what `pg_stat_activity.application_name`
/// shows, so a blocked operator command can name the runtime holding a
/// lock. [`APPLICATION_NAME_SQL`] builds the same text from a
/// `runtime_instances` row.
pub fn application_name(instance_id: Option<&str>) -> String {
    let mut name = format!("awa {}", crate::version::VERSION);
    if let Some(id) = instance_id {
        name.push(' ');
        name.push_str(id);
    }
    let mut end = name.len().min(63);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.truncate(end);
    name
}

/// [`application_name`] in SQL, over a `runtime_instances` row `ri`.
pub const APPLICATION_NAME_SQL: &str = "left('awa ' || ri.version || ' ' || ri.instance_id, 63)";

/// The session options of every connection of this binary: the
/// `awa.flip_aware` marker (a session without it may not enqueue once the
/// flip fenced pre-flip binaries; see the v3 migration) and the bound on
/// idling inside a transaction.
fn session_options(identity: &SessionIdentity) -> String {
    format!(
        "-c awa.flip_aware=on -c idle_in_transaction_session_timeout={}",
        identity.idle_in_transaction.as_millis()
    )
}

/// Open one connection and drive it on the runtime.
pub async fn connect(url: &str) -> Result<Client> {
    connect_with(url, "").await
}

/// [`connect`], with `extra` server options (`-c name=value ...`) after
/// this binary's own: for a caller whose sessions need settings of their
/// own (the rehearsal's monitor and audits turn JIT off).
pub async fn connect_with(url: &str, extra: &str) -> Result<Client> {
    let connect_error = |e: &tokio_postgres::Error| Error::Connect {
        target: crate::redact::redact(url),
        detail: crate::error::describe(e),
        sqlstate: e.code().map(|c| c.code().to_owned()),
    };
    let mut config: Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| connect_error(&e))?;
    let identity = IDENTITY.get().cloned().unwrap_or(SessionIdentity {
        instance_id: None,
        idle_in_transaction: DEFAULT_IDLE_IN_TRANSACTION,
    });
    if config.get_application_name().is_none() {
        config.application_name(application_name(identity.instance_id.as_deref()));
    }
    let mut options = match config.get_options() {
        Some(given) => format!("{given} {}", session_options(&identity)),
        None => session_options(&identity),
    };
    if !extra.is_empty() {
        options.push(' ');
        options.push_str(extra);
    }
    config.options(&options);
    let (client, connection) = config.connect(NoTls).await.map_err(|e| connect_error(&e))?;
    tokio::spawn(async move {
        // The client sees the failure on its next call; nothing to do here.
        let _ = connection.await;
    });
    Ok(client)
}

/// A connection that comes back after transient failures.
pub struct Conn {
    url: String,
    client: Option<Client>,
    /// Prepared hot-path statements of the current client, by SQL text.
    prepared: HashMap<&'static str, Statement>,
}

impl Conn {
    /// Connect now; a failure here is reported, not retried.
    pub async fn open(url: &str) -> Result<Conn> {
        let client = connect(url).await?;
        Ok(Conn {
            url: url.to_string(),
            client: Some(client),
            prepared: HashMap::new(),
        })
    }

    /// Open a task's connection, or report the failure as fatal.
    pub(crate) async fn open_or_report(
        url: &str,
        fatal: &tokio::sync::mpsc::Sender<Error>,
    ) -> Option<Conn> {
        match Conn::open(url).await {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = fatal.send(e).await;
                None
            }
        }
    }

    /// The live client, reconnecting first if the last one died.
    pub async fn client(&mut self) -> Result<&Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.client = None;
            self.prepared.clear();
            self.client = Some(connect(&self.url).await?);
        }
        Ok(self.client.as_ref().expect("just connected"))
    }

    /// The live client for a transaction.
    pub async fn client_mut(&mut self) -> Result<&mut Client> {
        self.client().await?;
        Ok(self.client.as_mut().expect("just connected"))
    }

    /// Forget the client after a transient error so the next call
    /// reconnects.
    pub fn reset(&mut self) {
        self.client = None;
        self.prepared.clear();
    }

    /// `sql` prepared once per connection: hot-path statements skip the
    /// parse and plan of every call.
    pub async fn prepare(&mut self, sql: &'static str) -> Result<Statement> {
        self.client().await?;
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let client = self.client.as_ref().expect("just connected");
        let stmt = client
            .prepare(sql)
            .await
            .map_err(|e| Error::db("preparing a statement", e))?;
        self.prepared.insert(sql, stmt.clone());
        Ok(stmt)
    }
}

/// How long a task keeps retrying transient failures: the clock starts
/// at the first failure of a run of failures and resets on success.
#[derive(Debug)]
pub struct Patience {
    limit: Duration,
    since: Option<Instant>,
}

impl Patience {
    /// Allow runs of failures up to `limit`.
    pub fn new(limit: Duration) -> Patience {
        Patience { limit, since: None }
    }

    /// The operation succeeded.
    pub fn ok(&mut self) {
        self.since = None;
    }

    /// `what` failed with `e`: give the error back when it is permanent
    /// or patience ran out; otherwise say so on stderr and return `None`
    /// (the caller resets its connection and retries).
    pub fn failed(&mut self, what: &str, e: Error) -> Option<Error> {
        if !e.is_transient() {
            return Some(e);
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() > self.limit {
            return Some(e);
        }
        eprintln!("awa: {what} failed, retrying after reconnecting: {e}");
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn patience_gives_up_on_permanent_errors_at_once_and_on_transient_ones_late() {
        let permanent = || super::Error::Refused("no".into());
        let transient = || super::Error::Connect {
            target: "x".into(),
            detail: "down".into(),
            sqlstate: None,
        };
        let mut p = super::Patience::new(std::time::Duration::from_millis(30));
        assert!(p.failed("x", permanent()).is_some());
        assert!(p.failed("x", transient()).is_none());
        std::thread::sleep(std::time::Duration::from_millis(40));
        assert!(p.failed("x", transient()).is_some());
        p.ok();
        assert!(p.failed("x", transient()).is_none());
    }

    #[test]
    fn application_names_carry_the_version_and_instance_within_63_bytes() {
        let v = crate::version::VERSION;
        assert_eq!(super::application_name(None), format!("awa {v}"));
        assert_eq!(
            super::application_name(Some("worker-1-abc")),
            format!("awa {v} worker-1-abc")
        );
        let long = "w".repeat(80);
        assert_eq!(super::application_name(Some(&long)).len(), 63);
    }
}
