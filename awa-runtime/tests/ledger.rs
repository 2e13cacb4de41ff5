//! Ledger mode under load: the `{ring}_ring_state` family receives no
//! UPDATE or DELETE and holds no dead tuples; folds keep the ledgers and
//! the delta table bounded; a genuinely pinned horizon stands the folds
//! down and a busy but unpinned database does not.

mod common;

use awa_runtime::store::folds::{self, Folded};
use common::*;
use std::time::Duration;

const RING_TABLES: &str = "relname IN ('queue_ring_state', 'claim_ring_state', 'lease_ring_state',
                                       'queue_ring_slots', 'claim_ring_slots', 'lease_ring_slots')";

async fn ring_table_churn(db: &Db) -> (i64, i64, i64) {
    let c = db.client().await;
    c.batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    let r = c
        .query_one(
            &format!(
                "SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_del), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint
                 FROM pg_stat_user_tables WHERE schemaname = 'awa' AND {RING_TABLES}"
            ),
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_mode_writes_no_dead_tuples_and_folds_stay_bounded() {
    let db = Db::migrated("ledger").await;
    // The fresh install itself poisoned the columns: 3 singletons and
    // 3 x 8 slot rows. Its backend's statistics reach pg_stat_user_tables
    // asynchronously, so wait for them before taking the baseline.
    let start = std::time::Instant::now();
    let before = loop {
        let churn = ring_table_churn(&db).await;
        if churn.0 >= 27 || start.elapsed() > Duration::from_secs(10) {
            break churn;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        before.0, 27,
        "the fresh install's poison updates, as a baseline"
    );
    let env = [
        ("AWA_ROTATE_INTERVAL", "100ms"),
        ("AWA_FOLD_INTERVAL", "500ms"),
    ];
    let w1 = spawn(awa_bin(), &db.url, &["worker"], &env);
    let w2 = spawn(awa_bin(), &db.url, &["worker"], &env);
    let (code, _, err) = run(
        awa_bin(),
        &db.url,
        &[
            "produce",
            "--count",
            "6000",
            "--rate",
            "1500",
            "--mix",
            "complete=9,retry_once=1",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let client = db.client().await;
    wait_count(
        &client,
        "SELECT count(*) FROM awa.jobs",
        0,
        Duration::from_secs(60),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rotations: i64 = client
        .query_one("SELECT max(generation) FROM awa.claim_ring_rotations", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        rotations >= 10,
        "the claim ring rotated only {rotations} times"
    );
    // Folds ran during the load: ledgers hold about one wrap, not one row per rotation.
    for ring in ["queue", "claim", "lease"] {
        let rows: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM awa.{ring}_ring_rotations"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            rows <= 8 + 10,
            "{ring} ledger holds {rows} rows after folds"
        );
    }
    assert_eq!(w1.terminate().await, 0);
    assert_eq!(w2.terminate().await, 0);
    // Stats of the exited workers are flushed at exit.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let after = ring_table_churn(&db).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (0, 0),
        "ring_state/ring_slots were updated or deleted in ledger mode"
    );
    assert_eq!(
        after.2, before.2,
        "dead tuples accumulated in the ring_state family"
    );
    let deltas: i64 = client
        .query_one("SELECT count(*) FROM awa.queue_terminal_rollup_deltas", &[])
        .await
        .unwrap()
        .get(0);
    assert!(deltas <= 50, "{deltas} unfolded delta rows");
    let mut c = db.client().await;
    assert!(matches!(
        folds::fold(&mut c).await.unwrap(),
        Folded::Done { .. }
    ));
    let deltas: i64 = client
        .query_one("SELECT count(*) FROM awa.queue_terminal_rollup_deltas", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(deltas, 0);
    for ring in ["queue", "claim", "lease"] {
        let rows: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM awa.{ring}_ring_rotations"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(rows <= 8, "{ring} ledger trimmed to one wrap, holds {rows}");
    }
    // Counts stay exact across folds.
    let s = awa_runtime::store::read::status(&client, 1000.0)
        .await
        .unwrap();
    assert_eq!(s.terminal, s.operator_terminal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folds_stand_down_only_for_a_genuinely_pinned_horizon() {
    let db = Db::migrated("horizon").await;
    let mut c = db.client().await;
    // Busy but unpinned: a stream of short statements on other sessions.
    let url = db.url.clone();
    let busy = tokio::spawn(async move {
        let b = awa_runtime::db::connect(&url).await.unwrap();
        for _ in 0..200 {
            b.batch_execute("SELECT pg_sleep(0.01)").await.unwrap();
        }
    });
    for _ in 0..10 {
        assert!(
            matches!(folds::fold(&mut c).await.unwrap(), Folded::Done { .. }),
            "ordinary statements stood the folds down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    busy.await.unwrap();
    // Idle in transaction holding a write xid: pinned.
    let mut pin = db.client().await;
    let tx = pin.transaction().await.unwrap();
    tx.batch_execute("INSERT INTO awa.queue_terminal_rollup_deltas (queue, priority, state, count) VALUES ('q', 0, 'completed', 1)").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        matches!(folds::fold(&mut c).await.unwrap(), Folded::StoodDown { .. }),
        "an idle-in-transaction writer must stand the folds down"
    );
    tx.commit().await.unwrap();
    assert!(matches!(
        folds::fold(&mut c).await.unwrap(),
        Folded::Done { delta_rows: 1, .. }
    ));
    // A read-only snapshot held longer than 5 s: pinned.
    let long = db.client().await;
    let url = db.url.clone();
    let holder = tokio::spawn(async move {
        let h = awa_runtime::db::connect(&url).await.unwrap();
        h.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM awa.jobs; SELECT pg_sleep(6.5); COMMIT").await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(5600)).await;
    assert!(
        matches!(folds::fold(&mut c).await.unwrap(), Folded::StoodDown { .. }),
        "a snapshot older than 5 s must stand the folds down"
    );
    holder.await.unwrap();
    drop(long);
    assert!(matches!(
        folds::fold(&mut c).await.unwrap(),
        Folded::Done { .. }
    ));
}
