//! Throughput benchmark: jobs enqueued-to-completed per second through
//! two `awa worker` processes, side by side in the same run with a minimal
//! `FOR UPDATE SKIP LOCKED` claim/complete loop on the same server (the
//! floor reference).
//!
//! Run: `cargo bench -p awa-runtime --bench throughput [-- JOBS]`
//! (default 20,000 jobs). Each side drains the same banked backlog of
//! `complete` jobs; the clock runs from the workers' start until no live
//! job is left. The frozen 0.6.2 (built from its archive) runs beside
//! this build, on the same server.

use awa_harness::pgtemp::Cluster;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const FLOOR_SCHEMA: &str =
    "CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, state text NOT NULL, args jsonb NOT NULL);
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

/// Drain `jobs` banked `complete` jobs through two worker processes of
/// `bin`, on a database migrated and filled by that same binary.
async fn awa(cluster: &Cluster, bin: &str, db: &str, jobs: i32) -> f64 {
    let url = cluster.create_database(db).await.unwrap();
    let c: Client = awa_runtime::db::connect(&url).await.unwrap();
    let ok = |args: &[&str]| {
        let st = Command::new(bin)
            .args(args)
            .env("AWA_DATABASE_URL", &url)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "{bin} {args:?}");
    };
    ok(&["migrate"]);
    ok(&[
        "produce",
        "--rate",
        "0",
        "--count",
        &jobs.to_string(),
        "--batch",
        "1000",
    ]);
    let start = Instant::now();
    let mut workers: Vec<_> = (0..2)
        .map(|i| {
            Command::new(bin)
                .args(["worker", "--name", &format!("bench-{i}")])
                .env("AWA_DATABASE_URL", &url)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    loop {
        let n: i64 = c
            .query_one("SELECT count(*) FROM awa.jobs", &[])
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = f64::from(jobs) / start.elapsed().as_secs_f64();
    for w in &mut workers {
        let pid = nix::unistd::Pid::from_raw(w.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        w.wait().unwrap();
    }
    rate
}

/// The 0.6.2 release binary, built from its archive (cached by digest).
fn release_062() -> Option<String> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .to_path_buf();
    let artifacts = repo.join("artifacts");
    let manifest = awa_harness::release::load_manifest(&artifacts).ok()?;
    let r = manifest.release("0.6.2", &artifacts).ok()?;
    match awa_harness::release::build(&artifacts, r, &repo.join("target").join("releases")) {
        Ok(b) => Some(b.binary.to_string_lossy().into_owned()),
        Err(e) => {
            eprintln!("skipping 0.6.2: {e}");
            None
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs: i32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let old = tokio::task::spawn_blocking(release_062).await.unwrap();
    let cluster = Cluster::start().await.expect("start PostgreSQL");
    println!(
        "throughput, {jobs} banked `complete` jobs, PostgreSQL {}",
        cluster.server_version().await.unwrap()
    );
    let floor_2 = floor(&cluster, jobs, 2).await;
    let current = awa(&cluster, env!("CARGO_BIN_EXE_awa"), "awa_current", jobs).await;
    let previous = match &old {
        Some(bin) => Some(awa(&cluster, bin, "awa_062", jobs).await),
        None => None,
    };
    let floor_32 = floor(&cluster, jobs, 32).await;
    println!("{:<62} {:>10}", "side", "jobs/s");
    println!(
        "{:<62} {:>10.0}",
        "floor: 2 SKIP LOCKED loops, one job at a time", floor_2
    );
    println!(
        "{:<62} {:>10.0}",
        "floor: 32 SKIP LOCKED loops (awa's total concurrency)", floor_32
    );
    if let Some(p) = previous {
        println!(
            "{:<62} {:>10.0}",
            "awa 0.6.2 (release archive): 2 workers, concurrency 16 each", p
        );
    }
    println!(
        "{:<62} {:>10.0}",
        format!(
            "awa {} (this build): 2 workers, concurrency 16 each",
            awa_runtime::version::VERSION
        ),
        current
    );
    println!(
        "this build / floor(2) = {:.2}, / floor(32) = {:.2} (target: >= 0.5)",
        current / floor_2,
        current / floor_32
    );
}
