//! The monitor: samples a running cell's invariants every 250 ms.
//!
//! Per ring it records a [`RingSample`] (authority, the singleton
//! columns, the ledger's max row, row count and gaps); per tick a
//! [`CensusSample`] (event counts by version from the fleet, fresh
//! runtimes by version, unfolded rollup deltas, sessions waiting on
//! locks) and a [`LivenessSample`] (per ring: the authoritative cursor,
//! whether the ring holds rows, whether the slot it would rotate into
//! holds live work; the fresh maintenance leaders). It is cheap by
//! design: one connection, one existence check and a few small queries
//! per tick. Ring samples are recorded when a ring's state changes (and
//! once at the end), so a quiet ring costs nothing; census and liveness
//! samples are recorded every tick. Every tick also reads, through the
//! runtime's audit API, the ready entries, claims and leases that sit
//! outside the slot their ring's cursor and generation give them (kept
//! when there are any: a misrouted row a claimer picks up within a
//! second leaves no other trace).
//!
//! Every sample is one consistent snapshot: its statements run in one
//! `REPEATABLE READ READ ONLY` transaction, so a flip or a rotation that
//! commits while the sample is being read is either wholly in it or
//! wholly outside it. (Read in separate autocommit statements, the
//! authority could predate a flip whose poisoned columns the next
//! statement sees: a ring "advanced under both disciplines" that never
//! did.)
//!
//! While PostgreSQL is down (a `pg_crash`), ticks are skipped and the
//! connection is re-opened on the next one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use awa_runtime::store::audit::{self, Misplaced, SchemaFeatures};

use crate::observe::{
    CensusSample, LateLease, LateRuntime, LateSample, LivenessSample, MISPLACED_SAMPLES_KEPT,
    MisplacedSample, RingLiveness, RingSample,
};
use crate::stream::{Events, RunEvent};

/// Sampling interval.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// The most often a cell's samples go into the event stream
/// ([`RunEvent::MonitorSample`]); a ring whose authority changes is sent
/// at once. Every tick is still recorded in [`Samples`].
pub const EVENT_EVERY: Duration = Duration::from_secs(1);

/// Where a cell's samples go as events, and under which cell's name.
pub struct Live {
    /// The run's stream.
    pub events: Events,
    /// The cell the samples are of.
    pub cell: String,
}

/// Event counts by version, then kind, as the fleet reported them so far.
pub type Counts = BTreeMap<String, BTreeMap<String, u64>>;

/// Where the monitor reads the fleet's counts from.
pub type CountSource = Arc<dyn Fn() -> Counts + Send + Sync>;

/// The runtimes that should be beating now, by `instance_id`, with their
/// process names: ready, not asked to stop, not killed, not held stopped
/// by the driver (nor let go only just). Their heartbeats' lateness is
/// starvation; anyone else's is the plan's doing.
pub type BeatingSource = Arc<dyn Fn() -> BTreeMap<String, String> + Send + Sync>;

/// What the monitor watches for starvation: who should be beating, and
/// how often they beat.
pub struct Beating {
    /// The runtimes that should be beating.
    pub source: BeatingSource,
    /// Their heartbeat interval.
    pub heartbeat: Duration,
    /// Where a tick that found the cell starving is told (the run's
    /// `--jobs auto` gate reads it).
    pub starving: Arc<Starving>,
}

/// When a monitor of the run last found its cell's timings slipping:
/// the harness's pulse late by half the cell's `stale_after` or more,
/// halfway to what makes a cell inconclusive.
/// Shared by a run's monitors; the runner starts no further cell while
/// one was seen lately.
#[derive(Debug, Default)]
pub struct Starving {
    last: std::sync::Mutex<Option<Instant>>,
}

impl Starving {
    /// A tick found its cell starving now.
    pub fn seen(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether a tick found a cell starving within `window`.
    pub fn within(&self, window: Duration) -> bool {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() < window)
    }
}

const EXISTING: &str = "
SELECT to_regclass('awa.queue_ring_state') IS NOT NULL,
       to_regclass('awa.ring_cursor_authority') IS NOT NULL,
       to_regclass('awa.queue_ring_rotations') IS NOT NULL,
       to_regclass('awa.queue_terminal_rollup_deltas') IS NOT NULL,
       to_regclass('awa.runtime_instances') IS NOT NULL";
