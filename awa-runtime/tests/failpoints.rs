//! Each seeded defect, armed, produces the wrong behaviour it models, so
//! the rehearsal's defect cells have a real fault to catch. Failpoints are
//! process-wide, so the tests take turns ([`SERIAL`]) and each arms its
//! defects one after another.
#![cfg(feature = "failpoints")]

mod common;

use awa_runtime::failpoint::{self, arm, disarm};
use awa_runtime::store::authority::{self, FlipOutcome};
use awa_runtime::store::folds::{self, Folded};
use awa_runtime::store::{Ring, rings};
use awa_runtime::timings::PRUNE_LOCK_WAIT_MAX;
use common::*;
use std::time::Duration;

/// One test at a time arms failpoints (they are process-wide).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Advance the queue columns as a 0.6 rotator would (three rotations).
const OLD_ROTATOR_THRICE: &str = "
UPDATE awa.queue_ring_state SET current_slot = 3, generation = 3;
UPDATE awa.queue_ring_slots SET generation = slot WHERE slot BETWEEN 1 AND 3;";

/// A ready entry on a queue nobody serves keeps the queue ring busy.
async fn park(db: &Db) {
    let job = awa_runtime::store::enqueue::NewJob {
        kind: "rehearsal".into(),
        queue: "parked".into(),
        args: serde_json::json!({"mode": "complete"}),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    };
    awa_runtime::store::enqueue::enqueue(&db.client().await, &[job])
        .await
        .unwrap();
}

