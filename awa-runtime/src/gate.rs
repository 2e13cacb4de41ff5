//! The start gate (`AWA_START_GATE_KEY`): a command that a rehearsal must
//! have act at a precise moment (a flip the instant a ring condition
//! holds) is started ahead and waits here, on a shared advisory lock the
//! rehearsal holds exclusively. Released, it goes on within milliseconds,
//! however long its process or container took to start.

use crate::error::{Error, Result};

/// The key the rehearsal holds while a gated command waits.
pub const START_GATE_KEY: i64 = 0x6177_615f_6761_7465;

/// Waits while the gate's holder keeps it closed (no lock or statement
/// timeout: the holder opens it or ends the command).
const WAIT: &str = "SELECT pg_advisory_lock_shared($1)";
const LEAVE: &str = "SELECT pg_advisory_unlock_shared($1)";
const NO_TIMEOUTS: &str = "SET lock_timeout = 0; SET statement_timeout = 0";

/// Blocks until the advisory lock `key` can be shared, then releases it.
pub async fn wait(url: &str, key: i64) -> Result<()> {
    let client = crate::db::connect(url).await?;
    client
        .batch_execute(NO_TIMEOUTS)
        .await
        .map_err(|e| Error::db("preparing to wait at the start gate", e))?;
    eprintln!("awa: waiting at the start gate (advisory lock {key}, AWA_START_GATE_KEY)");
    client
        .query_one(WAIT, &[&key])
        .await
        .map_err(|e| Error::db("waiting at the start gate", e))?;
    client
        .query_one(LEAVE, &[&key])
        .await
        .map_err(|e| Error::db("leaving the start gate", e))?;
    eprintln!("awa: the start gate opened");
    Ok(())
}
