//! Each seeded defect, armed, produces the wrong behaviour it models, so
//! the rehearsal's defect cells have a real fault to catch. Failpoints are
//! process-wide, so one test arms them one after another.
#![cfg(feature = "failpoints")]

mod common;

use awa_runtime::failpoint::{self, arm, disarm};
use awa_runtime::store::authority::{self, FlipOutcome};
use awa_runtime::store::folds::{self, Folded};
use awa_runtime::store::{Ring, rings};
use common::*;
use std::time::Duration;

/// Advance the queue columns as a 0.6 rotator would (three rotations).
const OLD_ROTATOR_THRICE: &str = "
UPDATE awa.queue_ring_state SET current_slot = 3, generation = 3;
UPDATE awa.queue_ring_slots SET generation = slot WHERE slot BETWEEN 1 AND 3;";

/// A ready entry on a queue nobody serves keeps the queue ring busy.
async fn park(db: &Db) {
    let job = awa_runtime::store::enqueue::NewJob {
        kind: "rehearsal".into(),
        queue: "parked".into(),
        args: serde_json::json!({"mode": "complete"}),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    };
    awa_runtime::store::enqueue::enqueue(&db.client().await, &[job])
        .await
        .unwrap();
}

async fn queue_flip(db: &Db) -> authority::RingFlip {
    match authority::flip(&mut db.client().await, 1000.0, true)
        .await
        .unwrap()
    {
        FlipOutcome::Flipped { rings, .. } => {
            rings.into_iter().find(|r| r.ring == "queue").unwrap()
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_seeded_defect_misbehaves_when_armed() {
    let bin062 = tokio::task::spawn_blocking(|| release_bin("0.6.2"))
        .await
        .unwrap();

    // flip_skip_reconcile: the ledger is promoted while it lags the columns.
    let db = Db::expanded("fp_flip", &bin062).await;
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    arm(failpoint::FLIP_SKIP_RECONCILE);
    let q = queue_flip(&db).await;
    disarm(failpoint::FLIP_SKIP_RECONCILE);
    assert_eq!(
        (q.columns_generation, q.ledger_generation),
        (3, 0),
        "promoted an unreconciled ledger"
    );
    let db = Db::expanded("fp_flip_ok", &bin062).await;
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    let q = queue_flip(&db).await;
    assert_eq!(
        (q.columns_generation, q.ledger_generation),
        (3, 3),
        "the real flip reconciles"
    );

    // fence_current_slot_only: an old-style advance from -1 to 0 succeeds.
    let db = Db::expanded("fp_fence", &bin062).await;
    arm(failpoint::FENCE_CURRENT_SLOT_ONLY);
    queue_flip(&db).await;
    disarm(failpoint::FENCE_CURRENT_SLOT_ONLY);
    let c = db.client().await;
    let g: i64 = c
        .query_one("SELECT generation FROM awa.queue_ring_state", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(g, -1, "the defective fence leaves generation unpoisoned");
    c.batch_execute(
        "UPDATE awa.queue_ring_state SET current_slot = 0, generation = generation + 1",
    )
    .await
    .expect("the defective fence lets an old rotator advance");
    let db = Db::expanded("fp_fence_ok", &bin062).await;
    queue_flip(&db).await;
    let err = db
        .client()
        .await
        .batch_execute("UPDATE awa.queue_ring_state SET current_slot = 0, generation = 0")
        .await
        .unwrap_err();
    assert!(
        awa_runtime::error::describe(&err).contains("ring cursor authority is ledger"),
        "{err}"
    );

    // authority_before_lock: a compat rotator that read `columns` before a
    // flip committed advances old-style after it (and meets the fence).
    let db = Db::expanded("fp_toctou", &bin062).await;
    // Columns at slot 3 with a parked entry there, so that from the
    // poisoned -1 the next slot (0) is free and an advance is attempted.
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    park(&db).await;
    arm(failpoint::AUTHORITY_BEFORE_LOCK);
    let url = db.url.clone();
    let rotator = tokio::spawn(async move {
        let mut c = awa_runtime::db::connect(&url).await.unwrap();
        rings::rotate(&mut c, Ring::Queue).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    queue_flip(&db).await;
    let res = rotator.await.unwrap();
    disarm(failpoint::AUTHORITY_BEFORE_LOCK);
    let err = res.expect_err("a stale-authority rotator advanced old-style after the flip");
    assert!(
        err.to_string().contains("ring cursor authority is ledger"),
        "{err}"
    );
    let mut c = db.client().await;
    assert!(
        rings::rotate(&mut c, Ring::Queue).await.is_ok(),
        "the real rotator reads the authority under the lock"
    );

    // fold_any_xmin: ordinary short statements stand the folds down.
    let db = Db::migrated("fp_fold").await;
    let url = db.url.clone();
    let busy = tokio::spawn(async move {
        let b = awa_runtime::db::connect(&url).await.unwrap();
        b.batch_execute("SELECT pg_sleep(1.5)").await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = db.client().await;
    arm(failpoint::FOLD_ANY_XMIN);
    let stood = folds::fold(&mut c).await.unwrap();
    disarm(failpoint::FOLD_ANY_XMIN);
    assert!(matches!(stood, Folded::StoodDown { .. }), "{stood:?}");
    assert!(
        matches!(folds::fold(&mut c).await.unwrap(), Folded::Done { .. }),
        "the real gate ignores a 1.5 s statement"
    );
    busy.await.unwrap();

    // compat_backfill_one: after an old rotator's three advances the
    // ledger is left with holes.
    let db = Db::expanded("fp_backfill", &bin062).await;
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    park(&db).await;
    let mut c = db.client().await;
    arm(failpoint::COMPAT_BACKFILL_ONE);
    rings::rotate(&mut c, Ring::Queue).await.unwrap();
    disarm(failpoint::COMPAT_BACKFILL_ONE);
    let (_, columns, ledger, gaps) = db.cursors().await.remove(0);
    assert_eq!(columns, 4);
    assert_eq!(ledger, 4);
    assert!(gaps >= 2, "the defective backfill left {gaps} gaps");

    // expand_drops_columns: the expand migration breaks the 0.6.2 fleet.
    let db = Db::at_v2("fp_expand", &bin062).await;
    arm(failpoint::EXPAND_DROPS_COLUMNS);
    awa_runtime::schema::migrate(&mut db.client().await, &Default::default())
        .await
        .unwrap();
    disarm(failpoint::EXPAND_DROPS_COLUMNS);
    let cols: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'awa' AND column_name = 'current_slot'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(cols, 0, "the compat columns are gone");
    let (code, _, _) = run(&bin062, &db.url, &["worker"], &[]).await;
    assert_ne!(code, 0, "0.6.2 cannot run on a schema without its columns");

    // preflight_no_lock: a runtime can register while the migration runs.
    let db = Db::at_v2("fp_prelock", &bin062).await;
    let migrate = spawn(
        awa_bin(),
        &db.url,
        &["migrate"],
        &[
            ("AWA_MIGRATE_PAUSE", "2s"),
            ("AWA_FAILPOINTS", "preflight_no_lock=return"),
        ],
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    db.client()
        .await
        .batch_execute("SET lock_timeout = '300ms'; INSERT INTO awa.runtime_instances (instance_id, name, version, role) VALUES ('late', 'late', '0.6.1', 'worker')")
        .await
        .expect("without the preflight lock a pre-guard runtime registers mid-migration");
    let (code, err) = migrate.exit_code(Duration::from_secs(10)).await;
    assert_eq!(code, 0, "{err}");
}