const COLUMNS: &str = "
SELECT 'queue', current_slot, generation, slot_count FROM awa.queue_ring_state
UNION ALL SELECT 'claim', current_slot, generation, slot_count FROM awa.claim_ring_state
UNION ALL SELECT 'lease', current_slot, generation, slot_count FROM awa.lease_ring_state";
const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority LIMIT 1";
const LEDGERS: &str = "
SELECT r.ring, l.max_gen, l.max_slot, l.rows, l.gaps FROM (VALUES ('queue'), ('claim'), ('lease')) r(ring)
CROSS JOIN LATERAL (
    SELECT max(generation) AS max_gen,
           (array_agg(slot ORDER BY generation DESC))[1] AS max_slot,
           count(*) AS rows,
           coalesce(max(generation) - min(generation) + 1 - count(*), 0) AS gaps
    FROM (SELECT generation, slot FROM awa.queue_ring_rotations WHERE r.ring = 'queue'
          UNION ALL SELECT generation, slot FROM awa.claim_ring_rotations WHERE r.ring = 'claim'
          UNION ALL SELECT generation, slot FROM awa.lease_ring_rotations WHERE r.ring = 'lease') g
) l";
const FRESH: &str = "
SELECT version, count(*) FROM awa.runtime_instances
WHERE heartbeat_at > now() - $1::float8 * interval '1 millisecond'
GROUP BY version";
const DELTAS: &str = "SELECT count(*) FROM awa.queue_terminal_rollup_deltas";
/// Every runtime's heartbeat age at the snapshot, in ms.
const HEARTBEAT_AGES: &str = "
SELECT instance_id, (extract(epoch FROM now() - heartbeat_at) * 1000)::int8
FROM awa.runtime_instances";
/// Leases whose heartbeat is older than `$1` ms, with that age: their
/// runtime is not refreshing them (killed, suspended, or its heartbeat held
/// back behind its own closes). A lease never seen here was being
/// refreshed as it should until it was rescued.
const LATE_LEASES: &str = "
SELECT job_id, run_lease, (extract(epoch FROM now() - heartbeat_at) * 1000)::int8
FROM awa.leases WHERE heartbeat_at < now() - $1::float8 * interval '1 millisecond'";
/// Attempts a rescue pass would take for their heartbeat: the lease's own
/// heartbeat or its runtime's older than `$1` ms, or its runtime gone
/// (deadlines left out: a 0.6 leader never deadline-rescues a 0.7 claim,
/// so those can wait a whole cell by design).
const RESCUE_PENDING: &str = "
SELECT count(*) FROM awa.leases l
LEFT JOIN awa.runtime_instances ri ON ri.instance_id = l.instance_id
WHERE l.heartbeat_at < now() - $1::float8 * interval '1 millisecond'
   OR ri.instance_id IS NULL
   OR ri.heartbeat_at < now() - $1::float8 * interval '1 millisecond'";
/// Whether a session holds `runtime_instances` in a mode that blocks a
/// heartbeat's `UPDATE` (the migration preflight's `SHARE ROW EXCLUSIVE`,
/// held to commit; a migration's DDL): heartbeats then wait on the lock
/// by the product's design, however much CPU the runtimes have.
const INSTANCES_LOCKED: &str = "
SELECT EXISTS (SELECT 1 FROM pg_locks l
               JOIN pg_class c ON c.oid = l.relation
               JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'awa' AND c.relname = 'runtime_instances' AND l.granted
                 AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                                'AccessExclusiveLock'))";
