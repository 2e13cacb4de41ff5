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
