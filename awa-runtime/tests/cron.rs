//! Cron across a leader kill: every fire time in the window yields
//! exactly one job, including the times that fell due while no leader
//! was alive.

mod common;

use awa_runtime::store::read;
use common::*;
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fire_time_yields_one_job_across_a_leader_kill() {
    let db = Db::migrated("cron").await;
    let client = db.client().await;
    let (code, _, err) = run(
        awa_bin(),
        &db.url,
        &["cron", "upsert", "--name", "tick", "--every", "300ms"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{err}");

    let first = spawn(awa_bin(), &db.url, &["worker", "--name", "first"], &[]);
    first
        .wait_for("leadership", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "leader")
        })
        .await;
    let second = spawn(awa_bin(), &db.url, &["worker", "--name", "second"], &[]);
    second
        .wait_for("ready", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "ready")
        })
        .await;
    // Let a few fires happen, then kill the leader right after a fire.
    first
        .wait_for("three fires", Duration::from_secs(10), |ev| {
            ev.iter().filter(|e| e["event"] == "cron_fired").count() >= 3
        })
        .await;
    first.kill().await;
    second
        .wait_for("the handoff", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "leader")
        })
        .await;
    second
        .wait_for("more fires", Duration::from_secs(10), |ev| {
            ev.iter().filter(|e| e["event"] == "cron_fired").count() >= 4
        })
        .await;
    assert_eq!(second.terminate().await, 0);

    let fires: Vec<(i64, i64)> = client
        .query(
            "SELECT fire_ms, job_id FROM awa.cron_fires WHERE name = 'tick' ORDER BY fire_ms",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(fires.len() >= 7, "fires: {fires:?}");
    let (lo, hi) = (fires[0].0, fires[fires.len() - 1].0);
    let expected: Vec<i64> = (0..)
        .map(|k| lo + k * 300)
        .take_while(|t| *t <= hi)
        .collect();
    let got: Vec<i64> = fires.iter().map(|f| f.0).collect();
    assert_eq!(got, expected, "every fire time in the window exactly once");
    // Each fire's job exists exactly once (terminal or still live).
    let terminal: HashMap<i64, usize> =
        read::terminal_records(&client)
            .await
            .unwrap()
            .iter()
            .fold(HashMap::new(), |mut m, r| {
                *m.entry(r.job_id).or_default() += 1;
                m
            });
    let live: Vec<i64> = client
        .query("SELECT job_id FROM awa.jobs", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (t, id) in &fires {
        let n = terminal.get(id).copied().unwrap_or(0) + live.iter().filter(|l| *l == id).count();
        assert_eq!(n, 1, "fire {t} (job {id}) has {n} records");
    }
    let jobs_with_cron: i64 = client
        .query_one(
            &format!(
                "SELECT count(DISTINCT job_id) FROM ({}) t",
                read::TERMINAL_RECORDS
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        jobs_with_cron as usize + live.len(),
        fires.len(),
        "no job without a fire"
    );
}
