//! Rotation and prune (ledger mode: a fresh install starts there; compat
//! mode is covered by the mixed-fleet tests): with rotation at a 1 s cadence and 10,000 jobs
//! through the system every accepted job has exactly one terminal record
//! (in the ring or the archive); prune refuses a sealed slot that holds
//! live work; rotation refuses a busy next slot and idle-skips only an
//! empty ring.

mod common;

use awa_runtime::store::Ring;
use awa_runtime::store::read;
use awa_runtime::store::rings::{self, Pruned, Rotated};
use awa_runtime::timings::PRUNE_LOCK_WAIT_MAX;
use common::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_through_rotating_rings_each_end_exactly_once() {
    let db = Db::migrated("rings").await;
    let client = db.client().await;
    let w1 = spawn(awa_bin(), &db.url, &["worker", "--concurrency", "32"], &[]);
    let w2 = spawn(awa_bin(), &db.url, &["worker", "--concurrency", "32"], &[]);
    let mix = "complete=70,retry_once=6,fail_terminal=4,exhaust_retries=2,snooze_once=6,cancel_self=4,sleep=6,scheduled=2";
    let producer = spawn(
        awa_bin(),
        &db.url,
        &[
            "produce",
            "--count",
            "10000",
            "--rate",
            "2000",
            "--mix",
            mix,
            "--sleep",
            "20ms",
            "--schedule-delay",
            "500ms",
        ],
        &[],
    );
    let (code, err) = producer_exit(producer).await;
    assert_eq!(code.0, 0, "producer: {err}");
    let accepted = code.1;
    assert_eq!(accepted.len(), 10_000);
    wait_count(
        &client,
        &format!("SELECT count(*) FROM ({}) t", read::TERMINAL_RECORDS),
        10_000,
        Duration::from_secs(120),
    )
    .await;
    // A claim slot is pruned once the cursor has wrapped round to it
    // (8 slots at 1 s): wait for the archive to be in use.
    wait_count(
        &client,
        "SELECT least(count(*), 1) FROM awa.terminal_archive",
        1,
        Duration::from_secs(30),
    )
    .await;

    let records = read::terminal_records(&client).await.unwrap();
    let mut per_job: HashMap<i64, usize> = HashMap::new();
    for r in &records {
        *per_job.entry(r.job_id).or_default() += 1;
    }
    let accepted_set: HashSet<i64> = accepted.iter().copied().collect();
    let extra: Vec<_> = per_job
        .keys()
        .filter(|k| !accepted_set.contains(k))
        .collect();
    let lost: Vec<_> = accepted
        .iter()
        .filter(|k| !per_job.contains_key(k))
        .collect();
    let dup: Vec<_> = per_job.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        extra.is_empty() && lost.is_empty() && dup.is_empty(),
        "extra {extra:?} lost {lost:?} duplicated {dup:?}"
    );
    let archived = records.iter().filter(|r| r.source == "archive").count();
    assert!(
        archived > 0,
        "prune archived nothing: rotation/prune did not run"
    );
    let generation: i64 = client
        .query_one(
            "SELECT generation FROM awa.flip_aware_ring_cursor('claim')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        generation >= 3,
        "the claim ring rotated only {generation} times"
    );
    // Operator counts (rollups + unarchived closures + dead letters) match
    // the row-by-row counts.
    let s = read::status(&client, 1000.0).await.unwrap();
    assert_eq!(s.terminal, s.operator_terminal);
    assert_eq!(w1.terminate().await, 0);
    assert_eq!(w2.terminate().await, 0);
}

