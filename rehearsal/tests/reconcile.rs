//! Reconciliation against a real PostgreSQL: a synthetic but faithful
//! history (the rows the runtime writes for each mode, interruptions
//! included) reconciles clean, and each fault a broken runtime could
//! leave behind is caught by its rule and only by it.

pub mod common;

use awa_harness::pgtemp::Cluster;
use awa_runtime::events::{Event, Flipped};
use awa_runtime::store::authority::RingFlip;
use common::database::on_06_schema;
use common::matrix::{PREVIOUS_AND_CURRENT, matrix};
use rehearsal::matrix::{self, FindingRule};
use rehearsal::observe::{
    AcceptedJob, CronWindow, DisownedRun, FenceRecord, Finding, FlipRecord, InFlight, KillRecord,
    Observations,
};
use rehearsal::plan::{self, CellPlan};
use rehearsal::reconcile::{ReconcileError, reconcile, reconcile_with_stats};
use tokio_postgres::Client;

/// Where a job's terminal record lives.
#[derive(Clone, Copy)]
enum Place {
    /// A terminal closure in the claim ring, with receipts and closures
    /// for every run.
    Ring,
    /// Pruned: only the archive row remains.
    Archive,
    /// Dead-lettered: the dead letter, with receipts and non-terminal
    /// closures for every run.
    DeadLetter,
}

/// A job as the runtime leaves it: its mode, max attempts, the outcome
/// of each run in order (attempt numbers follow the runtime's counter:
/// a release gives its attempt back) and where its terminal record is.
struct Job {
    id: i64,
    mode: &'static str,
    max: i32,
    runs: &'static [&'static str],
    terminal: Option<(&'static str, Place)>,
}

