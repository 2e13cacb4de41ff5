//! When a claim records its attempt's start. A claim's transaction starts
//! at its Bind, but it sees ready entries only from its snapshot, taken
//! once its plan holds its locks; whatever delays it in between (a lock
//! wait on a ring partition, planning on a busy machine) lets it claim a
//! job promoted after its transaction began. The attempt's `started_at`
//! must not come from before the claim could see the job, or a correct
//! runtime reads as starting retries and snoozes before they were due
//! (`audit::EARLY_STARTS`). Nor may its lease's first heartbeat or its
//! claim batch's deadline: a claim that waited past `stale_after` would
//! write an attempt already stale (or overdue) on arrival, and the leader
//! would rescue it as soon as it started.

mod common;

use awa_runtime::store::audit::{self, Waits};
use awa_runtime::store::enqueue::{self, NewJob};
use awa_runtime::store::finish::{self, Closed, Outcome};
use awa_runtime::store::{claim, instances, rescue};
use awa_runtime::workload;
use common::Db;
use std::time::Duration;
use tokio_postgres::{Client, Transaction};

const BACKOFF: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_held_before_its_snapshot_starts_the_attempt_no_earlier_than_it_was_due() {
    let db = Db::migrated("claim_clock").await;
    let worker = db.client().await;
    let leader = db.client().await;
    let mut holder = db.client().await;

    let ids = enqueue::enqueue(
        &worker,
        &[NewJob {
            kind: workload::KIND.into(),
            queue: "default".into(),
            args: serde_json::json!({"mode": "retry_once"}),
            priority: 0,
            max_attempts: 3,
            deadline_ms: None,
            run_at_ms: None,
        }],
    )
    .await
    .expect("enqueue");
    let first = claim::claim(&worker, "default", 1, "w1", "0.7.0")
        .await
        .expect("claim attempt 1");
    assert_eq!(first.len(), 1);
    let backoff_ms = workload::retry_backoff_ms(BACKOFF, 1);
    let closed = finish::finish(
        &worker,
        ids[0],
        first[0].run_lease,
        &Outcome::Retry {
            backoff_ms,
            reason: "test".into(),
        },
    )
    .await
    .expect("retry attempt 1");
    assert_eq!(closed, Closed::Accepted);

    let hold = hold_other_queue_partition(&leader, &mut holder).await;
    let stmt = worker
        .prepare(claim::CLAIM)
        .await
        .expect("prepare the claim");
    let pid = backend_pid(&worker).await;
    let claiming = tokio::spawn(async move {
        let got = claim::claim_with(&worker, &stmt, "default", 1, "w1", "0.7.0").await;
        (worker, got)
    });
    wait_until_waiting_for_lock(&leader, pid).await;
    // The backoff runs out while the claim waits; the leader promotes the
    // job, due now, and only then does the claim see it.
    tokio::time::sleep(BACKOFF + Duration::from_millis(50)).await;
    let promoted = enqueue::promote_due(&leader).await.expect("promote");
    assert_eq!(promoted, 1);
    hold.commit().await.expect("release the hold");
    let (worker, second) = claiming.await.expect("the claim task");
    let second = second.expect("claim attempt 2");
    assert_eq!(second.len(), 1, "the claim took the promoted job");
    assert_eq!(second[0].attempt, 2);

    let row = worker
        .query_one(
            "SELECT (extract(epoch FROM n.started_at - (p.finished_at + $2::float8 * interval '1 millisecond')) * 1000)::float8
             FROM awa.executions p JOIN awa.executions n ON n.job_id = p.job_id AND n.run_lease = p.run_lease + 1
             WHERE p.job_id = $1 AND p.run_lease = 1",
            &[&ids[0], &backoff_ms],
        )
        .await
        .expect("the two runs");
    let late_ms: f64 = row.get(0);
    assert!(
        late_ms >= 0.0,
        "attempt 2 recorded its start {:.1} ms before its backoff ended, though it was promoted only once due",
        -late_ms
    );
    let early = audit::early_starts(
        &worker,
        &[],
        &Waits {
            retry_backoff: BACKOFF,
            snooze: BACKOFF,
        },
    )
    .await
    .expect("early starts");
    assert_eq!(early.count, 0, "{early:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_past_stale_after_writes_a_fresh_lease_and_a_whole_deadline() {
    const STALE_MS: f64 = 1_000.0;
    const DEADLINE_MS: i32 = 2_000;
    let db = Db::migrated("claim_clock_lease").await;
    let worker = db.client().await;
    let mut leader = db.client().await;
    let mut holder = db.client().await;
    enqueue::enqueue(
        &worker,
        &[NewJob {
            kind: workload::KIND.into(),
            queue: "default".into(),
            args: serde_json::json!({"mode": "sleep"}),
            priority: 0,
            max_attempts: 3,
            deadline_ms: Some(DEADLINE_MS),
            run_at_ms: None,
        }],
    )
    .await
    .expect("enqueue");
    instances::register(&worker, "w1", "w1", "0.7.0", "worker")
        .await
        .expect("register the worker's runtime");

    // The claim begins, then waits on a held partition for longer than
    // both the stale bound and the deadline, as behind a frozen leader.
    let hold = hold_other_queue_partition(&leader, &mut holder).await;
    let pid = backend_pid(&worker).await;
    let claiming = tokio::spawn(async move {
        let got = claim::claim(&worker, "default", 1, "w1", "0.7.0").await;
        (worker, got)
    });
    wait_until_waiting_for_lock(&leader, pid).await;
    tokio::time::sleep(Duration::from_millis(DEADLINE_MS as u64 + 300)).await;
    hold.commit().await.expect("release the hold");
    let (worker, got) = claiming.await.expect("the claim task");
    assert_eq!(got.expect("claim").len(), 1, "the claim took the job");

    let ages: (f64, f64) = {
        let row = worker
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp() - l.heartbeat_at) * 1000)::float8,
                        (extract(epoch FROM b.deadline_at - clock_timestamp()) * 1000)::float8
                 FROM awa.leases l, awa.claim_batches b",
                &[],
            )
            .await
            .expect("the lease and the claim batch");
        (row.get(0), row.get(1))
    };
    assert!(
        ages.0 < STALE_MS / 2.0,
        "the lease's first heartbeat is {:.0} ms old right after the claim: it dates from before the wait",
        ages.0
    );
    assert!(
        ages.1 > f64::from(DEADLINE_MS) / 2.0,
        "the claim batch's deadline is {:.0} ms away right after the claim: the wait spent it",
        ages.1
    );
    // What the leader would do with it now, its runtime beating: nothing,
    // the attempt is healthy.
    instances::heartbeat(&worker, "w1", &[])
        .await
        .expect("the runtime's heartbeat");
    let rescued = rescue::rescue(&mut leader, STALE_MS)
        .await
        .expect("a rescue pass");
    assert!(
        rescued.is_empty(),
        "a healthy attempt was rescued: {rescued:?}"
    );
}

