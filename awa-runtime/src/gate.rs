//! The start gate (`AWA_START_GATE_KEY`): a command that a rehearsal must
//! have act at a precise moment (a flip the instant a ring condition
//! holds) is started ahead and waits here, until it can share an advisory
//! lock the rehearsal holds exclusively. Released, it goes on within a few
//! milliseconds, however long its process or container took to start.
//!
//! It waits between statements, never inside one: a statement blocked on
//! a lock keeps a snapshot, and a snapshot older than 5 s pins the MVCC
//! horizon, so the maintenance leader's folds would stand down for as long
//! as the gate stays closed and the rehearsal would watch its own gate
//! grow the ledgers. While it waits it holds the arrival key
//! ([`arrival_key`]) shared, so the holder can see it has arrived.

use std::time::Duration;

use crate::error::{Error, Result};

/// The key the rehearsal holds while a gated command waits.
pub const START_GATE_KEY: i64 = 0x6177_615f_6761_7465;

/// How often a waiting command tries the gate.
const POLL: Duration = Duration::from_millis(5);

const ARRIVE: &str = "SELECT pg_advisory_lock_shared($1)";
const TRY: &str = "SELECT pg_try_advisory_lock_shared($1)";
const LEAVE: &str = "SELECT pg_advisory_unlock_shared($1)";

/// The key a command holds (shared, at session level) while it waits at
/// the gate of `key`: what the holder looks for in `pg_locks`.
pub const fn arrival_key(key: i64) -> i64 {
    key ^ 1
}

/// Returns once the gate's holder lets go of `key` (no timeout: the
/// holder opens it or ends the command).
pub async fn wait(url: &str, key: i64) -> Result<()> {
    let client = crate::db::connect(url).await?;
    let arrival = arrival_key(key);
    client
        .query_one(ARRIVE, &[&arrival])
        .await
        .map_err(|e| Error::db("arriving at the start gate", e))?;
    eprintln!("awa: waiting at the start gate (advisory lock {key}, AWA_START_GATE_KEY)");
    loop {
        let open: bool = client
            .query_one(TRY, &[&key])
            .await
            .map_err(|e| Error::db("waiting at the start gate", e))?
            .get(0);
        if open {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    for k in [key, arrival] {
        client
            .query_one(LEAVE, &[&k])
            .await
            .map_err(|e| Error::db("leaving the start gate", e))?;
    }
    eprintln!("awa: the start gate opened");
    Ok(())
}
