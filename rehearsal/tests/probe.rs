//! The driver's probe against a real PostgreSQL: what `suspend at =
//! "holding_ring_locks"` takes for a process caught inside a rotation or
//! prune must be a session the flip cannot get past.
//!
//! A client stopped between preparing `SELECT ... FOR UPDATE` of a ring
//! singleton and executing it is idle in its transaction with the table's
//! `ROW SHARE` lock (taken when the statement is parsed) and no row locked:
//! another session's `FOR UPDATE NOWAIT` of the row goes through, so the
//! probe must not count it. Once the statement ran, the row is locked and
//! the probe must count it.

pub mod common;

use awa_harness::pgtemp::Cluster;
use common::database::on_06_schema;
use rehearsal::driver::probe::Probe;
use tokio_postgres::Client;

/// What 0.6's rotator and pruner run first in their transaction.
const LOCK_CURSOR: &str = "SELECT current_slot FROM awa.claim_ring_state FOR UPDATE";
/// What the flip needs: the same row, without waiting.
const TAKE_NOWAIT: &str = "SELECT current_slot FROM awa.claim_ring_state FOR UPDATE NOWAIT";

/// Whether a third session can lock the claim ring's singleton now.
async fn row_is_free(client: &mut Client) -> bool {
    let tx = client.transaction().await.unwrap();
    let free = match tx.query(TAKE_NOWAIT, &[]).await {
        Ok(_) => true,
        Err(e) if e.code().is_some_and(|c| c.code() == "55P03") => false,
        Err(e) => panic!("{e}"),
    };
    tx.rollback().await.unwrap();
    free
}

/// The probe's verdict on the one session idle in a transaction.
async fn holds_ring_locks(probe: &mut Probe) -> bool {
    let idle = probe.idle_in_transaction().await.unwrap();
    assert_eq!(idle.len(), 1, "{idle:?}");
    idle[0].ring_locks
}

#[tokio::test]
async fn a_session_counts_as_holding_ring_locks_only_once_it_locked_the_row() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let mut caught = on_06_schema(&cluster, "probe").await;
    let mut other = cluster.connect("probe").await.unwrap();
    let mut probe = Probe::new(&cluster.url("probe"));

    let tx = caught.transaction().await.unwrap();
    // Parsed, not run: the table lock is there, the row lock is not.
    let statement = tx.prepare(LOCK_CURSOR).await.unwrap();
    assert!(
        row_is_free(&mut other).await,
        "a parsed FOR UPDATE locked the row"
    );
    assert!(
        !holds_ring_locks(&mut probe).await,
        "a session that only parsed its FOR UPDATE was taken as holding the ring's row"
    );

    // Run: the row is locked, and the probe says so.
    tx.query(&statement, &[]).await.unwrap();
    assert!(
        !row_is_free(&mut other).await,
        "the FOR UPDATE did not lock the row"
    );
    assert!(
        holds_ring_locks(&mut probe).await,
        "a session holding the ring's row lock was not seen"
    );

    // An advance (an UPDATE after the lock) still holds it.
    tx.execute(
        "UPDATE awa.claim_ring_state SET generation = generation",
        &[],
    )
    .await
    .unwrap();
    assert!(!row_is_free(&mut other).await);
    assert!(holds_ring_locks(&mut probe).await);
    tx.rollback().await.unwrap();

    // A plain read inside a transaction holds nothing the flip waits for.
    let tx = caught.transaction().await.unwrap();
    tx.query("SELECT current_slot FROM awa.claim_ring_state", &[])
        .await
        .unwrap();
    assert!(row_is_free(&mut other).await);
    assert!(!holds_ring_locks(&mut probe).await);
    tx.rollback().await.unwrap();
    probe.close();
}

