//! `hold`: let the fleet run as it is (optionally beside a busy reader).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::super::state::GatedFlip;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use crate::matrix::{HeldRing, HoldStep, Until};
use crate::observe::{PartitionHold, StepOutcome, UntilRecord};

/// One read statement that keeps a snapshot (and so a `backend_xmin`)
/// for `$1` seconds, inside no transaction of its own.
const READ: &str = "SELECT pg_sleep($1::float8)";

/// `hold`: sleep for the duration (interrupted by Ctrl-C). With
/// `reads`, a client on its own connection runs back-to-back read
/// statements of that length meanwhile; the last one ends after the
/// hold (at most `reads` later).
pub(super) async fn hold(cx: &mut StepCtx<'_>, s: &HoldStep) -> Result<Done, Abort> {
    if let Some(until) = s.until {
        return hold_until(cx, s, until).await;
    }
    if let Some(ring) = s.lock_ring {
        if s.deadlock {
            return hold_deadlocking(cx, s, ring).await;
        }
        return hold_locking(cx, s, ring).await;
    }
    let Some(reads) = s.reads else {
        cx.cancel().sleep(s.duration.to_std()).await?;
        return Ok(Done::ok(format!("held {}", s.duration)));
    };
    let client = super::super::database::connect(&cx.db.url)
        .await
        .map_err(|e| Abort::Harness(format!("the reader of a hold could not connect: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let secs = reads.to_std().as_secs_f64();
        tokio::spawn(async move {
            let mut statements = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if client.execute(READ, &[&secs]).await.is_err() {
                    break;
                }
                statements += 1;
            }
            statements
        })
    };
    let slept = cx.cancel().sleep(s.duration.to_std()).await;
    stop.store(true, Ordering::Relaxed);
    let statements = reader.await.unwrap_or(0);
    slept?;
    Ok(Done::ok(format!(
        "held {} beside a client running {} of {reads}",
        s.duration,
        crate::observe::count(statements as u64, "read statement")
    )))
}

/// How often a `lock_ring` client looks for lock requests waiting on it.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// A `lock_ring` client holds the partitions for this many of the
/// leader's prune waits at a time, then lets go for [`GAP_WAITS`]: a
/// prune that comes in the first three quarters of a hold must give up, one
/// that comes later or in the gap prunes, so the ring never stalls.
const HELD_WAITS: u32 = 4;
const GAP_WAITS: u32 = 2;
/// The distinct sessions of the maintenance leader waiting for ACCESS
/// EXCLUSIVE on a partition of the tables `$1` that this session holds:
/// the leader's prune lock requests, and nothing else. The leader is the
/// session holding the leader's advisory lock `$2` (every release's
/// leader runs its duties on that connection, 0.6 included, which sets
/// no `application_name`); of its duties only a prune asks a ring
/// partition for ACCESS EXCLUSIVE (`LOCK TABLE` of the oldest sealed
/// slot's partitions; its `TRUNCATE` comes once it holds them). Anyone
/// else queued on the held ring (a migration's `ALTER`, an operator's
/// `LOCK`) is not the prune the hold is for.
const PRUNES_WAITING_ON_ME: &str = "
SELECT DISTINCT l.pid FROM pg_locks l
JOIN pg_inherits i ON i.inhrelid = l.relation
WHERE NOT l.granted AND l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock'
  AND i.inhparent IN (SELECT to_regclass(t) FROM unnest($1::text[]) AS t)
  AND pg_backend_pid() = ANY(pg_blocking_pids(l.pid))
  AND EXISTS (
      SELECT 1 FROM pg_locks x
      WHERE x.pid = l.pid AND x.granted AND x.locktype = 'advisory' AND x.objsubid = 1
        AND x.classid = ($2::bigint >> 32)::oid AND x.objid = ($2::bigint & 4294967295)::oid)";
const LET_GO: &str = "COMMIT";
/// The deadlocks the cell's database has counted so far.
const DEADLOCKS: &str = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()";
/// How often a `deadlock` client looks for a prune waiting on it: it must
/// close the cycle before the prune's session looks for one.
const DEADLOCK_POLL: std::time::Duration = std::time::Duration::from_millis(10);
/// A `deadlock` client's own session looks for a cycle only after this,
/// long after the prune's (whose database setting is a fraction of its
/// lock wait): the prune's session is the one that finds the cycle it
/// closed, and is rolled back; the client then gets its lock.
const CLIENT_DEADLOCK_TIMEOUT: &str = "SET LOCAL deadlock_timeout = '10s'";

/// `ring`'s tables, schema-qualified.
fn ring_tables(ring: HeldRing) -> Vec<String> {
    ring.ring()
        .tables()
        .iter()
        .map(|t| format!("awa.{t}"))
        .collect()
}

/// Opens a transaction holding every partition of `ring`'s tables as a
/// reporting transaction's reads do (ACCESS SHARE: no write waits on it,
/// a prune's ACCESS EXCLUSIVE does).
fn lock_ring_sql(ring: HeldRing) -> String {
    format!(
        "BEGIN; LOCK TABLE {} IN ACCESS SHARE MODE",
        ring_tables(ring).join(", ")
    )
}

/// The leader's prune lock requests waiting on `client`'s hold of
/// `ring`'s partitions, by backend pid.
async fn prunes_waiting(
    client: &tokio_postgres::Client,
    ring: HeldRing,
) -> Result<BTreeSet<i32>, tokio_postgres::Error> {
    let rows = client
        .query(
            PRUNES_WAITING_ON_ME,
            &[&ring_tables(ring), &awa_runtime::locks::LEADER_LOCK_KEY],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `hold` with `lock_ring`: for the duration, a client on its own
/// connection holds the ring's partitions for a few of the leader's prune
/// waits at a time, with gaps, and records the prune lock requests it saw
/// wait on them and give up while they were still held
/// ([`PartitionHold`]). Whether the leader went on is for the rest of the
/// cell to show (a runtime that dies unasked fails the step; the rings
/// must prune back afterwards).
async fn hold_locking(cx: &mut StepCtx<'_>, s: &HoldStep, ring: HeldRing) -> Result<Done, Abort> {
    let client = super::super::database::connect(&cx.db.url)
        .await
        .map_err(|e| {
            Abort::Harness(format!(
                "the lock_ring client of a hold could not connect: {e}"
            ))
        })?;
    let wait = prune_lock_wait(cx.plan);
    let end = Instant::now() + s.duration.to_std();
    let mut record = PartitionHold::new(cx.state.step_index, ring);
    while Instant::now() < end {
        client
            .batch_execute(&lock_ring_sql(ring))
            .await
            .map_err(lock_client_failed)?;
        record.holds += 1;
        let until = (Instant::now() + wait * HELD_WAITS).min(end);
        watch_waiters(cx, &client, ring, until, &mut record).await?;
        client
            .batch_execute(LET_GO)
            .await
            .map_err(lock_client_failed)?;
        let gap = (wait * GAP_WAITS).min(end.saturating_duration_since(Instant::now()));
        cx.cancel().sleep(gap).await?;
    }
    record.at_ms = cx.ms();
    let (holds, waits, gave_up) = (record.holds, record.waits, record.gave_up);
    cx.state.obs.partition_holds.push(record);
    Ok(Done::ok(format!(
        "held {} beside a client that held the {ring} ring's partitions {}: {} waited on them, {gave_up} of them gave up while they were held",
        s.duration,
        crate::observe::count(u64::from(holds), "time"),
        crate::observe::count(u64::from(waits), "prune lock request"),
    )))
}

/// Polls the leader's prune lock requests waiting on this session until
/// `until`: a request that is gone while the partitions are still held
/// gave up on its lock.
async fn watch_waiters(
    cx: &StepCtx<'_>,
    client: &tokio_postgres::Client,
    ring: HeldRing,
    until: Instant,
    record: &mut PartitionHold,
) -> Result<(), Abort> {
    let mut waiting: BTreeSet<i32> = BTreeSet::new();
    loop {
        let now = prunes_waiting(client, ring)
            .await
            .map_err(lock_client_failed)?;
        let gone = waiting.difference(&now).count() as u32;
        if gone > 0 && record.first_gave_up_ms.is_none() {
            record.first_gave_up_ms = Some(cx.ms());
        }
        record.gave_up += gone;
        record.waits += now.difference(&waiting).count() as u32;
        waiting = now;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        cx.cancel().sleep(LOCK_POLL.min(left)).await?;
    }
}

fn lock_client_failed(e: tokio_postgres::Error) -> Abort {
    Abort::Harness(format!("the lock_ring client of a hold failed: {e}"))
}

/// How soon the cell's database looks for a lock cycle, when a `hold`
/// with `deadlock` needs it to: half a prune's lock wait, so a prune that
/// closes a cycle finds it before its lock wait ends, as at production
/// timings (a 2 s wait, PostgreSQL's 1 s `deadlock_timeout`). The
/// matrix's compressed `stale_after` makes the wait shorter than the
/// server's default, which no prune would then outlast.
pub(super) fn deadlock_timeout(plan: &crate::plan::CellPlan) -> Option<std::time::Duration> {
    let deadlocks = plan
        .steps
        .iter()
        .any(|s| matches!(s, crate::matrix::Step::Hold(h) if h.lock_ring.is_some() && h.deadlock));
    deadlocks.then(|| prune_lock_wait(plan) / 2)
}

/// The lock wait of the cell's prunes.
fn prune_lock_wait(plan: &crate::plan::CellPlan) -> std::time::Duration {
    awa_runtime::timings::Timings {
        stale_after: plan.timings.stale_after.to_std(),
        ..Default::default()
    }
    .prune_lock_wait()
}

/// Before anything connects: every session of the cell's database looks
/// for lock cycles after `after` (`ALTER DATABASE ... SET`, which needs
/// the superuser the throwaway cluster gives the harness).
pub(super) async fn detect_deadlocks_within(
    cx: &mut StepCtx<'_>,
    after: std::time::Duration,
) -> Result<String, Abort> {
    let client = super::super::database::connect(&cx.db.url)
        .await
        .map_err(|e| Abort::Harness(format!("setting the cell's deadlock_timeout: {e}")))?;
    // The name is built from [a-z0-9_] only (see CellDb::create).
    let sql = format!(
        "ALTER DATABASE \"{}\" SET deadlock_timeout = '{}ms'",
        cx.db.name,
        after.as_millis().max(1)
    );
    client.batch_execute(&sql).await.map_err(|e| {
        Abort::Harness(format!(
            "setting the cell's deadlock_timeout for its deadlock hold failed ({}); \
             the hold needs a server that lets the harness ALTER DATABASE ... SET deadlock_timeout \
             (a superuser, as on the throwaway cluster)",
            crate::pg::describe(&e)
        ))
    })?;
    Ok(format!(
        "deadlock_timeout {}ms for the deadlock hold",
        after.as_millis()
    ))
}

/// `hold` with `lock_ring` and `deadlock`: for the duration, a client on
/// its own connection takes the ring's tables but the first (ACCESS
/// SHARE, as a report reading them would), waits for the leader's prune
/// to queue on them (holding the first table's partition of the slot it
/// prunes), then asks for the first table: the two wait on each other.
/// The prune's session finds the cycle and is rolled back; the client
/// gets its lock, lets go and, after a gap, does it again. What it saw is
/// a [`PartitionHold`] with the deadlocks the database counted meanwhile.
/// Whether the leader led on is for the rest of the cell to show.
async fn hold_deadlocking(
    cx: &mut StepCtx<'_>,
    s: &HoldStep,
    ring: HeldRing,
) -> Result<Done, Abort> {
    let client = super::super::database::connect(&cx.db.url)
        .await
        .map_err(|e| {
            Abort::Harness(format!(
                "the lock_ring client of a hold could not connect: {e}"
            ))
        })?;
    let tables = ring_tables(ring);
    let (first, rest) = tables
        .split_first()
        .ok_or_else(|| Abort::Harness(format!("the {ring} ring has no tables to hold")))?;
    let mut rest = rest.to_vec();
    rest.reverse();
    let take_rest = format!(
        "BEGIN; {CLIENT_DEADLOCK_TIMEOUT}; LOCK TABLE {} IN ACCESS SHARE MODE",
        rest.join(", ")
    );
    let take_first = format!("LOCK TABLE {first} IN ACCESS SHARE MODE");
    let wait = prune_lock_wait(cx.plan);
    let before = deadlocks(&client).await?;
    let end = Instant::now() + s.duration.to_std();
    let mut record = PartitionHold::new(cx.state.step_index, ring);
    while Instant::now() < end {
        client
            .batch_execute(&take_rest)
            .await
            .map_err(lock_client_failed)?;
        record.holds += 1;
        let until = (Instant::now() + wait * HELD_WAITS).min(end);
        if prune_queued(cx, &client, ring, until).await? {
            record.waits += 1;
            // Blocks behind the prune's hold of the first table's
            // partition until the prune is rolled back (or times out).
            client
                .batch_execute(&take_first)
                .await
                .map_err(lock_client_failed)?;
            record.gave_up += 1;
            record.first_gave_up_ms.get_or_insert(cx.ms());
        }
        client
            .batch_execute(LET_GO)
            .await
            .map_err(lock_client_failed)?;
        let gap = (wait * GAP_WAITS).min(end.saturating_duration_since(Instant::now()));
        cx.cancel().sleep(gap).await?;
    }
    let counted = deadlocks(&client).await?.saturating_sub(before);
    record.deadlocks = Some(counted);
    record.at_ms = cx.ms();
    let (holds, waits) = (record.holds, record.waits);
    cx.state.obs.partition_holds.push(record);
    Ok(Done::ok(format!(
        "held {} beside a client that held the {ring} ring's partitions in the other order from a prune's {}: {} closed a cycle with it; the database counted {}",
        s.duration,
        crate::observe::count(u64::from(holds), "time"),
        crate::observe::count(u64::from(waits), "prune lock request"),
        crate::observe::count(counted, "deadlock"),
    )))
}

/// Polls until the leader's prune waits on this session's hold of
/// `ring`'s tables, or `until` passes.
async fn prune_queued(
    cx: &StepCtx<'_>,
    client: &tokio_postgres::Client,
    ring: HeldRing,
    until: Instant,
) -> Result<bool, Abort> {
    loop {
        if !prunes_waiting(client, ring)
            .await
            .map_err(lock_client_failed)?
            .is_empty()
        {
            return Ok(true);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        cx.cancel().sleep(DEADLOCK_POLL.min(left)).await?;
    }
}

/// The deadlocks the cell's database has counted so far.
async fn deadlocks(client: &tokio_postgres::Client) -> Result<u64, Abort> {
    let n: i64 = client
        .query_one(DEADLOCKS, &[])
        .await
        .map_err(lock_client_failed)?
        .get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Which representations of the ring cursors the schema under test has
/// (it changes as migrations run: an expand adds the ledgers, a contract
/// drops the columns).
const LEDGERS_EXIST: &str = "to_regclass('awa.queue_ring_rotations') IS NOT NULL \
     AND to_regclass('awa.ring_cursor_authority') IS NOT NULL";

/// The representations of the ring cursors a schema has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CursorShape {
    /// The singleton `current_slot`/`generation` columns.
    columns: bool,
    /// The rotation ledgers and the authority row.
    ledgers: bool,
}

impl CursorShape {
    async fn read(client: &tokio_postgres::Client) -> Result<CursorShape, tokio_postgres::Error> {
        let sql = format!(
            "SELECT {}, {LEDGERS_EXIST}",
            crate::pg::CURSOR_COLUMNS_EXIST
        );
        let row = client.query_one(&sql, &[]).await?;
        Ok(CursorShape {
            columns: row.get(0),
            ledgers: row.get(1),
        })
    }

    /// A condition that holds when `ring`'s authoritative cursor is not in
    /// slot 0: the columns under `columns` authority (or with no
    /// ledgers), the ledger's top under `ledger` (or with no columns).
    fn cursor_not_in_slot_zero(self, ring: &str) -> String {
        let columns =
            format!("NOT EXISTS (SELECT 1 FROM awa.{ring}_ring_state WHERE current_slot = 0)");
        let ledger = format!(
            "coalesce((SELECT r.slot FROM awa.{ring}_ring_rotations r ORDER BY r.generation DESC LIMIT 1), -1) <> 0"
        );
        match (self.columns, self.ledgers) {
            (true, true) => format!(
                "CASE WHEN (SELECT authority FROM awa.ring_cursor_authority LIMIT 1) = 'ledger' \
                 THEN {ledger} ELSE {columns} END"
            ),
            (true, false) => columns,
            (false, true) => ledger,
            (false, false) => "true".into(),
        }
    }
}

/// Whether every ring holds rows, none in slot 0, and no ring's cursor
/// is in slot 0 (one statement, for the cursors the schema has). A ring
/// that has just rotated into slot 0 has not written there yet, most of
/// all on a loaded machine: its empty slot 0 is not free, the next claim
/// or enqueue fills it.
fn slot_zero_free_sql(shape: CursorShape) -> String {
    let mut busy = Vec::new();
    let mut zero = Vec::new();
    for ring in awa_runtime::store::Ring::ALL {
        zero.push(shape.cursor_not_in_slot_zero(ring.name()));
        let tables = ring.tables();
        busy.push(format!(
            "({})",
            tables
                .iter()
                .map(|t| format!("EXISTS (SELECT 1 FROM awa.{t})"))
                .collect::<Vec<_>>()
                .join(" OR ")
        ));
        zero.extend(
            tables
                .iter()
                .map(|t| format!("NOT EXISTS (SELECT 1 FROM awa.{t}_0)")),
        );
    }
    format!("SELECT {} AND {}", busy.join(" AND "), zero.join(" AND "))
}

/// `hold` with `until`: poll the condition every 50 ms and end as soon
/// as it holds; at the end of the duration without it the hold just
/// ends (a note says so; what follows runs anyway).
async fn hold_until(cx: &mut StepCtx<'_>, s: &HoldStep, until: Until) -> Result<Done, Abort> {
    let client = super::super::database::connect(&cx.db.url)
        .await
        .map_err(|e| Abort::Harness(format!("the hold could not connect: {e}")))?;
    let gate = super::gate::start_next_flip_gated(cx).await?;
    let start = std::time::Instant::now();
    let held = poll_until(cx, &client, until, s.duration.to_std(), gate.as_ref()).await;
    let held_ms = start.elapsed().as_millis();
    if let Ok(held) = held {
        let record = UntilRecord {
            step: cx.state.step_index,
            until,
            held,
            at_ms: cx.ms(),
        };
        cx.state.obs.untils.push(record);
    }
    match held {
        Ok(true) => {
            let note = let_go(cx, gate).await;
            Ok(Done::ok(format!("{until} after {held_ms} ms{note}")))
        }
        Ok(false) => {
            let note = let_go(cx, gate).await;
            Ok(Done::with(
                StepOutcome::TimedOut,
                format!("{until} did not hold within {}; going on{note}", s.duration),
            ))
        }
        Err(abort) => {
            // The gate's lock goes with its connection: the flip
            // waiting behind it must be gone first, or an interrupted
            // cell would flip while it stops.
            if let Some(gate) = gate {
                cx.kill_quietly(gate.id).await;
            }
            Err(abort)
        }
    }
}

/// Polls the condition every 50 ms until it holds with the gated flip
/// (if any) waiting at the gate (true), or `within` passes (false). Its
/// statement is written for the cursors the schema has, and written again
/// when the server refuses it as not fitting (a migration changed the
/// schema); a condition the server refused to the end is the harness's
/// error, not a hold that timed out.
async fn poll_until(
    cx: &StepCtx<'_>,
    client: &tokio_postgres::Client,
    until: Until,
    within: std::time::Duration,
    gate: Option<&super::gate::StartGate>,
) -> Result<bool, Abort> {
    let start = std::time::Instant::now();
    let mut sql: Option<String> = None;
    // The last refusal and how many came one after another: a statement
    // rewritten for the schema and refused again is no migration mid-poll.
    let mut refused: Option<(String, u32)> = None;
    while start.elapsed() < within {
        if sql.is_none() {
            sql = CursorShape::read(client)
                .await
                .ok()
                .map(|shape| match until {
                    Until::SlotZeroFree => slot_zero_free_sql(shape),
                });
        }
        if let Some(statement) = &sql {
            match client.query_one(statement.as_str(), &[]).await {
                Ok(row) => {
                    refused = None;
                    if row.get::<_, bool>(0) {
                        match gate {
                            // Not at the gate yet: the condition must hold once it is.
                            Some(g) if !g.ready().await => {}
                            _ => return Ok(true),
                        }
                    }
                }
                Err(e) => {
                    if let Some(why) = crate::pg::refused_for_schema(&e) {
                        let times = refused.map_or(0, |(_, n)| n) + 1;
                        refused = Some((why, times));
                        sql = None;
                    }
                }
            }
        }
        cx.cancel()
            .sleep(std::time::Duration::from_millis(50))
            .await?;
    }
    match refused {
        Some((why, times)) if times >= 3 => Err(Abort::Harness(format!(
            "the hold's condition `{until}` could not be read from the schema under test ({times} refusals in a row, each time written again for the schema): {why}"
        ))),
        _ => Ok(false),
    }
}

/// Opens the gate of a flip started ahead (it goes on now; its step
/// judges it) and says so for the hold's detail.
async fn let_go(cx: &mut StepCtx<'_>, gate: Option<super::gate::StartGate>) -> String {
    let Some(gate) = gate else {
        return String::new();
    };
    gate.open().await;
    cx.state.gated_flip = Some(GatedFlip {
        id: gate.id,
        opened_ms: cx.ms(),
    });
    let name = cx.proc(gate.id, |p| p.name.clone());
    format!("; {name}, started with the hold, let go at the start gate")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use awa_harness::pgtemp::Cluster;
    use awa_runtime::schema::{MigrateOptions, migrate};

    use super::*;

    /// Starts `sql` on a connection of its own and returns its backend pid
    /// at once; the statement runs on (and may wait) in the background.
    async fn waiting(cluster: &Cluster, sql: String) -> i32 {
        let client = cluster.connect("hold").await.unwrap();
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        tokio::spawn(async move {
            let _ = client.batch_execute(&sql).await;
            // Keeps the session (and what it holds) until the test ends.
            std::future::pending::<()>().await;
        });
        pid
    }

    /// Regression (review of the `lock_ring` hold): every ACCESS EXCLUSIVE
    /// waiter on the held ring counted as the prune. Here two wait on the
    /// claim ring's partitions: the leader (it holds the leader's advisory
    /// lock) and a session that does not lead. Only the leader's request is
    /// the prune's, and only on the ring the hold holds.
    #[tokio::test]
    async fn only_the_leaders_lock_request_on_a_held_partition_counts_as_the_prune() {
        let cluster = Cluster::start().await.expect("a throwaway cluster");
        cluster.create_database("hold").await.unwrap();
        let mut setup = cluster.connect("hold").await.unwrap();
        migrate(&mut setup, &MigrateOptions::default())
            .await
            .unwrap();
        let holder = cluster.connect("hold").await.unwrap();
        holder
            .batch_execute(&lock_ring_sql(HeldRing::Claim))
            .await
            .unwrap();
        // Leads as maintenance.rs does: the leader's advisory lock, held
        // by the session that prunes.
        let leader = waiting(
            &cluster,
            format!(
                "SELECT pg_advisory_lock({}); BEGIN; LOCK TABLE awa.claim_receipts_0 IN ACCESS EXCLUSIVE MODE",
                awa_runtime::locks::LEADER_LOCK_KEY
            ),
        )
        .await;
        let other = waiting(
            &cluster,
            "BEGIN; LOCK TABLE awa.claim_closures_0 IN ACCESS EXCLUSIVE MODE".to_owned(),
        )
        .await;
        let mut seen = BTreeSet::new();
        for _ in 0..100 {
            let queued: i64 = holder
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if queued == 2 {
                seen = prunes_waiting(&holder, HeldRing::Claim).await.unwrap();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            seen,
            BTreeSet::from([leader]),
            "the other waiter was {other}"
        );
        // The queue ring is not held: nothing of it waits on the hold.
        assert_eq!(
            prunes_waiting(&holder, HeldRing::Queue).await.unwrap(),
            BTreeSet::new()
        );
    }

    #[test]
    fn slot_zero_is_every_ring_table_partition_0() {
        let shape = CursorShape {
            columns: true,
            ledgers: false,
        };
        let sql = super::slot_zero_free_sql(shape);
        for t in [
            "queue_entries_0",
            "claim_receipts_0",
            "claim_closures_0",
            "leases_0",
        ] {
            assert!(
                sql.contains(&format!("NOT EXISTS (SELECT 1 FROM awa.{t})")),
                "{sql}"
            );
        }
        assert!(sql.contains("(EXISTS (SELECT 1 FROM awa.claim_receipts) OR EXISTS (SELECT 1 FROM awa.claim_closures))"), "{sql}");
        for ring in ["queue", "claim", "lease"] {
            assert!(
                sql.contains(&format!(
                    "NOT EXISTS (SELECT 1 FROM awa.{ring}_ring_state WHERE current_slot = 0)"
                )),
                "{sql}"
            );
        }
    }

    /// The cursor condition reads the cursor the schema has and its
    /// authority names: the columns under `columns`, the ledger's top under
    /// `ledger`, the ledger alone once a contract dropped the columns; and
    /// a statement written for columns that are gone is refused as not
    /// fitting the schema (the poll writes it again), not read as false.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cursor_condition_follows_the_schemas_cursors() {
        let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
        cluster.create_database("cursors").await.unwrap();
        let mut client = cluster.connect("cursors").await.unwrap();
        migrate(&mut client, &MigrateOptions::default())
            .await
            .unwrap();
        let holds = |sql: String| {
            let client = &client;
            async move {
                client
                    .query_one(&format!("SELECT {sql}"), &[])
                    .await
                    .map(|r| r.get::<_, bool>(0))
            }
        };
        let both = CursorShape::read(&client).await.unwrap();
        assert_eq!(
            both,
            CursorShape {
                columns: true,
                ledgers: true
            }
        );
        // Columns authority, the queue ring's columns in slot 0 and its
        // ledger elsewhere: the columns decide.
        client
            .batch_execute(
                "ALTER TABLE awa.queue_ring_state DISABLE TRIGGER ring_cursor_fence;
                 UPDATE awa.ring_cursor_authority SET authority = 'columns';
                 UPDATE awa.queue_ring_state SET current_slot = 0, generation = 8;
                 INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (9, 1);",
            )
            .await
            .unwrap();
        assert!(!holds(both.cursor_not_in_slot_zero("queue")).await.unwrap());
        // Ledger authority: the ledger's top (slot 1) decides.
        client
            .batch_execute("UPDATE awa.ring_cursor_authority SET authority = 'ledger'")
            .await
            .unwrap();
        assert!(holds(both.cursor_not_in_slot_zero("queue")).await.unwrap());
        client
            .batch_execute("INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (16, 0)")
            .await
            .unwrap();
        assert!(!holds(both.cursor_not_in_slot_zero("queue")).await.unwrap());
        // A contract drops the columns: the old statement no longer fits,
        // and the one written for the new shape reads the ledger.
        client
            .batch_execute(
                "ALTER TABLE awa.queue_ring_state DROP COLUMN current_slot CASCADE, DROP COLUMN generation CASCADE;
                 ALTER TABLE awa.claim_ring_state DROP COLUMN current_slot CASCADE, DROP COLUMN generation CASCADE;
                 ALTER TABLE awa.lease_ring_state DROP COLUMN current_slot CASCADE, DROP COLUMN generation CASCADE;",
            )
            .await
            .unwrap();
        let refused = holds(both.cursor_not_in_slot_zero("queue"))
            .await
            .expect_err("the columns are gone");
        let why = crate::pg::refused_for_schema(&refused).expect("class 42");
        assert!(why.contains("42703"), "{why}");
        let contracted = CursorShape::read(&client).await.unwrap();
        assert_eq!(
            contracted,
            CursorShape {
                columns: false,
                ledgers: true
            }
        );
        assert!(
            !holds(contracted.cursor_not_in_slot_zero("queue"))
                .await
                .unwrap()
        );
        client
            .batch_execute("INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (17, 1)")
            .await
            .unwrap();
        assert!(
            holds(contracted.cursor_not_in_slot_zero("queue"))
                .await
                .unwrap()
        );
        // The whole statement runs on the contracted schema.
        holds(format!(
            "({})",
            slot_zero_free_sql(contracted).trim_start_matches("SELECT ")
        ))
        .await
        .expect("the statement fits the contracted schema");
    }
}
