//! Shared test harness: a throwaway cluster per test, and real `awa`
//! processes whose JSON-lines events the tests read.
#![expect(
    dead_code,
    reason = "each test binary compiles this shared harness and uses only part of it"
)]

use awa_harness::pgtemp::Cluster;
use serde_json::Value;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_postgres::Client;

/// Compressed timings so rescue and rotation happen within a test.
pub const FAST: &[(&str, &str)] = &[
    ("AWA_HEARTBEAT_INTERVAL", "100ms"),
    ("AWA_STALE_AFTER", "1s"),
    ("AWA_RESCUE_INTERVAL", "100ms"),
    ("AWA_ROTATE_INTERVAL", "1s"),
    ("AWA_PROMOTE_INTERVAL", "50ms"),
    ("AWA_CRON_INTERVAL", "50ms"),
    ("AWA_POLL_INTERVAL", "20ms"),
    ("AWA_RETRY_BACKOFF", "100ms"),
    ("AWA_SNOOZE", "100ms"),
    ("AWA_SHUTDOWN_GRACE", "2s"),
];

/// A cluster with one migrated database.
pub struct Db {
    pub cluster: Cluster,
    pub url: String,
}

impl Db {
    /// Start a cluster and create database `name` (not migrated).
    pub async fn empty(name: &str) -> Db {
        let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
        let url = cluster
            .create_database(name)
            .await
            .expect("create database");
        Db { cluster, url }
    }

    /// Start a cluster, create `name` and migrate it with this build.
    pub async fn migrated(name: &str) -> Db {
        let db = Db::empty(name).await;
        let mut c = db.client().await;
        awa_runtime::schema::migrate(&mut c, &Default::default())
            .await
            .expect("migrate");
        db
    }

    pub async fn client(&self) -> Client {
        awa_runtime::db::connect(&self.url).await.expect("connect")
    }
}

/// The path of this build's `awa` binary.
pub fn awa_bin() -> &'static str {
    env!("CARGO_BIN_EXE_awa")
}

/// A running `awa` process with its events collected.
pub struct Proc {
    pub child: Child,
    pub events: Arc<Mutex<Vec<Value>>>,
    pub stderr: Arc<Mutex<String>>,
}

/// Start `bin args...` against `url` with the fast timings plus `env`.
pub fn spawn(bin: &str, url: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env("AWA_DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in FAST.iter().chain(env) {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn awa");
    let events: Arc<Mutex<Vec<Value>>> = Arc::default();
    let stderr: Arc<Mutex<String>> = Arc::default();
    let out = child.stdout.take().expect("stdout");
    let ev = events.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => ev.lock().unwrap().push(v),
                Err(_) => panic!("non-JSON line on stdout: {line}"),
            }
        }
    });
    let err = child.stderr.take().expect("stderr");
    let se = stderr.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = se.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    Proc {
        child,
        events,
        stderr,
    }
}

