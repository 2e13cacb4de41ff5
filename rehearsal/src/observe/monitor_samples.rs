//! What the monitor sampled while the cell ran: each ring, the census,
//! rotation liveness, lateness (the harness's, runtimes', leases') and
//! ring rows outside their slots.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One monitor sample of one ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingSample {
    pub at_ms: u64,
    pub ring: String,
    /// `columns`, `ledger`, or `none` before the expand migration.
    pub authority: String,
    /// The singleton cursor columns; `None` where the schema under test
    /// has none (a contract migration dropped them: a fact, not a fault).
    /// Numbers in reports before 1.35.
    pub column_slot: Option<i32>,
    pub column_generation: Option<i64>,
    /// The ledger's max row (`None` before the expand migration).
    pub ledger_generation: Option<i64>,
    pub ledger_slot: Option<i32>,
    /// Ledger rows, and generations missing between its min and max.
    pub ledger_rows: i64,
    pub ledger_gaps: i64,
}

/// Throughput and fleet counts at one sample time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CensusSample {
    pub at_ms: u64,
    /// Events seen so far, by `version` then kind (`accepted`, `started`, `finished`).
    pub by_version: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>,
    /// Fresh runtime_instances rows by version.
    pub fresh_runtimes: std::collections::BTreeMap<String, u64>,
    /// Rows in queue_terminal_rollup_deltas (0 before it exists).
    pub delta_rows: i64,
    /// Sessions waiting on a lock that rotation can be behind, at sample time.
    pub lock_waits: i64,
    /// Transactions the cell's database has ended so far (committed and
    /// rolled back, `pg_stat_database`; each backend reports its own about
    /// once a second): what a runaway loop of the runtime shows in.
    /// Added in 1.25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xacts: Option<i64>,
    /// Reads so far (sequential and index scans) of each table only the
    /// leader's slow duties read while the fleet is idle: which loop a
    /// runaway's work came from. Added in 1.28.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scans: BTreeMap<DutyTable, i64>,
}

/// A table of the runtime's schema that, while the fleet is idle, only
/// some of the maintenance leader's periodic duties read (besides the
/// harness): its reads say how often those duties ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DutyTable {
    QueueTerminalRollupDeltas,
    QueueTerminalRollups,
    CronSchedules,
    CronFires,
    DeadLetters,
    TerminalArchive,
}

impl DutyTable {
    /// Every one, in the order the census reads them.
    pub const ALL: [DutyTable; 6] = [
        DutyTable::QueueTerminalRollupDeltas,
        DutyTable::QueueTerminalRollups,
        DutyTable::CronSchedules,
        DutyTable::CronFires,
        DutyTable::DeadLetters,
        DutyTable::TerminalArchive,
    ];

    /// The table's name in the `awa` schema.
    pub fn name(self) -> &'static str {
        match self {
            DutyTable::QueueTerminalRollupDeltas => "queue_terminal_rollup_deltas",
            DutyTable::QueueTerminalRollups => "queue_terminal_rollups",
            DutyTable::CronSchedules => "cron_schedules",
            DutyTable::CronFires => "cron_fires",
            DutyTable::DeadLetters => "dead_letters",
            DutyTable::TerminalArchive => "terminal_archive",
        }
    }

    /// The table named `name`, if it is one.
    pub fn named(name: &str) -> Option<DutyTable> {
        DutyTable::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// A stretch of a cell in which the fleet stood idle by the plan's doing
/// (its load off and no job live), so that whatever the database did
/// then was the runtimes' periodic loops and the harness's reads: the
/// windows a runaway loop is judged in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleWindow {
    /// The step that held the fleet idle.
    pub step: usize,
    /// From when to when, in ms since the cell started.
    pub from_ms: u64,
    pub to_ms: u64,
}

/// A monitor tick that found the harness or a runtime late, by more than
/// the monitor's recording floor: the starvation a cell's timings met.
/// Added in report format 1.14.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateSample {
    pub at_ms: u64,
    /// How late the harness's own tasks woke since the tick before (the
    /// monitor's pulse: CPU starvation of rehearse itself, not the
    /// database's latency).
    pub tick_late_ms: u64,
    /// How far past its due time the latest heartbeat of the most
    /// overdue runtime that should have been beating was (its age less
    /// the heartbeat interval); 0 when none was late.
    pub beat_late_ms: u64,
    /// That runtime's process name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

