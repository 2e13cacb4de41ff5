//! The monitor against a real PostgreSQL: a flip that commits while a
//! sample is being read must not look like a ring advanced under both
//! disciplines (the false `mixed_discipline` seen in 2 of 10 full runs).
//!
//! The interleaving is made deterministic with a transaction held open:
//! it takes an ACCESS EXCLUSIVE lock on one table the sample reads, then
//! writes what a flip writes (poisoned cursor columns, `ledger`
//! authority). The monitor's next sample blocks on that table part-way
//! through; the transaction commits; the sample goes on. Read in separate
//! autocommit statements, that sample pairs the authority from before the
//! flip with the poisoned columns from after it. Read in one snapshot, it
//! sees the flip wholly or not at all.

pub mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use awa_harness::pgtemp::Cluster;
use common::database::on_06_schema;
use rehearsal::matrix::FindingRule;
use rehearsal::monitor::{Beating, Counts, EVENT_EVERY, Live, Monitor, Samples};
use rehearsal::observe::{DutyTable, Observations};
use rehearsal::reconcile::sample_findings;
use rehearsal::stream::{self, RunEvent};
use tokio_postgres::Client;

/// What a flip commits, less its checks: the columns and the per-slot
/// prune metadata poisoned, the authority set to `ledger`.
const FLIP_WRITES: &str = "
UPDATE awa.queue_ring_state SET current_slot = -1, generation = -1;
UPDATE awa.claim_ring_state SET current_slot = -1, generation = -1;
UPDATE awa.lease_ring_state SET current_slot = -1, generation = -1;
UPDATE awa.queue_ring_slots SET generation = -1;
UPDATE awa.claim_ring_slots SET generation = -1;
UPDATE awa.lease_ring_slots SET generation = -1;
UPDATE awa.ring_cursor_authority SET authority = 'ledger', flipped_at = now();";

/// Three rotations of every ring under columns authority, as a compat
/// rotator leaves them (columns and ledger together), so the ledgers do
/// not sit at generation 0.
const ROTATED_THRICE: &str = "
UPDATE awa.queue_ring_state SET current_slot = 3, generation = 3;
UPDATE awa.claim_ring_state SET current_slot = 3, generation = 3;
UPDATE awa.lease_ring_state SET current_slot = 3, generation = 3;
INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (1, 1), (2, 2), (3, 3);
INSERT INTO awa.claim_ring_rotations (generation, slot) VALUES (1, 1), (2, 2), (3, 3);
INSERT INTO awa.lease_ring_rotations (generation, slot) VALUES (1, 1), (2, 2), (3, 3);";

const LOCK_WAITERS: &str = "
SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = $1";

/// A database on the 0.6 schema upgraded by this build's expand migration
/// (authority `columns`), every ring rotated three times.
async fn expanded(cluster: &Cluster, name: &str) -> Client {
    let mut client = on_06_schema(cluster, name).await;
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .expect("expand migration");
    client.batch_execute(ROTATED_THRICE).await.unwrap();
    client
}

fn start_monitor(cluster: &Cluster, name: &str) -> Monitor {
    start_streaming(cluster, name, stream::Events::discard())
}

fn start_streaming(cluster: &Cluster, name: &str, events: stream::Events) -> Monitor {
    start_watching(cluster, name, events, BTreeMap::new())
}

/// A monitor that expects the runtimes of `beating` (instance id to
/// name) to heartbeat every 200 ms.
fn start_watching(
    cluster: &Cluster,
    name: &str,
    events: stream::Events,
    beating: BTreeMap<String, String>,
) -> Monitor {
    Monitor::start(
        cluster.url(name),
        Instant::now(),
        Duration::from_millis(1_500),
        Arc::new(Counts::new),
        Beating {
            source: Arc::new(move || beating.clone()),
            heartbeat: Duration::from_millis(200),
            starving: Arc::default(),
        },
        Live {
            events,
            cell: name.to_owned(),
        },
    )
}

/// Waits until some session of `name` waits on a lock.
async fn until_blocked(observer: &Client, name: &str) {
    until_waiting(observer, name, 1).await;
}

