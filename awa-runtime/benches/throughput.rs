//! Throughput benchmark: jobs enqueued-to-completed per second through
//! two `awa worker` processes, side by side in the same run with a minimal
//! `FOR UPDATE SKIP LOCKED` claim/complete loop on the same server (the
//! floor reference).
//!
//! Run: `cargo bench -p awa-runtime --bench throughput [-- JOBS]`
//! (default 20,000 jobs). Each side drains the same banked backlog of
//! `complete` jobs; the clock runs from the workers' start to the last
//! terminal record.

use awa_runtime::pgtemp::Cluster;
use awa_runtime::store::enqueue::{self, NewJob};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const FLOOR_SCHEMA: &str = "CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, state text NOT NULL, args jsonb NOT NULL);
CREATE INDEX floor_jobs_available ON floor_jobs (id) WHERE state = 'available';";
const FLOOR_FILL: &str = "INSERT INTO floor_jobs (state, args) SELECT 'available', '{\"mode\":\"complete\"}' FROM generate_series(1, $1::int)";
const FLOOR_CLAIM: &str = "UPDATE floor_jobs SET state = 'running' WHERE id = (
    SELECT id FROM floor_jobs WHERE state = 'available' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id";
const FLOOR_COMPLETE: &str = "UPDATE floor_jobs SET state = 'completed' WHERE id = $1";

async fn floor(cluster: &Cluster, jobs: i32, loops: usize) -> f64 {
    let db = format!("floor_{loops}");
    let url = cluster.create_database(&db).await.unwrap();
    let c = awa_runtime::db::connect(&url).await.unwrap();
    c.batch_execute(FLOOR_SCHEMA).await.unwrap();
    c.execute(FLOOR_FILL, &[&jobs]).await.unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..loops {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let c = awa_runtime::db::connect(&url).await.unwrap();
            let claim = c.prepare(FLOOR_CLAIM).await.unwrap();
            let complete = c.prepare(FLOOR_COMPLETE).await.unwrap();
            while let Some(row) = c.query_opt(&claim, &[]).await.unwrap() {
                let id: i64 = row.get(0);
                c.execute(&complete, &[&id]).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    f64::from(jobs) / start.elapsed().as_secs_f64()
}

async fn awa(cluster: &Cluster, jobs: i32) -> f64 {
    let url = cluster.create_database("awa_bench").await.unwrap();
    let mut c: Client = awa_runtime::db::connect(&url).await.unwrap();
    awa_runtime::schema::migrate(&mut c, &Default::default()).await.unwrap();
    let batch: Vec<NewJob> = (0..1000)
        .map(|_| NewJob {
            kind: "rehearsal".into(),
            queue: "default".into(),
            args: serde_json::json!({ "mode": "complete" }),
            priority: 0,
            max_attempts: 3,
            deadline_ms: None,
            run_at_ms: None,
        })
        .collect();
    for _ in 0..jobs / 1000 {
        enqueue::enqueue(&c, &batch).await.unwrap();
    }
    let total = (jobs / 1000) * 1000;
    let start = Instant::now();
    let mut workers: Vec<_> = (0..2)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_awa"))
                .args(["worker", "--name", &format!("bench-{i}")])
                .env("AWA_DATABASE_URL", &url)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let sql = format!("SELECT count(*) FROM ({}) t", awa_runtime::store::read::TERMINAL_RECORDS);
    loop {
        let n: i64 = c.query_one(&sql, &[]).await.unwrap().get(0);
        if n >= i64::from(total) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = f64::from(total) / start.elapsed().as_secs_f64();
    for w in &mut workers {
        unsafe { libc::kill(w.id() as i32, libc::SIGTERM) };
        w.wait().unwrap();
    }
    rate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs: i32 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let cluster = Cluster::start().await.expect("start PostgreSQL");
    println!("throughput, {jobs} banked `complete` jobs, PostgreSQL {}", cluster.server_version().await.unwrap());
    let floor_2 = floor(&cluster, jobs, 2).await;
    let awa_2 = awa(&cluster, jobs).await;
    let floor_32 = floor(&cluster, jobs, 32).await;
    println!("{:<58} {:>10}", "side", "jobs/s");
    println!("{:<58} {:>10.0}", "floor: 2 SKIP LOCKED loops, one job at a time", floor_2);
    println!("{:<58} {:>10.0}", "floor: 32 SKIP LOCKED loops (awa's total concurrency)", floor_32);
    println!("{:<58} {:>10.0}", "awa: 2 worker processes, concurrency 16 each", awa_2);
    println!("awa / floor(2) = {:.2}, awa / floor(32) = {:.2} (target: >= 0.5)", awa_2 / floor_2, awa_2 / floor_32);
}
