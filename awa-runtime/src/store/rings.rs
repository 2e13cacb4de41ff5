//! Rotation and prune of the three slot rings (maintenance leader only).
//!
//! Both read and write the singleton cursor columns directly, under the
//! singleton's `FOR UPDATE`, which serialises rotators and pruners.

use super::Ring;
use crate::error::{Error, Result};
use tokio_postgres::{Client, Transaction};

/// What a rotation tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "rotate", rename_all = "snake_case")]
pub enum Rotated {
    /// The cursor moved to `slot` at `generation`.
    Advanced { slot: i32, generation: i64 },
    /// The whole ring is empty: nothing to seal.
    IdleSkip,
    /// The next slot still holds rows (it has not been pruned).
    NextSlotBusy { slot: i32 },
}

/// What a prune tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "prune", rename_all = "snake_case")]
pub enum Pruned {
    /// The slot's partitions were truncated; `archived` terminal outcomes
    /// were copied out first.
    Truncated { slot: i32, generation: i64, archived: i64 },
    /// Nothing to do: the oldest sealed slot is empty.
    Empty,
    /// The slot still holds live work of its generation.
    Live { slot: i32, generation: i64 },
    /// Another session held the slot's partitions; try next tick.
    Busy,
}

/// The cursor as the columns hold it.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    slot_count: i32,
    slot: i32,
    generation: i64,
}

async fn lock_cursor(tx: &Transaction<'_>, ring: Ring) -> Result<Cursor> {
    let sql = format!(
        "SELECT slot_count, current_slot, generation FROM awa.{}_ring_state FOR UPDATE",
        ring.name()
    );
    let row = tx.query_one(&sql, &[]).await.map_err(|e| Error::db(format!("locking the {} ring cursor", ring.name()), e))?;
    Ok(Cursor { slot_count: row.get(0), slot: row.get(1), generation: row.get(2) })
}

async fn exists(tx: &Transaction<'_>, sql: &str, what: &str) -> Result<bool> {
    Ok(tx.query_one(sql, &[]).await.map_err(|e| Error::db(what.to_string(), e))?.get(0))
}

/// `EXISTS` over the given partitions of the ring (all of them for `None`).
fn any_rows_sql(ring: Ring, slot: Option<i32>) -> String {
    let parts: Vec<String> = ring
        .tables()
        .iter()
        .map(|t| match slot {
            Some(s) => format!("EXISTS (SELECT 1 FROM awa.{t}_{s})"),
            None => format!("EXISTS (SELECT 1 FROM awa.{t})"),
        })
        .collect();
    format!("SELECT {}", parts.join(" OR "))
}

/// Live work of `generation` in slot `slot`: unclaimed ready entries,
/// open claims (a receipt with no closure), unreleased leases.
fn live_sql(ring: Ring, slot: i32, generation: i64) -> String {
    match ring {
        Ring::Queue => format!("SELECT EXISTS (SELECT 1 FROM awa.queue_entries_{slot} WHERE generation = {generation})"),
        Ring::Claim => format!(
            "SELECT EXISTS (SELECT 1 FROM awa.claim_receipts_{slot} r WHERE r.generation = {generation}
               AND NOT EXISTS (SELECT 1 FROM awa.claim_closures c WHERE c.job_id = r.job_id AND c.run_lease = r.run_lease))"
        ),
        Ring::Lease => format!("SELECT EXISTS (SELECT 1 FROM awa.leases_{slot} WHERE generation = {generation})"),
    }
}