/// One ring as a liveness sample saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingLiveness {
    pub ring: String,
    /// The authoritative cursor (`awa.ring_cursor(ring)`).
    pub slot: i32,
    pub generation: i64,
    /// Whether any partition of the ring holds a row.
    pub busy: bool,
    /// Whether the slot after the current one holds live work (a ready
    /// entry, an open claim, a held lease): the one reason rotation may
    /// stand still while the ring holds rows.
    pub next_live: bool,
}

/// What rotation liveness depends on, at one sample time (one snapshot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessSample {
    pub at_ms: u64,
    /// `columns`, `ledger`, or `none` before the expand migration.
    pub authority: String,
    /// Fresh runtimes marked maintenance leader, and how many of them
    /// report a `binary_version` (flip-aware: able to rotate ledgers).
    pub leaders: u64,
    pub flip_aware_leaders: u64,
    /// Sessions waiting on a lock that rotation can be behind, at sample
    /// time (see the monitor's `ROTATION_LOCK_WAITS`).
    pub lock_waits: i64,
    /// The database did not answer the tick (or ticks) before this one (a
    /// `pg_crash`): what happened in between is unknown.
    #[serde(default)]
    pub after_outage: bool,
    /// Attempts a rescue pass would take for their heartbeat (a lease, or
    /// its runtime, older than `stale_after`, or the runtime gone), at
    /// sample time: after a kill or a PostgreSQL crash, the inheritance a
    /// leader works through before it rotates.
    #[serde(default)]
    pub rescue_pending: i64,
    pub rings: Vec<RingLiveness>,
    /// How squeezed the machine was around this sample. Added in 1.21.
    #[serde(default)]
    pub load: TickLoad,
}

/// How squeezed the machine was at one monitor tick: what decides
/// whether a ring that stood still a little past its bound stood still
/// for the release or for want of CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickLoad {
    /// How late the harness's own pulse woke since the tick before, in ms.
    pub pulse_late_ms: u64,
    /// How far past its due time the most overdue heartbeat of a runtime
    /// that should be beating was, in ms (0 when none was late).
    pub beat_late_ms: u64,
    /// The kernel's CPU pressure (`some avg10`, whole percent), where it
    /// reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pressure_pct: Option<u8>,
}

/// A runtime whose heartbeat the monitor found older than half
/// `stale_after`, by the database's clock, whatever held it back (CPU
/// starvation, a lock on `runtime_instances` such as a migration's, its
/// own waits). A crash rescue of an attempt of a runtime never seen here
/// took an attempt whose runtime was beating on time.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LateRuntime {
    /// Its `runtime_instances` key.
    pub instance_id: String,
    /// The first tick that saw it late (ms since the cell started).
    pub first_ms: u64,
    /// The oldest heartbeat age seen, in ms.
    pub age_ms: u64,
}

/// A lease whose heartbeat the monitor found older than half
/// `stale_after`: its runtime was not refreshing it (killed, suspended,
/// or its heartbeat held back, as 0.6's heartbeat waits behind its own
/// closes). A lease rescued for its heartbeat without ever being seen
/// here was fresh when the rescue took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LateLease {
    pub job_id: i64,
    pub run_lease: i64,
    /// The first tick that saw it late (ms since the cell started).
    pub first_ms: u64,
    /// The oldest heartbeat age seen, in ms.
    pub age_ms: u64,
}

