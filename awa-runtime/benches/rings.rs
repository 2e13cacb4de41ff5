//! Rotation and prune cost, compat (`columns`) vs ledger mode: SQL
//! statements and dead tuples created in the ring control
//! tables per 1,000 rotations of the queue ring, each preceded by the
//! leader's prune of the next slot.
//!
//! Run: `cargo bench -p awa-runtime --bench rings [-- ROTATIONS]`.

use awa_harness::pgtemp::Cluster;
use awa_runtime::store::{Ring, rings};
use awa_runtime::timings::PRUNE_LOCK_WAIT_MAX;
use std::process::{Command, Stdio};
use std::time::Instant;

const CONTROL_TABLES: &str =
    "relname IN ('queue_ring_state', 'queue_ring_slots', 'queue_ring_rotations')";

async fn churn(c: &tokio_postgres::Client) -> (i64, i64) {
    c.batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    let r = c
        .query_one(
            &format!(
                "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint
                 FROM pg_stat_user_tables WHERE schemaname = 'awa' AND {CONTROL_TABLES}"
            ),
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

struct Cost {
    statements: usize,
    dead: i64,
    dead_now: i64,
    ms: f64,
}

async fn measure(cluster: &Cluster, url: &str, rotations: i64) -> Cost {
    let mut c = awa_runtime::db::connect(url).await.unwrap();
    let work = awa_runtime::db::connect(url).await.unwrap();
    let stats = awa_runtime::db::connect(url).await.unwrap();
    let pid: i32 = c
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (churn0, _) = churn(&stats).await;
    c.batch_execute("SET log_statement = 'all'").await.unwrap();
    let start = Instant::now();
    let mut done = 0;
    let mut id = 0i64;
    while done < rotations {
        id += 1;
        // One ready entry in the current slot keeps the ring busy; it is
        // claimed (deleted) after the rotation, so the next slot is free.
        work.execute(
            "INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
             SELECT slot, generation, $1, 'bench', 0, 0 FROM awa.flip_aware_ring_cursor('queue')",
            &[&id],
        )
        .await
        .unwrap();
        rings::prune(&mut c, Ring::Queue, PRUNE_LOCK_WAIT_MAX)
            .await
            .unwrap();
        if matches!(
            rings::rotate(&mut c, Ring::Queue).await.unwrap(),
            rings::Rotated::Advanced { .. }
        ) {
            done += 1;
        }
        work.execute("DELETE FROM awa.queue_entries WHERE job_id = $1", &[&id])
            .await
            .unwrap();
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    c.batch_execute("RESET log_statement").await.unwrap();
    drop(c);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let (churn1, dead_now) = churn(&stats).await;
    let log = std::fs::read_to_string(cluster.log_path()).unwrap_or_default();
    let tag = format!("[{pid}]");
    let statements = log
        .lines()
        .filter(|l| {
            l.contains(&tag)
                && (l.contains("statement: ") || l.contains("execute "))
                && !l.contains("log_statement")
        })
        .count();
    let per = 1000.0 / rotations as f64;
    Cost {
        statements: (statements as f64 * per) as usize,
        dead: ((churn1 - churn0) as f64 * per) as i64,
        dead_now,
        ms: ms * per,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rotations: i64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let artifacts = repo.join("artifacts");
    let manifest = awa_harness::release::load_manifest(&artifacts).unwrap();
    let r = manifest.release("0.6.2", &artifacts).unwrap();
    let bin062 = awa_harness::release::build(&artifacts, r, &repo.join("target").join("releases"))
        .unwrap()
        .binary;

    let cluster = Cluster::start().await.expect("start PostgreSQL");
    let admin = cluster.connect("postgres").await.unwrap();
    admin
        .batch_execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] '")
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    // Compat: a 0.6.2 install expanded by this build (columns authority).
    let compat = cluster.create_database("compat").await.unwrap();
    let st = Command::new(&bin062)
        .arg("migrate")
        .env("AWA_DATABASE_URL", &compat)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    awa_runtime::schema::migrate(
        &mut awa_runtime::db::connect(&compat).await.unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    // Ledger: a fresh install.
    let ledger = cluster.create_database("ledger").await.unwrap();
    awa_runtime::schema::migrate(
        &mut awa_runtime::db::connect(&ledger).await.unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();

    let a = measure(&cluster, &compat, rotations).await;
    let b = measure(&cluster, &ledger, rotations).await;
    println!(
        "queue ring, per 1,000 rotations (each with the leader's prune of the next slot); {rotations} measured"
    );
    println!(
        "{:<10} {:>11} {:>22} {:>16} {:>10}",
        "mode", "statements", "dead tuples created", "n_dead_tup now", "ms"
    );
    for (name, c) in [("compat", &a), ("ledger", &b)] {
        println!(
            "{:<10} {:>11} {:>22} {:>16} {:>10.0}",
            name, c.statements, c.dead, c.dead_now, c.ms
        );
    }
    println!(
        "dead tuples: ring_state + ring_slots + ring_rotations UPDATEs and DELETEs (pg_stat_user_tables); ledger rows are trimmed by folds, not here"
    );
}
