//! Connecting to PostgreSQL, its errors on one line, and the shape of the
//! schema under test that every reader of it must ask before reading:
//! for the driver, the monitor, reconciliation and the schema comparison,
//! so none of them reaches into another for it.

use tokio_postgres::Client;

/// The rehearsal's own sessions run without JIT. Its statements are small
/// but some are planned with large estimates (placement's union of every
/// ring partition joined to the cursors), and JIT compiled each of them
/// afresh: 1.6 s of a monitor tick planned at 250 ms on a quiet machine,
/// more under load, so liveness samples came seconds apart and a stalled
/// ring went unseen. The runtime's sessions keep the server's setting.
pub const HARNESS_OPTIONS: &str = "-c jit=off";

/// A connection the server refused or never answered: its one-line
/// message, and the server's SQLSTATE when it answered, for a caller that
/// decides on the kind of failure ([`ConnectError::refused_login`]).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConnectError {
    message: String,
    sqlstate: Option<String>,
}

impl ConnectError {
    /// A failure worded `message`, with the server's `sqlstate` if it answered.
    pub fn new(message: impl Into<String>, sqlstate: Option<&str>) -> ConnectError {
        ConnectError {
            message: message.into(),
            sqlstate: sqlstate.map(str::to_owned),
        }
    }

    /// The server's SQLSTATE, when it answered and refused.
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// The server refused who connected or where: a login it did not
    /// accept (SQLSTATE class 28: a wrong password, an unknown role) or a
    /// database it does not have (3D000). The URL is wrong, not the
    /// server, which answered.
    pub fn refused_login(&self) -> bool {
        self.sqlstate()
            .is_some_and(|code| code.starts_with("28") || code == "3D000")
    }
}

/// Connects (the runtime crate's connect: it drives the connection and
/// names the transport error's causes), with [`HARNESS_OPTIONS`].
pub async fn connect(url: &str) -> Result<Client, ConnectError> {
    let client = awa_runtime::db::connect_with(url, HARNESS_OPTIONS)
        .await
        .map_err(|e| match e {
            awa_runtime::error::Error::Connect {
                target,
                detail,
                sqlstate,
            } => ConnectError::new(
                format!("could not connect to {target}: {detail}"),
                sqlstate.as_deref(),
            ),
            other => ConnectError::new(other.to_string(), None),
        })?;
    Ok(client)
}

/// The server's message (with detail) or the client error, on one line.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_owned(),
        },
        None => e.to_string(),
    }
}

/// An SQL expression: whether the rings have the singleton cursor columns
/// (`current_slot`, `generation`), which a contract migration drops. The
/// monitor, the probe and the hold's conditions read them only where this
/// holds; their absence is a fact of the schema under test.
pub const CURSOR_COLUMNS_EXIST: &str = "EXISTS (SELECT 1 FROM pg_attribute \
     WHERE attrelid = to_regclass('awa.queue_ring_state') AND attname = 'current_slot' \
     AND NOT attisdropped)";

/// The server refused a statement as not fitting its schema (SQLSTATE
/// class 42: a table, column or function missing, or a privilege), as
/// against the server going away, a lock or a timeout: its message and
/// SQLSTATE (neither carries a DSN or a parameter). The monitor and the
/// hold's conditions read a schema that migrations change under them and
/// must tell the two apart.
pub fn refused_for_schema(e: &tokio_postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    let code = db.code().code();
    code.starts_with("42")
        .then(|| format!("{} (SQLSTATE {code})", db.message()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use awa_harness::pgtemp::Cluster;

    /// The kind of a refused connection is read from the server's own
    /// answer: a database or a role it does not have is a refused login;
    /// a server that does not answer has no SQLSTATE at all.
    #[tokio::test]
    async fn a_refused_login_is_told_by_the_servers_sqlstate_not_by_its_words() {
        let cluster = Cluster::start().await.expect("a throwaway cluster");
        let no_database = connect(&cluster.url("no_such_database")).await.unwrap_err();
        assert_eq!(no_database.sqlstate(), Some("3D000"), "{no_database}");
        assert!(no_database.refused_login(), "{no_database}");
        let url = format!(
            "postgres://no_such_role@127.0.0.1:{}/postgres",
            cluster.port()
        );
        let no_role = connect(&url).await.unwrap_err();
        assert!(
            no_role.sqlstate().is_some_and(|c| c.starts_with("28")),
            "{no_role}"
        );
        assert!(no_role.refused_login(), "{no_role}");
        assert!(connect(&cluster.url("postgres")).await.is_ok());
        drop(cluster);
        let silent = connect("postgres://postgres@127.0.0.1:1/postgres")
            .await
            .unwrap_err();
        assert_eq!(silent.sqlstate(), None, "{silent}");
        assert!(!silent.refused_login(), "{silent}");
    }
}
