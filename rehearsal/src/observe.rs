//! What a cell's run observed. The driver fills an [`Observations`];
//! reconciliation reads it (with the cell's database) and produces
//! [`Finding`]s; reports render both. These types are the contract
//! between those stages, so they only grow (new fields get defaults).

#![expect(
    missing_docs,
    reason = "plain data records; fields are named for what they hold and documented where that is not enough"
)]

use crate::matrix::{FindingRule, FlipMode, Outcome};
use awa_runtime::events::Event;
use awa_runtime::workload::Mode;
use serde::{Deserialize, Serialize};

/// A job a producer reported `accepted` (printed only after commit), or
/// reported `uncertain` (its commit's fate unknown).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedJob {
    pub job_id: i64,
    /// The workload mode.
    pub mode: Mode,
    pub max_attempts: i32,
    /// Version of the producer that enqueued it.
    pub version: String,
    /// For a scheduled job, the `run_at` its producer wrote (Unix ms; the
    /// database stores it as given). Added in report format 1.16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<i64>,
}

/// An attempt a worker reported `started` and had not reported
/// `finished` when it was killed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub job_id: i64,
    pub attempt: i32,
    pub run_lease: i64,
}

/// A hard kill the driver performed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillRecord {
    /// The process name (e.g. `previous-worker-2`).
    pub process: String,
    pub version: String,
    /// `worker`, `leader` or `producer`.
    pub role: String,
    /// Milliseconds since the cell started.
    pub at_ms: u64,
    /// Its attempts in flight when killed: rescue must be proven on each.
    pub in_flight: Vec<InFlight>,
}

/// A cron schedule and the window in which every fire time must have
/// produced exactly one job: fire times `t` with `from_ms < t <= to_ms`
/// (Unix ms) that are multiples of `every_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronWindow {
    pub name: String,
    pub every_ms: i64,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// One run of `awa storage flip-ring-authority`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlipRecord {
    /// `manual`, `force` or `auto`.
    pub mode: FlipMode,
    /// `ok`, `refused` or `blocked`: what the step expected.
    pub expected: Outcome,
    /// Process exit code (`None` for an auto-flip observed in the database).
    pub exit_code: Option<i32>,
    pub at_ms: u64,
    /// The events the command printed (for an auto-flip, the `flipped`
    /// events the cell's workers printed).
    pub output: Vec<Event>,
}

/// An old binary started after the flip to prove the fence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceRecord {
    pub artifact: String,
    pub version: String,
    pub exit_code: Option<i32>,
    /// Whether it printed a `refused` event.
    pub refused: bool,
    /// Digests of the storage state (cursor columns, ledgers, authority,
    /// runtime_instances rows of that binary) before and after.
    pub state_before: String,
    pub state_after: String,
    pub stderr_tail: String,
}

/// Runtimes a `fleet ... when = "during_migrate"` step started inside a
/// migration, and which of them registered before it committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MidMigrationStart {
    pub artifact: String,
    pub version: String,
    /// The processes started.
    pub processes: Vec<String>,
    /// Milliseconds since the cell started.
    pub at_ms: u64,
    /// The migration was past its preflight and still in flight when they
    /// were started (without it the fault did not land inside it).
    pub inside: bool,
    /// `runtime_instances` names of theirs visible while the migration was
    /// still in flight: the preflight's lock should hold every one back.
    pub registered_in_flight: Vec<String>,
}

/// A process the driver ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub name: String,
    pub artifact: String,
    pub version: String,
    /// `worker`, `producer`, `migrate`, `flip`, `fence`, ...
    pub role: String,
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did (both backends; docker's 137 is 9). Added in 1.4.
    #[serde(default)]
    pub signal: Option<i32>,
    /// The container id, on the docker backend. Added in 1.4.
    #[serde(default)]
    pub container: Option<String>,
    /// From the spawn request (container create and start included) to its
    /// `ready` event, in ms; null when it never printed one. Added in 1.9.
    #[serde(default)]
    pub start_to_ready_ms: Option<u64>,
    /// Whether the driver killed it (SIGKILL) on purpose.
    pub killed: bool,
    /// Log file, relative to the run's report folder.
    pub log: String,
    /// The error it died with: its `fatal` event, else (when it exited
    /// non-zero without refusing) its last stderr line.
    #[serde(default)]
    pub error: Option<String>,
    /// Its stdout lines read against the runtime's event contract. Added in 1.11.
    #[serde(default)]
    pub contract: ContractCount,
    /// When it last reported maintenance leadership (ms since the cell
    /// started). Added in 1.14.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_at_ms: Option<u64>,
}

