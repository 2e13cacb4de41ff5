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
//!
//! A second task with its own connection, `lock_queue`, watches for
//! runtimes queued behind a table lock request (a prune's or a DDL's
//! `ACCESS EXCLUSIVE`): the sampler's own reads queue behind those too.
//!
//! This file holds what callers name (the monitor, its samples, where
//! they go, the starvation it watches for) and the pulse; the tick
//! itself is in `sampler` (what each tick records and sends), one
//! tick's reading of the database, with its SQL, in `snapshot`, and the
//! lock-queue watch in `lock_queue`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::observe::{
    CensusSample, LateLease, LateRuntime, LateSample, LivenessSample, MisplacedSample,
    QueuedRuntime, RingSample,
};
use crate::stream::Events;

mod lock_queue;
mod sampler;
mod snapshot;

use sampler::Sampler;

/// Sampling interval.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// The most often a cell's samples go into the event stream
/// ([`RunEvent::MonitorSample`](crate::stream::RunEvent::MonitorSample));
/// a ring whose authority changes is sent at once. Every tick is still
/// recorded in [`Samples`].
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

/// The monitor's SQL stopped fitting the schema under test: a cell that
/// passes with it proves nothing about the rings, so it is inconclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// When the first refused tick of the run began, ms into the cell.
    pub first_ms: u64,
    /// When its last refused tick began.
    pub last_ms: u64,
    /// Its refused ticks, one after another.
    pub ticks: u64,
    /// The server's error (SQLSTATE class 42), without the DSN.
    pub error: String,
}

/// What the monitor recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// Ring samples, on change.
    pub rings: Vec<RingSample>,
    /// Census samples, every tick.
    pub census: Vec<CensusSample>,
    /// Liveness samples, every tick the rings exist.
    pub liveness: Vec<LivenessSample>,
    /// Ticks skipped because the database did not answer (or refused a
    /// statement).
    pub skipped: u64,
    /// The server kept refusing the monitor's statements as not fitting
    /// its schema: its ring, liveness and placement samples stopped, and
    /// the rules that judge them would judge nothing.
    pub unreadable: Option<Unreadable>,
    /// Ticks that found the monitor itself or a runtime that should be
    /// beating late by more than [`LATE_ENOUGH_TO_RECORD`].
    pub late: Vec<LateSample>,
    /// Ticks that found ring rows outside their slots (the first
    /// [`MISPLACED_SAMPLES_KEPT`](crate::observe::MISPLACED_SAMPLES_KEPT)).
    pub misplaced: Vec<MisplacedSample>,
    /// Leases seen with a heartbeat older than half `stale_after` (the
    /// first [`LATE_LEASES_KEPT`]), by lease.
    pub late_leases: Vec<LateLease>,
    /// Runtimes seen with a heartbeat older than half `stale_after`, by
    /// `runtime_instances` key, whatever held them back.
    pub late_runtimes: Vec<LateRuntime>,
    /// Runtimes seen queued behind a table lock request for at least half
    /// `stale_after`, by runtime and requester.
    pub queued_runtimes: Vec<QueuedRuntime>,
    /// Statements of runtimes that name no session seen waiting on a
    /// one-shot command's lock for at least half `stale_after`.
    pub held_by_commands: Vec<crate::observe::HeldByCommand>,
    /// The database's clock against the cell's (the lock-queue watch's
    /// first reading).
    pub db_clock: Option<crate::observe::DbClock>,
}

/// At most this many late leases are kept (a cell rescues far fewer).
pub const LATE_LEASES_KEPT: usize = 100_000;

/// Lateness below this is noise and not recorded: a tick or a heartbeat
/// a fifth of a second behind its due time changes no decision.
pub const LATE_ENOUGH_TO_RECORD: Duration = Duration::from_millis(200);

/// A connection for one of the monitor's tasks, or `None` after a second:
/// a crashed server must not stall a tick.
async fn connect_briefly(url: &str) -> Option<Client> {
    match tokio::time::timeout(Duration::from_secs(1), crate::pg::connect(url)).await {
        Ok(Ok(c)) => Some(c),
        _ => None,
    }
}

/// A running monitor; [`Monitor::stop`] ends it and hands back its samples.
pub struct Monitor {
    stop: watch::Sender<bool>,
    task: JoinHandle<Samples>,
    pulse: JoinHandle<()>,
    lock_queue: JoinHandle<(lock_queue::Watched, Option<crate::observe::DbClock>)>,
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
        let lock_queue = lock_queue::start(url.clone(), t0, stale_after, stopped.clone());
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
        Monitor {
            stop,
            task,
            pulse,
            lock_queue,
        }
    }

    /// Stops sampling (after one last sample) and returns everything recorded.
    pub async fn stop(self) -> Samples {
        let _ = self.stop.send(true);
        let mut samples = self.task.await.unwrap_or_default();
        self.pulse.abort();
        let (watched, db_clock) = self.lock_queue.await.unwrap_or_default();
        samples.queued_runtimes = watched.queued;
        samples.held_by_commands = watched.held;
        samples.db_clock = db_clock;
        samples
    }
}
