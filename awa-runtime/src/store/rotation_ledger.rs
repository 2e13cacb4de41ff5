//! The rotation ledger of a ring (`awa.<ring>_ring_rotations`, ADR-040):
//! its generations appended up to a cursor, and checked for gaps. Both the
//! compat rotator (`rings`) and the flip (`authority`) keep the ledger a
//! faithful copy of the columns with these, so they sit below both.

use crate::error::{Error, Result};
use tokio_postgres::{GenericClient, Transaction};

/// Append every ledger generation after the ledger's max up to `through`
/// (or only the next one, when `only_one`): the compat reconcile after an
/// interleaved 0.6 rotator. Returns how many rows were added.
pub(crate) async fn backfill(
    tx: &Transaction<'_>,
    ring: &str,
    slot_count: i32,
    through: i64,
    only_one: bool,
) -> Result<u64> {
    let sql = format!(
        "INSERT INTO awa.{ring}_ring_rotations (generation, slot)
         SELECT g, (g % $1::int)::int FROM generate_series(
             (SELECT coalesce(max(generation), -1) + 1 FROM awa.{ring}_ring_rotations),
             CASE WHEN $3 THEN LEAST($2, (SELECT coalesce(max(generation), -1) + 1 FROM awa.{ring}_ring_rotations)) ELSE $2 END) g
         ON CONFLICT (generation) DO NOTHING"
    );
    tx.execute(&sql, &[&slot_count, &through, &only_one])
        .await
        .map_err(|e| Error::db(format!("backfilling the {ring} ledger"), e))
}

/// Generations missing from the ledger's last wrap (`slot_count` rows
/// ending at its max), and rows whose slot is not `generation mod slot_count`.
pub(crate) async fn ledger_gaps(
    client: &impl GenericClient,
    ring: &str,
    slot_count: i32,
) -> Result<i64> {
    let sql = format!(
        "WITH top AS (SELECT max(generation) AS g FROM awa.{ring}_ring_rotations),
              wrap AS (SELECT x FROM top, generate_series(greatest(0, top.g - $1::int + 1), top.g) x)
         SELECT (SELECT count(*) FROM wrap WHERE NOT EXISTS (SELECT 1 FROM awa.{ring}_ring_rotations r WHERE r.generation = wrap.x))
              + (SELECT count(*) FROM awa.{ring}_ring_rotations r, top WHERE r.generation > top.g - $1::int AND r.slot <> (r.generation % $1::int))"
    );
    Ok(client
        .query_one(&sql, &[&slot_count])
        .await
        .map_err(|e| Error::db(format!("verifying the {ring} ledger"), e))?
        .get(0))
}