async fn queue_flip(db: &Db) -> authority::RingFlip {
    match authority::flip(&mut db.client().await, 1000.0, true)
        .await
        .unwrap()
    {
        FlipOutcome::Flipped { rings, .. } => {
            rings.into_iter().find(|r| r.ring == "queue").unwrap()
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_seeded_defect_misbehaves_when_armed() {
    let _turn = SERIAL.lock().await;
    let bin062 = tokio::task::spawn_blocking(|| release_bin("0.6.2"))
        .await
        .unwrap();

    // flip_skip_reconcile: the ledger is promoted while it lags the columns.
    let db = Db::expanded("fp_flip", &bin062).await;
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    arm(failpoint::FLIP_SKIP_RECONCILE);
    let q = queue_flip(&db).await;
    disarm(failpoint::FLIP_SKIP_RECONCILE);
    assert_eq!(
        (q.columns_generation, q.ledger_generation),
        (3, 0),
        "promoted an unreconciled ledger"
    );
    let db = Db::expanded("fp_flip_ok", &bin062).await;
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    let q = queue_flip(&db).await;
    assert_eq!(
        (q.columns_generation, q.ledger_generation),
        (3, 3),
        "the real flip reconciles"
    );

    // fence_current_slot_only: an old-style advance from -1 to 0 succeeds.
    let db = Db::expanded("fp_fence", &bin062).await;
    arm(failpoint::FENCE_CURRENT_SLOT_ONLY);
    queue_flip(&db).await;
    disarm(failpoint::FENCE_CURRENT_SLOT_ONLY);
    let c = db.client().await;
    let g: i64 = c
        .query_one("SELECT generation FROM awa.queue_ring_state", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(g, -1, "the defective fence leaves generation unpoisoned");
    c.batch_execute(
        "UPDATE awa.queue_ring_state SET current_slot = 0, generation = generation + 1",
    )
    .await
    .expect("the defective fence lets an old rotator advance");
    let db = Db::expanded("fp_fence_ok", &bin062).await;
    queue_flip(&db).await;
    let err = db
        .client()
        .await
        .batch_execute("UPDATE awa.queue_ring_state SET current_slot = 0, generation = 0")
        .await
        .unwrap_err();
    assert!(
        awa_runtime::error::describe(&err).contains("ring cursor authority is ledger"),
        "{err}"
    );

    // authority_before_lock: a compat rotator that read `columns` before a
    // flip committed advances old-style after it (and meets the fence).
    let db = Db::expanded("fp_toctou", &bin062).await;
    // Columns at slot 3 with a parked entry there, so that from the
    // poisoned -1 the next slot (0) is free and an advance is attempted.
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    park(&db).await;
    arm(failpoint::AUTHORITY_BEFORE_LOCK);
    let url = db.url.clone();
    let rotator = tokio::spawn(async move {
        let mut c = awa_runtime::db::connect(&url).await.unwrap();
        rings::rotate(&mut c, Ring::Queue).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    queue_flip(&db).await;
    let res = rotator.await.unwrap();
    disarm(failpoint::AUTHORITY_BEFORE_LOCK);
    let err = res.expect_err("a stale-authority rotator advanced old-style after the flip");
    assert!(
        err.to_string().contains("ring cursor authority is ledger"),
        "{err}"
    );
    let mut c = db.client().await;
    assert!(
        rings::rotate(&mut c, Ring::Queue).await.is_ok(),
        "the real rotator reads the authority under the lock"
    );

    // fold_any_xmin: ordinary short statements stand the folds down.
    let db = Db::migrated("fp_fold").await;
    let url = db.url.clone();
    let busy = tokio::spawn(async move {
        let b = awa_runtime::db::connect(&url).await.unwrap();
        b.batch_execute("SELECT pg_sleep(1.5)").await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = db.client().await;
    arm(failpoint::FOLD_ANY_XMIN);
    let stood = folds::fold(&mut c).await.unwrap();
    disarm(failpoint::FOLD_ANY_XMIN);
    assert!(matches!(stood, Folded::StoodDown { .. }), "{stood:?}");
    assert!(
        matches!(folds::fold(&mut c).await.unwrap(), Folded::Done { .. }),
        "the real gate ignores a 1.5 s statement"
    );
    busy.await.unwrap();

    // compat_backfill_one: after an old rotator's three advances the
    // ledger is left with holes.
    let db = Db::expanded("fp_backfill", &bin062).await;
    db.client()
        .await
        .batch_execute(OLD_ROTATOR_THRICE)
        .await
        .unwrap();
    park(&db).await;
    let mut c = db.client().await;
    arm(failpoint::COMPAT_BACKFILL_ONE);
    rings::rotate(&mut c, Ring::Queue).await.unwrap();
    disarm(failpoint::COMPAT_BACKFILL_ONE);
    let (_, columns, ledger, gaps) = db.cursors().await.remove(0);
    assert_eq!(columns, 4);
    assert_eq!(ledger, 4);
    assert!(gaps >= 2, "the defective backfill left {gaps} gaps");

    // expand_drops_columns: the expand migration breaks the 0.6.2 fleet.
    let db = Db::at_v2("fp_expand", &bin062).await;
    arm(failpoint::EXPAND_DROPS_COLUMNS);
    awa_runtime::schema::migrate(&mut db.client().await, &Default::default())
        .await
        .unwrap();
    disarm(failpoint::EXPAND_DROPS_COLUMNS);
    let cols: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'awa' AND column_name = 'current_slot'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(cols, 0, "the compat columns are gone");
    let (code, _, _) = run(&bin062, &db.url, &["worker"], &[]).await;
    assert_ne!(code, 0, "0.6.2 cannot run on a schema without its columns");

    // preflight_no_lock: a runtime can register while the migration runs.
    let db = Db::at_v2("fp_prelock", &bin062).await;
    let migrate = spawn(
        awa_bin(),
        &db.url,
        &["migrate"],
        &[
            ("AWA_MIGRATE_PAUSE", "2s"),
            ("AWA_FAILPOINTS", "preflight_no_lock=return"),
        ],
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    db.client()
        .await
        .batch_execute("SET lock_timeout = '300ms'; INSERT INTO awa.runtime_instances (instance_id, name, version, role) VALUES ('late', 'late', '0.6.1', 'worker')")
        .await
        .expect("without the preflight lock a pre-guard runtime registers mid-migration");
    let (code, err) = migrate.exit_code(Duration::from_secs(10)).await;
    assert_eq!(code, 0, "{err}");
}

fn sleeper(queue: &str) -> awa_runtime::store::enqueue::NewJob {
    awa_runtime::store::enqueue::NewJob {
        kind: "rehearsal".into(),
        queue: queue.into(),
        args: serde_json::json!({"mode": "sleep", "ms": 60_000}),
        priority: 0,
        max_attempts: 3,
        deadline_ms: None,
        run_at_ms: None,
    }
}

/// Enqueue one job on `queue` and claim it for `instance`: (job, run lease).
async fn claim_one(c: &tokio_postgres::Client, queue: &str, instance: &str) -> (i64, i64) {
    let id = awa_runtime::store::enqueue::enqueue(c, &[sleeper(queue)])
        .await
        .unwrap()[0];
    let claimed = awa_runtime::store::claim::claim(c, queue, 1, instance, "0.7.0")
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job_id, id);
    (id, claimed[0].run_lease)
}

/// Realistic bug classes the matrix missed before it held work across a
/// ring wrap, watched rotation liveness, checked terminal records against
/// executions and left a leaderless gap of several cron periods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bug_class_defect_misbehaves_when_armed() {
    use awa_runtime::store::rings::{Pruned, Rotated};
    use awa_runtime::store::{claim, cron, finish, instances};
    let _turn = SERIAL.lock().await;

    // prune_wrong_generation: a lease held across a wrap (fresh install,
    // ledger authority) is truncated, and its worker loses it.
    let db = Db::migrated("fp_prune").await;
    let mut c = db.client().await;
    instances::register(&c, "holder", "holder", "0.7.0", "worker")
        .await
        .unwrap();
    let (job, lease) = claim_one(&c, "default", "holder").await;
    // Seven rotations later the held lease's slot is the oldest sealed one.
    for _ in 0..7 {
        let r = rings::rotate(&mut c, Ring::Lease).await.unwrap();
        assert!(matches!(r, Rotated::Advanced { .. }), "{r:?}");
    }
    let kept = rings::prune(&mut c, Ring::Lease, PRUNE_LOCK_WAIT_MAX)
        .await
        .unwrap();
    assert!(
        matches!(kept, Pruned::Live { .. }),
        "the real prune keeps a held lease: {kept:?}"
    );
    arm(failpoint::PRUNE_WRONG_GENERATION);
    let pruned = rings::prune(&mut c, Ring::Lease, PRUNE_LOCK_WAIT_MAX)
        .await
        .unwrap();
    disarm(failpoint::PRUNE_WRONG_GENERATION);
    assert!(
        matches!(pruned, Pruned::Truncated { .. }),
        "the defective prune truncates the held lease: {pruned:?}"
    );
    let held = instances::heartbeat(&c, "holder", &[(job, lease)])
        .await
        .unwrap();
    assert_eq!(held, [], "the worker's lease is gone");
    let state: String = c
        .query_one("SELECT state FROM awa.jobs WHERE job_id = $1", &[&job])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "running", "the job is stranded running");

    // rotate_checks_current_slot: the claim ring's current slot keeps the
    // closure of a finished job, so the defective rotator never advances.
    let db = Db::migrated("fp_rotate").await;
    let mut c = db.client().await;
    let (job, lease) = claim_one(&c, "default", "w").await;
    finish::finish(&c, job, lease, &finish::Outcome::Completed)
        .await
        .unwrap();
    arm(failpoint::ROTATE_CHECKS_CURRENT_SLOT);
    let stalled = rings::rotate(&mut c, Ring::Claim).await.unwrap();
    disarm(failpoint::ROTATE_CHECKS_CURRENT_SLOT);
    assert!(
        matches!(stalled, Rotated::NextSlotBusy { .. }),
        "the defective rotator refuses with the next slot empty: {stalled:?}"
    );
    let moved = rings::rotate(&mut c, Ring::Claim).await.unwrap();
    assert!(
        matches!(moved, Rotated::Advanced { .. }),
        "the real rotator advances into the empty next slot: {moved:?}"
    );

    // rotate_idle_on_current_slot: once the current slot is empty, rows
    // left in an older slot make the ring busy, but the defective rotator
    // calls it idle and never comes round to prune them.
    let db = Db::migrated("fp_idle").await;
    let mut c = db.client().await;
    let (job, lease) = claim_one(&c, "default", "w").await;
    finish::finish(&c, job, lease, &finish::Outcome::Completed)
        .await
        .unwrap();
    let first = rings::rotate(&mut c, Ring::Claim).await.unwrap();
    assert!(matches!(first, Rotated::Advanced { .. }), "{first:?}");
    arm(failpoint::ROTATE_IDLE_ON_CURRENT_SLOT);
    let idle = rings::rotate(&mut c, Ring::Claim).await.unwrap();
    disarm(failpoint::ROTATE_IDLE_ON_CURRENT_SLOT);
    assert_eq!(
        idle,
        Rotated::IdleSkip,
        "the defective rotator stands still"
    );
    let moved = rings::rotate(&mut c, Ring::Claim).await.unwrap();
    assert!(
        matches!(moved, Rotated::Advanced { .. }),
        "the real rotator keeps going while the ring holds rows: {moved:?}"
    );

    // cron_no_catch_up: after a gap of five periods only the latest fire
    // time is fired.
    let db = Db::migrated("fp_cron").await;
    let c = db.client().await;
    let schedule = |name: &str| cron::Schedule {
        name: name.into(),
        every_ms: 200,
        queue: "cron".into(),
        kind: "rehearsal".into(),
        args: serde_json::json!({"mode": "complete"}),
        priority: 0,
        max_attempts: 3,
    };
    const GAP: &str = "UPDATE awa.cron_schedules SET last_fire_ms = (extract(epoch FROM now()) * 1000)::bigint / 200 * 200 - 1000 WHERE name = $1";
    cron::upsert(&c, &schedule("defective")).await.unwrap();
    c.execute(GAP, &[&"defective"]).await.unwrap();
    arm(failpoint::CRON_NO_CATCH_UP);
    let fired = cron::fire_due(&c, "leader").await.unwrap();
    disarm(failpoint::CRON_NO_CATCH_UP);
    assert_eq!(fired.len(), 1, "only the latest fire time: {fired:?}");
    cron::upsert(&c, &schedule("real")).await.unwrap();
    c.execute(GAP, &[&"real"]).await.unwrap();
    let fired = cron::fire_due(&c, "leader").await.unwrap();
    let real = fired.iter().filter(|f| f.name == "real").count();
    assert!(
        real >= 5,
        "the real leader catches up every fire time: {fired:?}"
    );

    // finish_ignores_run_lease: a stale worker's completion after a
    // rescue closes the job's newer attempt, under the stale lease.
    let db = Db::migrated("fp_finish").await;
    let mut c = db.client().await;
    instances::register(&c, "fresh", "fresh", "0.7.0", "worker")
        .await
        .unwrap();
    // Claimed by a runtime that never registered: crash rescue takes it.
    let (job, stale) = claim_one(&c, "default", "ghost").await;
    let rescued = awa_runtime::store::rescue::rescue(&mut c, 60_000.0)
        .await
        .unwrap();
    assert!(rescued.iter().any(|r| r.job_id == job), "{rescued:?}");
    let again = claim::claim(&c, "default", 10, "fresh", "0.7.0")
        .await
        .unwrap();
    assert_eq!((again[0].job_id, again[0].run_lease), (job, stale + 1));
    assert_eq!(
        finish::finish(&c, job, stale, &finish::Outcome::Completed)
            .await
            .unwrap(),
        finish::Closed::Stale,
        "the real guard rejects the stale lease"
    );
    arm(failpoint::FINISH_IGNORES_RUN_LEASE);
    let closed = finish::finish(&c, job, stale, &finish::Outcome::Completed)
        .await
        .unwrap();
    disarm(failpoint::FINISH_IGNORES_RUN_LEASE);
    assert_eq!(closed, finish::Closed::Accepted, "the stale result landed");
    let row = c
        .query_one(
            "SELECT run_lease, attempt FROM awa.claim_closures WHERE job_id = $1 AND terminal",
            &[&job],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i32>(1)),
        (stale, 2),
        "the terminal record names the stale lease with the newer attempt"
    );
    assert_eq!(
        finish::finish(&c, job, stale + 1, &finish::Outcome::Completed)
            .await
            .unwrap(),
        finish::Closed::Stale,
        "the attempt actually running lost its job"
    );
}

/// worker_keys_attempts_by_job: a worker that claims a job it rescued
/// itself before its heartbeat noticed leaves the old handler running in
/// its slot, unannounced (the scenario of `tests/rescue.rs`, which the
/// real worker passes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_defect_keeps_rescued_handlers_in_their_slots() {
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_worker_keys").await;
    let armed = format!("{}=return", failpoint::WORKER_KEYS_ATTEMPTS_BY_JOB);
    let run = SelfRescue::run(&db, &[("AWA_FAILPOINTS", armed.as_str())]).await;
    assert_eq!(
        run.sleepers_started_within(Duration::from_secs(3)).await,
        1,
        "two of three slots stay held by the rescued first attempts"
    );
    for id in &run.overruns {
        assert!(
            run.first_attempt_ends(*id).is_empty(),
            "job {id}'s rescued first attempt was stopped or ended"
        );
    }
    assert_eq!(run.worker.terminate().await, 0);
}

/// rescue_requeues_without_entry: a rescued job goes back to
/// `available` with no ready entry, and no claim ever picks it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requeue_defect_leaves_rescued_jobs_where_no_claim_looks() {
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_requeue").await;
    let c = db.client().await;
    // Its claimer has no runtime row: crash rescue takes the attempt.
    let (id, _) = claim_one(&c, "default", "gone").await;
    arm(failpoint::RESCUE_REQUEUES_WITHOUT_ENTRY);
    let rescued = awa_runtime::store::rescue::rescue(&mut db.client().await, 60_000.0)
        .await
        .unwrap();
    disarm(failpoint::RESCUE_REQUEUES_WITHOUT_ENTRY);
    assert!(
        rescued.iter().any(|r| r.job_id == id && !r.dead),
        "{rescued:?}"
    );
    let state: String = c
        .query_one("SELECT state FROM awa.jobs WHERE job_id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "available");
    let unreachable = awa_runtime::store::audit::unreachable_ready(&c)
        .await
        .unwrap();
    assert_eq!(unreachable.ids, [id], "{unreachable:?}");
    assert!(
        awa_runtime::store::claim::claim(&c, "default", 10, "fresh", "0.7.0")
            .await
            .unwrap()
            .is_empty(),
        "a claim found the re-queued job"
    );
}

/// Whether the fence's resolver layer refuses (`awa.ring_cursor`) and its
/// trigger layer rejects an old-style advance, after a flip.
async fn fence_layers(db: &Db) -> (bool, bool) {
    let c = db.client().await;
    let resolver = c
        .query_one("SELECT slot FROM awa.ring_cursor('claim')", &[])
        .await
        .is_err();
    let trigger = c
        .batch_execute("UPDATE awa.queue_ring_state SET current_slot = 0, generation = 0")
        .await
        .is_err();
    (resolver, trigger)
}

/// ADR-041 §6: each fence layer covers its own old write path, so a flip
/// that forgets one leaves that path open (the other layer still stands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_that_forgets_a_fence_layer_leaves_its_path_open() {
    let _turn = SERIAL.lock().await;
    let bin062 = tokio::task::spawn_blocking(|| release_bin("0.6.2"))
        .await
        .unwrap();
    let db = Db::expanded("fp_layers_ok", &bin062).await;
    queue_flip(&db).await;
    assert_eq!(
        fence_layers(&db).await,
        (true, true),
        "the real flip installs both"
    );

    let db = Db::expanded("fp_no_resolver", &bin062).await;
    arm(failpoint::FENCE_NO_RESOLVER);
    queue_flip(&db).await;
    disarm(failpoint::FENCE_NO_RESOLVER);
    assert_eq!(
        fence_layers(&db).await,
        (false, true),
        "the resolver stays open"
    );

    let db = Db::expanded("fp_no_trigger", &bin062).await;
    arm(failpoint::FENCE_NO_TRIGGER);
    queue_flip(&db).await;
    disarm(failpoint::FENCE_NO_TRIGGER);
    assert_eq!(
        fence_layers(&db).await,
        (true, false),
        "the trigger stays inactive"
    );
}

/// enqueue_misroutes_slot: the ready entry sits one slot ahead of the
/// cursor, where the placement audit finds it; the real enqueue's does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misrouted_enqueue_is_found_by_the_placement_audit() {
    use awa_runtime::store::audit;
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_misroute").await;
    let c = db.client().await;
    let features = audit::schema_features(&c).await.unwrap();
    park(&db).await;
    assert!(audit::misplaced(&c, &features).await.unwrap().is_empty());
    arm(failpoint::ENQUEUE_MISROUTES_SLOT);
    park(&db).await;
    disarm(failpoint::ENQUEUE_MISROUTES_SLOT);
    let found = audit::misplaced(&c, &features).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind.as_str(), found[0].count), ("ready entry", 1));
}

