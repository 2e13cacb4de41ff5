//! Hard kills: a SIGKILLed worker's attempt is rescued and completes with
//! exactly one more attempt, and the killed attempt's late completion is
//! rejected by the `(job_id, run_lease)` guard.

mod common;

use awa_runtime::store::enqueue::{self, NewJob};
use awa_runtime::store::finish::{self, Closed, Outcome};
use awa_runtime::store::read;
use common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_attempt_is_rescued_once_and_its_stale_completion_loses() {
    let db = Db::migrated("rescue").await;
    let client = db.client().await;
    // The leader claims nothing (it serves another queue); the victim
    // claims the job and is killed while running it.
    let leader = spawn(
        awa_bin(),
        &db.url,
        &["worker", "--queues", "elsewhere", "--name", "leader"],
        &[],
    );
    leader
        .wait_for("leadership", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "leader")
        })
        .await;
    let victim = spawn(
        awa_bin(),
        &db.url,
        &["worker", "--no-maintenance", "--name", "victim"],
        &[],
    );
    let job = NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: json!({ "mode": "sleep", "ms": 30_000 }),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    };
    let id = enqueue::enqueue(&client, &[job]).await.unwrap()[0];
    victim
        .wait_for(
            "the victim to start the job",
            Duration::from_secs(10),
            |ev| {
                ev.iter()
                    .any(|e| e["event"] == "started" && e["job_id"] == id)
            },
        )
        .await;
    let started = victim
        .named("started")
        .into_iter()
        .find(|e| e["job_id"] == id)
        .unwrap();
    let (attempt_killed, lease_killed) = (
        started["attempt"].as_i64().unwrap() as i32,
        started["run_lease"].as_i64().unwrap(),
    );
    victim.kill().await;

    leader
        .wait_for("the rescue", Duration::from_secs(10), |ev| {
            ev.iter()
                .any(|e| e["event"] == "rescued" && e["job_id"] == id)
        })
        .await;
    let rescued = leader
        .named("rescued")
        .into_iter()
        .find(|e| e["job_id"] == id)
        .unwrap();
    assert!(
        rescued["reason"] == "crash" || rescued["reason"] == "heartbeat",
        "rescued by crash or heartbeat rescue, got {rescued}"
    );
    // The killed attempt comes back late: it must lose.
    let late = finish::finish(&client, id, lease_killed, &Outcome::Completed)
        .await
        .unwrap();
    assert_eq!(late, Closed::Stale);
    assert!(
        read::terminal_records(&client).await.unwrap().is_empty(),
        "the stale completion wrote a terminal record"
    );

    // A new worker runs the rescued job; a short sleep this time is not
    // possible (args are fixed), so cut the wait by cancelling the sleep:
    // the rescued attempt must simply be the killed one plus one.
    let rescuer = spawn(
        awa_bin(),
        &db.url,
        &["worker", "--no-maintenance", "--name", "rescuer"],
        &[],
    );
    rescuer
        .wait_for(
            "the rescued attempt to start",
            Duration::from_secs(10),
            |ev| {
                ev.iter()
                    .any(|e| e["event"] == "started" && e["job_id"] == id)
            },
        )
        .await;
    let again = rescuer
        .named("started")
        .into_iter()
        .find(|e| e["job_id"] == id)
        .unwrap();
    assert_eq!(
        again["attempt"].as_i64().unwrap() as i32,
        attempt_killed + 1,
        "exactly one more attempt"
    );
    assert!(again["run_lease"].as_i64().unwrap() > lease_killed);
    let outcome: String = client
        .query_one(
            "SELECT outcome FROM awa.executions WHERE job_id = $1 AND run_lease = $2",
            &[&id, &lease_killed],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        outcome.starts_with("rescued_"),
        "the killed execution is marked rescued, got {outcome}"
    );
    // Cancel the 30 s sleep by operator so the job ends; the running
    // attempt's completion is then stale too.
    assert!(finish::cancel_by_operator(&client, id).await.unwrap());
    let records = read::terminal_records(&client).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].state.as_str(), records[0].attempt),
        ("cancelled", attempt_killed + 1)
    );
    assert_eq!(rescuer.terminate().await, 0);
    assert_eq!(leader.terminate().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_handlers_whose_lease_was_rescued_and_frees_their_slot() {
    let db = Db::migrated("lease_lost").await;
    let client = db.client().await;
    // One slot: the overrunning attempt would hold it for 9 s.
    let worker = spawn(awa_bin(), &db.url, &["worker", "--concurrency", "1"], &[]);
    worker
        .wait_for("leadership", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "leader")
        })
        .await;
    let overrun = NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: json!({ "mode": "overrun_deadline" }),
        priority: 1,
        max_attempts: 3,
        deadline_ms: Some(300),
        run_at_ms: None,
    };
    let first = enqueue::enqueue(&client, &[overrun]).await.unwrap()[0];
    worker
        .wait_for("the overrun to start", Duration::from_secs(5), |ev| {
            ev.iter()
                .any(|e| e["event"] == "started" && e["job_id"] == first)
        })
        .await;
    let plain = NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: json!({ "mode": "complete" }),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    };
    let second = enqueue::enqueue(&client, &[plain]).await.unwrap()[0];
    worker
        .wait_for(
            "the lost lease to be noticed",
            Duration::from_secs(5),
            |ev| {
                ev.iter()
                    .any(|e| e["event"] == "lease_lost" && e["job_id"] == first)
            },
        )
        .await;
    worker
        .wait_for(
            "the freed slot to run the next job",
            Duration::from_secs(5),
            |ev| {
                ev.iter().any(|e| {
                    e["event"] == "finished" && e["job_id"] == second && e["outcome"] == "completed"
                })
            },
        )
        .await;
    assert_eq!(worker.terminate().await, 0);
}