/// Advance the ring's cursor by one slot.
pub async fn rotate(client: &mut Client, ring: Ring) -> Result<Rotated> {
    let tx = client.transaction().await.map_err(|e| Error::db("starting a rotation", e))?;
    let cur = lock_cursor(&tx, ring).await?;
    if !exists(&tx, &any_rows_sql(ring, None), "checking whether the ring is idle").await? {
        return Ok(Rotated::IdleSkip);
    }
    let next = (cur.slot + 1).rem_euclid(cur.slot_count);
    if exists(&tx, &any_rows_sql(ring, Some(next)), "checking the next slot").await? {
        return Ok(Rotated::NextSlotBusy { slot: next });
    }
    let generation = cur.generation + 1;
    let advance = format!("UPDATE awa.{}_ring_state SET current_slot = $1, generation = $2", ring.name());
    tx.execute(&advance, &[&next, &generation])
        .await
        .map_err(|e| Error::db(format!("advancing the {} ring cursor", ring.name()), e))?;
    let open = format!("UPDATE awa.{}_ring_slots SET generation = $2 WHERE slot = $1", ring.name());
    tx.execute(&open, &[&next, &generation])
        .await
        .map_err(|e| Error::db(format!("opening {} slot {next}", ring.name()), e))?;
    tx.commit().await.map_err(|e| Error::db("committing a rotation", e))?;
    Ok(Rotated::Advanced { slot: next, generation })
}

const ARCHIVE_SLOT: &str = "INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
SELECT job_id, run_lease, attempt, outcome, queue, priority, kind, closed_at FROM awa.claim_closures_{slot} WHERE terminal";
const ROLLUP_SLOT: &str = "INSERT INTO awa.queue_terminal_rollups (queue, priority, state, count)
SELECT queue, priority, outcome, count(*) FROM awa.claim_closures_{slot} WHERE terminal GROUP BY 1, 2, 3
ON CONFLICT (queue, priority, state) DO UPDATE SET count = queue_terminal_rollups.count + excluded.count";

/// Prune the oldest sealed slot (the one after the current slot), after
/// proving nothing live of its generation remains, re-checked under the
/// partitions' ACCESS EXCLUSIVE lock. Terminal closures are archived and
/// counted into the rollups before the truncate.
pub async fn prune(client: &mut Client, ring: Ring) -> Result<Pruned> {
    let tx = client.transaction().await.map_err(|e| Error::db("starting a prune", e))?;
    let cur = lock_cursor(&tx, ring).await?;
    let slot = (cur.slot + 1).rem_euclid(cur.slot_count);
    let sql = format!("SELECT generation FROM awa.{}_ring_slots WHERE slot = $1", ring.name());
    let generation: i64 = tx
        .query_one(&sql, &[&slot])
        .await
        .map_err(|e| Error::db(format!("reading {} slot {slot}", ring.name()), e))?
        .get(0);
    if generation >= cur.generation {
        return Ok(Pruned::Empty);
    }
    if !exists(&tx, &any_rows_sql(ring, Some(slot)), "checking the slot to prune").await? {
        return Ok(Pruned::Empty);
    }
    let live = live_sql(ring, slot, generation);
    if exists(&tx, &live, "checking the slot for live work").await? {
        return Ok(Pruned::Live { slot, generation });
    }
    let parts: Vec<String> = ring.tables().iter().map(|t| format!("awa.{t}_{slot}")).collect();
    let lock = format!("SET LOCAL lock_timeout = '2s'; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", parts.join(", "));
    if let Err(e) = tx.batch_execute(&lock).await {
        if e.code().is_some_and(|c| c.code() == "55P03" || c.code() == "40P01") {
            return Ok(Pruned::Busy);
        }
        return Err(Error::db("locking the slot to prune", e));
    }
    if exists(&tx, &live, "re-checking the slot under its lock").await? {
        return Ok(Pruned::Live { slot, generation });
    }
    let mut archived = 0;
    if ring == Ring::Claim {
        archived = tx
            .execute(&ARCHIVE_SLOT.replace("{slot}", &slot.to_string()), &[])
            .await
            .map_err(|e| Error::db("archiving terminal outcomes", e))? as i64;
        tx.execute(&ROLLUP_SLOT.replace("{slot}", &slot.to_string()), &[])
            .await
            .map_err(|e| Error::db("counting terminal outcomes into rollups", e))?;
    }
    tx.batch_execute(&format!("TRUNCATE {}", parts.join(", ")))
        .await
        .map_err(|e| Error::db(format!("truncating {} slot {slot}", ring.name()), e))?;
    tx.commit().await.map_err(|e| Error::db("committing a prune", e))?;
    Ok(Pruned::Truncated { slot, generation, archived })
}