/// cancel_ignores_running: the operator's cancel of a running job answers
/// that it was live and leaves it running; the real cancel takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_ignores_running_jobs_leaves_them_running() {
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_cancel").await;
    let c = db.client().await;
    let state = |job: i64| {
        let c = &c;
        async move {
            c.query_opt("SELECT state FROM awa.jobs WHERE job_id = $1", &[&job])
                .await
                .unwrap()
                .map(|r| r.get::<_, String>(0))
        }
    };
    let (job, _) = claim_one(&c, "default", "w").await;
    arm(failpoint::CANCEL_IGNORES_RUNNING);
    let answered = awa_runtime::store::finish::cancel_by_operator(&c, job)
        .await
        .unwrap();
    disarm(failpoint::CANCEL_IGNORES_RUNNING);
    assert!(answered, "the defective cancel says the job was live");
    assert_eq!(
        state(job).await.as_deref(),
        Some("running"),
        "and leaves it running"
    );
    let answered = awa_runtime::store::finish::cancel_by_operator(&c, job)
        .await
        .unwrap();
    assert!(answered);
    assert_eq!(
        state(job).await,
        None,
        "the real cancel takes the running job"
    );
}

/// compat_skips_slot_generation: a compat rotation opens the next slot
/// without recording its generation, which the compat prune reads; the
/// real compat rotation records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compat_rotator_that_skips_the_slot_generation_leaves_it_a_wrap_old() {
    use awa_runtime::store::rings::Rotated;
    let _turn = SERIAL.lock().await;
    let bin062 = tokio::task::spawn_blocking(|| release_bin("0.6.2"))
        .await
        .unwrap();
    for (armed, want) in [(true, -7), (false, 1)] {
        let db = Db::expanded(if armed { "fp_slots" } else { "fp_slots_ok" }, &bin062).await;
        park(&db).await;
        if armed {
            arm(failpoint::COMPAT_SKIPS_SLOT_GENERATION);
        }
        let r = rings::rotate(&mut db.client().await, Ring::Queue)
            .await
            .unwrap();
        disarm(failpoint::COMPAT_SKIPS_SLOT_GENERATION);
        assert_eq!(
            r,
            Rotated::Advanced {
                slot: 1,
                generation: 1
            }
        );
        let got: i64 = db
            .client()
            .await
            .query_one(
                "SELECT generation FROM awa.queue_ring_slots WHERE slot = 1",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, want, "armed: {armed}");
    }
}