impl Proc {
    /// Events named `name` so far.
    pub fn named(&self, name: &str) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == name)
            .cloned()
            .collect()
    }

    /// Wait until `pred` holds over the events, or panic after `timeout`.
    pub async fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&[Value]) -> bool) {
        let start = Instant::now();
        loop {
            if pred(&self.events.lock().unwrap()) {
                return;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out waiting for {what}; events: {:?}\nstderr: {}",
                    self.events.lock().unwrap(),
                    self.stderr.lock().unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait until more than `n` jobs were accepted, or panic after 10 s.
    pub async fn wait_accepted(&self, what: &str, n: usize) {
        self.wait_for(what, Duration::from_secs(10), |ev| {
            ev.iter().filter(|e| e["event"] == "accepted").count() > n
        })
        .await;
    }

    /// Send SIGTERM and wait for the exit code.
    pub async fn terminate(mut self) -> i32 {
        if let Some(pid) = self.child.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let st = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("exit after SIGTERM")
            .unwrap();
        st.code().unwrap_or(-1)
    }

    /// SIGKILL, reaped.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill");
    }

    /// Wait for the process to exit by itself.
    pub async fn exit_code(mut self, timeout: Duration) -> (i32, String) {
        let st = tokio::time::timeout(timeout, self.child.wait())
            .await
            .expect("process exits")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        (st.code().unwrap_or(-1), self.stderr.lock().unwrap().clone())
    }
}

/// Run an `awa` command to completion; returns (exit code, stdout, stderr).
pub async fn run(
    bin: &str,
    url: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut cmd = Command::new(bin);
    cmd.args(args).env("AWA_DATABASE_URL", url);
    for (k, v) in FAST.iter().chain(env) {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("command finishes")
        .expect("run awa");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sessions waiting on a lock that session `$1` holds.
const BLOCKED_BY: &str =
    "SELECT count(*) FROM pg_stat_activity WHERE $1::int4 = ANY(pg_blocking_pids(pid))";

/// How many sessions wait on a lock that session `pid` holds.
pub async fn waiting_on(client: &Client, pid: i32) -> i64 {
    client.query_one(BLOCKED_BY, &[&pid]).await.unwrap().get(0)
}

/// The jobs the ready entries name, in the table's order.
pub async fn ready_entries(client: &Client) -> Vec<i64> {
    client
        .query("SELECT job_id FROM awa.queue_entries", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Poll a query returning one i64 until it equals `want`.
pub async fn wait_count(client: &Client, sql: &str, want: i64, timeout: Duration) {
    let start = Instant::now();
    loop {
        let n: i64 = client.query_one(sql, &[]).await.unwrap().get(0);
        if n == want {
            return;
        }
        if start.elapsed() > timeout {
            panic!("timed out: {sql} = {n}, wanted {want}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The binary of a frozen release, built from its archive (cached by
/// digest under target/releases).
pub fn release_bin(version: &str) -> String {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let artifacts = repo.join("artifacts");
    let manifest = awa_harness::release::load_manifest(&artifacts).unwrap();
    let r = manifest.release(version, &artifacts).unwrap();
    let built = awa_harness::release::build(&artifacts, r, &repo.join("target").join("releases"))
        .unwrap_or_else(|e| panic!("{e}"));
    built.binary.to_str().unwrap().to_string()
}

impl Db {
    /// A database at the 0.6 schema (v2), migrated by the 0.6.2 release.
    pub async fn at_v2(name: &str, bin062: &str) -> Db {
        let db = Db::empty(name).await;
        let (code, _, err) = run(bin062, &db.url, &["migrate"], &[]).await;
        assert_eq!(code, 0, "0.6.2 migrate: {err}");
        db
    }

    /// A database migrated by 0.6.2 and then expanded by this build: an
    /// upgrade install in `columns` authority.
    pub async fn expanded(name: &str, bin062: &str) -> Db {
        let db = Db::at_v2(name, bin062).await;
        awa_runtime::schema::migrate(&mut db.client().await, &Default::default())
            .await
            .expect("expand");
        db
    }

    /// The authority row.
    pub async fn authority(&self) -> String {
        self.client()
            .await
            .query_one("SELECT authority FROM awa.ring_cursor_authority", &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Per ring: (columns generation, ledger max generation, ledger gaps in its last wrap).
    pub async fn cursors(&self) -> Vec<(String, i64, i64, i64)> {
        let c = self.client().await;
        let mut out = Vec::new();
        for ring in ["queue", "claim", "lease"] {
            let sql = format!(
                "WITH top AS (SELECT max(generation) g FROM awa.{ring}_ring_rotations),
                      n AS (SELECT slot_count FROM awa.{ring}_ring_state)
                 SELECT s.generation, top.g,
                        (SELECT count(*) FROM n, generate_series(greatest(0, top.g - n.slot_count + 1), top.g) x
                         WHERE NOT EXISTS (SELECT 1 FROM awa.{ring}_ring_rotations r WHERE r.generation = x))
                 FROM awa.{ring}_ring_state s, top"
            );
            let r = c.query_one(&sql, &[]).await.unwrap();
            out.push((ring.to_string(), r.get(0), r.get(1), r.get(2)));
        }
        out
    }
}

/// `awa storage flip-ring-authority` with `extra` flags, to completion;
/// returns (exit code, stdout, stderr).
pub async fn flip(url: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut args = vec!["storage", "flip-ring-authority"];
    args.extend_from_slice(extra);
    run(awa_bin(), url, &args, env).await
}

/// The outcome of job `id`'s first attempt, if it has ended.
pub async fn first_attempt_outcome(client: &Client, id: i64) -> Option<String> {
    client
        .query_one(
            "SELECT outcome FROM awa.executions WHERE job_id = $1 AND attempt = 1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

/// The scenario of a worker that deadline-rescues its own overrunning
/// first attempts (it is the only worker, so the leader) and claims the
/// re-queued jobs again at once: two `overrun_deadline` jobs (300 ms
/// deadline) on a worker with three slots and a slow heartbeat (1 s), so
/// the re-claim (polled every 20 ms) comes before the heartbeat can miss
/// the old leases. Once both completed on their second attempt, three 4 s
/// sleepers are enqueued: a worker that stopped the rescued handlers runs
/// them side by side.
pub struct SelfRescue {
    pub worker: Proc,
    pub overruns: Vec<i64>,
    pub sleepers: Vec<i64>,
}

impl SelfRescue {
    /// Run the scenario up to the sleepers' enqueue; `env` adds to the worker's.
    pub async fn run(db: &Db, env: &[(&str, &str)]) -> SelfRescue {
        use awa_runtime::store::enqueue::{self, NewJob};
        let client = db.client().await;
        let job = |args: Value, deadline_ms: Option<i32>| NewJob {
            kind: "rehearsal".into(),
            queue: "default".into(),
            args,
            priority: 0,
            max_attempts: 3,
            deadline_ms,
            run_at_ms: None,
        };
        let overrun = || job(serde_json::json!({ "mode": "overrun_deadline" }), Some(300));
        let overruns = enqueue::enqueue(&client, &[overrun(), overrun()])
            .await
            .expect("enqueue the overruns");
        let mut worker_env = vec![
            ("AWA_CONCURRENCY", "3"),
            ("AWA_HEARTBEAT_INTERVAL", "1s"),
            ("AWA_STALE_AFTER", "10s"),
        ];
        worker_env.extend_from_slice(env);
        let worker = spawn(
            awa_bin(),
            &db.url,
            &["worker", "--name", "self-rescuer"],
            &worker_env,
        );
        worker
            .wait_for(
                "both overruns to complete on their second attempt",
                Duration::from_secs(30),
                |ev| {
                    overruns.iter().all(|id| {
                        ev.iter().any(|e| {
                            e["event"] == "finished" && e["job_id"] == *id && e["attempt"] == 2
                        })
                    })
                },
            )
            .await;
        let rescued = worker.named("rescued");
        for id in &overruns {
            assert!(
                rescued
                    .iter()
                    .any(|e| e["job_id"] == *id && e["run_lease"] == 1),
                "job {id}'s first attempt was not rescued by the worker itself: {rescued:?}"
            );
        }
        let sleeper = || job(serde_json::json!({ "mode": "sleep", "ms": 4_000 }), None);
        let sleepers = enqueue::enqueue(&client, &[sleeper(), sleeper(), sleeper()])
            .await
            .expect("enqueue the sleepers");
        SelfRescue {
            worker,
            overruns,
            sleepers,
        }
    }

    /// How many of the sleepers the worker has started after `wait`
    /// (each holds its slot 4 s, so more than one means side by side).
    pub async fn sleepers_started_within(&self, wait: Duration) -> usize {
        let all = || {
            let ev = self.worker.events.lock().unwrap();
            self.sleepers
                .iter()
                .filter(|id| {
                    ev.iter()
                        .any(|e| e["event"] == "started" && e["job_id"] == **id)
                })
                .count()
        };
        let start = Instant::now();
        while all() < self.sleepers.len() && start.elapsed() < wait {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        all()
    }

    /// The `lease_lost` and `finished` events of job `id`'s first attempt.
    pub fn first_attempt_ends(&self, id: i64) -> Vec<Value> {
        self.worker
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["job_id"] == id && e["run_lease"] == 1)
            .filter(|e| e["event"] == "lease_lost" || e["event"] == "finished")
            .map(|e| e["event"].clone())
            .collect()
    }
}
