//! Integration tests for the throwaway PostgreSQL cluster, against a real
//! PostgreSQL installation.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use awa_harness::pgtemp::{Cluster, PgError};
use tokio_postgres::NoTls;

/// Connects with a URL, as a user of `Cluster::url` would.
async fn connect_url(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits briefly for a pid to disappear; a reaped process vanishes at once,
/// so this only absorbs scheduling noise.
fn wait_pid_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while proc_exists(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

async fn count_rows(cluster: &Cluster) -> i64 {
    let client = cluster.connect("postgres").await.expect("connect");
    client
        .query_one("SELECT count(*) FROM survivors", &[])
        .await
        .expect("table survives")
        .get(0)
}

async fn make_survivors(cluster: &Cluster) {
    let client = cluster.connect("postgres").await.expect("connect");
    client
        .batch_execute(
            "CREATE TABLE survivors (id int PRIMARY KEY, note text NOT NULL);
             INSERT INTO survivors SELECT g, 'row ' || g FROM generate_series(1, 100) g;",
        )
        .await
        .expect("create and fill table");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_databases_are_separate() {
    let cluster = Cluster::start().await.expect("start cluster");
    assert!(cluster.bindir().join("initdb").exists());
    assert!(cluster.dir().join("data").join("PG_VERSION").exists());
    assert!(cluster.log_path().exists());
    assert!(
        cluster
            .dir()
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("awa-pg-"))
    );
    assert!(cluster.dir().starts_with(std::env::temp_dir()));

    let version = cluster.server_version().await.expect("server version");
    assert!(
        version.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "{version}"
    );

    let alpha = cluster
        .create_database("alpha")
        .await
        .expect("create alpha");
    let beta = cluster
        .create_database("beta_2")
        .await
        .expect("create beta_2");
    assert_eq!(
        alpha,
        format!("postgres://postgres@127.0.0.1:{}/alpha", cluster.port())
    );
    assert_eq!(beta, cluster.url("beta_2"));

    let a = connect_url(&alpha).await;
    let b = connect_url(&beta).await;
    a.batch_execute("CREATE TABLE only_in_alpha (x int); INSERT INTO only_in_alpha VALUES (7)")
        .await
        .expect("create in alpha");
    let x: i32 = a
        .query_one("SELECT x FROM only_in_alpha", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(x, 7);
    let db: String = b
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(db, "beta_2");
    let in_beta: Option<String> = b
        .query_one("SELECT to_regclass('only_in_alpha')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_beta, None, "table leaked into the other database");

    // Names that would need case folding or quoting are rejected up front.
    for bad in ["", "Alpha", "a-b", "a;drop", "x\"y", &"a".repeat(64)] {
        match cluster.create_database(bad).await {
            Err(PgError::InvalidName(n)) => assert_eq!(n, bad),
            other => panic!("{bad:?} was not rejected: {other:?}"),
        }
    }
    // An existing name fails with a message naming the database.
    let err = cluster.create_database("alpha").await.unwrap_err();
    assert!(err.to_string().contains("alpha"), "{err}");
    // Reserved words work thanks to quoting.
    cluster
        .create_database("select")
        .await
        .expect("reserved word as name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_data_survives_crash_and_restart() {
    let mut cluster = Cluster::start().await.expect("start cluster");
    make_survivors(&cluster).await;
    // Hold a backend open so crash() has a backend to kill besides the
    // auxiliary processes.
    let idle = cluster.connect("postgres").await.expect("idle connection");
    let port = cluster.port();
    let pid = cluster.pid().expect("running");

    cluster.crash().expect("crash");
    assert_eq!(cluster.pid(), None);
    assert!(
        wait_pid_gone(pid),
        "postmaster {pid} still exists after crash"
    );
    assert!(
        idle.query_one("SELECT 1", &[]).await.is_err(),
        "backend survived the crash"
    );
    assert!(matches!(
        cluster.connect("postgres").await,
        Err(PgError::NotRunning)
    ));

    cluster.restart().await.expect("restart after crash");
    assert_eq!(cluster.port(), port, "port changed across restart");
    assert_ne!(cluster.pid(), Some(pid));
    assert_eq!(count_rows(&cluster).await, 100);

    // Crash twice in a row to be sure recovery leaves a restartable cluster.
    cluster.crash().expect("second crash");
    cluster.restart().await.expect("second restart");
    assert_eq!(count_rows(&cluster).await, 100);
    let log = std::fs::read_to_string(cluster.log_path()).unwrap_or_default();
    assert!(!log.is_empty() || cluster.log_path().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_immediate_then_restart() {
    let mut cluster = Cluster::start().await.expect("start cluster");
    make_survivors(&cluster).await;
    let port = cluster.port();
    let pid = cluster.pid().expect("running");

    cluster.stop_immediate().expect("stop");
    assert!(
        wait_pid_gone(pid),
        "postmaster {pid} still exists after stop"
    );
    // Stopping again is a no-op, and so is crashing a stopped cluster.
    cluster.stop_immediate().expect("second stop");
    cluster.crash().expect("crash while stopped");

    cluster.restart().await.expect("restart");
    assert_eq!(cluster.port(), port);
    assert_eq!(count_rows(&cluster).await, 100);

    // restart() on a running server stops it first.
    let pid = cluster.pid().expect("running");
    cluster.restart().await.expect("restart while running");
    assert!(wait_pid_gone(pid));
    assert_eq!(count_rows(&cluster).await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_stops_server_and_removes_dir() {
    let cluster = Cluster::start().await.expect("start cluster");
    let dir = cluster.dir().to_path_buf();
    let pid = cluster.pid().expect("running");
    let _idle = cluster.connect("postgres").await.expect("connect");
    assert!(dir.exists());
    assert!(proc_exists(pid));
    drop(cluster);
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
    assert!(
        !proc_exists(pid),
        "postmaster {pid} still exists after drop"
    );
}

#[test]
fn drop_during_panic_cleans_up() {
    let (tx, rx) = std::sync::mpsc::channel::<(PathBuf, u32)>();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let cluster = rt.block_on(Cluster::start()).expect("start cluster");
        tx.send((cluster.dir().to_path_buf(), cluster.pid().expect("running")))
            .expect("send");
        panic!("deliberate panic while owning a cluster");
    });
    assert!(handle.join().is_err(), "the thread should have panicked");
    let (dir, pid) = rx.recv().expect("cluster started before the panic");
    assert!(!dir.exists(), "{} survived the panic", dir.display());
    assert!(!proc_exists(pid), "postmaster {pid} survived the panic");
}

#[test]
fn drop_inside_catch_unwind_cleans_up() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = rt.block_on(Cluster::start()).expect("start cluster");
    let dir = cluster.dir().to_path_buf();
    let pid = cluster.pid().expect("running");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _owned = cluster;
        panic!("deliberate panic inside catch_unwind");
    }));
    assert!(result.is_err());
    assert!(!dir.exists(), "{} survived the panic", dir.display());
    assert!(!proc_exists(pid), "postmaster {pid} survived the panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_leaves_server_and_dir() {
    let cluster = Cluster::start().await.expect("start cluster");
    let pid = cluster.pid().expect("running");
    let url = cluster.url("postgres");
    let dir = cluster.keep();
    assert!(dir.exists());
    assert!(proc_exists(pid));
    let client = connect_url(&url).await;
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    drop(client);

    // Clean up by hand: the postmaster is still our child process.
    let raw = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::signal::kill(raw, nix::sys::signal::Signal::SIGQUIT).expect("SIGQUIT");
    let status = nix::sys::wait::waitpid(raw, None).expect("reap the postmaster");
    assert_eq!(status.pid(), Some(raw));
    std::fs::remove_dir_all(&dir).expect("remove kept dir");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_on_taken_port_reports_log_tail() {
    let mut cluster = Cluster::start().await.expect("start cluster");
    let port = cluster.port();
    cluster.crash().expect("crash");

    // Someone else grabs the port while the server is down.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("take the port");
    let err = cluster.restart().await.expect_err("restart must fail");
    match &err {
        PgError::Start {
            port: p, tail, log, ..
        } => {
            assert_eq!(*p, port);
            assert_eq!(log, &cluster.log_path());
            assert!(
                tail.contains("could not") || tail.contains("bind"),
                "{tail}"
            );
            assert!(tail.lines().count() <= 20, "{tail}");
        }
        other => panic!("expected a start error, got {other:?}"),
    }
    assert!(err.to_string().contains("postgres.log"), "{err}");
    assert_eq!(cluster.pid(), None);

    drop(squatter);
    cluster
        .restart()
        .await
        .expect("restart once the port is free");
    assert_eq!(cluster.port(), port);
    assert_eq!(
        cluster.server_version().await.map(|v| !v.is_empty()).ok(),
        Some(true)
    );
}