/// release_spends_attempt: a graceful stop's release of an attempt keeps
/// its number, so the job's next claim spends one more; the real release
/// gives it back and the next claim runs the same attempt again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_spends_its_attempt_runs_the_next_claim_one_attempt_on() {
    use awa_runtime::store::{claim, finish};
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_release").await;
    let c = db.client().await;
    let next_attempt = |lease: i64, job: i64| {
        let c = &c;
        async move {
            assert!(finish::release(c, job, lease).await.unwrap(), "released");
            let again = claim::claim(c, "default", 1, "w", "0.7.0").await.unwrap();
            assert_eq!((again.len(), again[0].job_id), (1, job));
            (again[0].attempt, again[0].run_lease)
        }
    };
    let (job, lease) = claim_one(&c, "default", "w").await;
    let (attempt, lease) = next_attempt(lease, job).await;
    assert_eq!(attempt, 1, "the real release gives the attempt back");
    arm(failpoint::RELEASE_SPENDS_ATTEMPT);
    let (attempt, _) = next_attempt(lease, job).await;
    disarm(failpoint::RELEASE_SPENDS_ATTEMPT);
    assert_eq!(attempt, 2, "the defective release spent it");
}

/// finish_closes_newer_attempt: a rescued attempt's late result closes the
/// job's newer attempt under that attempt's lease, so its terminal record
/// matches the newest run in every field; only the newer run's own report
/// (its lease lost) disowns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_result_that_closes_the_newer_attempt_is_disowned_only_by_its_run() {
    use awa_runtime::store::{audit, claim, finish, rescue};
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_newer").await;
    let c = db.client().await;
    // Its claimer has no runtime row: crash rescue takes attempt 1.
    let (job, old) = claim_one(&c, "default", "gone").await;
    rescue::rescue(&mut db.client().await, 60_000.0)
        .await
        .unwrap();
    let newer = claim::claim(&c, "default", 1, "w2", "0.7.0").await.unwrap();
    assert_eq!((newer[0].job_id, newer[0].attempt), (job, 2));
    let newer = newer[0].run_lease;
    arm(failpoint::FINISH_CLOSES_NEWER_ATTEMPT);
    let closed = finish::finish(&c, job, old, &finish::Outcome::Completed)
        .await
        .unwrap();
    disarm(failpoint::FINISH_CLOSES_NEWER_ATTEMPT);
    assert_eq!(closed, finish::Closed::Accepted, "the late result landed");
    let lease: i64 = c
        .query_one(
            "SELECT run_lease FROM awa.claim_closures WHERE job_id = $1 AND terminal",
            &[&job],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(lease, newer, "under the newer attempt's lease");
    // The newer run's own close now loses: it reports its close stale.
    let own = finish::finish(&c, job, newer, &finish::Outcome::Completed)
        .await
        .unwrap();
    assert_eq!(own, finish::Closed::Stale);
    let set = [audit::AuditJob {
        job_id: job,
        mode: awa_runtime::workload::Mode::Complete,
        max_attempts: 3,
        uncertain: false,
        cancelled: false,
    }];
    audit::load_audit_set(&c, set).await.unwrap();
    assert!(
        audit::terminal_mismatches(&c, &[(job, old)])
            .await
            .unwrap()
            .is_empty(),
        "the record matches the newest run's lease, attempt and outcome"
    );
    let found = audit::terminal_mismatches(&c, &[(job, old), (job, newer)])
        .await
        .unwrap();
    assert_eq!(found.ids, [job], "{found:?}");
}