/// Opens the snapshot every statement of a sample shares.
const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
const END: &str = "COMMIT";
/// Fresh maintenance leaders, and how many of them are flip-aware (report
/// a `binary_version`; the column exists only after the expand migration,
/// so it is read through the row's JSON).
const LEADERS: &str = "
SELECT count(*), count(*) FILTER (WHERE to_jsonb(ri) ->> 'binary_version' IS NOT NULL)
FROM awa.runtime_instances ri
WHERE leader AND heartbeat_at > now() - $1::float8 * interval '1 millisecond'";
/// Per ring, given the slot after its authoritative current one (`$1`
/// queue, `$2` claim, `$3` lease: the next to open): whether the ring
/// holds any row, and whether that slot holds live work (a ready entry,
/// an open claim, a held lease). Rotation may refuse only while that
/// slot holds rows; prune may keep them only while they are live.
const LIVENESS: &str = "
SELECT EXISTS (SELECT 1 FROM awa.queue_entries),
       EXISTS (SELECT 1 FROM awa.queue_entries WHERE slot = $1),
       EXISTS (SELECT 1 FROM awa.claim_receipts) OR EXISTS (SELECT 1 FROM awa.claim_closures),
       EXISTS (SELECT 1 FROM awa.claim_receipts r WHERE r.slot = $2 AND NOT EXISTS (
           SELECT 1 FROM awa.claim_closures k WHERE k.job_id = r.job_id AND k.run_lease = r.run_lease)),
       EXISTS (SELECT 1 FROM awa.leases),
       EXISTS (SELECT 1 FROM awa.leases WHERE slot = $3)";
/// Sessions of the cell's database waiting on a lock that rotation or
/// prune can be behind: a table lock (a migration's or a prune's
/// `ACCESS EXCLUSIVE`, a held partition), an advisory lock, or any lock a
/// session waits for while it holds a ring-state or authority table more
/// strongly than a read does (a rotation's or a flip's `FOR UPDATE`
/// queued behind the other's row lock; the same test as the probe's
/// `IDLE_IN_TRANSACTION`). A worker waiting on a job's row is not
/// counted, even after it read a ring cursor: under CPU pressure such
/// waits come every few seconds and say nothing about rotation.
const ROTATION_LOCK_WAITS: &str = "
SELECT count(DISTINCT w.pid) FROM pg_locks w
JOIN pg_stat_activity a ON a.pid = w.pid AND a.datname = current_database()
WHERE NOT w.granted
  AND (w.locktype IN ('relation', 'advisory')
       OR EXISTS (SELECT 1 FROM pg_locks h
                  JOIN pg_class c ON c.oid = h.relation
                  JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE h.pid = w.pid AND h.granted AND h.locktype = 'relation'
                    AND h.mode <> 'AccessShareLock' AND n.nspname = 'awa'
                    AND c.relname IN ('queue_ring_state', 'claim_ring_state', 'lease_ring_state',
                                      'ring_cursor_authority')))";

/// What the monitor recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// Ring samples, on change.
    pub rings: Vec<RingSample>,
    /// Census samples, every tick.
    pub census: Vec<CensusSample>,
    /// Liveness samples, every tick the rings exist.
    pub liveness: Vec<LivenessSample>,
    /// Ticks skipped because the database did not answer.
    pub skipped: u64,
    /// Ticks that found the monitor itself or a runtime that should be
    /// beating late by more than [`LATE_ENOUGH_TO_RECORD`].
    pub late: Vec<LateSample>,
    /// Ticks that found ring rows outside their slots (the first
    /// [`MISPLACED_SAMPLES_KEPT`]).
    pub misplaced: Vec<MisplacedSample>,
    /// Leases seen with a heartbeat older than half `stale_after` (the
    /// first [`LATE_LEASES_KEPT`]), by lease.
    pub late_leases: Vec<LateLease>,
    /// Runtimes seen with a heartbeat older than half `stale_after`, by
    /// `runtime_instances` key, whatever held them back.
    pub late_runtimes: Vec<LateRuntime>,
}

/// At most this many late leases are kept (a cell rescues far fewer).
pub const LATE_LEASES_KEPT: usize = 100_000;

/// Lateness below this is noise and not recorded: a tick or a heartbeat
/// a fifth of a second behind its due time changes no decision.
pub const LATE_ENOUGH_TO_RECORD: Duration = Duration::from_millis(200);

/// A running monitor; [`Monitor::stop`] ends it and hands back its samples.
pub struct Monitor {
    stop: watch::Sender<bool>,
    task: JoinHandle<Samples>,
    pulse: JoinHandle<()>,
}

/// How often the pulse wakes to see how late the harness's own tasks run.
pub const PULSE: Duration = Duration::from_millis(50);

