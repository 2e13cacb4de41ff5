//! Reconciliation at scale: a million accepted jobs must reconcile in
//! under 10 s with the rehearse process under 200 MB peak RSS.
//!
//! Starts a throwaway cluster, writes a synthetic history for N jobs
//! (default 1,000,000; `cargo bench -p rehearsal --bench reconcile -- N`)
//! with set-based SQL in the workload's proportions (most terminal
//! records pruned into the archive, the rest still in the claim ring,
//! exhausted jobs dead-lettered, 2% of one mode crash-rescued once, the
//! deadline mode rescued by design, cron fires), plants a few faults so
//! the findings are not empty, builds the Observations a driver would (N
//! `AcceptedJob`s), and times `reconcile_with_stats`.

use std::time::Instant;

use awa_harness::pgtemp::Cluster;
use rehearsal::matrix;
use rehearsal::observe::{AcceptedJob, CronWindow, InFlight, KillRecord, Observations};
use rehearsal::plan;
use rehearsal::reconcile::reconcile_with_stats;
use tokio_postgres::Client;

/// The workload mix by `job_id % 100`: `[lo, hi)` buckets.
const MIX: [(i32, i32, &str); 9] = [
    (0, 58, "complete"),
    (58, 59, "overrun_deadline"),
    (59, 67, "retry_once"),
    (67, 71, "fail_terminal"),
    (71, 75, "exhaust_retries"),
    (75, 81, "snooze_once"),
    (81, 85, "cancel_self"),
    (85, 95, "sleep"),
    (95, 100, "scheduled"),
];
const CRON_FIRES: i64 = 500;
const KILLED: i64 = 100;

fn mode_of(job_id: i64) -> &'static str {
    let b = (job_id % 100) as i32;
    MIX.iter()
        .find(|(lo, hi, _)| (*lo..*hi).contains(&b))
        .expect("buckets cover 0..100")
        .2
}

/// One row per job: its mode, the outcome of each run, its terminal
/// state and where that record lives (most pruned into the archive).
const PLAN: &str = "
CREATE UNLOGGED TABLE bench_jobs AS
WITH mix AS (SELECT * FROM unnest($1::int4[], $2::int4[], $3::text[]) AS m(lo, hi, mode))
SELECT i AS job_id, m.mode,
       CASE m.mode
           WHEN 'complete' THEN CASE WHEN i % 50 = 7 THEN ARRAY['rescued_crash', 'completed'] ELSE ARRAY['completed'] END
           WHEN 'retry_once' THEN ARRAY['retry', 'completed']
           WHEN 'snooze_once' THEN ARRAY['snoozed', 'completed']
           WHEN 'overrun_deadline' THEN ARRAY['rescued_deadline', 'completed']
           WHEN 'fail_terminal' THEN ARRAY['failed']
           WHEN 'cancel_self' THEN ARRAY['cancelled']
           WHEN 'exhaust_retries' THEN ARRAY['retry', 'retry', 'dead_lettered']
           ELSE ARRAY['completed'] END AS runs,
       CASE m.mode WHEN 'fail_terminal' THEN 'failed' WHEN 'exhaust_retries' THEN 'failed'
                   WHEN 'cancel_self' THEN 'cancelled' ELSE 'completed' END AS state,
       CASE WHEN m.mode = 'exhaust_retries' THEN 'dead' WHEN i % 10 < 7 THEN 'archive' ELSE 'ring' END AS place
FROM generate_series(1, $4::bigint) i JOIN mix m ON (i % 100) >= m.lo AND (i % 100) < m.hi";

/// The rows the runtime would have written for that plan: executions,
/// receipts and closures of unpruned runs, the archive, dead letters,
/// ledgers that cover the generations written, cron fires.
const HISTORY: &str = "
-- runs a second apart, longer than any backoff or snooze they wait
INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, started_at, finished_at, outcome)
SELECT job_id, r.n, r.n, 'w1', '0.7.0', now() + r.n * interval '1 second',
       now() + r.n * interval '1 second' + interval '10 milliseconds', r.outcome
FROM bench_jobs, unnest(runs) WITH ORDINALITY r(outcome, n);

INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id)
SELECT job_id % 8, 56 + job_id % 8, job_id, r.n, r.n, 'w1'
FROM bench_jobs, unnest(runs) WITH ORDINALITY r(outcome, n) WHERE place <> 'archive';

INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
SELECT job_id % 8, 56 + job_id % 8, job_id, r.n, r.n,
       CASE WHEN r.n = cardinality(runs) AND place = 'ring' THEN state ELSE r.outcome END,
       r.n = cardinality(runs) AND place = 'ring', 'default', 0, 'rehearsal'
FROM bench_jobs, unnest(runs) WITH ORDINALITY r(outcome, n) WHERE place <> 'archive';

INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
SELECT job_id, cardinality(runs), cardinality(runs), state, 'default', 0, 'rehearsal', now()
FROM bench_jobs WHERE place = 'archive';

INSERT INTO awa.dead_letters (job_id, kind, queue, priority, args, attempt, run_lease, reason)
SELECT job_id, 'rehearsal', 'default', 0, jsonb_build_object('mode', mode), cardinality(runs), cardinality(runs), 'attempts exhausted'
FROM bench_jobs WHERE place = 'dead';

INSERT INTO awa.queue_ring_rotations (generation, slot) SELECT g, g % 8 FROM generate_series(1, 63) g ON CONFLICT DO NOTHING;
INSERT INTO awa.claim_ring_rotations (generation, slot) SELECT g, g % 8 FROM generate_series(1, 63) g ON CONFLICT DO NOTHING;
INSERT INTO awa.lease_ring_rotations (generation, slot) SELECT g, g % 8 FROM generate_series(1, 63) g ON CONFLICT DO NOTHING;

INSERT INTO awa.cron_schedules (name, every_ms, queue, kind, args, anchor_ms)
VALUES ('tick', 1000, 'default', 'rehearsal', '{\"mode\": \"complete\"}', 1000);";

/// Cron fires at 2000 ms, 3000 ms, ... as jobs `$1 + k`.
const CRON_FIRES_SQL: &str = "
INSERT INTO awa.cron_fires (name, fire_ms, job_id, instance_id)
SELECT 'tick', (k + 1) * 1000, $1::bigint + k, 'w1' FROM generate_series(1, $2::bigint) k";
/// Each fired job completed on its first attempt and was archived.
const CRON_HISTORY: &str = "
INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, finished_at, outcome)
SELECT job_id, 1, 1, 'w1', '0.7.0', now(), 'completed' FROM awa.cron_fires;
INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
SELECT job_id, 1, 1, 'completed', 'default', 0, 'rehearsal', now() FROM awa.cron_fires;";

/// A few of each fault, at ids away from the start.
const FAULTS: &str = "
-- lost: five archived jobs vanish
DELETE FROM awa.terminal_archive WHERE job_id IN
    (SELECT job_id FROM bench_jobs WHERE place = 'archive' ORDER BY job_id OFFSET 1000 LIMIT 5);
-- duplicate: three unpruned jobs were archived too
INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
SELECT job_id, cardinality(runs), cardinality(runs), state, 'default', 0, 'rehearsal', now()
FROM bench_jobs WHERE place = 'ring' ORDER BY job_id OFFSET 2000 LIMIT 3;
-- wrong state: two complete jobs recorded as failed
UPDATE awa.claim_closures SET outcome = 'failed' WHERE terminal AND job_id IN
    (SELECT job_id FROM bench_jobs WHERE place = 'ring' AND mode = 'complete' ORDER BY job_id OFFSET 3000 LIMIT 2);
-- double execution: two completions recorded twice
INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, finished_at, outcome)
SELECT job_id, 9, 1, 'w2', '0.6.2', now(), 'completed'
FROM bench_jobs WHERE mode = 'sleep' ORDER BY job_id OFFSET 4000 LIMIT 2;
-- stuck: two jobs left running
INSERT INTO awa.jobs (job_id, kind, queue, state, attempt, run_lease)
SELECT job_id, 'rehearsal', 'default', 'running', 1, 1
FROM bench_jobs WHERE place = 'archive' ORDER BY job_id OFFSET 5000 LIMIT 2;
DELETE FROM awa.terminal_archive WHERE job_id IN
    (SELECT job_id FROM bench_jobs WHERE place = 'archive' ORDER BY job_id OFFSET 5000 LIMIT 2);
-- a missed cron fire
DELETE FROM awa.cron_fires WHERE fire_ms = 100000;
-- the rollups prune wrote (cron jobs included), and one delta counted twice
INSERT INTO awa.queue_terminal_rollups (queue, priority, state, count)
SELECT queue, priority, state, count(*) FROM awa.terminal_archive GROUP BY 1, 2, 3;
INSERT INTO awa.queue_terminal_rollup_deltas (queue, priority, state, count) VALUES ('default', 0, 'cancelled', 1);
DROP TABLE bench_jobs";