/// Hold one queue partition that promotion does not write (not the
/// current slot) the way a prune does, so a claim begun now waits in its
/// planning, after its transaction has begun.
async fn hold_other_queue_partition<'a>(
    leader: &Client,
    holder: &'a mut Client,
) -> Transaction<'a> {
    let partition: String = leader
        .query_one(
            "SELECT c.relname::text FROM pg_inherits i
             JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'awa.queue_entries'::regclass
               AND c.relname <> 'queue_entries_' || (SELECT slot FROM awa.flip_aware_ring_cursor('queue'))
             ORDER BY c.relname LIMIT 1",
            &[],
        )
        .await
        .expect("a queue partition")
        .get(0);
    let hold = holder.transaction().await.expect("begin the hold");
    hold.batch_execute(&format!(
        "LOCK TABLE awa.{partition} IN ACCESS EXCLUSIVE MODE"
    ))
    .await
    .expect("hold the partition");
    hold
}

async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("backend pid")
        .get(0)
}

/// Until backend `pid` waits for a lock (the claim has begun its
/// transaction and waits for the held partition).
async fn wait_until_waiting_for_lock(observer: &Client, pid: i32) {
    for _ in 0..500 {
        let waiting: bool = observer
            .query_one(
                "SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)",
                &[&pid],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        if waiting {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the claim never waited for the held partition");
}
