//! The start gate: a command started with `AWA_START_GATE_KEY` does
//! nothing while the gate's holder keeps the lock, and goes on at once
//! when it lets go.

mod common;

use awa_runtime::gate::{START_GATE_KEY, arrival_key};
use common::*;
use std::time::Duration;

const HAS_SCHEMA: &str = "SELECT to_regclass('awa.schema_version') IS NOT NULL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_command_waits_for_the_holder_and_goes_on_at_once() {
    let db = Db::empty("gate").await;
    let holder = db.client().await;
    holder
        .query_one("SELECT pg_advisory_lock($1)", &[&START_GATE_KEY])
        .await
        .expect("close the gate");
    let key = START_GATE_KEY.to_string();
    let migrate = spawn(
        awa_bin(),
        &db.url,
        &["migrate"],
        &[("AWA_START_GATE_KEY", key.as_str())],
    );
    // Past its start (it holds the arrival key, visible in pg_locks) and still nothing done.
    let arrived = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND mode = 'ShareLock' AND objid = {}::oid",
        arrival_key(START_GATE_KEY) & 0xffff_ffff
    );
    wait_count(&holder, &arrived, 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Regression: it used to wait inside a statement, whose snapshot pinned
    // the MVCC horizon (and stood the folds down) for as long as the gate
    // stayed closed. It waits between statements.
    let pinned: i64 = holder
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL \
             AND now() - xact_start > interval '200 milliseconds'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pinned, 0, "a session waiting at the gate holds a snapshot");
    let waiting_in_a_lock: i64 = holder
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        waiting_in_a_lock, 0,
        "it waits between statements, not in a lock"
    );
    let migrated: bool = holder.query_one(HAS_SCHEMA, &[]).await.unwrap().get(0);
    assert!(!migrated, "the command ran before the gate opened");
    assert!(
        migrate
            .stderr
            .lock()
            .unwrap()
            .contains("waiting at the start gate"),
        "{}",
        migrate.stderr.lock().unwrap()
    );
    holder
        .query_one("SELECT pg_advisory_unlock($1)", &[&START_GATE_KEY])
        .await
        .expect("open the gate");
    let (code, stderr) = migrate.exit_code(Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("the start gate opened"), "{stderr}");
    let migrated: bool = holder.query_one(HAS_SCHEMA, &[]).await.unwrap().get(0);
    assert!(migrated, "the command did not go on after the gate opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_gate_key_a_command_starts_at_once() {
    let db = Db::empty("nogate").await;
    let holder = db.client().await;
    holder
        .query_one("SELECT pg_advisory_lock($1)", &[&START_GATE_KEY])
        .await
        .expect("hold the key");
    let (code, _, stderr) = run(awa_bin(), &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("start gate"), "{stderr}");
}