/// The layer of the old-binary fence (ADR-041 §6) that stopped a
/// pre-flip binary, told by what it died of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceLayer {
    /// The fenced legacy resolver `awa.ring_cursor(ring)` or the enqueue
    /// fence: the old claim and enqueue path.
    Resolver,
    /// The trigger that rejects an old-style cursor advance: the old
    /// rotate and prune path.
    Trigger,
    /// A write at the poisoned slot -1 (no partition for it).
    Poison,
}

impl FenceLayer {
    /// What each layer's refusal says (the v003 fence functions, and
    /// PostgreSQL's own words for a row with no partition).
    const SAYS: [(&'static str, FenceLayer); 4] = [
        ("the legacy cursor resolver", FenceLayer::Resolver),
        (
            "enqueue from a session that is not flip-aware is fenced",
            FenceLayer::Resolver,
        ),
        ("old-style cursor write", FenceLayer::Trigger),
        ("no partition of relation", FenceLayer::Poison),
    ];

    /// The layer whose refusal `error` (a process's last words) is, if any.
    pub fn refusing(error: &str) -> Option<FenceLayer> {
        Self::SAYS
            .iter()
            .find(|(says, _)| error.contains(says))
            .map(|&(_, layer)| layer)
    }

    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            FenceLayer::Resolver => "the legacy resolver",
            FenceLayer::Trigger => "the cursor trigger",
            FenceLayer::Poison => "the poisoned cursor",
        }
    }
}

/// A process a `suspend` step held stopped, and for how long.
/// Added in report format 1.14.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspensionRecord {
    pub process: String,
    pub version: String,
    /// It was the maintenance leader when stopped.
    pub leader: bool,
    /// When it was stopped and let go (or killed), ms since the cell
    /// started; `to_ms` is `None` when it stayed stopped to the end.
    pub from_ms: u64,
    #[serde(default)]
    pub to_ms: Option<u64>,
}

/// A process's stdout lines read against the runtime's event contract
/// (`awa_runtime::events`): events, unknown events (a newer release's
/// kinds, kept in its log) and garbled lines (not events at all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractCount {
    /// Events of the contract.
    pub events: u64,
    /// Well-formed events of a kind the contract does not have.
    pub unknown: u64,
    /// Lines that are not events.
    pub garbled: u64,
}

impl ContractCount {
    /// Some line broke or went beyond the contract.
    pub fn off_contract(&self) -> bool {
        self.unknown + self.garbled > 0
    }
}

/// A phase of the cell: one step, with its timing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    /// 1-based step index (0 for setup, and for the final drain/reconcile phases).
    pub step: usize,
    /// Short name: `fleet`, `migrate`, `flip`, `reconcile`, ...
    pub name: String,
    /// Human description of what happened.
    pub detail: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub outcome: StepOutcome,
}

/// How a phase ended. Written in report.json as the word of each variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepOutcome {
    /// It did what the plan says.
    #[serde(rename = "ok")]
    Ok,
    /// The product refused (as required, or as a step failure).
    #[serde(rename = "refused")]
    Refused,
    /// The product gave up waiting for a lock another process holds,
    /// naming it (as required, or as a step failure).
    #[serde(rename = "blocked")]
    Blocked,
    /// The product did not do what the plan requires (a step failure).
    #[serde(rename = "failed")]
    Failed,
    /// A fenced binary wrote or kept running (judged by reconciliation).
    #[serde(rename = "breached")]
    Breached,
    /// What the step waited for did not happen in time.
    #[serde(rename = "timed out")]
    TimedOut,
    /// A fault is armed for the next migrate or flip.
    #[serde(rename = "armed")]
    Armed,
    /// The harness could not go on.
    #[serde(rename = "harness error")]
    HarnessError,
    /// Ctrl-C or SIGTERM to rehearse.
    #[serde(rename = "interrupted")]
    Interrupted,
}

