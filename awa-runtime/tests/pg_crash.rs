//! A PostgreSQL crash and restart under load: workers and producers ride
//! it out (transient errors are retried after reconnecting) and every
//! accepted job still ends exactly once.

mod common;

use awa_runtime::store::read;
use common::*;
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_survive_a_server_crash_and_every_job_ends_once() {
    let mut db = Db::migrated("crash").await;
    let worker = spawn(awa_bin(), &db.url, &["worker", "--concurrency", "16"], &[]);
    let producer = spawn(
        awa_bin(),
        &db.url,
        &[
            "produce",
            "--count",
            "3000",
            "--rate",
            "600",
            "--mix",
            "complete=8,retry_once=1,sleep=1",
            "--sleep",
            "50ms",
        ],
        &[],
    );
    producer.wait_accepted("some accepted jobs", 800).await;
    db.cluster.crash().expect("crash");
    tokio::time::sleep(Duration::from_millis(500)).await;
    db.cluster.restart().await.expect("restart");
    let events = producer.events.clone();
    let (code, err) = producer.exit_code(Duration::from_secs(60)).await;
    assert_eq!(code, 0, "producer: {err}");
    let accepted: Vec<i64> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "accepted")
        .map(|e| e["job_id"].as_i64().unwrap())
        .collect();
    let uncertain: Vec<i64> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "uncertain")
        .flat_map(|e| {
            e["job_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(accepted.len() + uncertain.len(), 3000);
    let client = db.client().await;
    wait_count(
        &client,
        "SELECT count(*) FROM awa.jobs",
        0,
        Duration::from_secs(60),
    )
    .await;
    let mut per_job: HashMap<i64, usize> = HashMap::new();
    for r in read::terminal_records(&client).await.unwrap() {
        *per_job.entry(r.job_id).or_default() += 1;
    }
    for id in &accepted {
        assert_eq!(per_job.get(id), Some(&1), "accepted job {id}");
    }
    for (id, n) in &per_job {
        assert_eq!(*n, 1, "job {id} has {n} terminal records");
        assert!(
            accepted.contains(id) || uncertain.contains(id),
            "job {id} was never accepted"
        );
    }
    assert_eq!(worker.terminate().await, 0, "the worker survived the crash");
}
