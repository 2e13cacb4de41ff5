//! A worker's lease heartbeat never waits for a lease row another
//! transaction holds: the worker's own close deletes its leases in one
//! statement while the heartbeat refreshes them in another, and a
//! heartbeat stuck behind (or deadlocked with) that close left the other
//! leases unrefreshed until they went stale and were rescued although
//! their attempts were healthy.

mod common;

use awa_runtime::store::instances;
use common::*;
use std::time::{Duration, Instant};

const INSTANCE: &str = "beater";

/// Leases (1, 1) and (2, 1) of [`INSTANCE`], last heartbeat an hour ago.
const SEED: &str = "
INSERT INTO awa.leases (slot, generation, job_id, run_lease, attempt, instance_id, heartbeat_at)
SELECT c.slot, c.generation, j, 1, 1, 'beater', now() - interval '1 hour'
FROM awa.flip_aware_ring_cursor('lease') c, unnest(ARRAY[1, 2]::int8[]) j";

async fn beat_age_secs(client: &tokio_postgres::Client, job_id: i64) -> f64 {
    client
        .query_one(
            "SELECT extract(epoch FROM now() - heartbeat_at)::float8 FROM awa.leases WHERE job_id = $1",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_skips_a_locked_lease_reports_it_held_and_missing_once_gone() {
    let db = Db::migrated("heartbeat").await;
    let client = db.client().await;
    client.batch_execute(SEED).await.unwrap();

    // Another session deletes lease (1, 1) and keeps its transaction open,
    // as a close does between deleting its leases and committing.
    let mut closer = db.client().await;
    let tx = closer.transaction().await.unwrap();
    let deleted = tx
        .execute("DELETE FROM awa.leases WHERE job_id = 1", &[])
        .await
        .unwrap();
    assert_eq!(deleted, 1);

    let asked = [(1, 1), (2, 1), (3, 1)];
    let start = Instant::now();
    let held = tokio::time::timeout(
        Duration::from_secs(5),
        instances::heartbeat(&client, INSTANCE, &asked),
    )
    .await
    .expect("the heartbeat waited for the lease row the other transaction holds")
    .unwrap();
    let took = start.elapsed();
    let mut held = held;
    held.sort();
    assert_eq!(
        held,
        vec![(1, 1), (2, 1)],
        "a lease being deleted still exists until the deletion commits, and (3, 1) never did"
    );
    assert!(took < Duration::from_secs(2), "heartbeat took {took:?}");
    assert!(
        beat_age_secs(&client, 2).await < 60.0,
        "the free lease's heartbeat was refreshed"
    );

    // Once the deletion commits, the lease is reported missing.
    tx.commit().await.unwrap();
    let held = instances::heartbeat(&client, INSTANCE, &asked)
        .await
        .unwrap();
    assert_eq!(held, vec![(2, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_does_not_wait_for_a_row_lock_that_is_released_without_deleting() {
    let db = Db::migrated("heartbeat_lock").await;
    let client = db.client().await;
    client.batch_execute(SEED).await.unwrap();

    let mut other = db.client().await;
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT 1 FROM awa.leases WHERE job_id = 1 FOR UPDATE", &[])
        .await
        .unwrap();

    let asked = [(1, 1), (2, 1)];
    let mut held = tokio::time::timeout(
        Duration::from_secs(5),
        instances::heartbeat(&client, INSTANCE, &asked),
    )
    .await
    .expect("the heartbeat waited for the locked lease row")
    .unwrap();
    held.sort();
    assert_eq!(held, vec![(1, 1), (2, 1)]);
    assert!(beat_age_secs(&client, 1).await > 3000.0, "locked: skipped");
    assert!(beat_age_secs(&client, 2).await < 60.0, "free: refreshed");

    // Released, the lease is refreshed by the next heartbeat.
    tx.rollback().await.unwrap();
    instances::heartbeat(&client, INSTANCE, &asked)
        .await
        .unwrap();
    assert!(beat_age_secs(&client, 1).await < 60.0);
}