impl StepOutcome {
    /// The word used in report.json and every report.
    pub fn word(self) -> &'static str {
        match self {
            StepOutcome::Ok => "ok",
            StepOutcome::Refused => "refused",
            StepOutcome::Blocked => "blocked",
            StepOutcome::Failed => "failed",
            StepOutcome::Breached => "breached",
            StepOutcome::TimedOut => "timed out",
            StepOutcome::Armed => "armed",
            StepOutcome::HarnessError => "harness error",
            StepOutcome::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for StepOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// A step that did not do what the plan requires: the product failed
/// where the driver could see it directly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    /// 1-based step index (0 for setup and the final drain).
    pub step: usize,
    /// The step's kind (`migrate`, `assert`, `drain`, ...).
    pub kind: String,
    /// What went wrong, in one sentence.
    pub message: String,
}

impl std::fmt::Display for StepFailure {
    /// `step 5 (migrate): current-migrate-1 was refused: ...`, as report.json has it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {} ({}): {}", self.step, self.kind, self.message)
    }
}

/// One monitor sample of one ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingSample {
    pub at_ms: u64,
    pub ring: String,
    /// `columns`, `ledger`, or `none` before the expand migration.
    pub authority: String,
    /// The singleton columns.
    pub column_slot: i32,
    pub column_generation: i64,
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

/// A fault step and the evidence that it did what it declares: a kill
/// interrupted in-flight attempts, a crash landed inside an open
/// migration or flip transaction, a required refusal came for the
/// declared reason. A fault without that evidence makes the cell
/// inconclusive (the run cannot judge what the fault was for).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// 1-based step index (a kill armed at one step fires in a later one).
    pub step: usize,
    /// What the step declares, in words (`kill worker of previous`).
    pub fault: String,
    /// Whether the evidence shows it did.
    pub fired: bool,
    /// The evidence, or what was seen instead.
    pub evidence: String,
}

/// One ring after a `rings_pruned_back` check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingPrunedBack {
    pub ring: String,
    /// The ring's generation when the workload was done: every row of
    /// this generation or older must be pruned.
    pub through_generation: i64,
    /// Rows of those generations still in the ring when the check ended.
    pub rows_left: i64,
    /// The ring's generation when the check ended (or gave up on it).
    #[serde(default)]
    pub generation: i64,
    /// How long its generation had not moved by then.
    #[serde(default)]
    pub still_ms: u64,
}

impl RingPrunedBack {
    /// `3 rotations past it, then stood still for 12.0s`.
    pub fn progress(&self) -> String {
        let rotations = (self.generation - self.through_generation)
            .max(0)
            .unsigned_abs();
        format!(
            "{} past it, then stood still for {}",
            count(rotations, "rotation"),
            duration(self.still_ms)
        )
    }
}

/// A `rings_pruned_back` check: how long it waited and what was left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedBack {
    pub step: usize,
    /// When the workload's jobs were all done (ms since the cell started).
    pub from_ms: u64,
    pub waited_ms: u64,
    /// How long a ring's cursor could stand still before the check gave
    /// up on it (a wrap of rotations and a few more at the cell's cadence).
    pub bound_ms: u64,
    pub rings: Vec<RingPrunedBack>,
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
}

