//! Nothing waits without bound behind a suspended process. A real 0.6.2
//! leader frozen (SIGSTOP) inside a prune holds ACCESS EXCLUSIVE on ring
//! partitions: the flip and `awa status` give up after their lock timeout
//! and name it, then proceed once it is gone. A 0.7 runtime frozen inside
//! a transaction, or a 0.7 leader frozen between ticks, loses its session
//! once the bound passes, so its locks and its leadership come free.

mod common;

use awa_runtime::store::enqueue::{self, NewJob};
use common::*;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn job() -> NewJob {
    NewJob {
        kind: "rehearsal".into(),
        queue: "default".into(),
        args: json!({ "mode": "complete" }),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    }
}

fn signal(p: &Proc, sig: Signal) {
    let pid = Pid::from_raw(p.child.id().expect("process is running") as i32);
    nix::sys::signal::kill(pid, sig).unwrap_or_else(|e| panic!("kill({pid}, {sig}): {e}"));
}

/// SIGSTOP `p` until `caught` (one boolean) holds while it is stopped;
/// SIGCONT and retry otherwise.
async fn freeze_until(p: &Proc, client: &Client, caught: &str) {
    for i in 0..600u64 {
        signal(p, Signal::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(40)).await;
        if client
            .query_one(caught, &[])
            .await
            .unwrap()
            .get::<_, bool>(0)
        {
            return;
        }
        signal(p, Signal::SIGCONT);
        tokio::time::sleep(Duration::from_millis(5 + i % 23)).await;
    }
    panic!("never caught the process with {caught}");
}

/// Enqueue a trickle of jobs until the returned sender is dropped.
fn trickle(client: Client) -> tokio::sync::oneshot::Sender<()> {
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        while rx.try_recv().is_err() {
            let jobs: Vec<NewJob> = (0..20).map(|_| job()).collect();
            if enqueue::enqueue(&client, &jobs).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    tx
}

fn events(out: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// The `blocked` event of a command's stdout, checked to name `name`.
fn blocked_by(out: &str, err: &str, name: &str, version: &str) -> Value {
    let ev = events(out)
        .into_iter()
        .find(|e| e["event"] == "blocked")
        .unwrap_or_else(|| panic!("no blocked event: {out} {err}"));
    let holders = ev["holders"].as_array().expect("holders");
    assert!(
        holders.iter().any(|h| h["runtime"]["name"] == name
            && h["runtime"]["version"] == version
            && h["locks"].as_array().unwrap().iter().any(|l| l
                .as_str()
                .unwrap()
                .starts_with("AccessExclusiveLock on awa."))),
        "the blocker {name} {version} with its locks: {ev}"
    );
    assert!(
        err.contains(&format!("runtime {name} (")) && err.contains("resume or stop that process"),
        "the message names the runtime and what to do: {err}"
    );
    ev
}

/// A backend holds ACCESS EXCLUSIVE on a claim-ring partition.
const CLAIM_PARTITION_HELD: &str = "SELECT EXISTS (
    SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
    WHERE l.granted AND l.mode = 'AccessExclusiveLock' AND c.relname ~ '^claim_(receipts|closures)_[0-9]+$')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flip_and_status_behind_a_frozen_n1_prune_give_up_naming_it_then_proceed() {
    let bin062 = tokio::task::spawn_blocking(|| release_bin("0.6.2"))
        .await
        .unwrap();
    let db = Db::expanded("frozen_prune", &bin062).await;
    let client = db.client().await;
    let fast = [
        ("AWA_ROTATE_INTERVAL", "20ms"),
        ("AWA_STALE_AFTER", "1s"),
        ("AWA_LOCK_TIMEOUT", "1s"),
    ];
    let old = spawn(&bin062, &db.url, &["worker", "--name", "old"], &fast);
    old.wait_for("leadership", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "leader")
    })
    .await;
    let stop_load = trickle(db.client().await);
    freeze_until(&old, &client, CLAIM_PARTITION_HELD).await;
    drop(stop_load);
    // Stale, so readiness would let an unforced flip through: only the locks stop it.
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let start = Instant::now();
    let (code, out, err) = flip(&db.url, &[], &fast).await;
    assert_eq!(code, 3, "the flip gives up, exit 3: {out} {err}");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    let ev = blocked_by(&out, &err, "old", "0.6.2");
    assert_eq!(ev["operation"], "the flip", "{ev}");
    assert!(
        ev["holders"][0]["runtime"]["leader"] == true
            && ev["holders"][0]["runtime"]["matched_by"] == "leader_lock",
        "0.6.2 sets no application_name: matched as the leader: {ev}"
    );
    assert_eq!(db.authority().await, "columns", "nothing changed");

    let start = Instant::now();
    let (code, out, err) = run(awa_bin(), &db.url, &["status", "--json"], &fast).await;
    assert_eq!(code, 3, "status gives up, exit 3: {out} {err}");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    blocked_by(&out, &err, "old", "0.6.2");

    // Once the frozen process is gone, both proceed.
    old.kill().await;
    let (code, out, err) = run(awa_bin(), &db.url, &["status", "--json"], &fast).await;
    assert_eq!(code, 0, "{out} {err}");
    let (code, _, err) = flip(&db.url, &[], &fast).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(db.authority().await, "ledger");
}

