//! Rotation and prune of the three slot rings (maintenance leader only),
//! under either cursor authority (ADR-040).
//!
//! - `columns` (compat): the singleton `FOR UPDATE` serialises rotators
//!   (0.6.2's and ours) and pruners. We take it before reading the
//!   authority, backfill every ledger generation a 0.6 rotator advanced
//!   past, CAS the columns and append the ledger, so the ledger is a
//!   faithful copy ready to promote.
//! - `ledger`: a per-ring `pg_try_advisory_xact_lock` serialises rotate and
//!   prune (a rotate skips under contention); rotation appends one ledger
//!   row with `ON CONFLICT (generation) DO NOTHING` as the compare-and-swap;
//!   per-slot generations are derived (`slot = generation mod slot_count`);
//!   prune appends rollup deltas. Nothing is UPDATEd: no dead tuples.

use super::Ring;
use super::authority::{self, Authority};
use super::rotation_ledger::backfill;
use crate::error::{Error, Result};
use crate::failpoint;
use std::time::Duration;
use tokio_postgres::{Client, GenericClient, Transaction};

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
    /// Ledger mode: another session holds the ring's advisory lock.
    Contended,
    /// Ledger mode: a competitor appended this generation first.
    LostRace { generation: i64 },
}

/// What a prune tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "prune", rename_all = "snake_case")]
pub enum Pruned {
    /// The slot's partitions were truncated; `archived` terminal outcomes
    /// were copied out first.
    Truncated {
        slot: i32,
        generation: i64,
        archived: i64,
    },
    /// Nothing to do: the oldest sealed slot is empty.
    Empty,
    /// The slot still holds live work of its generation.
    Live { slot: i32, generation: i64 },
    /// Another session held the slot's partitions or the ring's lock.
    Busy,
}

/// A cursor.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    slot_count: i32,
    slot: i32,
    generation: i64,
}

/// The advisory lock key of a ring in ledger mode.
fn ring_lock_key(ring: Ring) -> i64 {
    0x6177_615f_7269_6e00
        + match ring {
            Ring::Queue => 1,
            Ring::Claim => 2,
            Ring::Lease => 3,
        }
}

async fn lock_columns(tx: &Transaction<'_>, ring: Ring) -> Result<Cursor> {
    let sql = format!(
        "SELECT slot_count, current_slot, generation FROM awa.{}_ring_state FOR UPDATE",
        ring.name()
    );
    let row = tx
        .query_one(&sql, &[])
        .await
        .map_err(|e| Error::db(format!("locking the {} ring cursor", ring.name()), e))?;
    Ok(Cursor {
        slot_count: row.get(0),
        slot: row.get(1),
        generation: row.get(2),
    })
}

async fn slot_count(client: &impl GenericClient, ring: Ring) -> Result<i32> {
    let sql = format!("SELECT slot_count FROM awa.{}_ring_state", ring.name());
    Ok(client
        .query_one(&sql, &[])
        .await
        .map_err(|e| Error::db("reading the ring's slot count", e))?
        .get(0))
}

async fn ledger_cursor(client: &impl GenericClient, ring: Ring, slot_count: i32) -> Result<Cursor> {
    let sql = format!(
        "SELECT slot, generation FROM awa.{}_ring_rotations ORDER BY generation DESC LIMIT 1",
        ring.name()
    );
    let row = client
        .query_opt(&sql, &[])
        .await
        .map_err(|e| Error::db(format!("reading the {} ledger", ring.name()), e))?
        .ok_or_else(|| Error::Db {
            context: format!("reading the {} ledger", ring.name()),
            detail: "the ledger is empty".into(),
            transient: false,
            sqlstate: None,
        })?;
    Ok(Cursor {
        slot_count,
        slot: row.get(0),
        generation: row.get(1),
    })
}