/// One artifact as it was obtained for the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactInfo {
    /// The matrix's name for it (`previous`, `current`, `defective_fence`).
    pub name: String,
    /// The awa-runtime version its binary reports.
    pub version: String,
    /// Where it came from: `workspace build`, `release 0.6.2 (artifacts/awa-runtime-0.6.2.crate)`, or an image reference.
    pub source: String,
    /// sha256 (hex) of the binary or image that ran.
    pub digest: String,
    /// `built`, `cached` or `pulled`.
    pub obtained: String,
    /// Path of the binary (or image reference) that was started.
    pub binary: String,
    /// The seeded defect armed in it, if any.
    pub failpoint: Option<String>,
    /// On the docker backend: its image (reference, id, digest, tag, built/reused/pulled). Added in 1.4.
    #[serde(default)]
    pub image: Option<crate::vocab::image::ImageInfo>,
}

/// What a cell showed that the observations alone do not hold, for the
/// report's "proved" sentences (a passing cell's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProvedFacts {
    /// Asserts that held: `step 4 (assert): schema_expanded held: schema at v3`.
    pub asserts: Vec<String>,
    /// Refusals the plan required and got.
    pub refusals_required: Vec<String>,
    /// Processes refused on the N-1 schema (binary-first), by name.
    pub binary_first: Vec<String>,
    /// How many of those ran after the migration.
    pub relaunched: usize,
    /// PostgreSQL crashes the fleet survived.
    pub crashes: Vec<String>,
    /// Notes of the final stop.
    pub notes: Vec<String>,
    /// Versions whose workers claimed jobs.
    pub claimed_by: Vec<String>,
}

/// Everything one cell's run observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observations {
    pub accepted: Vec<AcceptedJob>,
    pub uncertain: Vec<AcceptedJob>,
    pub kills: Vec<KillRecord>,
    pub cron: Vec<CronWindow>,
    pub flips: Vec<FlipRecord>,
    pub fences: Vec<FenceRecord>,
    pub processes: Vec<ProcessRecord>,
    pub phases: Vec<Phase>,
    pub rings: Vec<RingSample>,
    pub census: Vec<CensusSample>,
    /// Liveness samples, one a monitor tick.
    #[serde(default)]
    pub liveness: Vec<LivenessSample>,
    /// Every fault step's evidence.
    #[serde(default)]
    pub faults: Vec<FaultRecord>,
    /// Every `rings_pruned_back` check.
    #[serde(default)]
    pub pruned_back: Vec<PrunedBack>,
    /// Steps whose required outcome did not happen (a migrate or flip
    /// refused or accepted against the plan's `expect`, a failed `assert`,
    /// a runtime that died unasked): product failures the driver saw
    /// directly. A `pass` cell with any of them fails.
    #[serde(default)]
    pub step_failures: Vec<StepFailure>,
    /// Fleets started inside a migration.
    #[serde(default)]
    pub mid_migration: Vec<MidMigrationStart>,
    /// `schema_version` as it stood after setup and after each migrate
    /// step. Added in 1.6.
    #[serde(default)]
    pub schema_history: Vec<SchemaRecord>,
    /// Every `schema_matches_fresh` comparison. Added in 1.6.
    #[serde(default)]
    pub schema_checks: Vec<SchemaCheck>,
    /// Monitor ticks that found the harness or a runtime late (see
    /// [`LateSample`]). Added in 1.14.
    #[serde(default)]
    pub late: Vec<LateSample>,
    /// Every suspension a `suspend` step made. Added in 1.14.
    #[serde(default)]
    pub suspensions: Vec<SuspensionRecord>,
    /// Results of rescued attempts their workers reported anyway. Added in 1.14.
    #[serde(default)]
    pub late_results: LateResultCount,
    /// Attempts a worker kept running after it had started a newer run
    /// lease of the same job.
    #[serde(default)]
    pub unstopped_handlers: Vec<UnstoppedHandler>,
    /// Monitor ticks that found ring rows outside the slot their ring's
    /// cursor gives them (the first [`MISPLACED_SAMPLES_KEPT`]). Added in 1.18.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub misplaced: Vec<MisplacedSample>,
    /// Every job a `cancel` step cancelled as an operator. Added in 1.18.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancels: Vec<CancelRecord>,
    /// Every `hold` with `until`: whether its condition held in time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untils: Vec<UntilRecord>,
    /// Attempts whose own run reported them lost (`lease_lost`, or a close
    /// that lost) and never reported its close recorded, by run lease.
    /// The run folder keeps them in the cell's history (format 1.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disowned_runs: Vec<DisownedRun>,
    /// The `runtime_instances` keys of the runtimes an injected fault
    /// reached: killed, suspended, or ended without being asked to stop
    /// (a fence's refusal, a crash). Their attempts' rescues have a cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faulted_runtimes: Vec<String>,
    /// Leases the monitor saw with a heartbeat older than half
    /// `stale_after` (see [`LateLease`]): a heartbeat rescue of one of them
    /// has its cause on record, whoever held its runtime's heartbeat back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_leases: Vec<LateLease>,
    /// Runtimes the monitor saw with a heartbeat older than half
    /// `stale_after` (see [`LateRuntime`]): a crash rescue of their
    /// attempts has its cause on record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_runtimes: Vec<LateRuntime>,
    /// First attempts of `overrun_deadline` jobs that their handler
    /// completed, nobody having deadline-rescued them in time (see
    /// [`UnrescuedOverrun`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruns_completed: Vec<UnrescuedOverrun>,
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