/// The harness's own lateness: a task that asks to wake every [`PULSE`]
/// and keeps the worst lateness of its wakes until the sampler takes it.
/// It does nothing else, so its lateness is the async runtime's (the CPU
/// rehearse gets), not the database's: a sample that waits on a lock
/// makes the monitor's ticks late, never the pulse.
fn pulse() -> (Arc<AtomicU64>, JoinHandle<()>) {
    let worst = Arc::new(AtomicU64::new(0));
    let task = {
        let worst = worst.clone();
        tokio::spawn(async move {
            loop {
                let due = tokio::time::Instant::now() + PULSE;
                tokio::time::sleep_until(due).await;
                let late = due.elapsed().as_millis() as u64;
                worst.fetch_max(late, Ordering::Relaxed);
            }
        })
    };
    (worst, task)
}

impl Monitor {
    /// Starts sampling the database at `url` for a cell that started at
    /// `t0`, sending samples to `live` as they are read.
    pub fn start(
        url: String,
        t0: Instant,
        stale_after: Duration,
        counts: CountSource,
        beating: Beating,
        live: Live,
    ) -> Monitor {
        let (stop, mut stopped) = watch::channel(false);
        let (late_wakes, pulse) = pulse();
        let task = tokio::spawn(async move {
            let mut sampler = Sampler::new(url, t0, stale_after, counts, live);
            sampler.beating = Some(beating);
            sampler.pulse = Some(late_wakes);
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = tick.tick() => sampler.tick().await,
                    _ = stopped.changed() => break,
                }
            }
            sampler.tick().await;
            sampler.finish()
        });
        Monitor { stop, task, pulse }
    }

    /// Stops sampling (after one last sample) and returns everything recorded.
    pub async fn stop(self) -> Samples {
        let _ = self.stop.send(true);
        let samples = self.task.await.unwrap_or_default();
        self.pulse.abort();
        samples
    }
}

struct Sampler {
    url: String,
    client: Option<Client>,
    t0: Instant,
    stale_ms: f64,
    counts: CountSource,
    /// The last ring sample taken per ring, recorded or not.
    last: BTreeMap<String, (RingSample, bool)>,
    samples: Samples,
    live: Live,
    /// When the last sample went into the stream.
    sent_ms: Option<u64>,
    /// A tick was skipped since the last sample.
    outage: bool,
    /// Who should be beating (none: lateness is not watched).
    beating: Option<Beating>,
    /// The pulse's worst late wake since the last tick, in ms.
    pulse: Option<Arc<AtomicU64>>,
    /// The last tick that saw heartbeats held back by the product or the
    /// server (a lock on runtime_instances, an outage), in ms.
    beats_excused_ms: Option<u64>,
    /// Leases seen late, by (job_id, run_lease).
    late_leases: BTreeMap<(i64, i64), LateLease>,
    /// Runtimes seen late, by instance id.
    late_runtimes: BTreeMap<String, LateRuntime>,
}

impl Sampler {
    fn new(
        url: String,
        t0: Instant,
        stale_after: Duration,
        counts: CountSource,
        live: Live,
    ) -> Sampler {
        Sampler {
            url,
            client: None,
            t0,
            stale_ms: stale_after.as_millis() as f64,
            counts,
            last: BTreeMap::new(),
            samples: Samples::default(),
            live,
            sent_ms: None,
            outage: false,
            beating: None,
            pulse: None,
            beats_excused_ms: None,
            late_leases: BTreeMap::new(),
            late_runtimes: BTreeMap::new(),
        }
    }