async fn producer_exit(p: Proc) -> ((i32, Vec<i64>), String) {
    let events = p.events.clone();
    let (code, err) = p.exit_code(Duration::from_secs(60)).await;
    let ids = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "accepted")
        .map(|e| e["job_id"].as_i64().unwrap())
        .collect();
    ((code, ids), err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_a_sealed_slot_holding_live_work() {
    let db = Db::migrated("plant").await;
    let mut client = db.client().await;
    // Seal slot 1 with generation 1: rotate twice with a row in the ring.
    client.batch_execute("INSERT INTO awa.jobs (job_id, kind, queue, state) VALUES (1, 'rehearsal', 'q', 'available')").await.unwrap();
    client
        .batch_execute("INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt) VALUES (0, 0, 1, 'q', 0, 0)")
        .await
        .unwrap();
    assert_eq!(
        rings::rotate(&mut client, Ring::Queue).await.unwrap(),
        Rotated::Advanced {
            slot: 1,
            generation: 1
        }
    );
    // Plant a live ready entry in slot 1 (generation 1) and move on.
    client.batch_execute("INSERT INTO awa.jobs (job_id, kind, queue, state) VALUES (2, 'rehearsal', 'q', 'available')").await.unwrap();
    client
        .batch_execute("INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt) VALUES (1, 1, 2, 'q', 0, 0)")
        .await
        .unwrap();
    // Walk the cursor round until slot 1 is the oldest sealed slot; slot 0
    // (still live) blocks the wrap, so drain it first.
    client
        .batch_execute("DELETE FROM awa.queue_entries WHERE job_id = 1")
        .await
        .unwrap();
    for _ in 0..6 {
        assert!(matches!(
            rings::rotate(&mut client, Ring::Queue).await.unwrap(),
            Rotated::Advanced { .. }
        ));
    }
    let cur: i32 = client
        .query_one("SELECT slot FROM awa.flip_aware_ring_cursor('queue')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(cur, 7);
    // Slot 0 is empty: prune has nothing; rotate into it.
    assert_eq!(
        rings::prune(&mut client, Ring::Queue, PRUNE_LOCK_WAIT_MAX)
            .await
            .unwrap(),
        Pruned::Empty
    );
    assert!(matches!(
        rings::rotate(&mut client, Ring::Queue).await.unwrap(),
        Rotated::Advanced { slot: 0, .. }
    ));
    // Now slot 1 is next: it holds live work, so prune refuses and rotate
    // refuses to move into it.
    assert_eq!(
        rings::prune(&mut client, Ring::Queue, PRUNE_LOCK_WAIT_MAX)
            .await
            .unwrap(),
        Pruned::Live {
            slot: 1,
            generation: 1
        }
    );
    assert_eq!(
        rings::rotate(&mut client, Ring::Queue).await.unwrap(),
        Rotated::NextSlotBusy { slot: 1 }
    );
    let still: i64 = client
        .query_one(
            "SELECT count(*) FROM awa.queue_entries WHERE job_id = 2",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(still, 1, "the live entry survived");

    // Claim ring: move its cursor to (slot 2, generation 2); slot 3 was
    // last opened one wrap ago (generation 2 - 8 + 1 = -5). A receipt
    // without closure is live; once closed, prune archives the terminal
    // closure, appends a rollup delta and truncates.
    client
        .batch_execute(
            "INSERT INTO awa.claim_ring_rotations (generation, slot) VALUES (1, 1), (2, 2);
             INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id) VALUES (3, -5, 9, 1, 1, 'x');",
        )
        .await
        .unwrap();
    assert_eq!(
        rings::prune(&mut client, Ring::Claim, PRUNE_LOCK_WAIT_MAX)
            .await
            .unwrap(),
        Pruned::Live {
            slot: 3,
            generation: -5
        }
    );
    client
        .batch_execute(
            "INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
             VALUES (3, -5, 9, 1, 1, 'completed', true, 'q', 0, 'rehearsal')",
        )
        .await
        .unwrap();
    assert_eq!(
        rings::prune(&mut client, Ring::Claim, PRUNE_LOCK_WAIT_MAX)
            .await
            .unwrap(),
        Pruned::Truncated {
            slot: 3,
            generation: -5,
            archived: 1
        }
    );
    let archived: i64 = client
        .query_one(
            "SELECT count(*) FROM awa.terminal_archive WHERE job_id = 9",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(archived, 1);
    let deltas: i64 = client
        .query_one(
            "SELECT sum(count)::bigint FROM awa.queue_terminal_rollup_deltas",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(deltas, 1, "ledger-mode prune appends a delta");
    let rolled: i64 = client
        .query_one("SELECT count(*) FROM awa.queue_terminal_rollups", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rolled, 0, "ledger-mode prune does not upsert rollups");
    // The fold drains the delta into the rollups.
    let folded = awa_runtime::store::folds::fold(&mut client).await.unwrap();
    assert!(
        matches!(
            folded,
            awa_runtime::store::folds::Folded::Done { delta_rows: 1, .. }
        ),
        "{folded:?}"
    );
    let rolled: i64 = client
        .query_one(
            "SELECT sum(count)::bigint FROM awa.queue_terminal_rollups",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rolled, 1);

    // An empty ring idle-skips.
    assert_eq!(
        rings::rotate(&mut client, Ring::Lease).await.unwrap(),
        Rotated::IdleSkip
    );
}

/// The placement audit: a ready entry moved to another slot at its old
/// generation (a misrouted enqueue) is found, with the generation its new
/// slot was last opened at; rows where the cursor put them are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_placement_audit_finds_a_row_outside_its_slot() {
    use awa_runtime::store::audit;
    let db = Db::migrated("placement").await;
    let client = db.client().await;
    let features = audit::schema_features(&client).await.unwrap();
    // misplaced reads inside its caller's transaction, as the monitor and
    // reconciliation call it.
    client
        .batch_execute(
            "BEGIN;
             INSERT INTO awa.jobs (job_id, kind, queue, state) VALUES (1, 'rehearsal', 'q', 'available');
             INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt) VALUES (0, 0, 1, 'q', 0, 0)",
        )
        .await
        .unwrap();
    assert!(
        audit::misplaced(&client, &features)
            .await
            .unwrap()
            .is_empty()
    );
    client
        .batch_execute("UPDATE awa.queue_entries SET slot = 1 WHERE job_id = 1")
        .await
        .unwrap();
    let found = audit::misplaced(&client, &features).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let m = &found[0];
    assert_eq!(
        (m.ring.as_str(), m.kind.as_str(), m.count, m.ids.as_slice()),
        ("queue", "ready entry", 1, &[1][..])
    );
    // Slot 1 was last opened one wrap before the cursor's generation 0.
    assert_eq!(m.first, [1, 1, 0, -7]);
    client.batch_execute("COMMIT").await.unwrap();

    // A schema that lost the columns placement reads (an expand that
    // dropped them): nothing to place, and the caller's transaction (the
    // monitor's and reconciliation's snapshots) goes on.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute("ALTER TABLE awa.queue_entries DROP COLUMN generation")
        .await
        .unwrap();
    assert!(
        audit::misplaced(&client, &features)
            .await
            .unwrap()
            .is_empty()
    );
    let still: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(still, 1, "the transaction was not aborted");
    client.batch_execute("ROLLBACK").await.unwrap();
}

/// A client of `db` whose claim ring has a prunable slot: cursor at
/// (2, 2), slot 3 sealed one wrap ago with a closed (not live) receipt,
/// as in the archive test above.
async fn prunable_claim_slot(db: &Db) -> tokio_postgres::Client {
    let client = db.client().await;
    client
        .batch_execute(
            "INSERT INTO awa.claim_ring_rotations (generation, slot) VALUES (1, 1), (2, 2);
             INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id) VALUES (3, -5, 9, 1, 1, 'x');
             INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
             VALUES (3, -5, 9, 1, 1, 'completed', true, 'q', 0, 'rehearsal')",
        )
        .await
        .unwrap();
    client
}

/// A prune whose partitions another session is reading gives up within
/// its lock wait, and what queued behind its ACCESS EXCLUSIVE request (a
/// heartbeat, a claim: anything on the ring's tables) goes on then; with
/// the fixed 2 s wait, every statement on the ring waited 2 s, longer than
/// a `stale_after` of 1.5 s, so the leader's next rescue took healthy
/// attempts whose heartbeats were queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_waiting_for_its_lock_holds_the_ring_up_no_longer_than_its_wait() {
    let db = Db::migrated("prune_wait").await;
    let mut client = prunable_claim_slot(&db).await;
    // Another session reads the slot's partition and keeps its transaction open.
    let reader = db.client().await;
    reader
        .batch_execute("BEGIN; SELECT count(*) FROM awa.claim_closures_3")
        .await
        .unwrap();
    let timings = awa_runtime::timings::Timings {
        stale_after: Duration::from_millis(1500),
        ..Default::default()
    };
    let wait = timings.prune_lock_wait();
    assert_eq!(wait, Duration::from_millis(375));
    let pruner = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let pruned = rings::prune(&mut client, Ring::Claim, wait).await.unwrap();
        (pruned, started.elapsed(), client)
    });
    // Once the prune's request is queued, a statement on the ring's parent
    // table waits behind it.
    let probe = db.client().await;
    wait_count(
        &probe,
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'",
        1,
        Duration::from_secs(10),
    )
    .await;
    let queued = std::time::Instant::now();
    let n: i64 = probe
        .query_one("SELECT count(*) FROM awa.claim_closures", &[])
        .await
        .unwrap()
        .get(0);
    let held_up = queued.elapsed();
    assert_eq!(n, 1);
    let (pruned, took, mut client) = pruner.await.unwrap();
    assert_eq!(pruned, Pruned::Busy, "the reader holds the partition");
    assert!(
        took < Duration::from_millis(1500) && held_up < Duration::from_millis(1500),
        "the prune waited {took:?} and held a statement on its ring up {held_up:?}: past a stale_after of 1.5 s"
    );
    // The reader gone, the same prune goes through.
    reader.batch_execute("COMMIT").await.unwrap();
    assert!(matches!(
        rings::prune(&mut client, Ring::Claim, wait).await.unwrap(),
        Pruned::Truncated { slot: 3, .. }
    ));
}