/// Waits until `at_least` sessions of `name` wait on a lock.
async fn until_waiting(observer: &Client, name: &str, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = observer
            .query_one(LOCK_WAITERS, &[&name])
            .await
            .unwrap()
            .get(0);
        if n >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the monitor never blocked on the held lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The monitor samples while a flip holding `table` commits mid-sample.
async fn flip_mid_sample(cluster: &Cluster, name: &str, table: &str) -> Samples {
    let observer = expanded(cluster, name).await;
    let flip = cluster.connect(name).await.unwrap();
    flip.batch_execute(&format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; {FLIP_WRITES}"
    ))
    .await
    .unwrap();
    let monitor = start_monitor(cluster, name);
    until_blocked(&observer, name).await;
    flip.batch_execute("COMMIT").await.unwrap();
    // A few samples after the flip, so the samples show it.
    tokio::time::sleep(Duration::from_millis(800)).await;
    monitor.stop().await
}

fn judged(samples: &Samples) -> Vec<rehearsal::observe::Finding> {
    let obs = Observations {
        rings: samples.rings.clone(),
        ..Default::default()
    };
    sample_findings(&obs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_committing_mid_sample_is_not_mixed_discipline() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    // Each table a sample reads the ring state from: the cursor columns,
    // a ledger, the authority.
    for (name, table) in [
        ("columns_held", "awa.claim_ring_state"),
        ("ledger_held", "awa.queue_ring_rotations"),
        ("authority_held", "awa.ring_cursor_authority"),
    ] {
        let samples = flip_mid_sample(&cluster, name, table).await;
        let authorities: Vec<&str> = samples.rings.iter().map(|s| s.authority.as_str()).collect();
        assert!(
            authorities.contains(&"columns") && authorities.contains(&"ledger"),
            "{name}: the samples must show the flip: {authorities:?}"
        );
        let found = judged(&samples);
        assert!(
            !found.iter().any(|f| f.rule == FindingRule::MixedDiscipline),
            "{name}: a flip committing mid-sample was taken for mixed discipline: {found:#?}"
        );
        assert_eq!(found, [], "{name}");
        // Every sample is internally consistent: columns authority with
        // live columns, or ledger authority with poisoned ones.
        for s in &samples.rings {
            let poisoned = (s.column_slot, s.column_generation) == (Some(-1), Some(-1));
            assert_eq!(s.authority == "ledger", poisoned, "{name}: {s:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_flip_under_sampling_is_not_mixed_discipline() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    for round in 0..3 {
        let name = format!("real_flip_{round}");
        let _db = expanded(&cluster, &name).await;
        let (events, mut rx) = stream::channel();
        let monitor = start_streaming(&cluster, &name, events);
        // Flip at a different point of the sampling interval each round.
        tokio::time::sleep(Duration::from_millis(300 + 80 * round)).await;
        let mut flipper = cluster.connect(&name).await.unwrap();
        let outcome = awa_runtime::store::authority::flip(&mut flipper, 1_500.0, true)
            .await
            .expect("flip");
        assert!(
            matches!(
                outcome,
                awa_runtime::store::authority::FlipOutcome::Flipped { .. }
            ),
            "{outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        let samples = monitor.stop().await;
        assert!(samples.rings.iter().any(|s| s.authority == "ledger"));
        assert_eq!(judged(&samples), [], "round {round}");
        // The live stream: the first sample at once, then at most one a
        // second, but the tick that saw the flip whenever it came.
        let mut sent = Vec::new();
        while let Ok(event) = rx.try_recv() {
            match event {
                RunEvent::MonitorSample {
                    cell,
                    census,
                    rings,
                } => {
                    assert_eq!(cell, name);
                    assert_eq!(rings.len(), 3, "{rings:?}");
                    sent.push((census.at_ms, rings[0].authority.clone()));
                }
                other => panic!("the monitor sends only samples: {other:?}"),
            }
        }
        assert_eq!(
            sent.first().map(|s| s.1.as_str()),
            Some("columns"),
            "{sent:?}"
        );
        let seen = samples
            .rings
            .iter()
            .find(|s| s.authority == "ledger")
            .map(|s| s.at_ms);
        assert!(
            sent.iter().any(|s| Some(s.0) == seen && s.1 == "ledger"),
            "the tick that saw the flip was sent: {sent:?}, flip seen at {seen:?}"
        );
        for pair in sent.windows(2) {
            if pair[0].1 == pair[1].1 {
                assert!(
                    pair[1].0 - pair[0].0 >= EVENT_EVERY.as_millis() as u64,
                    "{sent:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_samples_read_the_cursor_and_the_next_slot() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let client = expanded(&cluster, "liveness").await;
    // A ready entry in the queue ring's slot 4 (the one after the
    // current slot 3), and a closed claim in the claim ring's slot 3.
    client
        .batch_execute(
            "INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
             VALUES (4, -4, 1, 'parked', 0, 0);
             INSERT INTO awa.claim_receipts (slot, generation, job_id, run_lease, attempt, instance_id)
             VALUES (3, 3, 2, 1, 1, 'gone');
             INSERT INTO awa.claim_closures (slot, generation, job_id, run_lease, attempt, outcome, terminal, queue, priority, kind)
             VALUES (3, 3, 2, 1, 1, 'completed', true, 'default', 0, 'rehearsal');",
        )
        .await
        .unwrap();
    let monitor = start_monitor(&cluster, "liveness");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let samples = monitor.stop().await;
    let last = samples.liveness.last().expect("liveness samples");
    assert_eq!(last.authority, "columns");
    let ring = |name: &str| last.rings.iter().find(|r| r.ring == name).unwrap();
    let (queue, claim, lease) = (ring("queue"), ring("claim"), ring("lease"));
    assert_eq!((queue.slot, queue.generation), (3, 3));
    assert!(queue.busy && queue.next_live, "{queue:?}");
    assert!(claim.busy && !claim.next_live, "{claim:?}");
    assert!(!lease.busy && !lease.next_live, "{lease:?}");
    assert_eq!(last.leaders, 0);
}

/// Under ledger authority the legacy resolver `awa.ring_cursor` refuses
/// (it fences returning pre-flip binaries): the monitor must not use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_install_is_sampled() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster.create_database("fresh").await.unwrap();
    let mut client = cluster.connect("fresh").await.unwrap();
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .expect("fresh install");
    let monitor = start_monitor(&cluster, "fresh");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let samples = monitor.stop().await;
    assert_eq!(samples.skipped, 0, "{samples:?}");
    assert!(samples.rings.len() >= 3, "{samples:?}");
    assert!(samples.rings.iter().all(|s| s.authority == "ledger"));
    let last = samples.liveness.last().expect("liveness samples");
    assert!(
        last.rings.iter().all(|r| r.slot >= 0 && !r.busy),
        "{last:?}"
    );
}

/// What a contract migration removes (ADR-040): the compat cursor columns
/// and the per-slot generation columns, with what depends on them.
const CONTRACTED: &str = "
ALTER TABLE awa.queue_ring_state DROP COLUMN current_slot CASCADE, DROP COLUMN generation CASCADE;
ALTER TABLE awa.claim_ring_state DROP COLUMN current_slot CASCADE, DROP COLUMN generation CASCADE;
ALTER TABLE awa.lease_ring_state DROP COLUMN current_slot CASCADE, DROP COLUMN generation CASCADE;
ALTER TABLE awa.queue_ring_slots DROP COLUMN generation CASCADE;
ALTER TABLE awa.claim_ring_slots DROP COLUMN generation CASCADE;
ALTER TABLE awa.lease_ring_slots DROP COLUMN generation CASCADE;";

/// A schema whose compat columns a contract dropped is sampled as it is:
/// the columns are absent (a fact, not a fault), each ring's cursor is its
/// ledger's top, and no ring rule takes the absence for a finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contracted_schema_is_sampled_from_its_ledgers() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let client = expanded(&cluster, "contracted").await;
    let mut flipper = cluster.connect("contracted").await.unwrap();
    awa_runtime::store::authority::flip(&mut flipper, 1_500.0, true)
        .await
        .expect("flip");
    client.batch_execute(CONTRACTED).await.expect("contract");
    // A ready entry where the queue ring's cursor (generation 3 of 8
    // slots) never opened: slot 5 was last opened at generation -3.
    client
        .batch_execute(
            "INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
             VALUES (5, 99, 1, 'parked', 0, 0)",
        )
        .await
        .unwrap();
    let monitor = start_monitor(&cluster, "contracted");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let samples = monitor.stop().await;
    assert_eq!(samples.skipped, 0, "no tick failed: {samples:?}");
    assert!(samples.rings.len() >= 3, "{samples:?}");
    for s in &samples.rings {
        assert_eq!(s.authority, "ledger", "{s:?}");
        assert_eq!((s.column_slot, s.column_generation), (None, None), "{s:?}");
        assert_eq!(s.ledger_generation, Some(3), "{s:?}");
    }
    let last = samples.liveness.last().expect("liveness samples");
    assert_eq!(last.rings.len(), 3, "{last:?}");
    assert!(
        last.rings.iter().all(|r| (r.slot, r.generation) == (3, 3)),
        "the cursor is the ledger's top: {last:?}"
    );
    assert_eq!(judged(&samples), []);
    // Placement is still judged, from the ledgers.
    let misplaced = samples.misplaced.first().expect("placement judged");
    assert_eq!(misplaced.rows[0].first, [1, 5, 99, -3], "{misplaced:?}");
}

/// A schema the monitor's SQL no longer fits (here a ledger it reads is
/// gone) is not sampled as empty: the run of refused ticks makes the
/// monitor unreadable, naming the server's error, so the cell cannot pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_the_monitor_cannot_read_makes_it_unreadable() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let client = expanded(&cluster, "unfit").await;
    let monitor = start_monitor(&cluster, "unfit");
    tokio::time::sleep(Duration::from_millis(400)).await;
    client
        .batch_execute("DROP TABLE awa.claim_ring_rotations CASCADE")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let samples = monitor.stop().await;
    assert!(!samples.rings.is_empty(), "sampled before the drop");
    let unreadable = samples.unreadable.expect("the refused ticks were noticed");
    assert!(
        unreadable.error.contains("claim_ring_rotations") && unreadable.error.contains("42P01"),
        "{unreadable:?}"
    );
    assert!(unreadable.first_ms >= 300, "{unreadable:?}");
    // The same monitor on a schema it can read stays readable.
    let _ = expanded(&cluster, "fit").await;
    let monitor = start_monitor(&cluster, "fit");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(monitor.stop().await.unreadable, None);
}

/// Every census sample carries the transactions the cell's database has
/// ended: an idle database barely moves (the monitor's own reads), a
/// connection that ends 500 in a burst (as a runaway loop does) shows in
/// full once its backend reports them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_census_counts_the_transactions_the_database_ends() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster.create_database("xacts").await.unwrap();
    let monitor = start_monitor(&cluster, "xacts");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let burst_ms = 1_200;
    let busy = cluster.connect("xacts").await.unwrap();
    for _ in 0..500 {
        busy.batch_execute("SELECT 1").await.unwrap();
    }
    // A backend reports its counts at the latest when it ends.
    drop(busy);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let samples = monitor.stop().await;
    let xacts: Vec<(u64, i64)> = samples
        .census
        .iter()
        .filter_map(|s| Some((s.at_ms, s.xacts?)))
        .collect();
    assert_eq!(xacts.len(), samples.census.len(), "{samples:?}");
    let (_, first) = xacts[0];
    let before = xacts
        .iter()
        .filter(|(at_ms, _)| *at_ms < burst_ms)
        .map(|(_, x)| *x)
        .max()
        .unwrap();
    let (_, last) = *xacts.last().unwrap();
    assert!(
        before - first < 100,
        "an idle database ended {} transactions",
        before - first
    );
    assert!(
        last - before >= 500,
        "the burst of 500 showed as {}",
        last - before
    );
}

/// Every census sample carries the reads of each table only the leader's
/// slow duties read: a connection reading the deltas table 200 times (as
/// a fold on every pass does) shows there, and in no other table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_census_counts_the_reads_of_the_duties_tables() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster.create_database("scans").await.unwrap();
    let mut client = cluster.connect("scans").await.unwrap();
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .expect("fresh install");
    drop(client);
    let monitor = start_monitor(&cluster, "scans");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let busy = cluster.connect("scans").await.unwrap();
    for _ in 0..200 {
        busy.batch_execute("SELECT count(*) FROM awa.queue_terminal_rollup_deltas")
            .await
            .unwrap();
    }
    // A backend reports its counts at the latest when it ends.
    drop(busy);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let samples = monitor.stop().await;
    let first = &samples.census[0];
    let last = samples.census.last().unwrap();
    assert_eq!(
        first.scans.keys().copied().collect::<Vec<_>>(),
        DutyTable::ALL.to_vec(),
        "every duty table is read from the start: {first:?}"
    );
    let grew = |t: DutyTable| last.scans[&t] - first.scans[&t];
    assert!(
        grew(DutyTable::QueueTerminalRollupDeltas) >= 200,
        "the 200 reads showed as {}",
        grew(DutyTable::QueueTerminalRollupDeltas)
    );
    assert_eq!(grew(DutyTable::CronFires), 0, "{last:?}");
}

/// Runs `hold` on a connection of its own (returned, so its transaction
/// and locks stay), then starts `wait` on another, where it blocks behind
/// them; returns once `waiting` sessions of the database wait on a lock.
async fn contend(
    cluster: &Cluster,
    observer: &Client,
    hold: &str,
    wait: &'static str,
    waiting: i64,
) -> Client {
    let holder = cluster.connect("waits").await.unwrap();
    holder.batch_execute(hold).await.unwrap();
    let client = cluster.connect("waits").await.unwrap();
    tokio::spawn(async move {
        let _ = client.batch_execute(wait).await;
        // Keep the transaction (and its locks) open.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    until_waiting(observer, "waits", waiting).await;
    holder
}

/// The most lock waits a monitor counted over a few samples.
async fn counted_waits(cluster: &Cluster, name: &str) -> i64 {
    let monitor = start_monitor(cluster, name);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let samples = monitor.stop().await;
    assert!(!samples.liveness.is_empty(), "{samples:?}");
    samples.liveness.iter().map(|s| s.lock_waits).max().unwrap()
}

/// Rotation liveness stands down while a session waits on a lock rotation
/// can be behind. A worker waiting on a job's row lock is not one: under
/// CPU pressure such waits come every few seconds, and counted, they
/// broke every run of stalled samples, so a stopped rotator went unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_count_only_what_rotation_can_be_behind() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let observer = expanded(&cluster, "waits").await;
    // Created first: statements before a BEGIN in one simple query join its transaction.
    observer
        .batch_execute(
            "CREATE TABLE public.work (id int PRIMARY KEY); INSERT INTO public.work VALUES (1);
             CREATE TABLE public.parts (n int)",
        )
        .await
        .unwrap();
    // A worker waiting on a job's row, after it read a ring cursor in the
    // same transaction (as a claim does): not counted.
    let _worker = contend(
        &cluster,
        &observer,
        "BEGIN; SELECT id FROM public.work WHERE id = 1 FOR UPDATE",
        "BEGIN; SELECT current_slot FROM awa.claim_ring_state; UPDATE public.work SET id = 1 WHERE id = 1",
        1,
    )
    .await;
    assert_eq!(
        counted_waits(&cluster, "waits").await,
        0,
        "a wait on a work row was counted as one rotation can be behind"
    );
    // A rotation's FOR UPDATE of a ring's row queued behind a flip's.
    let _flip = contend(
        &cluster,
        &observer,
        "BEGIN; SELECT current_slot FROM awa.claim_ring_state FOR UPDATE",
        "BEGIN; SELECT current_slot FROM awa.claim_ring_state FOR UPDATE",
        2,
    )
    .await;
    assert_eq!(
        counted_waits(&cluster, "waits").await,
        1,
        "a rotation waiting behind the flip's ring lock was not counted"
    );
    // A table lock (as a prune's or a migration's): counted too.
    let _migration = contend(
        &cluster,
        &observer,
        "BEGIN; LOCK TABLE public.parts IN ACCESS EXCLUSIVE MODE",
        "SELECT count(*) FROM public.parts",
        3,
    )
    .await;
    assert_eq!(counted_waits(&cluster, "waits").await, 2);
}

/// Beats `beating-1` every 150 ms for 0.6 s under `monitor`, then stops it.
async fn beat_on_time(client: &Client, monitor: Monitor) -> Samples {
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        client
            .batch_execute("UPDATE awa.runtime_instances SET heartbeat_at = now() WHERE instance_id = 'beating-1'")
            .await
            .unwrap();
    }
    monitor.stop().await
}

/// Starvation: a runtime that should be beating but whose heartbeat is
/// 3 s old is recorded late by about 2.8 s, naming it; the same runtime
/// held stopped on purpose (not in the beating set) is not, and neither
/// is one that beats on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_should_beat_and_does_not_is_recorded_late() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let client = on_06_schema(&cluster, "late").await;
    client
        .batch_execute(
            "INSERT INTO awa.runtime_instances (instance_id, name, version, role, heartbeat_at)
             VALUES ('starved-1', 'previous-worker-1', '0.6.2', 'worker', now() - interval '3 s'),
                    ('beating-1', 'current-worker-1', '0.7.0', 'worker', now())",
        )
        .await
        .unwrap();
    let both: BTreeMap<String, String> = [
        ("starved-1".to_owned(), "previous-worker-1".to_owned()),
        ("beating-1".to_owned(), "current-worker-1".to_owned()),
    ]
    .into();
    let monitor = start_watching(&cluster, "late", stream::Events::discard(), both);
    let samples = beat_on_time(&client, monitor).await;
    let worst = samples
        .late
        .iter()
        .max_by_key(|l| l.beat_late_ms)
        .unwrap_or_else(|| panic!("nothing recorded late: {samples:?}"));
    assert_eq!(
        worst.runtime.as_deref(),
        Some("previous-worker-1"),
        "{worst:?}"
    );
    assert!((2_700..6_000).contains(&worst.beat_late_ms), "{worst:?}");

    // Held stopped on purpose: only the one beating on time is expected.
    let only_beating: BTreeMap<String, String> =
        [("beating-1".to_owned(), "current-worker-1".to_owned())].into();
    let monitor = start_watching(&cluster, "late", stream::Events::discard(), only_beating);
    let samples = beat_on_time(&client, monitor).await;
    assert!(
        samples.late.iter().all(|l| l.runtime.is_none()),
        "{:?}",
        samples.late
    );
}

/// Heartbeats held back by a lock on runtime_instances (the migration
/// preflight holds one to commit) are the product's doing: a stale
/// heartbeat is not starvation while such a lock is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_held_by_a_lock_on_runtime_instances_are_not_starvation() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let client = on_06_schema(&cluster, "locked").await;
    client
        .batch_execute(
            "INSERT INTO awa.runtime_instances (instance_id, name, version, role, heartbeat_at)
             VALUES ('held-1', 'previous-worker-1', '0.6.2', 'worker', now() - interval '3 s')",
        )
        .await
        .unwrap();
    let holder = cluster.connect("locked").await.unwrap();
    holder
        .batch_execute("BEGIN; LOCK TABLE awa.runtime_instances IN SHARE ROW EXCLUSIVE MODE")
        .await
        .unwrap();
    let held: BTreeMap<String, String> =
        [("held-1".to_owned(), "previous-worker-1".to_owned())].into();
    let monitor = start_watching(&cluster, "locked", stream::Events::discard(), held);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let samples = monitor.stop().await;
    assert!(
        samples.late.iter().all(|l| l.runtime.is_none()),
        "{:?}",
        samples.late
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
}

/// A lease left unrefreshed past half `stale_after` is recorded (its
/// heartbeat rescue then has its cause on record); a lease refreshed on
/// time never is, so a rescue of it stays unexplained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_whose_heartbeat_goes_stale_are_recorded_fresh_ones_are_not() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster.create_database("leases").await.unwrap();
    let mut client = cluster.connect("leases").await.unwrap();
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .expect("fresh install");
    client
        .batch_execute(
            "INSERT INTO awa.leases (slot, generation, job_id, run_lease, attempt, instance_id, heartbeat_at)
             SELECT c.slot, c.generation, j, 1, 1, 'w', now() - (j - 7) * interval '10 seconds'
             FROM awa.flip_aware_ring_cursor('lease') c, unnest(ARRAY[7, 8]::int8[]) j",
        )
        .await
        .unwrap();
    let monitor = start_monitor(&cluster, "leases");
    // Lease (7, 1) is refreshed every 100 ms, as its runtime should; (8, 1)
    // was last refreshed 10 s ago.
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        client
            .execute(
                "UPDATE awa.leases SET heartbeat_at = now() WHERE job_id = 7",
                &[],
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let samples = monitor.stop().await;
    assert_eq!(samples.skipped, 0, "{samples:?}");
    let late: Vec<(i64, i64)> = samples
        .late_leases
        .iter()
        .map(|l| (l.job_id, l.run_lease))
        .collect();
    assert_eq!(late, [(8, 1)], "{:?}", samples.late_leases);
    assert!(samples.late_leases[0].age_ms >= 10_000);
}

/// A runtime's lease heartbeat queued behind another session's ACCESS
/// EXCLUSIVE request on a lease partition (as behind a 0.6 prune, which
/// waits 2 s for its lock) is recorded, with the requester's version
/// (none: 0.6 names no session) and the wait: a read of the leases
/// would queue too, so no lease sample could see those heartbeats go
/// stale. A runtime beating beside it, not queued, is not recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_queued_behind_a_table_lock_request_is_recorded_with_the_requester() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    cluster.create_database("queued").await.unwrap();
    let mut client = cluster.connect("queued").await.unwrap();
    awa_runtime::schema::migrate(&mut client, &Default::default())
        .await
        .expect("fresh install");
    // A reader keeps a lease partition open; a requester (no
    // application_name, as 0.6) asks for it exclusively and queues.
    let reader = cluster.connect("queued").await.unwrap();
    reader
        .batch_execute("BEGIN; SELECT count(*) FROM awa.leases_0")
        .await
        .unwrap();
    let requester = cluster.connect("queued").await.unwrap();
    let request = tokio::spawn(async move {
        requester
            .batch_execute("BEGIN; LOCK TABLE awa.leases_0 IN ACCESS EXCLUSIVE MODE; COMMIT")
            .await
            .unwrap();
    });
    until_blocked(&client, "queued").await;
    let monitor = start_monitor(&cluster, "queued");
    let db_now_ms = async |c: &tokio_postgres::Client| -> i64 {
        c.query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    };
    let before_beat = db_now_ms(&client).await;
    // A 0.7 runtime's heartbeat on the parent table queues behind the request.
    let runtime = cluster.connect("queued").await.unwrap();
    runtime
        .batch_execute("SET application_name = 'awa 0.7.0 current-worker-2-123-ab'")
        .await
        .unwrap();
    let beat = tokio::spawn(async move {
        runtime
            .execute(
                "UPDATE awa.leases SET heartbeat_at = now() WHERE instance_id = 'x'",
                &[],
            )
            .await
            .unwrap();
    });
    until_waiting(&client, "queued", 2).await;
    client
        .batch_execute("SET application_name = 'awa 0.7.0 current-worker-1-456-cd'")
        .await
        .unwrap();
    // Past half stale_after (1.5 s) of queueing, then the reader lets go.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    reader.batch_execute("COMMIT").await.unwrap();
    request.await.unwrap();
    beat.await.unwrap();
    let released = db_now_ms(&client).await;
    let samples = monitor.stop().await;
    let seen: Vec<(&str, Option<&str>, &str)> = samples
        .queued_runtimes
        .iter()
        .map(|q| {
            (
                q.instance_id.as_str(),
                q.requester_version.as_deref(),
                q.relation.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("current-worker-2-123-ab", None, "leases_0")],
        "{:?}",
        samples.queued_runtimes
    );
    let q = &samples.queued_runtimes[0];
    assert!(q.waited_ms >= 750);
    // The database's clock against the cell's, read when the watch began
    // (before the heartbeat was sent).
    let clock = samples
        .db_clock
        .expect("the watch read the database's clock");
    assert!(
        clock.unix_ms <= before_beat + 250,
        "{clock:?}, {before_beat}"
    );
    // The wait, by the database's clock: it began after the heartbeat was
    // sent, and explains a rescue until a tick and stale_after past the
    // last reading that saw it (before the release), no later.
    assert!(
        (before_beat..released).contains(&q.since_unix_ms),
        "{before_beat} <= {} < {released}",
        q.since_unix_ms
    );
    assert!(
        q.explains_until_unix_ms >= q.since_unix_ms + 750 + 250 + 1_500
            && q.explains_until_unix_ms <= released + 250 + 1_500,
        "{q:?}, released at {released}"
    );
}