    async fn tick(&mut self) {
        let at_ms = self.t0.elapsed().as_millis() as u64;
        let tick_late = Duration::from_millis(
            self.pulse
                .as_ref()
                .map_or(0, |worst| worst.swap(0, Ordering::Relaxed)),
        );
        if self.client.as_ref().is_some_and(Client::is_closed) {
            // The server went away since the last tick (a crash), however
            // fast it is back.
            self.outage = true;
        }
        if self.client.as_ref().is_none_or(Client::is_closed) {
            // A short connect timeout: a crashed server must not stall the monitor.
            let connect = crate::pg::connect(&self.url);
            self.client = match tokio::time::timeout(Duration::from_secs(1), connect).await {
                Ok(Ok(c)) => Some(c),
                _ => None,
            };
        }
        let Some(client) = self.client.as_ref() else {
            self.samples.skipped += 1;
            self.outage = true;
            // The harness's own lateness counts whatever the server does.
            self.record_lateness(at_ms, tick_late, &[]);
            return;
        };
        match sample(client, at_ms, self.stale_ms, &self.counts).await {
            Ok(Snapshot {
                rings,
                census,
                liveness,
                beats,
                instances_locked,
                misplaced,
                late_leases,
            }) => {
                self.record_late_leases(at_ms, &late_leases);
                if !misplaced.is_empty() && self.samples.misplaced.len() < MISPLACED_SAMPLES_KEPT {
                    self.samples.misplaced.push(MisplacedSample {
                        at_ms,
                        rows: misplaced,
                    });
                }
                // Heartbeats held by a lock on runtime_instances, or by a
                // server that was down (a pg_crash), are excused.
                if instances_locked || self.outage {
                    self.beats_excused_ms = Some(at_ms);
                }
                self.record_late_runtimes(at_ms, &beats);
                self.record_lateness(at_ms, tick_late, &beats);
                self.send(&census, &rings);
                for ring in rings {
                    self.record_ring(ring);
                }
                self.samples.census.push(census);
                let after_outage = std::mem::take(&mut self.outage);
                self.samples
                    .liveness
                    .extend(liveness.map(|l| LivenessSample { after_outage, ..l }));
            }
            Err(_) => {
                self.samples.skipped += 1;
                self.outage = true;
                self.client = None;
                self.record_lateness(at_ms, tick_late, &[]);
            }
        }
    }

    /// Sends the tick's snapshot as an event when [`EVENT_EVERY`] has
    /// passed since the last one, or a ring's authority changed.
    fn send(&mut self, census: &CensusSample, rings: &[RingSample]) {
        let authority_changed = rings.iter().any(|r| {
            self.last
                .get(&r.ring)
                .is_some_and(|(prev, _)| prev.authority != r.authority)
        });
        if !due(self.sent_ms, census.at_ms, authority_changed) {
            return;
        }
        self.sent_ms = Some(census.at_ms);
        self.live.events.send(RunEvent::MonitorSample {
            cell: self.live.cell.clone(),
            census: census.clone(),
            rings: rings.to_vec(),
        });
    }

    /// Records the tick when it or a runtime that should be beating ran
    /// late: the monitor's tick against its interval, each heartbeat's
    /// age against the heartbeat interval.
    fn record_lateness(&mut self, at_ms: u64, tick_late: Duration, beats: &[(String, i64)]) {
        let Some(beating) = &self.beating else {
            return;
        };
        // Heartbeats held by a lock on runtime_instances or an outage (and
        // their age until each runtime's next beat after it) are the
        // product's or the server's doing, not starvation.
        let locked = self.beats_excused_ms.is_some_and(|t| {
            at_ms <= t + self.stale_ms as u64 + beating.heartbeat.as_millis() as u64
        });
        let expected = if locked {
            BTreeMap::new()
        } else {
            (beating.source)()
        };
        let interval = beating.heartbeat.as_millis() as i64;
        let worst = beats
            .iter()
            .filter_map(|(id, age)| Some((expected.get(id)?, (age - interval).max(0) as u64)))
            .max_by_key(|(_, late)| *late);
        let (runtime, beat_late_ms) =
            worst.map_or((None, 0), |(name, late)| (Some(name.clone()), late));
        let tick_late_ms = tick_late.as_millis() as u64;
        // The gate reads the pulse alone: a heartbeat can also be late for
        // the runtime's own lock waits (a heartbeat of many leases queued
        // behind closes), which fewer cells would not cure; a late pulse
        // is CPU the harness did not get.
        if tick_late_ms as f64 >= self.stale_ms / 2.0 {
            beating.starving.seen();
        }
        let floor = LATE_ENOUGH_TO_RECORD.as_millis() as u64;
        if tick_late_ms < floor && beat_late_ms < floor {
            return;
        }
        self.samples.late.push(LateSample {
            at_ms,
            tick_late_ms,
            beat_late_ms,
            runtime: (beat_late_ms >= floor).then_some(runtime).flatten(),
        });
    }

