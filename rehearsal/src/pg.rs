//! Connecting to PostgreSQL: one function for the driver, the monitor
//! and reconciliation, so none of them reaches into another for it.

use tokio_postgres::Client;

/// Connects (the runtime crate's connect: it drives the connection and
/// names the transport error's causes).
pub async fn connect(url: &str) -> Result<Client, String> {
    let client = awa_runtime::db::connect(url).await.map_err(|e| match e {
        awa_runtime::error::Error::Connect { target, detail } => {
            format!("could not connect to {target}: {detail}")
        }
        other => other.to_string(),
    })?;
    Ok(client)
}
