//! The job lifecycle against a real worker process: every workload mode
//! reaches its designed terminal `(state, attempt)`, scheduled jobs wait
//! for `run_at`, and an operator can cancel.

mod common;

use awa_runtime::store::enqueue::{self, NewJob};
use awa_runtime::store::read;
use awa_runtime::workload::Mode;
use common::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn job(mode: Mode, run_at_ms: Option<i64>) -> NewJob {
    NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: json!({ "mode": mode.name(), "ms": 50 }),
        priority: 0,
        max_attempts: 3,
        deadline_ms: (mode == Mode::OverrunDeadline).then_some(400),
        run_at_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_reaches_its_designed_terminal_and_scheduled_jobs_wait() {
    let db = Db::migrated("lifecycle").await;
    let client = db.client().await;
    let run_at = now_ms() + 1500;
    let mut want: HashMap<i64, (Mode, (&str, i32))> = HashMap::new();
    for mode in Mode::ALL {
        let jobs: Vec<NewJob> = (0..4)
            .map(|_| job(mode, (mode == Mode::Scheduled).then_some(run_at)))
            .collect();
        for id in enqueue::enqueue(&client, &jobs).await.unwrap() {
            want.insert(id, (mode, mode.designed_terminal(3)));
        }
    }
    let worker = spawn(awa_bin(), &db.url, &["worker", "--concurrency", "8"], &[]);
    wait_count(
        &client,
        &format!("SELECT count(*) FROM ({}) t", read::TERMINAL_RECORDS),
        want.len() as i64,
        Duration::from_secs(30),
    )
    .await;

    let records = read::terminal_records(&client).await.unwrap();
    assert_eq!(records.len(), want.len(), "one terminal record per job");
    for r in &records {
        let (mode, (state, attempt)) = want[&r.job_id];
        assert_eq!(
            (r.state.as_str(), r.attempt),
            (state, attempt),
            "job {} of mode {}",
            r.job_id,
            mode.name()
        );
    }
    // Nothing left live.
    let live: i64 = client
        .query_one("SELECT count(*) FROM awa.jobs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, 0);
    // Scheduled jobs did not start before run_at.
    let scheduled: Vec<i64> = want
        .iter()
        .filter(|(_, (m, _))| *m == Mode::Scheduled)
        .map(|(id, _)| *id)
        .collect();
    let earliest: f64 = client
        .query_one(
            "SELECT min(extract(epoch FROM started_at) * 1000)::float8 FROM awa.executions WHERE job_id = ANY($1)",
            &[&scheduled],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        earliest >= run_at as f64,
        "a scheduled job started {} ms before run_at",
        run_at as f64 - earliest
    );
    // The overrun attempt was taken by deadline rescue, not heartbeat rescue.
    let overrun: Vec<i64> = want
        .iter()
        .filter(|(_, (m, _))| *m == Mode::OverrunDeadline)
        .map(|(id, _)| *id)
        .collect();
    let outcomes: Vec<String> = client
        .query(
            "SELECT outcome FROM awa.executions WHERE job_id = ANY($1) AND attempt = 1",
            &[&overrun],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        outcomes,
        vec!["rescued_deadline".to_string(); overrun.len()]
    );
    // Executions: one per attempt (plus none for jobs never started).
    let per_attempt: i64 = client
        .query_one("SELECT count(*) FROM (SELECT job_id, attempt FROM awa.executions GROUP BY 1, 2 HAVING count(*) > 1) t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(per_attempt, 0, "an attempt ran twice");
    assert_eq!(worker.terminate().await, 0, "SIGTERM stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_cancel_closes_a_live_job() {
    let db = Db::migrated("cancel").await;
    let client = db.client().await;
    let ids = enqueue::enqueue(&client, &[job(Mode::Complete, Some(now_ms() + 3_600_000))])
        .await
        .unwrap();
    let (code, out, err) = run(
        awa_bin(),
        &db.url,
        &["job", "cancel", &ids[0].to_string()],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"was_live\":true"), "{out}");
    let records = read::terminal_records(&client).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (
            records[0].job_id,
            records[0].state.as_str(),
            records[0].attempt
        ),
        (ids[0], "cancelled", 0)
    );
    let (_, out, _) = run(
        awa_bin(),
        &db.url,
        &["job", "cancel", &ids[0].to_string()],
        &[],
    )
    .await;
    assert!(
        out.contains("\"was_live\":false"),
        "a second cancel finds nothing: {out}"
    );
}

/// An operator's cancel of a scheduled job and the leader's promotion of
/// it, meeting on its row: the cancel deletes the job, and the promotion,
/// whether it skips the locked row or waits for it, never brings it back
/// (no `available` job, no ready entry). Promotion's `FOR UPDATE SKIP
/// LOCKED` is defence in depth here: one promoter runs at a time (under
/// the leader's lock), and a promotion that waits re-checks the row the
/// cancel deleted. matrix.toml lists the mutants that drop it as
/// equivalent for that reason; they pass this test too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_meeting_an_operators_cancel_never_brings_the_job_back() {
    use awa_runtime::store::finish;
    let db = Db::migrated("promote_meets_cancel").await;
    let watch = db.client().await;
    let later = now_ms() + 600_000;
    let job = NewJob {
        kind: "rehearsal".into(),
        queue: "q".into(),
        args: json!({"mode": "complete"}),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: Some(later),
    };
    let ids = enqueue::enqueue(&watch, &[job.clone(), job]).await.unwrap();
    // Both due now.
    watch
        .execute(
            "UPDATE awa.jobs SET run_at = now() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    let state = |id: i64| {
        let c = &watch;
        async move {
            c.query_opt("SELECT state FROM awa.jobs WHERE job_id = $1", &[&id])
                .await
                .unwrap()
                .map(|r| r.get::<_, String>(0))
        }
    };
    assert_eq!(state(ids[0]).await.as_deref(), Some("scheduled"));

    // The operator's cancel of the first job is in flight (its row
    // deleted, not yet committed) when the promotion comes.
    let operator = db.client().await;
    let operator_pid: i32 = operator
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    operator.batch_execute("BEGIN").await.unwrap();
    assert!(finish::cancel_by_operator(&operator, ids[0]).await.unwrap());
    let leader = db.client().await;
    let promotion = tokio::spawn(async move { enqueue::promote_due(&leader).await });
    // The promotion either skipped the locked row and is done, or waits
    // for it; let it get that far, then the cancel commits.
    let start = std::time::Instant::now();
    while !promotion.is_finished() {
        if common::waiting_on(&watch, operator_pid).await > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the promotion neither ended nor waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    operator.batch_execute("COMMIT").await.unwrap();
    let promoted = promotion.await.unwrap().unwrap();

    assert_eq!(promoted, 1, "only the job nobody cancelled is promoted");
    assert_eq!(state(ids[0]).await, None, "the cancelled job came back");
    assert_eq!(state(ids[1]).await.as_deref(), Some("available"));
    let entries = common::ready_entries(&watch).await;
    assert_eq!(entries, [ids[1]], "a ready entry names the cancelled job");
}

/// Two claims that meet on the same ready entries (two workers polling
/// one queue): each job is claimed once. The claim whose DELETE of an
/// entry commits takes its job; the other, whether it skipped the locked
/// entries or waited for them, re-checks each entry it waited for (gone)
/// and leaves it, and its UPDATE of the job re-checks `state =
/// 'available'`. The claim's `FOR UPDATE SKIP LOCKED` is not what makes
/// this hold: it spares the second claim that wait, and without any row
/// lock a poll that meets another comes back with fewer jobs than it
/// picked, a throughput cost under contention. matrix.toml lists the two
/// mutants that drop it (ma6aa69ee, m8127860a) as equivalent for that
/// reason; they pass this test. A claim without the lock that also
/// updates the jobs it picked rather than those it deleted, and drops the
/// `state = 'available'` re-check, fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claims_that_meet_on_the_same_entries_take_each_job_once() {
    use awa_runtime::store::claim;
    let db = Db::migrated("claims_meet").await;
    let watch = db.client().await;
    let jobs: Vec<NewJob> = (0..4).map(|_| job(Mode::Complete, None)).collect();
    let ids = enqueue::enqueue(&watch, &jobs).await.unwrap();

    // The first claim has taken the two first entries, not yet committed.
    let mut first = db.client().await;
    let first_pid: i32 = first
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = first.transaction().await.unwrap();
    let taken: Vec<i64> = tx
        .query(claim::CLAIM, &[&"default", &2_i64, &"w1", &"0.7.0"])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(taken, ids[..2]);
    let second = db.client().await;
    let other =
        tokio::spawn(async move { claim::claim(&second, "default", 4, "w2", "0.7.0").await });
    // The second claim either skipped the locked entries and is done, or
    // waits for them; let it get that far, then the first commits.
    let start = std::time::Instant::now();
    while !other.is_finished() {
        if common::waiting_on(&watch, first_pid).await > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the second claim neither ended nor waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.commit().await.unwrap();
    let mut rest: Vec<i64> = other
        .await
        .unwrap()
        .unwrap()
        .iter()
        .map(|c| c.job_id)
        .collect();
    rest.sort_unstable();
    assert_eq!(rest, ids[2..], "the second claim took a job the first had");

    let runs: Vec<(i64, i64, i32)> = watch
        .query(
            "SELECT job_id, count(*), max(attempt) FROM awa.executions GROUP BY job_id ORDER BY job_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let once: Vec<(i64, i64, i32)> = ids.iter().map(|&id| (id, 1, 1)).collect();
    assert_eq!(runs, once, "a job ran twice, or on a second attempt");
    assert!(common::ready_entries(&watch).await.is_empty());
}