fn the_plan() -> plan::CellPlan {
    let text = r#"
[artifacts.previous]
release = "0.6.2"
[artifacts.current]
build = "workspace"
[workload]
rate_per_s = 200
mix = { complete = 1 }
[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "60s"
[[cell]]
name = "bench"
about = "a million accepted jobs"
steps = [{ fleet = "current", workers = 1, producers = 1 }, { drain = "10s" }]
"#;
    let matrix = matrix::parse("matrix.toml", text).expect("valid matrix");
    let selection = plan::Selection {
        matrix: None,
        cells: vec!["bench".into()],
    };
    plan::Request {
        selection,
        seed: 1,
        ..plan::Request::default()
    }
    .expand(&matrix)
    .expect("plan")
    .cells
    .remove(0)
}

/// What a driver would have observed: every job accepted, a kill whose
/// in-flight attempts were crash-rescued, the cron window.
fn observations(n: i64) -> Observations {
    let mut accepted = Vec::with_capacity(n as usize);
    for job_id in 1..=n {
        accepted.push(AcceptedJob {
            job_id,
            mode: awa_runtime::workload::Mode::parse(mode_of(job_id)).expect("a mode"),
            max_attempts: 3,
            version: "0.7.0".to_owned(),
            run_at_ms: None,
        });
    }
    let in_flight = (1..=n)
        .filter(|i| mode_of(*i) == "complete" && i % 50 == 7)
        .take(KILLED as usize)
        .map(|job_id| InFlight {
            job_id,
            attempt: 1,
            run_lease: 1,
        })
        .collect();
    Observations {
        accepted,
        kills: vec![KillRecord {
            process: "current-worker-1".into(),
            version: "0.7.0".into(),
            role: "worker".into(),
            at_ms: 1_000,
            in_flight,
        }],
        cron: vec![CronWindow {
            name: "tick".into(),
            every_ms: 1_000,
            from_ms: 1_000,
            to_ms: (CRON_FIRES + 1) * 1_000,
        }],
        ..Default::default()
    }
}

/// `VmHWM` (peak RSS) or `VmRSS` of this process, in MB.
fn rss_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Start a new peak-RSS measurement (Linux: writing 5 to clear_refs resets VmHWM).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

async fn load(client: &Client, n: i64) {
    let (lo, hi, modes): (Vec<i32>, Vec<i32>, Vec<&str>) = MIX.iter().fold(
        (vec![], vec![], vec![]),
        |(mut a, mut b, mut c), (lo, hi, m)| {
            a.push(*lo);
            b.push(*hi);
            c.push(*m);
            (a, b, c)
        },
    );
    client
        .execute(PLAN, &[&lo, &hi, &modes, &n])
        .await
        .expect("plan the history");
    client
        .batch_execute(HISTORY)
        .await
        .expect("write the history");
    client
        .execute(CRON_FIRES_SQL, &[&(n + 1_000_000), &CRON_FIRES])
        .await
        .expect("cron fires");
    client
        .batch_execute(CRON_HISTORY)
        .await
        .expect("cron history");
    client.batch_execute(FAULTS).await.expect("plant faults");
    // As autovacuum would have, after a run that wrote this much.
    client
        .batch_execute("VACUUM ANALYZE")
        .await
        .expect("vacuum");
}

fn main() {
    let n: i64 = std::env::args()
        .skip(1)
        .find_map(|a| a.replace('_', "").parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
        cluster.create_database("bench").await.expect("create database");
        let mut client = cluster.connect("bench").await.expect("connect");
        awa_runtime::schema::migrate(&mut client, &Default::default()).await.expect("migrate");

        let t = Instant::now();
        load(&client, n).await;
        let load_s = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let obs = observations(n);
        let obs_s = t.elapsed().as_secs_f64();
        let rss_before = rss_mb("VmRSS:");
        let peak_before = rss_mb("VmHWM:");
        let reset = reset_peak();

        let (findings, stats) = reconcile_with_stats(&client, &the_plan(), &obs).await.expect("reconcile");
        let peak_reconcile = rss_mb("VmHWM:");
        let peak_process = peak_before.max(peak_reconcile);

        println!("reconcile bench: {n} accepted jobs (+{CRON_FIRES} cron fires, {KILLED} killed attempts)");
        println!("  {:<34} {:>10}", "step", "figure");
        println!("  {:<34} {:>8.1} s", "write synthetic history (SQL)", load_s);
        println!("  {:<34} {:>8.2} s", "build Observations", obs_s);
        println!("  {:<34} {:>8.2} s   (target < 10 s)", "reconcile", stats.elapsed_ms as f64 / 1000.0);
        println!("  {:<34} {:>8.1} MB", "RSS with Observations built", rss_before);
        if reset {
            println!("  {:<34} {:>8.1} MB", "peak RSS during reconcile", peak_reconcile);
        }
        println!("  {:<34} {:>8.1} MB  (target < 200 MB)", "peak RSS of the process", peak_process);
        println!(
            "  stats: accepted {}, cron fires {}, terminal {}, interrupted executions {}, unaccounted {}",
            stats.accepted, stats.cron_fires, stats.terminal, stats.interrupted_executions, stats.unaccounted_terminal
        );
        println!("  findings (planted: lost 5, duplicate 3, wrong_state 2, double_execution 2x2, stuck 2, missed fire 1, count drift 1):");
        for f in &findings {
            println!("    {:<18} {:>4}  {}", f.rule.name(), f.count, f.message);
        }
    });
}
