//! Connecting to PostgreSQL, and its errors on one line: for the driver,
//! the monitor, reconciliation and the schema comparison, so none of them
//! reaches into another for it.

use tokio_postgres::Client;

/// The rehearsal's own sessions run without JIT. Its statements are small
/// but some are planned with large estimates (placement's union of every
/// ring partition joined to the cursors), and JIT compiled each of them
/// afresh: 1.6 s of a monitor tick planned at 250 ms on a quiet machine,
/// more under load, so liveness samples came seconds apart and a stalled
/// ring went unseen. The runtime's sessions keep the server's setting.
pub const HARNESS_OPTIONS: &str = "-c jit=off";

/// Connects (the runtime crate's connect: it drives the connection and
/// names the transport error's causes), with [`HARNESS_OPTIONS`].
// A String: every caller wraps it in its own error or message; the one that sorts a refusal
// (pipeline's database_refused) reads the SQLSTATE, which the runtime's connect error has as text only.
pub async fn connect(url: &str) -> Result<Client, String> {
    let client = awa_runtime::db::connect_with(url, HARNESS_OPTIONS)
        .await
        .map_err(|e| match e {
            awa_runtime::error::Error::Connect { target, detail } => {
                format!("could not connect to {target}: {detail}")
            }
            other => other.to_string(),
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