async fn exists(client: &impl GenericClient, sql: &str, what: &str) -> Result<bool> {
    Ok(client
        .query_one(sql, &[])
        .await
        .map_err(|e| Error::db(what.to_string(), e))?
        .get(0))
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

/// Where rotation looks for rows before it calls the ring idle: the whole
/// ring (the seeded defect looks at the current slot only).
fn idle_scope(current: i32) -> Option<i32> {
    failpoint::armed(failpoint::ROTATE_IDLE_ON_CURRENT_SLOT).then_some(current)
}

/// The slot that must be empty before the cursor advances into `next`:
/// `next` itself (the seeded defect checks the current slot instead).
fn checked_before_advance(current: i32, next: i32) -> i32 {
    if failpoint::armed(failpoint::ROTATE_CHECKS_CURRENT_SLOT) {
        current
    } else {
        next
    }
}

/// Advance the ring's cursor by one slot under the current authority.
// Long on purpose: one transaction under the ring singleton's lock that
// reads, decides and writes in order (each seeded defect's failpoint marks
// the decision it changes); split, the lock's scope would no longer show
// in one place.
pub async fn rotate(client: &mut Client, ring: Ring) -> Result<Rotated> {
    let early = authority::read(&*client).await?;
    if early == Authority::Ledger {
        return rotate_ledger(client, ring).await;
    }
    let stale_read = failpoint::armed(failpoint::AUTHORITY_BEFORE_LOCK);
    if stale_read {
        // The seeded defect decides on the unlocked read; the pause widens
        // the window in which a flip can commit in between.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let tx = client
        .transaction()
        .await
        .map_err(|e| Error::db("starting a rotation", e))?;
    let cur = lock_columns(&tx, ring).await?;
    // Read the authority only under the singleton lock: the flip takes the
    // same lock, so the answer cannot change before we commit.
    if !stale_read && authority::read(&tx).await? == Authority::Ledger {
        drop(tx);
        return rotate_ledger(client, ring).await;
    }
    let only_one = failpoint::armed(failpoint::COMPAT_BACKFILL_ONE);
    backfill(&tx, ring.name(), cur.slot_count, cur.generation, only_one).await?;
    if !exists(
        &tx,
        &any_rows_sql(ring, idle_scope(cur.slot)),
        "checking whether the ring is idle",
    )
    .await?
    {
        tx.commit()
            .await
            .map_err(|e| Error::db("committing a rotation", e))?;
        return Ok(Rotated::IdleSkip);
    }
    let next = (cur.slot + 1).rem_euclid(cur.slot_count);
    if exists(
        &tx,
        &any_rows_sql(ring, Some(checked_before_advance(cur.slot, next))),
        "checking the next slot",
    )
    .await?
    {
        tx.commit()
            .await
            .map_err(|e| Error::db("committing a rotation", e))?;
        return Ok(Rotated::NextSlotBusy { slot: next });
    }
    let generation = cur.generation + 1;
    let advance = format!(
        "UPDATE awa.{}_ring_state SET current_slot = $1, generation = $2",
        ring.name()
    );
    tx.execute(&advance, &[&next, &generation])
        .await
        .map_err(|e| Error::db(format!("advancing the {} ring cursor", ring.name()), e))?;
    // The opened slot's generation is what a compat prune (0.6's, and
    // ours under `columns`) reads to tell the slot's live work.
    if !failpoint::armed(failpoint::COMPAT_SKIPS_SLOT_GENERATION) {
        let open = format!(
            "UPDATE awa.{}_ring_slots SET generation = $2 WHERE slot = $1",
            ring.name()
        );
        tx.execute(&open, &[&next, &generation])
            .await
            .map_err(|e| Error::db(format!("opening {} slot {next}", ring.name()), e))?;
    }
    let shadow = format!(
        "INSERT INTO awa.{}_ring_rotations (generation, slot) VALUES ($1, $2) ON CONFLICT (generation) DO NOTHING",
        ring.name()
    );
    tx.execute(&shadow, &[&generation, &next])
        .await
        .map_err(|e| Error::db(format!("shadowing the {} ledger", ring.name()), e))?;
    tx.commit()
        .await
        .map_err(|e| Error::db("committing a rotation", e))?;
    Ok(Rotated::Advanced {
        slot: next,
        generation,
    })
}

async fn try_ring_lock(tx: &Transaction<'_>, ring: Ring) -> Result<bool> {
    Ok(tx
        .query_one(
            "SELECT pg_try_advisory_xact_lock($1)",
            &[&ring_lock_key(ring)],
        )
        .await
        .map_err(|e| Error::db(format!("taking the {} ring lock", ring.name()), e))?
        .get(0))
}

async fn rotate_ledger(client: &mut Client, ring: Ring) -> Result<Rotated> {
    let n = slot_count(&*client, ring).await?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| Error::db("starting a rotation", e))?;
    if !try_ring_lock(&tx, ring).await? {
        return Ok(Rotated::Contended);
    }
    let cur = ledger_cursor(&tx, ring, n).await?;
    if !exists(
        &tx,
        &any_rows_sql(ring, idle_scope(cur.slot)),
        "checking whether the ring is idle",
    )
    .await?
    {
        return Ok(Rotated::IdleSkip);
    }
    let next = (cur.slot + 1).rem_euclid(n);
    if exists(
        &tx,
        &any_rows_sql(ring, Some(checked_before_advance(cur.slot, next))),
        "checking the next slot",
    )
    .await?
    {
        return Ok(Rotated::NextSlotBusy { slot: next });
    }
    let generation = cur.generation + 1;
    let append = format!(
        "INSERT INTO awa.{}_ring_rotations (generation, slot) VALUES ($1, $2) ON CONFLICT (generation) DO NOTHING",
        ring.name()
    );
    let n_rows = tx
        .execute(&append, &[&generation, &next])
        .await
        .map_err(|e| Error::db(format!("appending the {} ledger", ring.name()), e))?;
    tx.commit()
        .await
        .map_err(|e| Error::db("committing a rotation", e))?;
    Ok(if n_rows == 1 {
        Rotated::Advanced {
            slot: next,
            generation,
        }
    } else {
        Rotated::LostRace { generation }
    })
}

const ARCHIVE_SLOT: &str = "INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
SELECT job_id, run_lease, attempt, outcome, queue, priority, kind, closed_at FROM awa.claim_closures_{slot} WHERE terminal";
const ROLLUP_SLOT: &str = "INSERT INTO awa.queue_terminal_rollups (queue, priority, state, count)
SELECT queue, priority, outcome, count(*) FROM awa.claim_closures_{slot} WHERE terminal GROUP BY 1, 2, 3
ON CONFLICT (queue, priority, state) DO UPDATE SET count = queue_terminal_rollups.count + excluded.count";
const DELTA_SLOT: &str = "INSERT INTO awa.queue_terminal_rollup_deltas (queue, priority, state, count)
SELECT queue, priority, outcome, count(*) FROM awa.claim_closures_{slot} WHERE terminal GROUP BY 1, 2, 3";

/// The session's `lock_timeout`, before a prune bounds its lock wait.
const CURRENT_LOCK_TIMEOUT: &str = "SELECT current_setting('lock_timeout')";
/// Puts it back for the rest of the prune's transaction.
const RESTORE_LOCK_TIMEOUT: &str = "SELECT set_config('lock_timeout', $1, true)";

/// Prune the oldest sealed slot (the one after the current slot), after
/// proving nothing live of its generation remains, re-checked under the
/// partitions' ACCESS EXCLUSIVE lock. Terminal closures are archived and
/// counted (rollups in compat mode, deltas in ledger mode) first.
///
/// Each partition's lock is waited for at most `lock_wait` (the leader
/// passes `Timings::prune_lock_wait`, a fraction of `stale_after`; the
/// claim ring has two tables, so twice that at worst): the request queues
/// every other user of the ring's tables behind it while it waits.
// Long on purpose: one transaction whose every early return (busy, empty,
// live) rolls back before anything is written, and whose check, bounded
// lock, re-check under that lock, archive and truncate must run in this
// order; split, the order and the rollbacks would be spread over
// functions that each borrow the transaction.
pub async fn prune(client: &mut Client, ring: Ring, lock_wait: Duration) -> Result<Pruned> {
    let mode = authority::read(&*client).await?;
    let n = slot_count(&*client, ring).await?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| Error::db("starting a prune", e))?;
    let (slot, generation) = match mode {
        Authority::Columns => {
            let cur = lock_columns(&tx, ring).await?;
            if authority::read(&tx).await? == Authority::Ledger {
                // Flipped while we waited for the lock: next tick.
                return Ok(Pruned::Busy);
            }
            let slot = (cur.slot + 1).rem_euclid(cur.slot_count);
            let sql = format!(
                "SELECT generation FROM awa.{}_ring_slots WHERE slot = $1",
                ring.name()
            );
            let g: i64 = tx
                .query_one(&sql, &[&slot])
                .await
                .map_err(|e| Error::db(format!("reading {} slot {slot}", ring.name()), e))?
                .get(0);
            if g >= cur.generation {
                return Ok(Pruned::Empty);
            }
            (slot, g)
        }
        Authority::Ledger => {
            if !try_ring_lock(&tx, ring).await? {
                return Ok(Pruned::Busy);
            }
            let cur = ledger_cursor(&tx, ring, n).await?;
            // Derived: the oldest sealed slot was last opened one wrap ago.
            let slot = (cur.slot + 1).rem_euclid(n);
            let wrap = if failpoint::armed(failpoint::PRUNE_WRONG_GENERATION) {
                i64::from(n)
            } else {
                i64::from(n) - 1
            };
            (slot, cur.generation - wrap)
        }
    };
    if !exists(
        &tx,
        &any_rows_sql(ring, Some(slot)),
        "checking the slot to prune",
    )
    .await?
    {
        return Ok(Pruned::Empty);
    }
    let live = live_sql(ring, slot, generation);
    if exists(&tx, &live, "checking the slot for live work").await? {
        return Ok(Pruned::Live { slot, generation });
    }
    let parts: Vec<String> = ring
        .tables()
        .iter()
        .map(|t| format!("awa.{t}_{slot}"))
        .collect();
    // The bound is for the lock alone: the session's own lock_timeout is
    // put back for the archive, rollup and truncate that follow.
    let session_timeout: String = tx
        .query_one(CURRENT_LOCK_TIMEOUT, &[])
        .await
        .map_err(|e| Error::db("reading lock_timeout before a prune", e))?
        .get(0);
    let lock = format!(
        "SET LOCAL lock_timeout = '{}ms'; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        lock_wait.as_millis().max(1),
        parts.join(", ")
    );
    if let Err(e) = tx.batch_execute(&lock).await {
        if e.code()
            .is_some_and(|c| c.code() == "55P03" || c.code() == "40P01")
        {
            return Ok(Pruned::Busy);
        }
        return Err(Error::db("locking the slot to prune", e));
    }
    tx.execute(RESTORE_LOCK_TIMEOUT, &[&session_timeout])
        .await
        .map_err(|e| Error::db("restoring lock_timeout after a prune's lock", e))?;
    if exists(&tx, &live, "re-checking the slot under its lock").await? {
        return Ok(Pruned::Live { slot, generation });
    }
    let mut archived = 0;
    if ring == Ring::Claim {
        let s = slot.to_string();
        archived = tx
            .execute(&ARCHIVE_SLOT.replace("{slot}", &s), &[])
            .await
            .map_err(|e| Error::db("archiving terminal outcomes", e))? as i64;
        let count = if mode == Authority::Ledger {
            DELTA_SLOT
        } else {
            ROLLUP_SLOT
        };
        tx.execute(&count.replace("{slot}", &s), &[])
            .await
            .map_err(|e| Error::db("counting terminal outcomes", e))?;
    }
    tx.batch_execute(&format!("TRUNCATE {}", parts.join(", ")))
        .await
        .map_err(|e| Error::db(format!("truncating {} slot {slot}", ring.name()), e))?;
    tx.commit()
        .await
        .map_err(|e| Error::db("committing a prune", e))?;
    Ok(Pruned::Truncated {
        slot,
        generation,
        archived,
    })
}