    /// Keeps the first sighting and the oldest age of each runtime whose
    /// heartbeat was older than half `stale_after`: a crash rescue of its
    /// attempts then has its cause on record (it looked dead, or nearly,
    /// by the database's clock), whatever held it back (CPU, a lock on
    /// runtime_instances, its own waits). A runtime beating on time is
    /// never seen here (heartbeat 200 ms against a 750 ms floor).
    fn record_late_runtimes(&mut self, at_ms: u64, beats: &[(String, i64)]) {
        let floor = (self.stale_ms / 2.0) as i64;
        for (instance_id, age) in beats.iter().filter(|(_, age)| *age > floor) {
            let age_ms = (*age).max(0) as u64;
            self.late_runtimes
                .entry(instance_id.clone())
                .and_modify(|seen| seen.age_ms = seen.age_ms.max(age_ms))
                .or_insert(LateRuntime {
                    instance_id: instance_id.clone(),
                    first_ms: at_ms,
                    age_ms,
                });
        }
    }

    /// Keeps each late lease's first sighting and the oldest age seen.
    fn record_late_leases(&mut self, at_ms: u64, leases: &[(i64, i64, i64)]) {
        for &(job_id, run_lease, age) in leases {
            let age_ms = age.max(0) as u64;
            let kept = self.late_leases.len();
            match self.late_leases.entry((job_id, run_lease)) {
                std::collections::btree_map::Entry::Occupied(mut seen) => {
                    let seen = seen.get_mut();
                    seen.age_ms = seen.age_ms.max(age_ms);
                }
                std::collections::btree_map::Entry::Vacant(slot) if kept < LATE_LEASES_KEPT => {
                    slot.insert(LateLease {
                        job_id,
                        run_lease,
                        first_ms: at_ms,
                        age_ms,
                    });
                }
                std::collections::btree_map::Entry::Vacant(_) => {}
            }
        }
    }

    fn record_ring(&mut self, sample: RingSample) {
        let changed = self.last.get(&sample.ring).is_none_or(|(prev, _)| {
            (
                &prev.authority,
                prev.column_slot,
                prev.column_generation,
                prev.ledger_generation,
                prev.ledger_rows,
                prev.ledger_gaps,
            ) != (
                &sample.authority,
                sample.column_slot,
                sample.column_generation,
                sample.ledger_generation,
                sample.ledger_rows,
                sample.ledger_gaps,
            )
        });
        if changed {
            self.samples.rings.push(sample.clone());
        }
        self.last.insert(sample.ring.clone(), (sample, changed));
    }

    fn finish(mut self) -> Samples {
        // The final state of each ring, if its last sample was not recorded.
        for (sample, recorded) in std::mem::take(&mut self.last).into_values() {
            if !recorded {
                self.samples.rings.push(sample);
            }
        }
        self.samples.rings.sort_by_key(|s| s.at_ms);
        self.samples.late_leases = std::mem::take(&mut self.late_leases)
            .into_values()
            .collect();
        self.samples.late_runtimes = std::mem::take(&mut self.late_runtimes)
            .into_values()
            .collect();
        self.samples
    }
}

/// Whether a sample read at `at_ms` goes into the stream, the last one
/// having gone at `sent_ms`.
fn due(sent_ms: Option<u64>, at_ms: u64, authority_changed: bool) -> bool {
    authority_changed
        || sent_ms.is_none_or(|sent| at_ms.saturating_sub(sent) >= EVENT_EVERY.as_millis() as u64)
}

/// The authoritative cursor of a sampled ring: the ledger's top under
/// ledger authority, the singleton columns otherwise.
fn authoritative(r: &RingSample) -> (i32, i64) {
    match (r.authority.as_str(), r.ledger_slot, r.ledger_generation) {
        ("ledger", Some(slot), Some(generation)) => (slot, generation),
        _ => (r.column_slot, r.column_generation),
    }
}

/// One tick's reading of the database.
struct Snapshot {
    rings: Vec<RingSample>,
    census: CensusSample,
    liveness: Option<LivenessSample>,
    /// Every runtime's heartbeat age (ms), by `instance_id`.
    beats: Vec<(String, i64)>,
    /// Heartbeats were blocked by a lock on `runtime_instances`.
    instances_locked: bool,
    /// Ring rows outside the slot their ring's cursor gives them.
    misplaced: Vec<Misplaced>,
    /// Leases whose heartbeat is older than half `stale_after`:
    /// (job_id, run_lease, age in ms).
    late_leases: Vec<(i64, i64, i64)>,
}

