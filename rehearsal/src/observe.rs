//! What a cell's run observed. The driver fills an [`Observations`];
//! reconciliation reads it (with the cell's database) and produces
//! [`Finding`]s; reports render both. These types are the contract
//! between those stages, so they only grow (new fields get defaults).
//!
//! This file holds the whole ([`Observations`], [`ProvedFacts`]) and
//! re-exports its parts, each file a kind of record: `process_records`
//! (what ran), `step_records` (what the steps did), `job_records` (what
//! became of the jobs), `monitor_samples` (what the monitor saw),
//! `finding` (what is wrong, and the verdict), and `wording` (counts and
//! durations as sentences write them).

#![expect(
    missing_docs,
    reason = "plain data records; fields are named for what they hold and documented where that is not enough"
)]

use serde::{Deserialize, Serialize};

mod finding;
mod job_records;
mod monitor_samples;
mod process_records;
mod step_records;
mod wording;

pub use finding::{Doubt, Finding, Verdict};
pub use job_records::{
    AcceptedJob, CronWindow, DisownedRun, LateResultCount, UnrescuedOverrun, UnstoppedHandler,
};
pub use monitor_samples::{
    CensusSample, DbClock, DutyTable, HeldByCommand, IdleWindow, LateLease, LateRuntime,
    LateSample, LivenessSample, MISPLACED_SAMPLES_KEPT, MisplacedSample, QueuedRuntime,
    RingLiveness, RingSample, StoppedRuntime, TickLoad,
};
pub use process_records::{
    ArtifactInfo, ContractCount, FenceLayer, InFlight, KillRecord, LeaderTerm, ProcessRecord,
    SecretLine, SuspensionRecord,
};
pub use step_records::{
    CancelRecord, FaultRecord, FenceRecord, FlipRecord, HolderAge, LeftRow, MidMigrationStart,
    MigratedRange, PartitionHold, Phase, PrunedBack, RefusalTiming, RingPrunedBack, SchemaCheck,
    SchemaRecord, SchemaVersionRow, StepFailure, StepOutcome, UntilRecord,
};
pub use wording::{agree, count, duration, thousands};

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
    /// Every refusal the cell asked for or met by design, timed (see
    /// [`RefusalTiming`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<RefusalTiming>,
    /// Every `hold` with `until`: whether its condition held in time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untils: Vec<UntilRecord>,
    /// Every `hold` with `lock_ring`: what its client saw of the prunes
    /// that met the partitions it held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_holds: Vec<PartitionHold>,
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
    /// Runtimes the monitor saw queued behind a table lock request for at
    /// least half `stale_after` (see [`QueuedRuntime`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_runtimes: Vec<QueuedRuntime>,
    /// Statements of runtimes that name no session seen waiting on a
    /// one-shot command's lock for at least half `stale_after` (see
    /// [`HeldByCommand`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by_commands: Vec<HeldByCommand>,
    /// Runtimes the harness stopped gracefully, and when (see
    /// [`StoppedRuntime`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopped_runtimes: Vec<StoppedRuntime>,
    /// The database's clock against the cell's, read once by the monitor
    /// (`None`: never read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_clock: Option<DbClock>,
    /// First attempts of `overrun_deadline` jobs that their handler
    /// completed, nobody having deadline-rescued them in time (see
    /// [`UnrescuedOverrun`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruns_completed: Vec<UnrescuedOverrun>,
    /// First attempts of `overrun_deadline` jobs in flight on a process
    /// the harness killed, each with the kill as its latest end: its
    /// handler may have completed one before the kill, the `finished`
    /// line lost with the process (a runtime commits first, then prints).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruns_killed: Vec<UnrescuedOverrun>,
    /// Stretches in which the plan held the fleet idle (see
    /// [`IdleWindow`]): the drain's idle tail, a `rings_pruned_back` wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<IdleWindow>,
    /// Every term of maintenance leadership, in the order the runtimes
    /// reported it (see [`LeaderTerm`]). Added in 1.27.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaderships: Vec<LeaderTerm>,
}
