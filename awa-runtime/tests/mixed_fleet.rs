//! The 0.6.2 -> 0.7 rolling upgrade with the frozen 0.6.2 binary built
//! from its archive: compat mode, the flip and its readiness gate, the
//! fence, binary-first, the migration floor and deadline claims.

mod common;

use awa_runtime::store::authority::{self, FlipOutcome};
use awa_runtime::store::enqueue::{self, NewJob};
use awa_runtime::store::{Ring, read, rings};
use common::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

fn job(queue: &str, mode: &str, deadline_ms: Option<i32>) -> NewJob {
    NewJob {
        kind: "rehearsal".into(),
        queue: queue.into(),
        args: json!({ "mode": mode }),
        priority: 0,
        max_attempts: 3,
        deadline_ms,
        run_at_ms: None,
    }
}

async fn bins() -> (String, String) {
    tokio::task::spawn_blocking(|| (release_bin("0.6.1"), release_bin("0.6.2")))
        .await
        .unwrap()
}

async fn queue_columns_generation(db: &Db) -> i64 {
    db.client()
        .await
        .query_one("SELECT generation FROM awa.queue_ring_state", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_starts_in_columns_and_fresh_install_in_ledger() {
    let (_, bin062) = bins().await;
    let fresh = Db::migrated("fresh").await;
    assert_eq!(fresh.authority().await, "ledger");
    for (ring, columns, ledger, gaps) in fresh.cursors().await {
        assert_eq!(
            (columns, ledger, gaps),
            (-1, 0, 0),
            "{ring}: compat fields poisoned, ledger at genesis"
        );
    }
    let upgrade = Db::expanded("upgrade", &bin062).await;
    assert_eq!(upgrade.authority().await, "columns");
    for (ring, columns, ledger, gaps) in upgrade.cursors().await {
        assert_eq!(
            (columns, ledger, gaps),
            (0, 0, 0),
            "{ring}: ledger seeded from the columns"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_rotation_and_the_flip_catch_up_with_an_old_rotator_then_fence_it() {
    let (_, bin062) = bins().await;
    let db = Db::expanded("compat", &bin062).await;
    let client = db.client().await;
    // Parked entries keep the queue ring non-idle (no worker serves them).
    enqueue::enqueue(&client, &[job("parked", "complete", None)])
        .await
        .unwrap();
    let fast = [("AWA_ROTATE_INTERVAL", "100ms"), ("AWA_STALE_AFTER", "1s")];
    let old = spawn(&bin062, &db.url, &["worker", "--name", "old-leader"], &fast);
    old.wait_for("leadership", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "leader")
    })
    .await;
    wait_count(
        &client,
        "SELECT least(generation, 7) FROM awa.queue_ring_state",
        7,
        Duration::from_secs(10),
    )
    .await;

    // The old rotator advanced the columns 7 times; the ledger lags.
    let before = db.cursors().await;
    assert_eq!(
        (before[0].1, before[0].2),
        (7, 0),
        "queue columns ahead of the ledger: {before:?}"
    );
    // One 0.7 rotation (under the same singleton lock) backfills every
    // generation, not just one.
    let mut c = db.client().await;
    let r = rings::rotate(&mut c, Ring::Queue).await.unwrap();
    assert!(
        matches!(
            r,
            rings::Rotated::NextSlotBusy { .. } | rings::Rotated::Advanced { .. }
        ),
        "{r:?}"
    );
    let after = db.cursors().await;
    assert_eq!(
        after[0].2, after[0].1,
        "ledger caught up exactly: {after:?}"
    );
    assert_eq!(after[0].3, 0, "no gaps: {after:?}");

    // The old rotator moves on again.
    let parked: Vec<i64> = client
        .query("SELECT job_id FROM awa.jobs WHERE queue = 'parked'", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for id in parked {
        awa_runtime::store::finish::cancel_by_operator(&client, id)
            .await
            .unwrap();
    }
    enqueue::enqueue(&client, &[job("parked", "complete", None)])
        .await
        .unwrap();
    let target = after[0].1 + 5;
    wait_count(
        &client,
        &format!("SELECT least(generation, {target}) FROM awa.queue_ring_state"),
        target,
        Duration::from_secs(10),
    )
    .await;

    // The flip refuses while the 0.6.2 runtime heartbeats, naming it.
    let (code, out, err) = flip(&db.url, &[], &fast).await;
    assert_eq!(code, 2, "{out} {err}");
    assert!(
        err.contains("old-leader") && err.contains("version 0.6.2") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(db.authority().await, "columns");
    let (code, out, _) = flip(&db.url, &["--check"], &fast).await;
    assert_eq!(code, 2);
    assert!(out.contains("\"ready\":false"), "{out}");

    // Once it stops being fresh (killed: its row stays, its heartbeat ages)...
    let columns_at_death = queue_columns_generation(&db).await;
    old.kill().await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (code, out, err) = flip(&db.url, &[], &fast).await;
    assert_eq!(code, 0, "{err}");
    let flipped: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let queue = flipped["rings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ring"] == "queue")
        .unwrap()
        .clone();
    assert_eq!(queue["columns_generation"].as_i64(), Some(columns_at_death));
    assert_eq!(
        queue["ledger_generation"].as_i64(),
        Some(columns_at_death),
        "the flip reconciled through the final columns"
    );
    assert!(queue["backfilled"].as_u64().unwrap() >= 5, "{queue}");
    assert_eq!(db.authority().await, "ledger");
    for (ring, columns, _, gaps) in db.cursors().await {
        assert_eq!((columns, gaps), (-1, 0), "{ring} poisoned and verified");
    }
    // Idempotent.
    let (code, out, _) = flip(&db.url, &[], &fast).await;
    assert_eq!(code, 0);
    assert!(out.contains("\"already\":true"), "{out}");

    // A returning 0.6.2 refuses before any write; compat fields stay poisoned.
    let (code, out, err) = run(&bin062, &db.url, &["worker"], &fast).await;
    assert_eq!(code, 2, "{err}");
    assert!(out.contains("refused"), "{out}");
    for (ring, columns, _, _) in db.cursors().await {
        assert_eq!(columns, -1, "{ring}");
    }
    let slots: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT generation FROM awa.queue_ring_slots UNION ALL SELECT generation FROM awa.claim_ring_slots
             UNION ALL SELECT generation FROM awa.lease_ring_slots) t WHERE generation <> -1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "per-slot prune metadata poisoned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_flip_under_a_running_n1_fleet_makes_it_fail_loudly_and_loses_nothing() {
    let (_, bin062) = bins().await;
    let db = Db::expanded("forced", &bin062).await;
    let fast = [("AWA_ROTATE_INTERVAL", "200ms"), ("AWA_STALE_AFTER", "1s")];
    let old = spawn(&bin062, &db.url, &["worker", "--name", "old"], &fast);
    old.wait_for("leadership", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "leader")
    })
    .await;
    let producer = spawn(
        &bin062,
        &db.url,
        &[
            "produce",
            "--rate",
            "300",
            "--mix",
            "complete=8,retry_once=1,sleep=1",
            "--sleep",
            "50ms",
        ],
        &fast,
    );
    producer.wait_accepted("load", 300).await;

    let (code, _, err) = flip(&db.url, &["--force"], &fast).await;
    assert_eq!(code, 0, "{err}");
    // The old worker's next terminal write or rotation meets the fence.
    let (code, stderr) = old.exit_code(Duration::from_secs(15)).await;
    assert_ne!(code, 0, "the 0.6.2 worker kept running after the flip");
    assert!(
        stderr.contains("ring cursor authority is ledger")
            || stderr.contains("no partition of relation"),
        "a loud failure naming the authority or the missing partition: {stderr}"
    );
    for (ring, columns, _, _) in db.cursors().await {
        assert_eq!(columns, -1, "{ring} stays poisoned");
    }
    // The old producer's next enqueue meets the fenced legacy resolver
    // (or the enqueue fence) and fails before it writes anything. 0.7
    // takes over; drain and check exactly-once.
    let events = producer.events.clone();
    let (code, stderr) = producer.exit_code(Duration::from_secs(10)).await;
    assert_ne!(code, 0, "the 0.6.2 producer kept enqueueing after the flip");
    assert!(
        stderr.contains("ring cursor authority is ledger"),
        "a loud failure naming the authority: {stderr}"
    );
    let new = spawn(awa_bin(), &db.url, &["worker", "--name", "new"], &fast);
    let client = db.client().await;
    wait_count(
        &client,
        "SELECT count(*) FROM awa.jobs",
        0,
        Duration::from_secs(30),
    )
    .await;
    let accepted: Vec<i64> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "accepted")
        .map(|e| e["job_id"].as_i64().unwrap())
        .collect();
    let mut per_job: HashMap<i64, usize> = HashMap::new();
    for r in read::terminal_records(&client).await.unwrap() {
        *per_job.entry(r.job_id).or_default() += 1;
    }
    let bad: Vec<_> = accepted
        .iter()
        .filter(|id| per_job.get(id) != Some(&1))
        .collect();
    assert!(
        bad.is_empty(),
        "{} accepted jobs without exactly one terminal record: {:?}",
        bad.len(),
        &bad[..bad.len().min(20)]
    );
    assert_eq!(new.terminate().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_first_a_new_worker_refuses_until_migrated() {
    let (_, bin062) = bins().await;
    let db = Db::at_v2("binfirst", &bin062).await;
    let (code, out, err) = run(awa_bin(), &db.url, &["worker"], &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        out.contains("refused") && err.contains("run `awa migrate`"),
        "{out} {err}"
    );
    let (code, _, err) = run(awa_bin(), &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 0, "{err}");
    let worker = spawn(awa_bin(), &db.url, &["worker"], &[]);
    worker
        .wait_for("ready", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "ready")
        })
        .await;
    assert_eq!(worker.terminate().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_refuses_while_a_pre_guard_runtime_is_live() {
    let (bin061, bin062) = bins().await;
    let db = Db::at_v2("floor", &bin062).await;
    let old = spawn(
        &bin061,
        &db.url,
        &["worker", "--name", "pre-guard-worker"],
        &[],
    );
    old.wait_for("ready", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "ready")
    })
    .await;
    let (code, out, err) = run(awa_bin(), &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(out.contains("refused"), "{out}");
    assert!(
        err.contains("pre-guard-worker")
            && err.contains("0.6.1")
            && err.contains("--allow-live-runtimes"),
        "{err}"
    );
    let v: i32 = db
        .client()
        .await
        .query_one("SELECT max(version) FROM awa.schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, 2, "nothing applied");
    let (code, _, err) = run(
        awa_bin(),
        &db.url,
        &["migrate", "--allow-live-runtimes"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    old.kill().await;

    // The exclusive-window refusal path (the shipped list is empty).
    let db = Db::at_v2("exclusive", &bin062).await;
    let w = spawn(&bin062, &db.url, &["worker", "--name", "live-062"], &[]);
    w.wait_for("ready", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "ready")
    })
    .await;
    let mut c = db.client().await;
    let tx = c.transaction().await.unwrap();
    let opts = awa_runtime::schema::MigrateOptions::default();
    let err = awa_runtime::schema::preflight(&tx, &[3], &[], &[3], &opts)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("exclusive window") && err.contains("live-062"),
        "{err}"
    );
    let allow = awa_runtime::schema::MigrateOptions {
        allow_live_runtimes: true,
        ..Default::default()
    };
    awa_runtime::schema::preflight(&tx, &[3], &[], &[3], &allow)
        .await
        .unwrap();
    drop(tx);
    assert_eq!(w.terminate().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preflight_holds_runtime_instances_until_the_migration_commits() {
    let (_, bin062) = bins().await;
    let db = Db::at_v2("prelock", &bin062).await;
    let migrate = spawn(
        awa_bin(),
        &db.url,
        &["migrate"],
        &[("AWA_MIGRATE_PAUSE", "2s")],
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let c = db.client().await;
    let blocked = c
        .batch_execute("SET lock_timeout = '300ms'; INSERT INTO awa.runtime_instances (instance_id, name, version, role) VALUES ('late', 'late', '0.6.1', 'worker')")
        .await;
    assert!(
        blocked.is_err(),
        "a runtime registered during the migration"
    );
    let (code, err) = migrate.exit_code(Duration::from_secs(10)).await;
    assert_eq!(code, 0, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_claims_of_n_wait_for_an_n_leader() {
    let (_, bin062) = bins().await;
    let db = Db::expanded("deadline", &bin062).await;
    let fast = [("AWA_STALE_AFTER", "1s")];
    // The 0.6.2 leader serves no queue; the 0.7 worker claims but never leads.
    let old = spawn(
        &bin062,
        &db.url,
        &["worker", "--queues", "none", "--name", "old-leader"],
        &fast,
    );
    old.wait_for("leadership", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "leader")
    })
    .await;
    let new = spawn(
        awa_bin(),
        &db.url,
        &["worker", "--no-maintenance", "--name", "new"],
        &fast,
    );
    let client = db.client().await;
    let id = enqueue::enqueue(&client, &[job("default", "overrun_deadline", Some(300))])
        .await
        .unwrap()[0];
    new.wait_for("the claim", Duration::from_secs(10), |ev| {
        ev.iter()
            .any(|e| e["event"] == "started" && e["job_id"] == id)
    })
    .await;
    let batches: i64 = client
        .query_one(
            "SELECT count(*) FROM awa.claim_batches WHERE $1 = ANY(job_ids)",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(batches, 1, "the deadline went to a compact claim batch");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let outcome = first_attempt_outcome(&client, id).await;
    assert_eq!(
        outcome, None,
        "a 0.6 leader must not (cannot) deadline-rescue a 0.7 claim batch"
    );
    // A 0.7 leader takes over and rescues it.
    old.kill().await;
    let leader = spawn(
        awa_bin(),
        &db.url,
        &["worker", "--queues", "none", "--name", "new-leader"],
        &fast,
    );
    leader
        .wait_for("the deadline rescue", Duration::from_secs(10), |ev| {
            ev.iter()
                .any(|e| e["event"] == "rescued" && e["job_id"] == id && e["reason"] == "deadline")
        })
        .await;
    wait_count(
        &client,
        &format!(
            "SELECT count(*) FROM ({}) t WHERE job_id = {id}",
            read::TERMINAL_RECORDS
        ),
        1,
        Duration::from_secs(10),
    )
    .await;
    let r = read::terminal_records(&client)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.job_id == id)
        .unwrap();
    assert_eq!((r.state.as_str(), r.attempt), ("completed", 2));
    assert_eq!(new.terminate().await, 0);
    assert_eq!(leader.terminate().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flip_readiness_counts_binary_versions_not_schema_versions() {
    assert_eq!(authority::parse_version("0.7.0"), Some((0, 7, 0)));
    assert_eq!(authority::parse_version("0.7.1-rc.1"), Some((0, 7, 1)));
    assert_eq!(authority::parse_version("0.7"), None);
    assert_eq!(authority::parse_version("x.7.0"), None);
    let (_, bin062) = bins().await;
    let db = Db::expanded("ready", &bin062).await;
    let c = db.client().await;
    // A fresh runtime with a NULL or unparseable binary_version blocks.
    c.batch_execute(
        "INSERT INTO awa.runtime_instances (instance_id, name, version, role, binary_version) VALUES
           ('a', 'a', '0.7.0', 'worker', '0.7.0'), ('b', 'b', '0.7.0', 'worker', NULL), ('c', 'c', '0.7.0', 'worker', 'garbage')",
    )
    .await
    .unwrap();
    let (blocking, fresh) = authority::flip_readiness(&c, 5000.0).await.unwrap();
    assert_eq!(fresh, 3);
    let names: Vec<&str> = blocking.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, vec!["b", "c"]);
    let out = authority::flip(&mut db.client().await, 5000.0, false)
        .await
        .unwrap();
    assert!(matches!(out, FlipOutcome::Blocked { .. }), "{out:?}");
    // Stale rows do not block.
    c.batch_execute("UPDATE awa.runtime_instances SET heartbeat_at = now() - interval '1 minute' WHERE binary_version IS DISTINCT FROM '0.7.0'").await.unwrap();
    let out = authority::flip(&mut db.client().await, 5000.0, false)
        .await
        .unwrap();
    assert!(
        matches!(out, FlipOutcome::Flipped { forced: false, .. }),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_that_deadlocks_with_live_traffic_is_retried_whole() {
    let (_, bin062) = bins().await;
    let db = Db::at_v2("deadlock", &bin062).await;
    // The migration holds runtime_instances (preflight) and will want the
    // ring singletons (fence triggers); this session takes a singleton,
    // then asks for runtime_instances: a cycle. Its long deadlock_timeout
    // makes the migration the one that detects it and is cancelled.
    let migrate = spawn(
        awa_bin(),
        &db.url,
        &["migrate"],
        &[("AWA_MIGRATE_PAUSE", "1500ms")],
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut other = db.client().await;
    other
        .batch_execute("SET deadlock_timeout = '10s'")
        .await
        .unwrap();
    let tx = other.transaction().await.unwrap();
    tx.batch_execute("UPDATE awa.queue_ring_state SET slot_count = slot_count")
        .await
        .unwrap();
    // Blocks behind the migration's preflight lock until the migration's
    // first attempt dies of the deadlock.
    tx.batch_execute("UPDATE awa.runtime_instances SET name = name")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.commit().await.unwrap();
    let (code, err) = migrate.exit_code(Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("deadlocked") && err.contains("retrying (1/3)"),
        "{err}"
    );
    let v: i32 = db
        .client()
        .await
        .query_one("SELECT max(version) FROM awa.schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, 3);
}