/// A prune whose lock request closes a cycle (a reader holds one of the
/// claim slot's two partitions, then asks for the other, which the prune
/// has locked already) and is rolled back by the deadlock detector
/// answers `Busy`, as one whose lock wait ran out: the leader tries again
/// at a later tick. As an error it would cost the leader its maintenance
/// connection, and with it leadership, for a lock it may simply retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_whose_lock_deadlocks_answers_busy() {
    let db = Db::migrated("prune_deadlock").await;
    let mut client = prunable_claim_slot(&db).await;
    // The prune's session finds the cycle (deadlock_timeout 1 s, the
    // default) before the reader's would (10 s): the prune is rolled back.
    let reader = db.client().await;
    reader
        .batch_execute(
            "SET deadlock_timeout = '10s'; BEGIN; SELECT count(*) FROM awa.claim_closures_3",
        )
        .await
        .unwrap();
    // A lock wait longer than deadlock_timeout: the cycle is found first.
    let pruner = tokio::spawn(async move {
        rings::prune(&mut client, Ring::Claim, Duration::from_secs(5)).await
    });
    let probe = db.client().await;
    wait_count(
        &probe,
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'",
        1,
        Duration::from_secs(10),
    )
    .await;
    // The prune holds claim_receipts_3 and waits for claim_closures_3;
    // the reader now asks for claim_receipts_3.
    let second = tokio::spawn(async move {
        let n = reader
            .query_one("SELECT count(*) FROM awa.claim_receipts_3", &[])
            .await
            .map(|r| r.get::<_, i64>(0));
        (n, reader)
    });
    let pruned = pruner.await.unwrap();
    assert!(
        matches!(pruned, Ok(Pruned::Busy)),
        "a deadlocked prune must answer Busy: {pruned:?}"
    );
    let (n, reader) = second.await.unwrap();
    assert_eq!(
        n.unwrap(),
        1,
        "the reader goes on once the prune is rolled back"
    );
    reader.batch_execute("COMMIT").await.unwrap();
}

/// The prune's bound is for its partitions' lock only: the archive that
/// follows waits as the session would, so a table briefly held by someone
/// else (here `terminal_archive`, for longer than the lock wait) delays
/// the prune instead of failing the leader's maintenance pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_waits_for_the_archive_as_the_session_would_after_its_bounded_lock() {
    let db = Db::migrated("prune_restore").await;
    let mut client = prunable_claim_slot(&db).await;
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE awa.terminal_archive IN SHARE MODE")
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(900)).await;
        holder.batch_execute("COMMIT").await.unwrap();
    });
    let wait = Duration::from_millis(300);
    let pruned = rings::prune(&mut client, Ring::Claim, wait).await;
    release.await.unwrap();
    assert!(
        matches!(
            pruned,
            Ok(Pruned::Truncated {
                slot: 3,
                archived: 1,
                ..
            })
        ),
        "the archive gave up at the lock's bound instead of waiting: {pruned:?}"
    );
}
