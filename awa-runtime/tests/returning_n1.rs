//! A pre-flip binary that is still alive across the flip (suspended, or
//! running under a forced flip) and comes back: the fence must stop it on
//! its claim and enqueue path, before it takes a job or writes one, so no
//! job loses an attempt to a binary that could never close it. Proven with
//! the real 0.6.2 built from its archive.

mod common;

use awa_runtime::store::enqueue::{self, NewJob};
use awa_runtime::store::{audit, read};
use common::*;
use nix::sys::signal::Signal;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn job(queue: &str, mode: &str) -> NewJob {
    NewJob {
        kind: "rehearsal".into(),
        queue: queue.into(),
        args: json!({ "mode": mode }),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    }
}

async fn bin062() -> String {
    tokio::task::spawn_blocking(|| release_bin("0.6.2"))
        .await
        .unwrap()
}

fn signal(p: &Proc, sig: Signal) {
    let pid = p.child.id().expect("process is running") as i32;
    // A child this test started and has not reaped.
    let rc = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    assert_eq!(rc, Ok(()), "kill({pid}, {sig})");
}

/// Sessions of this database sitting inside a transaction.
const IN_TRANSACTION: &str = "SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL";

/// SIGSTOP `p` at a moment when none of its sessions is inside a
/// transaction (so it holds no row or table lock while frozen).
async fn freeze_between_transactions(p: &Proc, client: &Client) {
    for _ in 0..200 {
        signal(p, Signal::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n: i64 = client.query_one(IN_TRANSACTION, &[]).await.unwrap().get(0);
        if n == 0 {
            return;
        }
        signal(p, Signal::SIGCONT);
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    panic!("never caught the process between transactions");
}

async fn flipped_at(client: &Client) -> f64 {
    client
        .query_one(
            "SELECT extract(epoch FROM flipped_at)::float8 FROM awa.ring_cursor_authority",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Executions (attempts started) by `version` since the flip.
async fn attempts_since_flip(client: &Client, version: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM awa.executions e, awa.ring_cursor_authority a
             WHERE e.version = $1 AND e.started_at >= a.flipped_at",
            &[&version],
        )
        .await
        .unwrap()
        .get(0)
}

/// Every id in `accepted` has exactly one terminal record.
async fn exactly_once(client: &Client, accepted: &[i64]) {
    let mut per_job: HashMap<i64, usize> = HashMap::new();
    for r in read::terminal_records(client).await.unwrap() {
        *per_job.entry(r.job_id).or_default() += 1;
    }
    let bad: Vec<_> = accepted
        .iter()
        .filter(|id| per_job.get(id) != Some(&1))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} accepted jobs without exactly one terminal record: {:?}",
        bad.len(),
        accepted.len(),
        &bad[..bad.len().min(20)]
    );
}

async fn wait_leader(p: &Proc) {
    p.wait_for("leadership", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "leader")
    })
    .await;
}

/// What became of a 0.6.2 leader frozen across an unforced flip.
struct Returned {
    db: Db,
    client: Client,
    /// Every job enqueued.
    accepted: Vec<i64>,
    /// Jobs enqueued after the flip, before the resume.
    waiting: Vec<i64>,
    code: i32,
    stderr: String,
}