/// A runtime whose session the monitor saw waiting, for at least half
/// `stale_after`, behind an `ACCESS EXCLUSIVE` request on an awa table
/// (a prune's, a migration's DDL): while such a request waits, every
/// statement on that table queues behind it, the runtime's lease
/// heartbeats included, and no read of the table (the monitor's own)
/// sees them go stale. A heartbeat rescue of that runtime's attempts
/// then has its cause on record when the requester is not the release
/// under test: a 0.6 prune waits up to 2 s for its lock, longer than the
/// cells' `stale_after`, which no release can change. In report.json from
/// format 1.19.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QueuedRuntime {
    /// The waiting runtime's `runtime_instances` key.
    pub instance_id: String,
    /// The first tick that saw it queued that long (ms since the cell started).
    pub first_ms: u64,
    /// The longest wait seen, in ms.
    pub waited_ms: u64,
    /// The version the requesting session names (`None`: it names none,
    /// as 0.6 runtimes do).
    pub requester_version: Option<String>,
    /// The table it requested.
    pub relation: String,
    /// When the waiting statement began, Unix ms by the database's clock
    /// (0 in reports before format 1.20). Added in 1.20.
    #[serde(default)]
    pub since_unix_ms: i64,
    /// The latest a rescue can have found a lease this wait held stale,
    /// Unix ms by the database's clock: one monitor tick past the last
    /// that saw the wait, and `stale_after` more for the rescue pass to
    /// close it (0 in reports before format 1.20). Added in 1.20.
    #[serde(default)]
    pub explains_until_unix_ms: i64,
}

/// A statement of a runtime that names no session (0.6) seen waiting,
/// for at least half `stale_after`, on a lock held or requested by a
/// one-shot command of the awa binary (a migration, a flip, an operator
/// command: a step of the cell). A 0.6 statement stamps the lease it
/// writes (a claim's) or refreshes (a heartbeat) with its transaction's
/// start, before the wait: a wait past `stale_after` leaves the lease
/// stale the moment it lands, and a rescue can close it before any read
/// of the leases sees it late. A heartbeat or crash rescue of an earlier
/// release's attempt inside the wait's window then has its cause on
/// record; the release under test names its sessions and is never
/// excused so. In report.json from format 1.26.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HeldByCommand {
    /// The first tick that saw the statement waiting that long (ms since
    /// the cell started).
    pub first_ms: u64,
    /// The longest wait seen, in ms.
    pub waited_ms: u64,
    /// The version the command names (`awa <version>`).
    pub command_version: String,
    /// The table the waiting statement asked for.
    pub relation: String,
    /// When the waiting statement began, Unix ms by the database's clock.
    pub since_unix_ms: i64,
    /// The latest a rescue can have found a lease this wait held stale,
    /// Unix ms by the database's clock (as [`QueuedRuntime`]'s).
    pub explains_until_unix_ms: i64,
}

/// The database's clock against the cell's: `unix_ms` read by the
/// database when the harness's clock stood at `at_ms` (ms since the
/// cell started; the middle of the query), so a time the database
/// recorded (a rescue's `finished_at`) can be placed in the cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbClock {
    /// Ms since the cell started.
    pub at_ms: u64,
    /// Unix ms, by the database's clock.
    pub unix_ms: i64,
}

impl DbClock {
    /// A database time (Unix ms) as ms since the cell started (negative
    /// before it).
    pub fn cell_ms(&self, unix_ms: i64) -> i64 {
        unix_ms - self.unix_ms + self.at_ms as i64
    }
}

/// A runtime the harness stopped gracefully (a roll, a stop step, the
/// end of the cell), and when it asked: an earlier release's shutdown
/// may leave attempts to the rescuer (0.6.2 stops heartbeating them while
/// it releases the rest), which is the stop's doing. The rule excuses
/// earlier releases only: the release under test's graceful stop must
/// release what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppedRuntime {
    /// Its `runtime_instances` key.
    pub instance_id: String,
    /// The artifact it ran (`previous`, `pre_guard`, ...).
    pub artifact: String,
    /// When the harness asked it to stop (ms since the cell started).
    pub asked_ms: u64,
}

/// How many monitor ticks with misplaced rows a cell keeps: the first
/// ones say where it began; later ticks repeat them.
pub const MISPLACED_SAMPLES_KEPT: usize = 20;

/// A monitor tick that found ring rows where no cursor put them. Added in
/// report format 1.18.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MisplacedSample {
    /// When (ms since the cell started).
    pub at_ms: u64,
    /// Per ring and kind of row.
    pub rows: Vec<awa_runtime::store::audit::Misplaced>,
}