/// An `overrun_deadline` job whose first attempt its handler ran to
/// completion: a handler that gives up overrunning (the 0.6 releases'
/// after four deadlines) was not deadline-rescued in time. Reconciliation
/// decides whether a rescuer of this release was leading meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UnrescuedOverrun {
    pub job_id: i64,
    /// When the attempt started and ended (ms since the cell started).
    pub started_ms: u64,
    pub finished_ms: u64,
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

/// A `hold` with `until`: whether its condition held before the hold's
/// duration ran out (if not, the steps after it ran anyway, without it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UntilRecord {
    /// The hold's step (1-based).
    pub step: usize,
    pub until: crate::matrix::Until,
    pub held: bool,
    /// When the hold ended (ms since the cell started).
    pub at_ms: u64,
}

/// An attempt its own run disowned: the worker reported its lease lost
/// or its close lost, never its close recorded, so no terminal record
/// naming this run lease is that run's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DisownedRun {
    pub job_id: i64,
    pub run_lease: i64,
}

/// A worker started a newer attempt (run lease) of a job while its
/// handler of an older one still ran: it had neither finished that
/// attempt nor reported its lease lost. The newer run lease proves the
/// older was rescued (or cancelled), so a runtime that stops the handlers
/// of lost leases (0.7 on) must have stopped it first; left running, it
/// holds one of the worker's concurrency slots for as long as it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnstoppedHandler {
    /// The worker (e.g. `current-worker-2`).
    pub process: String,
    pub job_id: i64,
    /// The older attempt, still running in the worker.
    pub attempt: i32,
    pub run_lease: i64,
    /// The newer run lease it started.
    pub next_run_lease: i64,
    /// When it started the newer one (ms since the cell started).
    pub at_ms: u64,
}

/// One operator cancel (`awa job cancel`) a `cancel` step ran. Added in
/// report format 1.18.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRecord {
    pub job_id: i64,
    /// What the job was when picked: `running` or `available`.
    pub state: String,
    /// The artifact and version whose binary cancelled it.
    pub artifact: String,
    pub version: String,
    /// The command's answer: the job was live, so the cancel took it
    /// (`None`: it printed no answer).
    pub was_live: Option<bool>,
    /// When the command ended (ms since the cell started).
    pub at_ms: u64,
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

/// Results of rescued attempts that their workers reported anyway (a
/// worker frozen past its lease, come back): each must lose to the run
/// lease. Added in report format 1.14.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateResultCount {
    /// Reported while the job's next attempt was in flight elsewhere.
    pub during_rerun: u64,
    /// Reported once the next attempt had ended, or before it started.
    pub after_rerun: u64,
    /// The first reported during a rerun: `job 101 by defective_finish-worker-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
}

/// One row of `awa.schema_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SchemaVersionRow {
    pub version: i32,
    /// `applied_at`, in microseconds since the Unix epoch.
    pub applied_at_us: i64,
}