/// rescue_healthy_attempts: the rescue pass takes the healthy first run
/// of every tenth job, its runtime and lease freshly beating; the real
/// pass leaves it running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescue_pass_that_takes_healthy_attempts_rescues_fresh_leases() {
    use awa_runtime::store::{instances, rescue};
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_healthy").await;
    let c = db.client().await;
    instances::register(&c, "healthy", "healthy", "0.7.0", "worker")
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(claim_one(&c, "default", "healthy").await);
    }
    let tenth: Vec<i64> = held.iter().map(|h| h.0).filter(|j| j % 10 == 0).collect();
    assert_eq!(tenth.len(), 1, "{held:?}");
    instances::heartbeat(&c, "healthy", &held).await.unwrap();
    let real = rescue::rescue(&mut db.client().await, 60_000.0)
        .await
        .unwrap();
    assert_eq!(real, [], "the real pass leaves healthy attempts alone");
    arm(failpoint::RESCUE_HEALTHY_ATTEMPTS);
    let taken = rescue::rescue(&mut db.client().await, 60_000.0)
        .await
        .unwrap();
    disarm(failpoint::RESCUE_HEALTHY_ATTEMPTS);
    let taken: Vec<(i64, rescue::RescueReason)> =
        taken.iter().map(|r| (r.job_id, r.reason)).collect();
    assert_eq!(taken, [(tenth[0], rescue::RescueReason::Heartbeat)]);
}