/// Regression: an overrunning first attempt used to end on its own after
/// 30 deadlines, so a cell whose N-1 leader outlasted that saw it complete
/// on attempt 1, unrescued. With no leader at all it must still be running
/// long after 30 deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrunning_first_attempt_waits_for_deadline_rescue_past_thirty_deadlines() {
    let db = Db::migrated("overrun_hold").await;
    let client = db.client().await;
    // No maintenance anywhere: nothing can rescue the attempt.
    let worker = spawn(
        awa_bin(),
        &db.url,
        &["worker", "--no-maintenance", "--name", "alone"],
        &[],
    );
    let overrun = NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: json!({ "mode": "overrun_deadline" }),
        priority: 0,
        max_attempts: 3,
        deadline_ms: Some(50),
        run_at_ms: None,
    };
    let id = enqueue::enqueue(&client, &[overrun]).await.unwrap()[0];
    worker
        .wait_for("the overrun to start", Duration::from_secs(10), |ev| {
            ev.iter()
                .any(|e| e["event"] == "started" && e["job_id"] == id)
        })
        .await;
    // 30 deadlines are 1.5 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !worker.named("finished").iter().any(|e| e["job_id"] == id),
        "the attempt ended without a rescue: {:?}",
        worker.named("finished")
    );
    let outcome = first_attempt_outcome(&client, id).await;
    assert_eq!(outcome, None, "still running, waiting for deadline rescue");
    assert_eq!(worker.terminate().await, 0);
}