/// `awa.schema_version` after a step that may write it (setup, migrate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaRecord {
    /// 1-based step index; 0 for setup.
    pub step: usize,
    /// The artifact whose `awa migrate` ran, and its version.
    pub by: String,
    pub at_ms: u64,
    /// The rows, by version.
    pub rows: Vec<SchemaVersionRow>,
}

/// A `schema_matches_fresh` comparison: what differed from a fresh install.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaCheck {
    pub step: usize,
    pub at_ms: u64,
    /// The artifact (and version) whose fresh install was the reference.
    pub fresh_by: String,
    /// Objects the upgraded schema has.
    pub objects: usize,
    /// Wall time of the comparison (scratch database, fresh install,
    /// both introspections, diff, drop).
    pub elapsed_ms: u64,
    /// Differences, intended or not, and declarations that matched nothing.
    pub judged: crate::schema::Judged,
}

/// Something reconciliation (or the monitor) found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: FindingRule,
    /// The phase in which it was found or to which it points (`reconcile`
    /// when only the end state shows it).
    pub phase: String,
    /// What is wrong, in one sentence.
    pub message: String,
    /// The first 20 job ids (or row keys) concerned.
    pub ids: Vec<i64>,
    /// How many in all.
    pub count: u64,
    /// When it was seen, in ms from the cell's start, where its rule
    /// knows (the sample that showed a breach, a stall's start, the kill
    /// a rescue follows); `None` for what only the end state shows. The
    /// timeline pins a finding here, else at its phase. Added in report
    /// format 1.13.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

/// A cell's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The cell met its expectation (no findings for `pass`; the required
    /// finding for `detect`).
    Pass,
    /// It did not.
    Fail,
    /// The harness could not run it (no PostgreSQL, a binary that would
    /// not start, cut short by Ctrl-C).
    Inconclusive,
}

/// 12345 -> "12,345": how counts read in the sentences observations carry.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration for humans: `850ms`, `12.3s` (tenths, truncated), `4m05s`,
/// `1h02m`; the one shape every message and report writes durations in.
pub fn duration(ms: u64) -> String {
    const MINUTE: u64 = 60_000;
    const HOUR: u64 = 60 * MINUTE;
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < MINUTE {
        format!("{}.{}s", ms / 1_000, ms % 1_000 / 100)
    } else if ms < HOUR {
        format!("{}m{:02}s", ms / MINUTE, ms % MINUTE / 1_000)
    } else {
        format!("{}h{:02}m", ms / HOUR, ms % HOUR / MINUTE)
    }
}

/// `1 job`, `2,340 jobs`, `3 processes`: a count and its noun, agreeing,
/// as every sentence of a run writes them (the noun's last word takes the `s`).
pub fn count(n: u64, one: &str) -> String {
    let noun = if n == 1 {
        one.to_owned()
    } else if one.ends_with('s') || one.ends_with('x') || one.ends_with("ch") {
        format!("{one}es")
    } else {
        format!("{one}s")
    };
    format!("{} {noun}", thousands(n))
}

/// The verb form that agrees with `n`: `agree(1, "was", "were")` is `was`.
pub fn agree<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
impl Finding {
    /// A finding of `rule` with nothing else filled in (tests of verdicts).
    pub fn of(rule: FindingRule) -> Finding {
        Finding {
            rule,
            phase: "reconcile".into(),
            message: String::new(),
            ids: vec![],
            count: 1,
            at_ms: None,
        }
    }
}

impl Finding {
    /// The finding, seen `at_ms` from the cell's start.
    pub fn at(mut self, at_ms: u64) -> Finding {
        self.at_ms = Some(at_ms);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_345), "12,345");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(0, "job"), "0 jobs");
        assert_eq!(count(1, "job"), "1 job");
        assert_eq!(count(2_340, "accepted job"), "2,340 accepted jobs");
        assert_eq!(count(3, "process"), "3 processes");
        assert_eq!(count(1, "process"), "1 process");
        assert_eq!(agree(1, "was", "were"), "was");
        assert_eq!(agree(0, "was", "were"), "were");
    }
}