/// permanent_as_transient: a revoked privilege (SQLSTATE 42501, met for
/// real by a role without privileges on the schema) reads as permanent,
/// and the worker's patience gives it back at once; armed, it reads as
/// transient and patience keeps retrying it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classifier_that_takes_a_revoked_privilege_for_transient_retries_it() {
    use awa_runtime::db::Patience;
    use awa_runtime::error::Error;
    let _turn = SERIAL.lock().await;
    let db = Db::migrated("fp_permanent").await;
    let c = db.client().await;
    c.batch_execute("CREATE ROLE fp_unprivileged; SET ROLE fp_unprivileged")
        .await
        .unwrap();
    let denied = || {
        let c = &c;
        async move {
            let e = c
                .query_one("SELECT count(*) FROM awa.jobs", &[])
                .await
                .expect_err("the role has no privilege on the schema");
            Error::db("reading", e)
        }
    };
    let real = denied().await;
    assert_eq!(real.sqlstate(), Some("42501"), "{real}");
    assert!(!real.is_transient());
    let mut patience = Patience::new(Duration::from_secs(30));
    assert!(
        patience.failed("reading", real).is_some(),
        "surfaced at once"
    );
    arm(failpoint::PERMANENT_AS_TRANSIENT);
    let seeded = denied().await;
    disarm(failpoint::PERMANENT_AS_TRANSIENT);
    assert_eq!(seeded.sqlstate(), Some("42501"), "{seeded}");
    assert!(seeded.is_transient());
    let mut patience = Patience::new(Duration::from_secs(30));
    assert!(
        patience.failed("reading", seeded).is_none(),
        "retried as if a reconnect could cure it"
    );
}

#[tokio::test]
async fn the_quoted_secret_defect_shows_the_rest_of_a_password_with_a_space() {
    let _turn = SERIAL.lock().await;
    let dsn = "host=db user=app password='first half' dbname=jobs";
    let shown = awa_runtime::redact::redact(dsn);
    assert_eq!(shown, "host=db user=app password=*** dbname=jobs");
    arm(failpoint::QUOTED_SECRET_CUT_AT_SPACE);
    let shown = awa_runtime::redact::redact(dsn);
    disarm(failpoint::QUOTED_SECRET_CUT_AT_SPACE);
    assert!(shown.contains("half'"), "{shown}");
    assert!(!shown.contains("first"), "{shown}");
}
