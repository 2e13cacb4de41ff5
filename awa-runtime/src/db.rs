//! Connections. Each long-running task owns one `Conn`, which reconnects
//! lazily after a transient failure (a server restart, a dropped socket).

use crate::error::{Error, Result};
use std::collections::HashMap;
use tokio_postgres::{Client, NoTls, Statement};

/// Open one connection and drive it on the runtime.
pub async fn connect(url: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(|e| Error::Connect {
        target: redact(url),
        detail: crate::error::describe(&e),
    })?;
    tokio::spawn(async move {
        // The client sees the failure on its next call; nothing to do here.
        let _ = connection.await;
    });
    Ok(client)
}

/// Hide a password in a URL before it reaches a message.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &url[s + 3..at];
            match cred.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &cred[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
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
        Ok(Conn { url: url.to_string(), client: Some(client), prepared: HashMap::new() })
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
        let stmt = client.prepare(sql).await.map_err(|e| Error::db("preparing a statement", e))?;
        self.prepared.insert(sql, stmt.clone());
        Ok(stmt)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords_only() {
        assert_eq!(super::redact("postgres://u:secret@h:5/db"), "postgres://u:***@h:5/db");
        assert_eq!(super::redact("postgres://u@h:5/db"), "postgres://u@h:5/db");
        assert_eq!(super::redact("host=x"), "host=x");
    }
}