/// One rescue pass closes every attempt it found in one transaction: an
/// attempt with attempts left is re-queued, one that spent its last is
/// dead-lettered, and a lease whose attempt is closed already is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_requeues_dead_letters_and_drops_orphan_leases() {
    use awa_runtime::store::claim;
    use awa_runtime::store::rescue::{self, RescueReason};
    let db = Db::migrated("rescue_pass").await;
    let mut c = db.client().await;
    let job = |max_attempts: i32| NewJob {
        kind: "rehearsal".into(),
        queue: "q".into(),
        args: json!({"mode": "sleep", "ms": 60_000}),
        priority: 0,
        max_attempts,
        deadline_ms: None,
        run_at_ms: None,
    };
    let ids = enqueue::enqueue(&c, &[job(3), job(1), job(3), job(3)])
        .await
        .unwrap();
    // Claimed by a runtime that never registered: crash rescue takes them all.
    let claimed = claim::claim(&c, "q", 4, "ghost", "0.7.0").await.unwrap();
    assert_eq!(claimed.len(), 4);
    let lease_of = |id: i64| claimed.iter().find(|a| a.job_id == id).unwrap().run_lease;
    // The fourth job closed (terminal jobs leave awa.jobs), but its lease
    // was left behind: an orphan.
    c.execute("DELETE FROM awa.jobs WHERE job_id = $1", &[&ids[3]])
        .await
        .unwrap();

    let mut rescued = rescue::rescue(&mut c, 60_000.0).await.unwrap();
    rescued.sort_by_key(|r| r.job_id);
    let got: Vec<(i64, i64, RescueReason, bool)> = rescued
        .iter()
        .map(|r| (r.job_id, r.run_lease, r.reason, r.dead))
        .collect();
    assert_eq!(
        got,
        [
            (ids[0], lease_of(ids[0]), RescueReason::Crash, false),
            (ids[1], lease_of(ids[1]), RescueReason::Crash, true),
            (ids[2], lease_of(ids[2]), RescueReason::Crash, false),
        ]
    );
    let count = |sql: &'static str| {
        let c = &c;
        async move { c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM awa.leases").await,
        0,
        "a lease was left"
    );
    assert_eq!(
        count("SELECT count(*) FROM awa.jobs WHERE state = 'available'").await,
        2
    );
    assert_eq!(count("SELECT count(*) FROM awa.queue_entries").await, 2);
    assert_eq!(
        count("SELECT count(*) FROM awa.dead_letters WHERE reason = 'attempts exhausted: crash rescue'").await,
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM awa.claim_closures WHERE outcome = 'rescued_crash'").await,
        3
    );
    assert_eq!(
        count("SELECT count(*) FROM awa.executions WHERE outcome = 'rescued_crash'").await,
        3
    );
    // Nothing is left to rescue: a second pass finds nothing.
    assert_eq!(rescue::rescue(&mut c, 60_000.0).await.unwrap(), []);
}

/// A worker that rescues its own overrunning attempts (it is the leader)
/// and claims the re-queued jobs again before its heartbeat has noticed
/// the lost leases must still stop the old handlers: each one holds a
/// concurrency slot for as long as it runs, and an `overrun_deadline`
/// first attempt runs for ten minutes. The `leader-handoff-cron` cell
/// (docker, loaded machine) ended with one live worker holding 63 of its
/// 64 slots that way: 1689 jobs ready, none running, claimed one at a
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescued_attempt_claimed_again_by_its_own_worker_frees_its_slot() {
    let db = Db::migrated("rescue_reclaim").await;
    let run = SelfRescue::run(&db, &[]).await;
    // All three slots are free again: the three long sleepers run side by
    // side (with the rescued handlers left running, one at a time).
    assert_eq!(run.sleepers_started_within(Duration::from_secs(3)).await, 3);
    // Each rescued first attempt's handler was stopped and said so.
    for id in &run.overruns {
        assert_eq!(
            run.first_attempt_ends(*id),
            vec![json!("lease_lost")],
            "job {id}'s rescued first attempt"
        );
    }
    assert_eq!(run.worker.terminate().await, 0);
}

