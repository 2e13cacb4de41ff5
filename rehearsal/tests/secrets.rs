//! Secrets never written: the real `rehearse` binary runs a small cell
//! against `--database-url` with a password (a role of a real throwaway
//! cluster, password authentication on for it), and afterwards no file
//! of the report folder, nor what rehearse printed, holds the password in
//! any form: as typed, percent-encoded or decoded.

pub mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use awa_harness::pgtemp::Cluster;
use common::matrix::current_only;
use common::rehearse::{on_scratch, run};
use common::scratch::Scratch;

/// The role's password: characters a URL must escape (`@`, `#`, `/`), so
/// the typed and the decoded forms differ.
const PASSWORD: &str = "Kp7@vQ#x2/Wm";
/// How it is typed in a URL.
const PASSWORD_IN_URL: &str = "Kp7%40vQ%23x2%2FWm";
/// A wrong password, for the run that cannot connect.
const WRONG: &str = "Nope-9rTz4Lq";
const ROLE: &str = "rehearse_secret";

const CELLS: &str = r#"
[[cell]]
name = "tiny"
about = "one workspace worker and producer under load, then drained"
fresh_install = true
steps = [
  { fleet = "current", workers = 1, producers = 1, leader = true },
  { load = "on" },
  { hold = "1s" },
  { load = "off" },
  { drain = "30s" },
]
"#;

/// A scratch tree with the matrix.
fn scratch(tag: &str) -> Scratch {
    let workload = "rate_per_s = 50
backlog = 50
mix = { complete = 90, retry_once = 10 }";
    Scratch::with_matrix("secrets", tag, &current_only(workload, CELLS))
}

/// Runs rehearse with `args`; returns its exit code, stdout and stderr.
fn rehearse(scratch: &Scratch, args: &[&str]) -> (Option<i32>, String, String) {
    let (status, out, err) = run(on_scratch(scratch, args), Duration::from_secs(600));
    (status.code(), out, err)
}

/// Every file below `dir`, with its bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, bytes));
        }
    }
    out
}

/// Panics naming the place if any form of `secret` is in `text`.
fn assert_absent(what: &str, text: &[u8], secrets: &[&str]) {
    for secret in secrets {
        let found = text
            .windows(secret.len())
            .any(|w| w.eq_ignore_ascii_case(secret.as_bytes()));
        assert!(!found, "{what} holds the secret {secret:?}");
    }
}

/// Starts the cluster with a password-protected superuser role; TCP
/// logins of that role must give its password (scram-sha-256).
async fn cluster_with_password_role() -> Cluster {
    let cluster = Cluster::start().await.expect("throwaway cluster");
    let client = cluster.connect("postgres").await.unwrap();
    let escaped = PASSWORD.replace('\'', "''");
    client
        .batch_execute(&format!(
            "SET password_encryption = 'scram-sha-256';
             CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{escaped}'"
        ))
        .await
        .unwrap();
    // pg_hba.conf: the first matching line wins, so ours goes first.
    let hba = cluster.dir().join("data").join("pg_hba.conf");
    let old = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("host all {ROLE} 127.0.0.1/32 scram-sha-256\n{old}"),
    )
    .unwrap();
    let reloaded: bool = client
        .query_one("SELECT pg_reload_conf()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(reloaded);
    cluster
}

/// Password authentication really is on: no password and a wrong one are
/// refused, the right one is let in.
async fn assert_password_required(port: u16) {
    let url = |userinfo: &str| format!("postgres://{userinfo}@127.0.0.1:{port}/postgres");
    let attempt = |url: String| async move {
        tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .map(|_| ())
    };
    // pg_reload_conf only signals the postmaster; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while attempt(url(ROLE)).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the role logs in without a password"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(attempt(url(&format!("{ROLE}:{WRONG}"))).await.is_err());
    attempt(url(&format!("{ROLE}:{PASSWORD_IN_URL}")))
        .await
        .expect("the right password logs in");
}