/// `holder_misreported` judges the transaction age a blocked command
/// printed for a lock holder against the probe's reading of the same
/// transaction, taken once the command ended: the product's own reading
/// (`lock_wait::holders`, what a blocked flip prints) must fall between
/// the probe's reading less the time since it was asked and the probe's
/// reading, and one a minute off (the clock shifted) must not. Once the
/// transaction is over there is nothing to read.
#[tokio::test]
async fn the_probe_reads_a_holders_transaction_age_as_a_blocked_command_names_it() {
    use std::time::{Duration, Instant};
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster
        .create_database("ages")
        .await
        .expect("create database");
    let mut holder = cluster.connect("ages").await.unwrap();
    awa_runtime::schema::migrate(&mut holder, &Default::default())
        .await
        .unwrap();
    let pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE awa.claim_ring_state IN ROW SHARE MODE")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;

    let asked = Instant::now();
    let other = cluster.connect("ages").await.unwrap();
    let named = awa_runtime::store::lock_wait::holders(&other, Duration::from_millis(200))
        .await
        .unwrap();
    let named = named
        .iter()
        .find(|h| h.pid == pid)
        .unwrap_or_else(|| panic!("the holder was not named: {named:?}"))
        .transaction_age_ms;
    let mut probe = Probe::new(&cluster.url("ages"));
    let read = probe
        .transaction_age_ms(pid)
        .await
        .unwrap()
        .expect("the holder's transaction is open");
    let window = i64::try_from(asked.elapsed().as_millis()).unwrap();
    assert!(named >= 400, "named {named} ms, held 400 ms at least");
    assert!(
        read - window - 50 <= named && named <= read + 50,
        "named {named} ms outside {}..{} (read {read} ms, {window} ms after asking)",
        read - window - 50,
        read + 50
    );
    let shifted = named + 60_000;
    assert!(shifted > read + 50, "a minute off must fall outside");

    tx.rollback().await.unwrap();
    assert_eq!(probe.transaction_age_ms(pid).await.unwrap(), None);
    probe.close();
}

/// What `rings_pruned_back` reports when a ring kept rows: each ring's
/// oldest rows, with the job each belongs to as it stands. One job
/// claimed (its receipt and its lease, held by the claimer and just
/// heartbeated), one still ready (its entry), on the current schema.
#[tokio::test]
async fn the_probe_names_the_rows_a_ring_kept_with_their_jobs() {
    use awa_runtime::store::{claim, enqueue};
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster
        .create_database("left")
        .await
        .expect("create database");
    let mut client = cluster.connect("left").await.unwrap();
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .unwrap();
    let job = enqueue::NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: serde_json::json!({"mode": "complete"}),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    };
    let ids = enqueue::enqueue(&client, &[job.clone(), job])
        .await
        .unwrap();
    let taken = claim::claim(&client, "default", 1, "w1", "0.7.0")
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let (claimed, ready) = (
        taken[0].job_id,
        if taken[0].job_id == ids[0] {
            ids[1]
        } else {
            ids[0]
        },
    );

    let mut probe = Probe::new(&cluster.url("left"));
    let through = probe.ring_generations().await.unwrap();
    let counted = probe.ring_rows_through(through).await.unwrap();
    let [queue, claim, lease] = probe.ring_rows_left(through).await.unwrap();
    assert_eq!(counted, [1, 1, 1], "the rows the check counts");

    assert_eq!(queue.len(), 1, "{queue:?}");
    assert_eq!(
        (
            queue[0].table.as_str(),
            queue[0].job_id,
            queue[0].run_lease,
            queue[0].holder.as_deref()
        ),
        ("queue_entries", ready, None, None)
    );
    assert_eq!(queue[0].job, Some(("available".to_owned(), 0)));

    assert_eq!(claim.len(), 1, "{claim:?}");
    assert_eq!(
        (
            claim[0].table.as_str(),
            claim[0].job_id,
            claim[0].run_lease,
            claim[0].holder.as_deref()
        ),
        ("claim_receipts", claimed, Some(1), Some("w1"))
    );

    assert_eq!(lease.len(), 1, "{lease:?}");
    let l = &lease[0];
    assert_eq!(
        (
            l.table.as_str(),
            l.job_id,
            l.run_lease,
            l.holder.as_deref(),
            l.generation
        ),
        ("leases", claimed, Some(1), Some("w1"), through[2])
    );
    assert_eq!(l.job, Some(("running".to_owned(), 1)));
    let age = l.heartbeat_age_ms.expect("a lease has a heartbeat");
    assert!((0..60_000).contains(&age), "heartbeat age {age} ms");
    assert!(
        l.describe()
            .starts_with(&format!("job {claimed} run 1 in leases slot ")),
        "{}",
        l.describe()
    );

    // Nothing of an older generation than the rings' first.
    let none = probe.ring_rows_left(through.map(|g| g - 1)).await.unwrap();
    assert!(none.iter().all(Vec::is_empty), "{none:?}");
    probe.close();
}