/// Waits until a session waits on one that `pid` holds.
async fn wait_blocked_by(c: &tokio_postgres::Client, pid: i32) {
    let start = std::time::Instant::now();
    loop {
        if common::waiting_on(c, pid).await > 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nobody waited on session {pid}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pid_of(c: &tokio_postgres::Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Closures recorded for one job: (outcome, terminal).
async fn closures_of(c: &tokio_postgres::Client, id: i64) -> Vec<(String, bool)> {
    c.query(
        "SELECT outcome, terminal FROM awa.claim_closures WHERE job_id = $1 ORDER BY outcome",
        &[&id],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// A worker's close and the leader's rescue of the same attempt that meet
/// on its row: whichever commits first closes the attempt, the other
/// changes nothing (one closure, no second terminal record, no re-queue
/// of a completed job). Each closing statement re-checks its own guard
/// (`job_id`, `run_lease`, `state = 'running'`) against the row it waited
/// for, so this holds by the statements alone; the rescue's up-front LOCK
/// only orders its row locks (fewer deadlocks, which both sides retry).
/// That is why the mutants that change which rows the LOCK takes (other
/// attempts, rows no longer running, none at all) are listed equivalent
/// in matrix.toml: this test passes with each of them applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_and_a_rescue_that_meet_on_an_attempt_close_it_once() {
    use awa_runtime::store::claim;
    use awa_runtime::store::rescue::{self, RescueReason};
    let db = Db::migrated("rescue_meets_close").await;
    let watch = db.client().await;
    let job = NewJob {
        kind: "rehearsal".into(),
        queue: "q".into(),
        args: json!({"mode": "sleep", "ms": 60_000}),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    };
    let ids = enqueue::enqueue(&watch, &[job.clone(), job]).await.unwrap();
    // Claimed by a runtime that never registered: crash rescue wants both.
    let claimed = claim::claim(&watch, "q", 2, "ghost", "0.7.0")
        .await
        .unwrap();
    let lease_of = |id: i64| claimed.iter().find(|a| a.job_id == id).unwrap().run_lease;
    let (first, second) = (ids[0], ids[1]);

    // The close first: its transaction holds the first job's row while
    // the rescue pass comes for it and waits.
    let mut closer = db.client().await;
    let closer_pid = pid_of(&closer).await;
    let tx = closer.transaction().await.unwrap();
    let closed = tx
        .query(
            finish::TERMINAL,
            &[&vec![first], &vec![lease_of(first)], &vec!["completed"]],
        )
        .await
        .unwrap();
    assert_eq!(closed.len(), 1);
    let mut leader = db.client().await;
    let leader_pid = pid_of(&leader).await;
    // The second job's lease is held by a third session, so the pass stops
    // inside its re-queue, holding the second job's row.
    let mut holder = db.client().await;
    let holder_pid = pid_of(&holder).await;
    let held = holder.transaction().await.unwrap();
    held.execute(
        "SELECT 1 FROM awa.leases WHERE job_id = $1 FOR UPDATE",
        &[&second],
    )
    .await
    .unwrap();
    let pass = tokio::spawn(async move { rescue::rescue(&mut leader, 60_000.0).await });
    wait_blocked_by(&watch, closer_pid).await;
    tx.commit().await.unwrap();

    // The rescue pass now holds the second job's row and waits for its
    // lease; the worker's close of that attempt comes and waits for the row.
    wait_blocked_by(&watch, holder_pid).await;
    let late = db.client().await;
    let second_lease = lease_of(second);
    let close = tokio::spawn(async move {
        finish::finish(&late, second, second_lease, &Outcome::Completed).await
    });
    wait_blocked_by(&watch, leader_pid).await;
    held.commit().await.unwrap();

    let rescued = pass.await.unwrap().unwrap();
    let got: Vec<(i64, RescueReason, bool)> = rescued
        .iter()
        .map(|r| (r.job_id, r.reason, r.dead))
        .collect();
    assert_eq!(
        got,
        [(second, RescueReason::Crash, false)],
        "the rescue took the completed job, or missed the one it held"
    );
    assert_eq!(close.await.unwrap().unwrap(), Closed::Stale);
    assert_eq!(
        closures_of(&watch, first).await,
        [("completed".to_owned(), true)],
        "the completed attempt was closed again"
    );
    assert_eq!(
        closures_of(&watch, second).await,
        [("rescued_crash".to_owned(), false)],
        "the rescued attempt's late close was recorded"
    );
    let entries = common::ready_entries(&watch).await;
    assert_eq!(entries, [second], "only the rescued job is ready again");
}