#[test]
fn a_run_against_a_password_dsn_writes_the_password_nowhere() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = rt.block_on(cluster_with_password_role());
    let port = cluster.port();
    rt.block_on(assert_password_required(port));
    let forms = [PASSWORD, PASSWORD_IN_URL, "Kp7%40vQ", "vQ#x2/Wm"];

    // The password in the userinfo, then as a `password=` query parameter.
    let dsns = [
        format!("postgres://{ROLE}:{PASSWORD_IN_URL}@127.0.0.1:{port}/postgres"),
        format!(
            "postgres://{ROLE}@127.0.0.1:{port}/postgres?application_name=rehearse&password={PASSWORD_IN_URL}"
        ),
    ];
    for (n, dsn) in dsns.iter().enumerate() {
        let scratch = scratch(&format!("run{n}"));
        let (code, out, err) = rehearse(
            &scratch,
            &["--cell", "tiny", "--seed", "7", "--database-url", dsn],
        );
        assert_eq!(code, Some(0), "{dsn}\nstdout:\n{out}\nstderr:\n{err}");
        assert_absent("stdout", out.as_bytes(), &forms);
        assert_absent("stderr", err.as_bytes(), &forms);
        let written = files(&scratch.reports());
        let names: Vec<String> = written
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for file in ["report.json", "report.md", "junit.xml", "report.html"] {
            assert!(names.iter().any(|n| n == file), "no {file} in {names:?}");
        }
        assert!(
            names.iter().filter(|n| n.ends_with(".log")).count() >= 2,
            "the fleet's logs: {names:?}"
        );
        for (path, bytes) in &written {
            assert_absent(&path.display().to_string(), bytes, &forms);
        }
        // Not vacuous: the places that used to carry the password are
        // there, with the password masked.
        let report = written
            .iter()
            .find(|(p, _)| p.ends_with("report.json"))
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .unwrap();
        assert!(report.contains("--database-url"), "{report}");
        assert!(report.contains("***"), "{report}");
        let logged_env = written.iter().any(|(p, b)| {
            p.extension().is_some_and(|e| e == "log")
                && String::from_utf8_lossy(b).contains("AWA_DATABASE_URL=postgres://")
        });
        assert!(logged_env, "a process log names its AWA_DATABASE_URL");
    }

    // A wrong password: bad input (SQLSTATE 28P01), refused before
    // anything is built or started (exit 2), without quoting the password
    // it was given.
    let scratch = scratch("wrong");
    let dsn = format!("postgres://{ROLE}:{WRONG}@127.0.0.1:{port}/postgres");
    let (code, out, err) = rehearse(&scratch, &["--cell", "tiny", "--database-url", &dsn]);
    assert_eq!(code, Some(2), "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(err.contains(&format!("{ROLE}:***@")), "{err}");
    assert_absent("stdout", out.as_bytes(), &[WRONG]);
    assert_absent("stderr", err.as_bytes(), &[WRONG]);
    for (path, bytes) in files(scratch.path()) {
        assert_absent(&path.display().to_string(), &bytes, &[WRONG]);
    }
    drop(cluster);
}

/// Whether a log line shows one shape of DSN with its password hidden.
type Shape = fn(&str) -> bool;

const CRASH: &str = r#"
[[cell]]
name = "crash"
about = "workspace runtimes reconnect through a PostgreSQL crash, each carrying the cell's password"
fresh_install = true
steps = [
  { fleet = "current", workers = 3, producers = 1, leader = true },
  { load = "on" },
  { hold = "1s" },
  { pg_crash = "now" },
  { hold = "2s" },
  { load = "off" },
  { drain = "30s" },
]
"#;

/// On the throwaway cluster, the workspace's runtimes carry a password in
/// each shape of DSN; reconnecting through a crash, each prints its target
/// (hidden by the runtime), and the clean build passes: `secret_printed`
/// has something to read and finds nothing.
#[test]
fn runtimes_that_print_their_target_through_a_crash_hide_the_password_in_every_shape() {
    let workload = "rate_per_s = 50
backlog = 50
mix = { complete = 90, retry_once = 10 }";
    let scratch = Scratch::with_matrix("secrets", "crash", &current_only(workload, CRASH));
    let (status, out, err) = run(
        on_scratch(&scratch, &["--cell", "crash", "--seed", "3"]),
        Duration::from_secs(600),
    );
    assert_eq!(status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let logs: Vec<String> = files(&scratch.reports())
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "log"))
        .filter(|(p, _)| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("current-worker") || name.starts_with("current-producer")
        })
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .collect();
    assert_eq!(logs.len(), 4, "three workers and a producer");
    // The three shapes, hidden: the userinfo, the query parameter, key=value.
    let shapes: [(&str, Shape); 3] = [
        ("userinfo", |l| l.contains("postgres://postgres:***@")),
        ("query", |l| l.contains("?password=***")),
        ("key=value", |l| {
            l.contains("dbname='") && l.contains(" password=***")
        }),
    ];
    // Each shape was handed (the environment line of a log) ...
    for (shape, hidden) in shapes {
        assert!(
            logs.iter().any(|log| log
                .lines()
                .any(|l| l.contains("# rehearse: env") && hidden(l))),
            "no runtime was handed the {shape} shape"
        );
    }
    // ... and printed back, hidden, by a runtime that could not reach the server.
    let printed: Vec<&str> = logs
        .iter()
        .flat_map(|log| log.lines())
        .filter(|l| l.contains("stderr| ") && l.contains("cannot connect to the database ("))
        .collect();
    for (shape, hidden) in shapes {
        assert!(
            printed.iter().any(|l| hidden(l)),
            "no runtime printed its target in the {shape} shape: {printed:?}"
        );
    }
}