/// One sample, read in one snapshot. A failed statement aborts the
/// transaction; the caller then drops the connection, which ends it.
async fn sample(
    client: &Client,
    at_ms: u64,
    stale_ms: f64,
    counts: &CountSource,
) -> Result<Snapshot, tokio_postgres::Error> {
    client.batch_execute(BEGIN).await?;
    let snapshot = read_snapshot(client, at_ms, stale_ms, counts).await?;
    client.batch_execute(END).await?;
    Ok(snapshot)
}

async fn read_snapshot(
    client: &Client,
    at_ms: u64,
    stale_ms: f64,
    counts: &CountSource,
) -> Result<Snapshot, tokio_postgres::Error> {
    let exists = Existing::read(client).await?;
    let authority = if exists.authority {
        client
            .query_opt(AUTHORITY, &[])
            .await?
            .map_or("none".to_owned(), |r| r.get(0))
    } else {
        "none".to_owned()
    };
    let (rings, slot_counts) = if exists.rings {
        read_rings(client, at_ms, &authority, exists.ledgers).await?
    } else {
        (Vec::new(), BTreeMap::new())
    };
    let (fresh_runtimes, leaders) = if exists.instances {
        read_runtimes(client, stale_ms).await?
    } else {
        (BTreeMap::new(), (0, 0))
    };
    let instances_locked =
        exists.instances && client.query_one(INSTANCES_LOCKED, &[]).await?.get(0);
    let beats = if exists.instances {
        client
            .query(HEARTBEAT_AGES, &[])
            .await?
            .iter()
            .filter_map(|r| Some((r.get(0), r.get::<_, Option<i64>>(1)?)))
            .collect()
    } else {
        Vec::new()
    };
    let delta_rows = if exists.deltas {
        client.query_one(DELTAS, &[]).await?.get(0)
    } else {
        0
    };
    let lock_waits = client.query_one(ROTATION_LOCK_WAITS, &[]).await?.get(0);
    let misplaced = if exists.rings {
        let features = SchemaFeatures {
            authority: exists.authority,
            ledgers: exists.ledgers,
            rollup_deltas: exists.deltas,
        };
        audit::read_misplaced(client, &features).await?
    } else {
        Vec::new()
    };
    let late_leases = if exists.rings {
        client
            .query(LATE_LEASES, &[&(stale_ms / 2.0)])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    } else {
        Vec::new()
    };
    let liveness = if exists.rings {
        let rescue_pending = if exists.instances {
            client.query_one(RESCUE_PENDING, &[&stale_ms]).await?.get(0)
        } else {
            0
        };
        let cursors = read_liveness(client, &rings, &slot_counts).await?;
        Some(LivenessSample {
            at_ms,
            authority,
            leaders: leaders.0,
            flip_aware_leaders: leaders.1,
            lock_waits,
            after_outage: false,
            rescue_pending,
            rings: cursors,
        })
    } else {
        None
    };
    let census = CensusSample {
        at_ms,
        by_version: counts(),
        fresh_runtimes,
        delta_rows,
        lock_waits,
    };
    Ok(Snapshot {
        rings,
        census,
        liveness,
        beats,
        instances_locked,
        misplaced,
        late_leases,
    })
}

/// Which of the tables a sample reads exist yet (a cell's database grows
/// them as its migrations run).
struct Existing {
    rings: bool,
    authority: bool,
    ledgers: bool,
    deltas: bool,
    instances: bool,
}

impl Existing {
    async fn read(client: &Client) -> Result<Existing, tokio_postgres::Error> {
        let row = client.query_one(EXISTING, &[]).await?;
        Ok(Existing {
            rings: row.get(0),
            authority: row.get(1),
            ledgers: row.get(2),
            deltas: row.get(3),
            instances: row.get(4),
        })
    }
}

