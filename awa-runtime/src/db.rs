//! Connections. Each long-running task owns one `Conn`, which reconnects
//! lazily after a transient failure (a server restart, a dropped socket).

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls, Statement};

/// Open one connection and drive it on the runtime.
pub async fn connect(url: &str) -> Result<Client> {
    let (client, connection) =
        tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| Error::Connect {
                target: crate::redact::redact(url),
                detail: crate::error::describe(&e),
            })?;
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
        };
        let mut p = super::Patience::new(std::time::Duration::from_millis(30));
        assert!(p.failed("x", permanent()).is_some());
        assert!(p.failed("x", transient()).is_none());
        std::thread::sleep(std::time::Duration::from_millis(40));
        assert!(p.failed("x", transient()).is_some());
        p.ok();
        assert!(p.failed("x", transient()).is_none());
    }
}