/// Every mode, and the interruptions a rehearsal produces: crash,
/// heartbeat and deadline rescue on first and later attempts, releases,
/// rescue past the cap. None of these may produce a finding.
const HISTORY: &[Job] = &[
    Job {
        id: 1,
        mode: "complete",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Archive)),
    },
    Job {
        id: 2,
        mode: "retry_once",
        max: 3,
        runs: &["retry", "completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    Job {
        id: 3,
        mode: "fail_terminal",
        max: 3,
        runs: &["failed"],
        terminal: Some(("failed", Place::Ring)),
    },
    Job {
        id: 4,
        mode: "exhaust_retries",
        max: 3,
        runs: &["retry", "retry", "dead_lettered"],
        terminal: Some(("failed", Place::DeadLetter)),
    },
    Job {
        id: 5,
        mode: "snooze_once",
        max: 3,
        runs: &["snoozed", "completed"],
        terminal: Some(("completed", Place::Archive)),
    },
    Job {
        id: 6,
        mode: "cancel_self",
        max: 3,
        runs: &["cancelled"],
        terminal: Some(("cancelled", Place::Archive)),
    },
    Job {
        id: 7,
        mode: "sleep",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    Job {
        id: 8,
        mode: "overrun_deadline",
        max: 3,
        runs: &["rescued_deadline", "completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    Job {
        id: 9,
        mode: "scheduled",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Archive)),
    },
    // crash rescue of attempt 1: one more attempt
    Job {
        id: 10,
        mode: "complete",
        max: 3,
        runs: &["rescued_crash", "completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    // retry_once whose first attempt was rescued never retries
    Job {
        id: 11,
        mode: "retry_once",
        max: 3,
        runs: &["rescued_crash", "completed"],
        terminal: Some(("completed", Place::Archive)),
    },
    // ... but one rescued on attempt 2 needs a third
    Job {
        id: 12,
        mode: "retry_once",
        max: 3,
        runs: &["retry", "rescued_heartbeat", "completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    // a graceful release gives the attempt back
    Job {
        id: 13,
        mode: "complete",
        max: 3,
        runs: &["released", "completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    // a rescue of the last attempt dead-letters
    Job {
        id: 14,
        mode: "snooze_once",
        max: 1,
        runs: &["rescued_crash"],
        terminal: Some(("failed", Place::DeadLetter)),
    },
    Job {
        id: 15,
        mode: "complete",
        max: 2,
        runs: &["rescued_crash", "rescued_heartbeat"],
        terminal: Some(("failed", Place::DeadLetter)),
    },
    Job {
        id: 16,
        mode: "overrun_deadline",
        max: 3,
        runs: &["rescued_deadline", "rescued_crash", "completed"],
        terminal: Some(("completed", Place::Archive)),
    },
    Job {
        id: 17,
        mode: "exhaust_retries",
        max: 3,
        runs: &["retry", "rescued_crash", "dead_lettered"],
        terminal: Some(("failed", Place::DeadLetter)),
    },
    // a snooze raises the cap by one: rescued on attempt 2 of max 1+1
    Job {
        id: 18,
        mode: "snooze_once",
        max: 1,
        runs: &["snoozed", "rescued_crash"],
        terminal: Some(("failed", Place::DeadLetter)),
    },
    // uncertain: one never committed, one did
    Job {
        id: 21,
        mode: "complete",
        max: 3,
        runs: &[],
        terminal: None,
    },
    Job {
        id: 22,
        mode: "complete",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    // cron-fired, fire times 2000, 3000, 4000 of schedule "tick"
    Job {
        id: 23,
        mode: "complete",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Archive)),
    },
    Job {
        id: 24,
        mode: "complete",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Ring)),
    },
    Job {
        id: 25,
        mode: "complete",
        max: 3,
        runs: &["completed"],
        terminal: Some(("completed", Place::Archive)),
    },
];
const UNCERTAIN: [i64; 2] = [21, 22];
const CRON: [(i64, i64); 3] = [(2_000, 23), (3_000, 24), (4_000, 25)];

/// A throwaway cluster and one database with the current schema.
struct Cell {
    _cluster: Cluster,
    client: Client,
}

async fn cell() -> Cell {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster
        .create_database("cell")
        .await
        .expect("create database");
    let mut client = cluster.connect("cell").await.expect("connect");
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .expect("migrate");
    // The history is written as a current (flip-aware) runtime writes it:
    // under ledger authority the schema fences enqueues of other sessions.
    client
        .batch_execute("SET awa.flip_aware = on")
        .await
        .expect("mark the session flip-aware");
    Cell {
        _cluster: cluster,
        client,
    }
}

/// A database on the 0.6 schema (migrations 1 and 2 only), optionally
/// then upgraded by this build's migrate (which starts in `columns`).
async fn old_cell(upgrade: bool) -> Cell {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let mut client = on_06_schema(&cluster, "cell").await;
    if upgrade {
        awa_runtime::schema::migrate(&mut client, &Default::default())
            .await
            .expect("migrate");
    }
    Cell {
        _cluster: cluster,
        client,
    }
}

fn the_plan() -> CellPlan {
    let cells = r#"
[[cell]]
name = "synthetic"
about = "synthetic history"
steps = [{ fleet = "current", workers = 1, producers = 1 }, { drain = "10s" }]
"#;
    let text = matrix(
        PREVIOUS_AND_CURRENT,
        "rate_per_s = 10\nmix = { complete = 1 }",
        "60s",
        cells,
    );
    let matrix = matrix::parse("matrix.toml", &text).expect("valid matrix");
    let selection = plan::Selection {
        matrix: None,
        cells: vec!["synthetic".into()],
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

/// Insert `job` as the runtime would have left it.
async fn insert(client: &Client, job: &Job) {
    // run lease n is the n-th claim; a released claim's attempt is reused
    let mut attempt = 0;
    for (i, outcome) in job.runs.iter().enumerate() {
        let lease = i as i64 + 1;
        attempt += 1;
        // Each run starts a second after the one before (longer than any
        // backoff or snooze it may wait) and takes 10 ms.
        client
            .execute(
                "INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, started_at, finished_at, outcome)
                 SELECT $1, $2, $3, 'w1', '0.7.0', t, t + interval '10 milliseconds', $4
                 FROM (SELECT to_timestamp($5::float8 / 1000.0) AS t) s",
                &[&job.id, &lease, &attempt, outcome, &(run_start_ms(job.id, lease) as f64)],
            )
            .await
            .unwrap();
        if *outcome == "released" {
            attempt -= 1;
        }
    }
    let Some((state, place)) = job.terminal else {
        return;
    };
    let runs = job.runs.len() as i64;
    if matches!(place, Place::Ring | Place::DeadLetter) {
        // every run's receipt and closure; the last is terminal unless dead-lettered
        client
            .execute(
                "INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id)
                 SELECT 0, 0, $1, e.run_lease, e.attempt, 'w1' FROM awa.executions e WHERE e.job_id = $1",
                &[&job.id],
            )
            .await
            .unwrap();
        client
            .execute(
                "INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
                 SELECT 0, 0, $1, e.run_lease, e.attempt,
                        CASE WHEN e.run_lease = $2 AND $3 THEN $4 ELSE e.outcome END,
                        e.run_lease = $2 AND $3, 'default', 0, 'rehearsal'
                 FROM awa.executions e WHERE e.job_id = $1",
                &[&job.id, &runs, &matches!(place, Place::Ring), &state],
            )
            .await
            .unwrap();
    }
    match place {
        Place::Ring => {}
        Place::Archive => {
            client
                .execute(
                    "INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
                     SELECT $1, e.run_lease, e.attempt, $2, 'default', 0, 'rehearsal', now()
                     FROM awa.executions e WHERE e.job_id = $1 AND e.run_lease = $3",
                    &[&job.id, &state, &runs],
                )
                .await
                .unwrap();
        }
        Place::DeadLetter => {
            client
                .execute(
                    "INSERT INTO awa.dead_letters (job_id, kind, queue, priority, args, attempt, run_lease, reason)
                     SELECT $1, 'rehearsal', 'default', 0, '{}', e.attempt, e.run_lease, 'attempts exhausted'
                     FROM awa.executions e WHERE e.job_id = $1 AND e.run_lease = $2",
                    &[&job.id, &runs],
                )
                .await
                .unwrap();
        }
    }
}

/// When run lease `lease` of job `job_id` started, Unix ms: job by job a
/// hundred seconds apart from 2026-01-01, its runs a second apart.
fn run_start_ms(job_id: i64, lease: i64) -> i64 {
    const EPOCH_2026_MS: i64 = 1_767_225_600_000;
    EPOCH_2026_MS + job_id * 100_000 + lease * 1_000
}

/// The scheduled job of the history, and its `run_at` (Unix ms): half a
/// second before its first run.
const SCHEDULED: (i64, i64) = (9, 1_767_225_600_000 + 9 * 100_000 + 1_000 - 500);

/// The clean history, without the rollups (see [`settle`]).
async fn history(client: &Client) {
    for job in HISTORY {
        insert(client, job).await;
    }
    client
        .execute(
            "INSERT INTO awa.cron_schedules (name, every_ms, queue, kind, args, anchor_ms)
             VALUES ('tick', 1000, 'default', 'rehearsal', '{\"mode\": \"complete\"}', 1500)",
            &[],
        )
        .await
        .unwrap();
    for (fire_ms, job_id) in CRON {
        client
            .execute(
                "INSERT INTO awa.cron_fires (name, fire_ms, job_id, instance_id) VALUES ('tick', $1, $2, 'w1')",
                &[&fire_ms, &job_id],
            )
            .await
            .unwrap();
    }
}

/// Count archived outcomes as prune does: into the rollups, and (on a
/// 0.7 schema) the cancelled ones into not yet folded deltas.
async fn settle(client: &Client, deltas: bool) {
    let (rollups, delta) = if deltas {
        ("state <> 'cancelled'", "state = 'cancelled'")
    } else {
        ("true", "false")
    };
    client
        .batch_execute(&format!(
            "INSERT INTO awa.queue_terminal_rollups (queue, priority, state, count)
             SELECT queue, priority, state, count(*) FROM awa.terminal_archive WHERE {rollups} GROUP BY 1, 2, 3"
        ))
        .await
        .unwrap();
    if deltas {
        client
            .batch_execute(&format!(
                "INSERT INTO awa.queue_terminal_rollup_deltas (queue, priority, state, count)
                 SELECT queue, priority, state, count(*) FROM awa.terminal_archive WHERE {delta} GROUP BY 1, 2, 3"
            ))
            .await
            .unwrap();
    }
}

/// What the driver observed of that history.
fn observations() -> Observations {
    let accepted = |job: &Job| AcceptedJob {
        job_id: job.id,
        mode: awa_runtime::workload::Mode::parse(job.mode).expect("a mode"),
        max_attempts: job.max,
        version: "0.7.0".into(),
        run_at_ms: (job.id == SCHEDULED.0).then_some(SCHEDULED.1),
    };
    let cron: Vec<i64> = CRON.iter().map(|c| c.1).collect();
    Observations {
        accepted: HISTORY
            .iter()
            .filter(|j| !UNCERTAIN.contains(&j.id) && !cron.contains(&j.id))
            .map(accepted)
            .collect(),
        uncertain: HISTORY
            .iter()
            .filter(|j| UNCERTAIN.contains(&j.id))
            .map(accepted)
            .collect(),
        kills: vec![KillRecord {
            process: "current-worker-1".into(),
            version: "0.7.0".into(),
            role: "worker".into(),
            at_ms: 1_000,
            in_flight: vec![
                // rescued and retried
                InFlight {
                    job_id: 10,
                    attempt: 1,
                    run_lease: 1,
                },
                // rescued on its last attempt: dead-lettered
                InFlight {
                    job_id: 14,
                    attempt: 1,
                    run_lease: 1,
                },
            ],
        }],
        cron: vec![CronWindow {
            name: "tick".into(),
            every_ms: 1_000,
            from_ms: 1_000,
            to_ms: 4_000,
        }],
        // Every run of the history ran on runtime w1, which was killed.
        faulted_runtimes: vec!["w1".into()],
        ..Default::default()
    }
}

fn rules(found: &[Finding]) -> Vec<FindingRule> {
    found.iter().map(|f| f.rule).collect()
}

/// The clean history with `fault` applied before the rollups are
/// counted, reconciled against `obs`.
async fn reconcile_with(fault: &str, obs: &Observations) -> Vec<Finding> {
    let c = cell().await;
    history(&c.client).await;
    c.client.batch_execute(fault).await.unwrap();
    settle(&c.client, true).await;
    reconcile(&c.client, &the_plan(), obs)
        .await
        .expect("reconcile")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_history_with_every_kind_of_interruption_has_no_findings() {
    let c = cell().await;
    history(&c.client).await;
    settle(&c.client, true).await;
    let (found, stats) = reconcile_with_stats(&c.client, &the_plan(), &observations())
        .await
        .expect("reconcile");
    assert_eq!(found, []);
    assert_eq!(stats.accepted, 18);
    assert_eq!((stats.uncertain, stats.uncertain_found), (2, 1));
    assert_eq!(stats.cron_fires, 3);
    assert_eq!(stats.terminal, 22);
    assert_eq!(stats.unaccounted_terminal, 0);
    // 10, 11, 12, 13, 14, 15 (2), 16 (2), 17, 18, 8: rescue, release, deadline
    assert_eq!(stats.interrupted_executions, 12);
    // Nothing was kept: the temp table and snapshot are gone, and it runs again.
    let again = reconcile(&c.client, &the_plan(), &observations())
        .await
        .expect("reconcile twice");
    assert_eq!(again, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_terminal_record_is_lost() {
    let found = reconcile_with(
        "DELETE FROM awa.terminal_archive WHERE job_id = 1",
        &observations(),
    )
    .await;
    assert_eq!(rules(&found), [FindingRule::Lost]);
    assert_eq!((found[0].ids.as_slice(), found[0].count), (&[1][..], 1));
    assert!(
        found[0].message.contains("first: job 1 (complete)"),
        "{}",
        found[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_archived_and_still_in_the_ring_is_a_duplicate() {
    let found = reconcile_with(
        "INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
         VALUES (2, 2, 2, 'completed', 'default', 0, 'rehearsal', now()),
                (22, 1, 1, 'completed', 'default', 0, 'rehearsal', now())",
        &observations(),
    )
    .await;
    // 22 is uncertain: it may be absent, never terminal twice.
    assert_eq!(rules(&found), [FindingRule::Duplicate]);
    assert_eq!((found[0].ids.as_slice(), found[0].count), (&[2, 22][..], 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_in_the_wrong_state_is_found() {
    let found = reconcile_with(
        "UPDATE awa.claim_closures SET outcome = 'completed' WHERE job_id = 3 AND terminal;
         UPDATE awa.executions SET outcome = 'completed' WHERE job_id = 3",
        &observations(),
    )
    .await;
    assert_eq!(rules(&found), [FindingRule::WrongState]);
    assert_eq!(found[0].ids, [3]);
    assert!(
        found[0]
            .message
            .contains("ended (completed, 1), expected (failed, 1)"),
        "{}",
        found[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_the_wrong_attempt_is_found() {
    // retry_once ending on attempt 3 with nothing interrupted; and an
    // overrun_deadline job whose first attempt was never deadline-rescued.
    let found = reconcile_with(
        "UPDATE awa.claim_closures SET attempt = 3 WHERE job_id = 2 AND terminal;
         UPDATE awa.executions SET attempt = 3 WHERE job_id = 2 AND run_lease = 2;
         DELETE FROM awa.executions WHERE job_id = 8 AND run_lease = 1;
         UPDATE awa.executions SET attempt = 1, run_lease = 1 WHERE job_id = 8;
         DELETE FROM awa.claim_closures WHERE job_id = 8 AND NOT terminal;
         DELETE FROM awa.claim_receipts WHERE job_id = 8 AND run_lease = 2;
         UPDATE awa.claim_closures SET attempt = 1, run_lease = 1 WHERE job_id = 8;",
        &observations(),
    )
    .await;
    // Job 2's second run also skipped a number.
    assert_eq!(
        rules(&found),
        [FindingRule::WrongAttempt, FindingRule::WrongAttempt]
    );
    assert_eq!((found[0].ids.as_slice(), found[0].count), (&[2, 8][..], 2));
    assert!(found[0].message.contains("job 2 (retry_once, max_attempts 3, 0 interrupted attempt(s)) ended (completed, 3), expected (completed, 2)"), "{}", found[0].message);
    assert_eq!((found[1].ids.as_slice(), found[1].count), (&[2][..], 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_spends_its_attempt_is_a_wrong_attempt() {
    // Job 13 (complete) was released by a graceful stop and completed on
    // its next run: under the same attempt 1 (clean), or, when the
    // release spent the number, on attempt 2.
    let found = reconcile_with(
        "UPDATE awa.executions SET attempt = 2 WHERE job_id = 13 AND run_lease = 2;
         UPDATE awa.claim_receipts SET attempt = 2 WHERE job_id = 13 AND run_lease = 2;
         UPDATE awa.claim_closures SET attempt = 2 WHERE job_id = 13 AND run_lease = 2;",
        &observations(),
    )
    .await;
    assert_eq!(
        rules(&found),
        [FindingRule::WrongAttempt, FindingRule::WrongAttempt],
        "{found:#?}"
    );
    assert!(
        found[0].message.ends_with(
            "first: job 13 (complete, max_attempts 3, 0 interrupted attempt(s)) ended (completed, 2), expected (completed, 1)"
        ),
        "{}",
        found[0].message
    );
    assert_eq!(
        found[1].message,
        "1 job ran an attempt its run before does not explain (a released attempt runs again \
         under its number); first: job 13 (complete): run lease 2 ran attempt 2 after run lease 1 \
         ended released on attempt 1, so it was due attempt 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_rows_and_open_claims_are_stuck() {
    let found = reconcile_with(
        "INSERT INTO awa.jobs (job_id, kind, queue, state, attempt, run_lease) VALUES (30, 'rehearsal', 'default', 'running', 1, 1);
         INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id) VALUES (0, 0, 31, 1, 1, 'w1');
         DELETE FROM awa.terminal_archive WHERE job_id = 1;
         INSERT INTO awa.jobs (job_id, kind, queue, state) VALUES (1, 'rehearsal', 'default', 'available');
         INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt) VALUES (0, 0, 1, 'default', 0, 0);",
        &observations(),
    )
    .await;
    // job 1 is live (and claimable), not lost
    assert_eq!(rules(&found), [FindingRule::Stuck]);
    assert_eq!(
        (found[0].ids.as_slice(), found[0].count),
        (&[1, 30, 31][..], 3)
    );
    assert!(
        found[0].message.contains("(2 live rows, 1 open claim)"),
        "{}",
        found[0].message
    );
}

/// A re-queue that leaves a job `available` with no ready entry of its
/// queue (none at all, or only one of another queue) strands it where no
/// claim looks: a finding of its own beside `stuck`, naming where the
/// entries sit. A claimable one (job 42) is only stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_available_job_without_an_entry_of_its_queue_is_unreachable() {
    let found = reconcile_with(
        "INSERT INTO awa.jobs (job_id, kind, queue, state, attempt, run_lease) VALUES
             (40, 'rehearsal', 'default', 'available', 1, 1),
             (41, 'rehearsal', 'default', 'available', 1, 1),
             (42, 'rehearsal', 'default', 'available', 1, 1);
         INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt) VALUES
             (0, 0, 41, 'elsewhere', 0, 1),
             (0, 0, 42, 'default', 0, 1);",
        &observations(),
    )
    .await;
    assert_eq!(
        rules(&found),
        [FindingRule::Stuck, FindingRule::UnreachableReady]
    );
    let unreachable = &found[1];
    assert_eq!(
        (unreachable.ids.as_slice(), unreachable.count),
        (&[40, 41][..], 2)
    );
    assert_eq!(
        unreachable.message,
        "2 jobs are ready where no claim can reach them; first: job 40 is available (attempt 1) \
         with no ready entry in its queue default, where claims look; it has no entry in any slot"
    );
    let found = reconcile_with(
        "INSERT INTO awa.jobs (job_id, kind, queue, state, attempt, run_lease) VALUES
             (41, 'rehearsal', 'default', 'available', 1, 1);
         INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt) VALUES
             (0, 0, 41, 'elsewhere', 0, 1);",
        &observations(),
    )
    .await;
    assert!(
        found[1].message.ends_with(
            "job 41 is available (attempt 1) with no ready entry in its queue default, \
             where claims look; its entries: slot 0 generation 0 queue elsewhere"
        ),
        "{}",
        found[1].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_recorded_twice_is_a_double_execution() {
    // The second run is written by a current (flip-aware) binary like the
    // rest of the history: a 0.6.2 run started more than the flip's commit
    // margin after the fresh install's flip would also (rightly) be a late
    // attempt, and whether setup took over 50 ms must not decide the test.
    let found = reconcile_with(
        "INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, finished_at, outcome)
         VALUES (7, 2, 1, 'w2', '0.7.0', now(), 'completed')",
        &observations(),
    )
    .await;
    // a second run under the number the first one spent; two
    // completions, and two runs where one attempt explains one; and the
    // terminal record is not the outcome of the last run
    assert_eq!(
        rules(&found),
        [
            FindingRule::WrongAttempt,
            FindingRule::DoubleExecution,
            FindingRule::DoubleExecution,
            FindingRule::TerminalMismatch
        ]
    );
    assert_eq!(found[1].ids, [7]);
    assert!(
        found[1]
            .message
            .contains("more than one completed execution"),
        "{}",
        found[1].message
    );
    assert!(
        found[2]
            .message
            .contains("job 7 (sleep) ran 2 times but ended on attempt 1"),
        "{}",
        found[2].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_result_landing_after_a_rescue_is_a_terminal_mismatch() {
    // Job 10 (complete): attempt 1 (run lease 1) was crash-rescued and
    // attempt 2 (run lease 2) completed. Here the rescued worker's late
    // result landed instead, under its stale lease but on the job's
    // newer attempt, and the attempt actually running lost (stale), as
    // a completion guard that forgets the run lease leaves it.
    let found = reconcile_with(
        "UPDATE awa.claim_closures SET run_lease = 1 WHERE job_id = 10 AND terminal;
         UPDATE awa.executions SET outcome = 'stale' WHERE job_id = 10 AND run_lease = 2;
         DELETE FROM awa.claim_closures WHERE job_id = 10 AND run_lease = 2 AND NOT terminal;",
        &observations(),
    )
    .await;
    assert!(
        rules(&found).contains(&FindingRule::TerminalMismatch),
        "{found:#?}"
    );
    let mismatch = found
        .iter()
        .find(|f| f.rule == FindingRule::TerminalMismatch)
        .unwrap();
    assert_eq!((mismatch.ids.as_slice(), mismatch.count), (&[10][..], 1));
    assert!(
        mismatch
            .message
            .contains("first: job 10: its ring record (completed) says attempt 2, but run lease 1 ran attempt 1"),
        "{}",
        mismatch.message
    );

    // An archived record naming an old lease on the right attempt, and a
    // ring record whose execution ended otherwise.
    let found = reconcile_with(
        "UPDATE awa.terminal_archive SET run_lease = 1, attempt = 1 WHERE job_id = 16;
         UPDATE awa.executions SET outcome = 'failed' WHERE job_id = 24;",
        &observations(),
    )
    .await;
    let mismatch = found
        .iter()
        .find(|f| f.rule == FindingRule::TerminalMismatch)
        .unwrap_or_else(|| panic!("{found:#?}"));
    assert_eq!(
        (mismatch.ids.as_slice(), mismatch.count),
        (&[16, 24][..], 2)
    );
    assert!(
        mismatch.message.contains(
            "first: job 16: its archive record (completed, attempt 1) names run lease 1, but the job last ran under run lease 3"
        ),
        "{}",
        mismatch.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_record_its_own_run_disowned_is_a_terminal_mismatch() {
    // Job 10 (complete): attempt 1 (run lease 1) was crash-rescued and
    // run lease 2 completed, its record naming lease 2. Its rescued run
    // reported its late close lost: that disowns lease 1, which no record
    // names, so the history is clean.
    let mut obs = observations();
    obs.disowned_runs = vec![DisownedRun {
        job_id: 10,
        run_lease: 1,
    }];
    assert_eq!(reconcile_with("", &obs).await, []);
    // The same rows when run lease 2's own worker reported that lease
    // lost: a late result closed attempt 2 and wrote its lease, and the
    // record, right in every field, is not that run's. A rescue's dead
    // letter naming the lease its run lost (job 15, lease 2) is the
    // leader's record, not a run's: not judged so.
    obs.disowned_runs.extend([
        DisownedRun {
            job_id: 10,
            run_lease: 2,
        },
        DisownedRun {
            job_id: 15,
            run_lease: 2,
        },
    ]);
    let found = reconcile_with("", &obs).await;
    assert_eq!(rules(&found), [FindingRule::TerminalMismatch], "{found:#?}");
    assert_eq!((found[0].ids.as_slice(), found[0].count), (&[10][..], 1));
    assert_eq!(
        found[0].message,
        "1 job has a terminal record that is not the outcome of its last run (run lease and attempt); \
         first: job 10: its ring record (completed, attempt 2) names run lease 2, whose own run \
         reported that lease lost: another result closed it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescues_no_injected_fault_explains_are_unexplained_interruptions() {
    // The same rescues with runtime w1 never killed, suspended or ended:
    // the crash and heartbeat rescues have no cause; the deadline rescues
    // of the overrun jobs 8 and 16 still have theirs.
    let mut obs = observations();
    obs.faulted_runtimes.clear();
    let found = reconcile_with("", &obs).await;
    assert_eq!(
        rules(&found),
        [FindingRule::UnexplainedInterruption],
        "{found:#?}"
    );
    assert_eq!(
        (found[0].ids.as_slice(), found[0].count),
        (&[10, 11, 12, 14, 15, 16, 17, 18][..], 8)
    );
    assert!(
        found[0].message.ends_with(
            "first: job 10 (complete) attempt 1 (run lease 1) on w1 was rescued (crash) though its \
             runtime was neither killed, suspended nor ended unasked, and PostgreSQL did not crash"
        ),
        "{}",
        found[0].message
    );
    // A deadline rescue of a job that has no deadline is unexplained even
    // on a killed runtime.
    let found = reconcile_with(
        "UPDATE awa.executions SET outcome = 'rescued_deadline' WHERE job_id = 10 AND run_lease = 1",
        &observations(),
    )
    .await;
    assert_eq!(rules(&found), [FindingRule::UnexplainedInterruption]);
    assert_eq!(found[0].ids, [10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_started_before_they_were_due_are_early_starts() {
    // Job 2 (retry_once) ran attempt 2 100 ms after attempt 1 asked for
    // its 200 ms backoff; job 17 (exhaust_retries) waited attempt 1's 200
    // ms to the microsecond (on time); job 5's attempt 2, claimed by a
    // 0.6.2 worker, says it started 40 ms before its 200 ms snooze ended
    // (not judged: 0.6 records a claim's transaction start, before the
    // snapshot that saw the promotion); job 18 ran attempt 2 100 ms after
    // attempt 1 snoozed; and the scheduled job 9 ran 2 s before its run_at.
    let mut obs = observations();
    for job in &mut obs.accepted {
        if job.job_id == SCHEDULED.0 {
            job.run_at_ms = Some(SCHEDULED.1 + 2_500);
        }
    }
    let next_after = |job: i64, ms: f64| {
        format!(
            "UPDATE awa.executions n SET started_at = p.finished_at + {ms} * interval '1 millisecond'
             FROM awa.executions p WHERE p.job_id = {job} AND p.run_lease = 1 AND n.job_id = {job} AND n.run_lease = 2;"
        )
    };
    let fault = [
        next_after(2, 100.0),
        next_after(17, 200.0),
        next_after(5, 160.0),
        "UPDATE awa.executions SET version = '0.6.2' WHERE job_id = 5 AND run_lease = 2;"
            .to_owned(),
        next_after(18, 100.0),
    ]
    .concat();
    let found = reconcile_with(&fault, &obs).await;
    assert_eq!(rules(&found), [FindingRule::EarlyStart], "{found:#?}");
    assert_eq!(
        (found[0].ids.as_slice(), found[0].count),
        (&[2, 9, 18][..], 3)
    );
    assert_eq!(
        found[0].message,
        "3 jobs started an attempt before it was due; first: job 2 attempt 2 (run lease 2) \
         started 100.0 ms before the 200.0 ms backoff after attempt 1's retry ended"
    );

    // The same history on time: nothing found.
    let found = reconcile_with(
        &[next_after(2, 200.0), next_after(18, 200.0)].concat(),
        &observations(),
    )
    .await;
    assert_eq!(found, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_attempt_that_was_not_rescued_is_unproven() {
    let mut obs = observations();
    // job 1's killed attempt was never closed (no rescue happened);
    // job 10's attempt 1 was rescued but attempt 2 never ran;
    // job 2's attempt closed normally before the kill (its `finished`
    // line was lost with the process): nothing to rescue, no finding.
    for job_id in [1, 2] {
        obs.kills[0].in_flight.push(InFlight {
            job_id,
            attempt: 1,
            run_lease: 1,
        });
    }
    let found = reconcile_with(
        "UPDATE awa.executions SET outcome = NULL, finished_at = NULL WHERE job_id = 1 AND run_lease = 1;
         DELETE FROM awa.executions WHERE job_id = 10 AND run_lease = 2;
         UPDATE awa.claim_closures SET run_lease = 1, attempt = 1, outcome = 'completed' WHERE job_id = 10 AND terminal;
         DELETE FROM awa.claim_closures WHERE job_id = 10 AND NOT terminal;
         DELETE FROM awa.claim_receipts WHERE job_id = 10 AND run_lease = 2;",
        &obs,
    )
    .await;
    let unproven: Vec<_> = found
        .iter()
        .filter(|f| f.rule == FindingRule::RescueUnproven)
        .collect();
    assert_eq!(unproven.len(), 1, "{found:?}");
    assert_eq!(
        (unproven[0].ids.as_slice(), unproven[0].count),
        (&[1, 10][..], 2)
    );
    assert!(
        unproven[0].message.contains("job 1 attempt 1 (run lease 1) on current-worker-1 was never closed and never ran attempt 2"),
        "{}",
        unproven[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_time_with_two_jobs_is_a_double_fire() {
    let found = reconcile_with(
        // job 24 (fire 3000) terminal twice; a second live job claims fire 4000
        "INSERT INTO awa.terminal_archive (job_id, run_lease, attempt, state, queue, priority, kind, closed_at)
         VALUES (24, 1, 1, 'completed', 'default', 0, 'rehearsal', now());
         INSERT INTO awa.dead_letters (job_id, kind, queue, priority, args, attempt, run_lease, reason)
         VALUES (99, 'rehearsal', 'default', 0, '{\"mode\": \"complete\", \"cron\": \"tick\", \"fire_ms\": 4000}', 1, 1, 'x');
         INSERT INTO awa.executions (job_id, run_lease, attempt, instance_id, version, finished_at, outcome)
         VALUES (99, 1, 1, 'w1', '0.7.0', now(), 'rescued_crash');",
        &observations(),
    )
    .await;
    assert!(
        rules(&found).contains(&FindingRule::CronDoubleFire),
        "{found:?}"
    );
    let double = found
        .iter()
        .find(|f| f.rule == FindingRule::CronDoubleFire)
        .unwrap();
    assert_eq!(
        (double.ids.as_slice(), double.count),
        (&[24, 25, 99][..], 2)
    );
    assert!(
        double
            .message
            .contains("first: schedule \"tick\" at 3000 ms, job 24 has 2 terminal records"),
        "{}",
        double.message
    );
    // The same faults as job-level rules, and nothing else.
    assert_eq!(
        rules(&found),
        [FindingRule::Duplicate, FindingRule::CronDoubleFire]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_time_without_a_job_is_missed() {
    let mut obs = observations();
    // the window now reaches 6000: 5000 and 6000 never fired
    obs.cron[0].to_ms = 6_500;
    let found = reconcile_with("DELETE FROM awa.cron_fires WHERE fire_ms = 3000", &obs).await;
    assert_eq!(rules(&found), [FindingRule::CronMissedFire]);
    assert_eq!(
        (found[0].ids.as_slice(), found[0].count),
        (&[3_000, 5_000, 6_000][..], 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_counts_that_drift_are_found_with_and_without_deltas() {
    // 0.7: a delta counted twice
    let found = reconcile_with(
        "INSERT INTO awa.queue_terminal_rollup_deltas (queue, priority, state, count) VALUES ('default', 0, 'completed', 2)",
        &observations(),
    )
    .await;
    assert_eq!(rules(&found), [FindingRule::CountDrift]);
    assert_eq!(found[0].count, 2);

    // 0.6: no delta table; a prune whose rollup was lost
    let c = old_cell(false).await;
    history(&c.client).await;
    settle(&c.client, false).await;
    let clean = reconcile(&c.client, &the_plan(), &observations())
        .await
        .expect("reconcile 0.6");
    assert_eq!(clean, []);
    c.client
        .batch_execute("DELETE FROM awa.queue_terminal_rollups WHERE state = 'cancelled'")
        .await
        .unwrap();
    let found = reconcile(&c.client, &the_plan(), &observations())
        .await
        .expect("reconcile 0.6");
    assert_eq!(rules(&found), [FindingRule::CountDrift]);
    assert!(
        found[0].message.ends_with("cancelled 0 (true 1)"),
        "{}",
        found[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpoisoned_column_or_a_fence_run_that_wrote_is_a_breach() {
    let mut obs = observations();
    obs.fences.push(FenceRecord {
        artifact: "previous".into(),
        version: "0.6.2".into(),
        exit_code: Some(0),
        refused: false,
        state_before: "d1".into(),
        state_after: "d2".into(),
        stderr_tail: String::new(),
    });
    // The seeded defect: the flip poisoned only current_slot.
    let found = reconcile_with(
        "ALTER TABLE awa.claim_ring_state DISABLE TRIGGER ring_cursor_fence;
         UPDATE awa.claim_ring_state SET generation = 12;",
        &obs,
    )
    .await;
    assert_eq!(
        rules(&found),
        [FindingRule::FenceBreached, FindingRule::FenceBreached]
    );
    assert_eq!(found[0].phase, "fence");
    assert!(
        found[0]
            .message
            .contains("exited 0, printed no refused event, changed the storage state"),
        "{}",
        found[0].message
    );
    assert!(
        found[1].message.contains(
            "the claim ring's cursor columns are not poisoned (current_slot -1, generation 12)"
        ),
        "{}",
        found[1].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_ahead_of_its_columns_under_columns_authority_is_mixed_discipline() {
    let c = old_cell(true).await;
    history(&c.client).await;
    settle(&c.client, true).await;
    let clean = reconcile(&c.client, &the_plan(), &observations())
        .await
        .expect("reconcile");
    assert_eq!(
        clean,
        [],
        "an upgraded schema in columns authority reconciles clean"
    );
    c.client
        .batch_execute("INSERT INTO awa.lease_ring_rotations (generation, slot) SELECT g, g % 8 FROM generate_series(1, 3) g")
        .await
        .unwrap();
    let found = reconcile(&c.client, &the_plan(), &observations())
        .await
        .expect("reconcile");
    assert_eq!(rules(&found), [FindingRule::MixedDiscipline]);
    assert!(
        found[0].message.contains(
            "the lease ring's ledger ends at generation 3, ahead of its columns (generation 0)"
        ),
        "{}",
        found[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_that_does_not_verify_after_the_flip_is_unverified() {
    let mut obs = observations();
    obs.flips.push(FlipRecord {
        holder_ages: Vec::new(),
        ids_drawn_before: None,
        mode: matrix::FlipMode::Manual,
        expected: matrix::Outcome::Ok,
        exit_code: Some(0),
        at_ms: 2_000,
        output: vec![Event::Flipped(Flipped {
            rings: vec![RingFlip {
                ring: "queue".into(),
                columns_slot: 1,
                columns_generation: 9,
                ledger_slot: 7,
                ledger_generation: 7,
                backfilled: 0,
            }],
            forced: Some(false),
            version: Some("0.7.0".into()),
            ..Default::default()
        })],
    });
    let found = reconcile_with(
        // the queue ledger misses generation 2; a claim closure was written
        // at a generation the claim ledger never reached
        "INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (1, 1), (3, 3);
         UPDATE awa.claim_closures SET generation = 5 WHERE job_id = 2 AND terminal;",
        &obs,
    )
    .await;
    // The closure moved to generation 5 also sits outside the slot the
    // claim ring's cursor gives it: placement names it too.
    assert_eq!(
        rules(&found),
        [
            FindingRule::FlipUnverified,
            FindingRule::FlipUnverified,
            FindingRule::FlipUnverified,
            FindingRule::Misplaced
        ]
    );
    assert!(found[3].message.contains("job 2"), "{}", found[3].message);
    assert!(
        found[0].message.contains(
            "promoted the queue ring's ledger at generation 7, behind its columns at generation 9"
        ),
        "{}",
        found[0].message
    );
    assert!(
        found[1]
            .message
            .contains("the queue ring's ledger (top generation 3) misses 1 generation"),
        "{}",
        found[1].message
    );
    assert!(
        found[2].message.contains(
            "the claim ring's ledger (top generation 0) has ring rows written at generation 5"
        ),
        "{}",
        found[2].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_the_schema_is_a_harness_error() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster
        .create_database("empty")
        .await
        .expect("create database");
    let client = cluster.connect("empty").await.expect("connect");
    let err = reconcile(&client, &the_plan(), &observations())
        .await
        .unwrap_err();
    assert!(matches!(err, ReconcileError::NoSchema { .. }), "{err}");
    // The session is usable afterwards: the snapshot was rolled back.
    client
        .query_one("SELECT 1", &[])
        .await
        .expect("session still usable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_sessions_run_without_jit_and_the_runtimes_keep_the_servers_setting() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let url = cluster.url("postgres");
    let show = |client: Client| async move {
        client
            .query_one("SHOW jit", &[])
            .await
            .expect("show jit")
            .get::<_, String>(0)
    };
    let harness = rehearsal::pg::connect(&url).await.expect("harness connect");
    assert_eq!(show(harness).await, "off");
    let runtime = awa_runtime::db::connect(&url)
        .await
        .expect("runtime connect");
    let server: String = cluster
        .connect("postgres")
        .await
        .expect("plain connect")
        .query_one("SELECT current_setting('jit')", &[])
        .await
        .expect("read the server's jit")
        .get(0);
    assert_eq!(show(runtime).await, server);
}