/// Each ring's cursor columns beside its ledger's top (when the ledgers
/// exist), and each ring's slot count.
async fn read_rings(
    client: &Client,
    at_ms: u64,
    authority: &str,
    ledgers_exist: bool,
) -> Result<(Vec<RingSample>, BTreeMap<String, i32>), tokio_postgres::Error> {
    let mut ledgers: BTreeMap<String, (Option<i64>, Option<i32>, i64, i64)> = BTreeMap::new();
    if ledgers_exist {
        for r in client.query(LEDGERS, &[]).await? {
            ledgers.insert(r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4)));
        }
    }
    let mut rings = Vec::new();
    let mut slot_counts = BTreeMap::new();
    for r in client.query(COLUMNS, &[]).await? {
        let ring: String = r.get(0);
        let (ledger_generation, ledger_slot, ledger_rows, ledger_gaps) =
            ledgers.get(&ring).copied().unwrap_or((None, None, 0, 0));
        slot_counts.insert(ring.clone(), r.get::<_, i32>(3));
        rings.push(RingSample {
            at_ms,
            ring,
            authority: authority.to_owned(),
            column_slot: r.get(1),
            column_generation: r.get(2),
            ledger_generation,
            ledger_slot,
            ledger_rows,
            ledger_gaps,
        });
    }
    Ok((rings, slot_counts))
}

/// Fresh runtimes by version, and the leaders (all, and flip-aware).
async fn read_runtimes(
    client: &Client,
    stale_ms: f64,
) -> Result<(BTreeMap<String, u64>, (u64, u64)), tokio_postgres::Error> {
    let mut fresh_runtimes = BTreeMap::new();
    for r in client.query(FRESH, &[&stale_ms]).await? {
        fresh_runtimes.insert(r.get::<_, String>(0), r.get::<_, i64>(1) as u64);
    }
    let r = client.query_one(LEADERS, &[&stale_ms]).await?;
    let leaders = (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64);
    Ok((fresh_runtimes, leaders))
}

/// Each ring's authoritative cursor, whether its slot is busy and whether
/// the next slot still holds live rows.
async fn read_liveness(
    client: &Client,
    rings: &[RingSample],
    slot_counts: &BTreeMap<String, i32>,
) -> Result<Vec<RingLiveness>, tokio_postgres::Error> {
    let cursors: Vec<RingLiveness> = rings
        .iter()
        .map(|r| {
            let (slot, generation) = authoritative(r);
            RingLiveness {
                ring: r.ring.clone(),
                slot,
                generation,
                busy: false,
                next_live: false,
            }
        })
        .collect();
    let next = |name: &str| -> i32 {
        let n = slot_counts.get(name).copied().unwrap_or(1).max(1);
        cursors
            .iter()
            .find(|c| c.ring == name)
            .map_or(0, |c| (c.slot + 1).rem_euclid(n))
    };
    let row = client
        .query_one(LIVENESS, &[&next("queue"), &next("claim"), &next("lease")])
        .await?;
    Ok(cursors
        .into_iter()
        .map(|mut c| {
            let at = match c.ring.as_str() {
                "queue" => 0,
                "claim" => 2,
                _ => 4,
            };
            c.busy = row.get(at);
            c.next_live = row.get(at + 1);
            c
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler() -> Sampler {
        Sampler::new(
            String::new(),
            Instant::now(),
            Duration::from_millis(1_500),
            Arc::new(Counts::new),
            Live {
                events: Events::discard(),
                cell: "c".into(),
            },
        )
    }

    #[test]
    fn samples_go_into_the_stream_once_a_second_or_at_an_authority_change() {
        assert!(due(None, 0, false), "the first sample goes at once");
        assert!(!due(Some(0), 250, false));
        assert!(!due(Some(0), 999, false));
        assert!(due(Some(0), 1_000, false));
        assert!(due(Some(0), 250, true), "a flip is sent when it is seen");
    }

    fn ring(at_ms: u64, generation: i64) -> RingSample {
        RingSample {
            at_ms,
            ring: "queue".into(),
            authority: "columns".into(),
            column_slot: (generation % 8) as i32,
            column_generation: generation,
            ledger_generation: Some(generation),
            ledger_slot: Some((generation % 8) as i32),
            ledger_rows: generation + 1,
            ledger_gaps: 0,
        }
    }

    #[test]
    fn ring_samples_are_kept_on_change_and_at_the_end() {
        let mut s = sampler();
        s.record_ring(ring(0, 1));
        s.record_ring(ring(250, 1));
        s.record_ring(ring(500, 2));
        s.record_ring(ring(750, 2));
        s.record_ring(ring(1000, 2));
        let samples = s.finish();
        let kept: Vec<(u64, i64)> = samples
            .rings
            .iter()
            .map(|r| (r.at_ms, r.column_generation))
            .collect();
        assert_eq!(kept, [(0, 1), (500, 2), (1000, 2)]);
    }
}