/// A real 0.6.2 worker (the leader when `old_leads`, else the 0.7 worker
/// leads) is frozen between transactions, an unforced flip runs, work
/// waits, and the 0.6.2 is resumed and runs until it exits. With
/// `unfence`, the flip's refusal of the legacy resolver is undone first:
/// the claim path as it was before the fence covered it.
async fn freeze_flip_and_resume(name: &str, unfence: bool, old_leads: bool) -> Returned {
    let bin062 = bin062().await;
    let db = Db::expanded(name, &bin062).await;
    let client = db.client().await;
    let fast = [("AWA_ROTATE_INTERVAL", "200ms"), ("AWA_STALE_AFTER", "1s")];
    let maintenance = |leads: bool| if leads { "" } else { "--no-maintenance" };
    let args = |name: &'static str, leads: bool| -> Vec<&'static str> {
        ["worker", "--name", name, maintenance(leads)]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect()
    };
    let (old, new) = if old_leads {
        let old = spawn(&bin062, &db.url, &args("old", true), &fast);
        wait_leader(&old).await;
        (old, spawn(awa_bin(), &db.url, &args("new", false), &fast))
    } else {
        let new = spawn(awa_bin(), &db.url, &args("new", true), &fast);
        wait_leader(&new).await;
        (spawn(&bin062, &db.url, &args("old", false), &fast), new)
    };
    let mut accepted = Vec::new();
    for _ in 0..10 {
        let jobs: Vec<NewJob> = (0..30).map(|_| job("default", "complete")).collect();
        accepted.extend(enqueue::enqueue(&client, &jobs).await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    old.wait_for("claims by 0.6.2", Duration::from_secs(10), |ev| {
        ev.iter().any(|e| e["event"] == "started")
    })
    .await;

    // Idle when frozen, so its first act on return is a claim (a close of
    // an attempt it held would meet the poisoned slot first).
    wait_count(
        &client,
        "SELECT count(*) FROM awa.jobs",
        0,
        Duration::from_secs(20),
    )
    .await;
    freeze_between_transactions(&old, &client).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Unforced: the frozen 0.6.2 is no longer fresh, the 0.7 worker is flip-aware.
    let (code, _, err) = flip(&db.url, &[], &fast).await;
    assert_eq!(code, 0, "the unforced flip: {err}");
    assert_eq!(new.terminate().await, 0);
    // Ready work for the returning binary, enqueued through the flip-aware resolver.
    let waiting: Vec<NewJob> = (0..40).map(|_| job("default", "complete")).collect();
    let waiting = enqueue::enqueue(&client, &waiting).await.unwrap();
    accepted.extend(&waiting);

    // It stays stopped a while past the flip, as a suspension does (and
    // past the audit's margin for the flip's commit).
    tokio::time::sleep(Duration::from_millis(300)).await;
    if unfence {
        client
            .batch_execute("UPDATE awa.ring_cursor_authority SET legacy_fenced = false")
            .await
            .unwrap();
    }
    signal(&old, Signal::SIGCONT);
    let (code, stderr) = old.exit_code(Duration::from_secs(20)).await;
    Returned {
        db,
        client,
        accepted,
        waiting,
        code,
        stderr,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_n1_leader_resumed_after_an_unforced_flip_fails_before_it_claims() {
    let Returned {
        db,
        client,
        accepted,
        waiting,
        code,
        stderr,
    } = freeze_flip_and_resume("suspended_leader", false, true).await;
    assert_ne!(code, 0, "the returning 0.6.2 kept running after the flip");
    assert!(
        stderr.contains("ring cursor authority is ledger"),
        "a loud failure naming the authority: {stderr}"
    );
    assert_eq!(
        attempts_since_flip(&client, "0.6.2").await,
        0,
        "the returning 0.6.2 started attempts after the flip; stderr: {stderr}"
    );
    let untouched: i64 = client
        .query_one(
            "SELECT count(*) FROM awa.jobs WHERE job_id = ANY($1) AND state = 'available' AND attempt = 0",
            &[&waiting],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        untouched,
        waiting.len() as i64,
        "jobs waiting at the resume were taken"
    );
    assert!(flipped_at(&client).await > 0.0);
    let features = audit::schema_features(&client).await.unwrap();
    let late = audit::attempts_after_flip_by_pre_flip_binaries(&client, &features)
        .await
        .unwrap();
    assert_eq!(late, [], "the audit agrees");

    // A 0.7 leader takes over, rescues what the frozen one held, drains.
    let fast = [("AWA_ROTATE_INTERVAL", "200ms"), ("AWA_STALE_AFTER", "1s")];
    let new = spawn(awa_bin(), &db.url, &["worker", "--name", "new2"], &fast);
    wait_count(
        &client,
        "SELECT count(*) FROM awa.jobs",
        0,
        Duration::from_secs(30),
    )
    .await;
    exactly_once(&client, &accepted).await;
    assert_eq!(attempts_since_flip(&client, "0.6.2").await, 0);
    assert_eq!(new.terminate().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_claim_path_fence_the_audit_names_the_attempts_a_returning_n1_worker_started() {
    let r = freeze_flip_and_resume("unfenced_worker", true, false).await;
    // The old behaviour: it claims through the ledger-aware resolver, then
    // dies on its first closure write at the poisoned slot.
    assert_ne!(r.code, 0, "{}", r.stderr);
    let features = audit::schema_features(&r.client).await.unwrap();
    let late = audit::attempts_after_flip_by_pre_flip_binaries(&r.client, &features)
        .await
        .unwrap();
    assert!(
        !late.is_empty()
            && late
                .iter()
                .all(|a| a.version == "0.6.2" && a.after_flip_ms > 0),
        "the attempts the returning 0.6.2 started: {late:?}; stderr: {}",
        r.stderr
    );
    assert!(
        late.iter()
            .all(|a| r.waiting.contains(&a.job_id) || r.accepted.contains(&a.job_id)),
        "{late:?}"
    );
    drop(r.db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_n1_producer_fails_on_its_first_enqueue_after_a_forced_flip() {
    producer_across_a_forced_flip("mixed", "complete=1,scheduled=1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_n1_producer_of_scheduled_jobs_only_fails_after_a_forced_flip() {
    producer_across_a_forced_flip("scheduled", "scheduled=1").await;
}

/// A 0.6.2 producer enqueues `mix` onto a queue no worker serves while a
/// forced flip commits: it must fail on its first batch after the flip,
/// and nothing it enqueued after the flip may exist.
async fn producer_across_a_forced_flip(name: &str, mix: &str) {
    let bin062 = bin062().await;
    let db = Db::expanded(name, &bin062).await;
    let client = db.client().await;
    let fast = [("AWA_STALE_AFTER", "1s")];
    let producer = spawn(
        &bin062,
        &db.url,
        &[
            "produce", "--queue", "parked", "--rate", "200", "--batch", "5", "--mix", mix,
        ],
        &fast,
    );
    producer.wait_accepted("load", 50).await;
    let (code, _, err) = flip(&db.url, &["--force"], &fast).await;
    assert_eq!(code, 0, "{err}");
    // Every transaction that starts from now on sees the flip committed.
    let flip_done: f64 = client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .unwrap()
        .get(0);
    let start = Instant::now();
    let events = producer.events.clone();
    let (code, stderr) = producer.exit_code(Duration::from_secs(10)).await;
    assert_ne!(code, 0, "the 0.6.2 producer kept enqueueing after the flip");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "it took {:?}",
        start.elapsed()
    );
    assert!(
        stderr.contains("ring cursor authority is ledger"),
        "a loud failure naming the authority: {stderr}"
    );
    let after: i64 = client
        .query_one(
            "SELECT count(*) FROM awa.jobs WHERE created_at > to_timestamp($1)",
            &[&flip_done],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, 0, "jobs enqueued by 0.6.2 after the flip");
    // Everything it reported accepted is there, nothing else.
    let accepted: Vec<i64> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "accepted")
        .map(|e| e["job_id"].as_i64().unwrap())
        .collect();
    let present: i64 = client
        .query_one(
            "SELECT count(*) FROM awa.jobs WHERE job_id = ANY($1)",
            &[&accepted],
        )
        .await
        .unwrap()
        .get(0);
    let total: i64 = client
        .query_one("SELECT count(*) FROM awa.jobs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        (present, total),
        (accepted.len() as i64, accepted.len() as i64)
    );
}