/// A session of runtime `name` is idle inside a transaction.
fn idle_in_transaction_of(name: &str) -> String {
    format!(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
         AND state = 'idle in transaction' AND application_name LIKE 'awa % {name}-%')"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_07_runtime_frozen_inside_a_transaction_loses_the_session_after_the_bound() {
    let db = Db::migrated("frozen_tx").await;
    let client = db.client().await;
    let fast = [
        ("AWA_ROTATE_INTERVAL", "20ms"),
        ("AWA_IDLE_IN_TRANSACTION_TIMEOUT", "1s"),
    ];
    let w = spawn(awa_bin(), &db.url, &["worker", "--name", "frozen"], &fast);
    w.wait_for("leadership", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "leader")
    })
    .await;
    let stop_load = trickle(db.client().await);
    freeze_until(&w, &client, &idle_in_transaction_of("frozen")).await;
    drop(stop_load);
    // The server ends the session once the bound passes; its locks go with it.
    wait_count(
        &client,
        &format!("SELECT ({})::int::int8", idle_in_transaction_of("frozen")),
        0,
        Duration::from_secs(3),
    )
    .await;
    // Resumed, it reconnects and carries on.
    signal(&w, Signal::SIGCONT);
    let before = w.named("finished").len();
    let c2 = db.client().await;
    enqueue::enqueue(&c2, &(0..20).map(|_| job()).collect::<Vec<_>>())
        .await
        .unwrap();
    w.wait_for("work after the resume", Duration::from_secs(15), |ev| {
        ev.iter().filter(|e| e["event"] == "finished").count() > before
    })
    .await;
    let stderr = w.stderr.clone();
    let code = w.terminate().await;
    assert_eq!(code, 0, "stderr: {}", stderr.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_07_leader_frozen_between_ticks_hands_leadership_on_once_stale() {
    let db = Db::migrated("frozen_leader").await;
    let fast = [("AWA_STALE_AFTER", "1s")];
    let first = spawn(awa_bin(), &db.url, &["worker", "--name", "first"], &fast);
    first
        .wait_for("leadership", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "leader")
        })
        .await;
    let second = spawn(awa_bin(), &db.url, &["worker", "--name", "second"], &fast);
    second
        .wait_for("ready", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "ready")
        })
        .await;
    signal(&first, Signal::SIGSTOP);
    let start = Instant::now();
    second
        .wait_for("leadership handed on", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "leader")
        })
        .await;
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    signal(&first, Signal::SIGCONT);
    assert_eq!(second.terminate().await, 0);
    assert_eq!(first.terminate().await, 0);
}
