//! The rules a finding can come from (reconciliation's and the monitor's),
//! by the names matrix.toml's `expect = { detect = ... }` and the reports use.

use serde::{Deserialize, Serialize};

/// The reconciliation and monitor rules a finding can come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingRule {
    /// An accepted job has no terminal record.
    Lost,
    /// An accepted job has more than one terminal record.
    Duplicate,
    /// A job ended in a state its mode was not designed for.
    WrongState,
    /// A job ended on an attempt its mode was not designed for.
    WrongAttempt,
    /// Work is left non-terminal after drain.
    Stuck,
    /// A completed job executed more often than interruptions explain.
    DoubleExecution,
    /// A killed worker's jobs did not end with exactly one more attempt.
    RescueUnproven,
    /// A cron fire time produced more than one job.
    CronDoubleFire,
    /// A cron fire time produced no job.
    CronMissedFire,
    /// Operator counts differ from the true per-state counts.
    CountDrift,
    /// A fenced old binary wrote, or did not refuse, after the flip.
    FenceBreached,
    /// A ring advanced under both disciplines without the ledger shadowing it.
    MixedDiscipline,
    /// After the flip, ledgers and poisoned columns do not verify.
    FlipUnverified,
    /// A ring held rows but stopped rotating while nothing live blocked it.
    RingStalled,
    /// A terminal record does not match the execution (run lease and
    /// attempt) that should have produced it.
    TerminalMismatch,
    /// A ring ledger or the rollup deltas grew for many fold intervals
    /// without a single trim (folds that stand down when they should not).
    UnboundedGrowth,
    /// The N-1 release cannot run on the expanded schema (the expand
    /// migration is not additive: columns or tables it uses are gone).
    N1Incompatible,
    /// A runtime registered while a migration with a version floor was in
    /// flight: the preflight did not hold `runtime_instances`.
    FloorBypassed,
    /// Rows of `schema_version` the cell saw recorded were rewritten or
    /// removed later (a pre-guard binary took a newer schema for a legacy
    /// one and re-applied its migrations, ADR-041 context item 1).
    SchemaRewritten,
    /// `schema_version` does not record each migration once, by the run
    /// that applied it: a version missing below the newest or recorded
    /// twice, a lower version recorded after a higher one, one migrate's
    /// versions with different `applied_at` (a migrate is one
    /// transaction), or rows other than the versions its `migrated` event
    /// names (a migration re-applied, or the wrong branch taken).
    MigrationMisrecorded,
    /// The upgraded schema differs from a fresh install of the current
    /// build in a way the matrix does not declare intended.
    SchemaDrift,
    /// A worker started a newer attempt of a job while the handler of
    /// its older, rescued attempt still ran: a lost lease whose handler
    /// was never stopped keeps a concurrency slot.
    UnstoppedHandler,
    /// An attempt started before it was due: a scheduled job before its
    /// `run_at`, a retry before its backoff, a snoozed job before its snooze.
    EarlyStart,
    /// A job is `available` but no ready entry of its queue names it: no
    /// claim, which reads the entries, can ever pick it.
    UnreachableReady,
    /// A ready entry, claim or lease sits in a slot, or at a generation,
    /// that its ring's cursor never gave it (a misrouted row, wherever a
    /// claimer happens to find it).
    Misplaced,
    /// An operator's cancel was accepted (the job was live) but the job
    /// did not end cancelled: it ran on and completed, or the cancel hit
    /// another job.
    CancelIgnored,
    /// An attempt was rescued with no injected fault to explain it: its
    /// runtime was neither killed, suspended nor ended unasked, PostgreSQL
    /// did not crash, it was no deadline overrun, and (for a heartbeat
    /// rescue) the monitor never saw its lease's heartbeat late, though it
    /// read the leases in the half `stale_after` before the rescue (where
    /// it had no reading, the rule is doubted: the cell is inconclusive).
    UnexplainedInterruption,
    /// A refusal the cell asked for (or met by design) came only after a
    /// good part of the runtime's patience for transient database
    /// failures: a decision made before any write was retried or waited on.
    SlowRefusal,
    /// A command that gave up on a held lock named a holder's transaction
    /// age the database's own clock contradicts.
    HolderMisreported,
    /// A periodic loop of the runtime ran far faster than its period:
    /// while the fleet stood idle, the cell's database committed more
    /// transactions than every live runtime's timings allow.
    RunawayLoop,
    /// A maintenance leader of the release under test stopped leading
    /// (another runtime, or itself again, took the lead) though it was
    /// neither killed, suspended, asked to stop nor ended, PostgreSQL did
    /// not crash, and the monitor never saw its heartbeat late: a duty
    /// that failed dropped its leader session unasked.
    LeadershipLost,
    /// A runtime of the release under test printed a secret: a line of its
    /// output held a word of the password its DSN carried.
    SecretPrinted,
    /// A runtime of the release under test printed its DSN masked, naming
    /// its server and database, but with more than the password masked
    /// (the user's name, or other text beside the password): a redaction
    /// that cuts in the wrong place hides the target today and may show
    /// the secret on the next DSN.
    TargetHidden,
}

impl FindingRule {
    /// Every rule, in documentation order.
    pub const ALL: [FindingRule; 33] = [
        FindingRule::Lost,
        FindingRule::Duplicate,
        FindingRule::WrongState,
        FindingRule::WrongAttempt,
        FindingRule::Stuck,
        FindingRule::DoubleExecution,
        FindingRule::RescueUnproven,
        FindingRule::CronDoubleFire,
        FindingRule::CronMissedFire,
        FindingRule::CountDrift,
        FindingRule::FenceBreached,
        FindingRule::MixedDiscipline,
        FindingRule::FlipUnverified,
        FindingRule::RingStalled,
        FindingRule::TerminalMismatch,
        FindingRule::UnboundedGrowth,
        FindingRule::N1Incompatible,
        FindingRule::FloorBypassed,
        FindingRule::SchemaRewritten,
        FindingRule::MigrationMisrecorded,
        FindingRule::SchemaDrift,
        FindingRule::UnstoppedHandler,
        FindingRule::EarlyStart,
        FindingRule::UnreachableReady,
        FindingRule::Misplaced,
        FindingRule::CancelIgnored,
        FindingRule::UnexplainedInterruption,
        FindingRule::SlowRefusal,
        FindingRule::HolderMisreported,
        FindingRule::RunawayLoop,
        FindingRule::LeadershipLost,
        FindingRule::SecretPrinted,
        FindingRule::TargetHidden,
    ];

    /// Whether no timing can make a correct runtime produce a finding of
    /// this rule (a job lost, finished twice, a stale result landing, a
    /// count or schema wrong, an attempt started before the database's own
    /// clock said it was due): such a finding stands even when the cell
    /// ran starved. Rules about who is alive, leads or rotates (a fence
    /// breached by a runtime that looked stale, a ring stalled behind a
    /// starved leader, an attempt more from rescuing a live worker) are
    /// not.
    pub fn timing_independent(self) -> bool {
        matches!(
            self,
            FindingRule::Lost
                | FindingRule::Duplicate
                | FindingRule::DoubleExecution
                | FindingRule::CronDoubleFire
                | FindingRule::TerminalMismatch
                | FindingRule::CountDrift
                | FindingRule::FlipUnverified
                | FindingRule::SchemaRewritten
                | FindingRule::MigrationMisrecorded
                | FindingRule::SchemaDrift
                | FindingRule::UnstoppedHandler
                | FindingRule::EarlyStart
                | FindingRule::UnreachableReady
                | FindingRule::Misplaced
                | FindingRule::CancelIgnored
                | FindingRule::HolderMisreported
                | FindingRule::SecretPrinted
                | FindingRule::TargetHidden
        )
    }

    /// The name used in matrix.toml, findings and reports.
    pub fn name(self) -> &'static str {
        match self {
            FindingRule::Lost => "lost",
            FindingRule::Duplicate => "duplicate",
            FindingRule::WrongState => "wrong_state",
            FindingRule::WrongAttempt => "wrong_attempt",
            FindingRule::Stuck => "stuck",
            FindingRule::DoubleExecution => "double_execution",
            FindingRule::RescueUnproven => "rescue_unproven",
            FindingRule::CronDoubleFire => "cron_double_fire",
            FindingRule::CronMissedFire => "cron_missed_fire",
            FindingRule::CountDrift => "count_drift",
            FindingRule::FenceBreached => "fence_breached",
            FindingRule::MixedDiscipline => "mixed_discipline",
            FindingRule::FlipUnverified => "flip_unverified",
            FindingRule::RingStalled => "ring_stalled",
            FindingRule::TerminalMismatch => "terminal_mismatch",
            FindingRule::UnboundedGrowth => "unbounded_growth",
            FindingRule::N1Incompatible => "n1_incompatible",
            FindingRule::FloorBypassed => "floor_bypassed",
            FindingRule::SchemaRewritten => "schema_rewritten",
            FindingRule::MigrationMisrecorded => "migration_misrecorded",
            FindingRule::SchemaDrift => "schema_drift",
            FindingRule::UnstoppedHandler => "unstopped_handler",
            FindingRule::EarlyStart => "early_start",
            FindingRule::UnreachableReady => "unreachable_ready",
            FindingRule::Misplaced => "misplaced",
            FindingRule::CancelIgnored => "cancel_ignored",
            FindingRule::UnexplainedInterruption => "unexplained_interruption",
            FindingRule::SlowRefusal => "slow_refusal",
            FindingRule::HolderMisreported => "holder_misreported",
            FindingRule::RunawayLoop => "runaway_loop",
            FindingRule::LeadershipLost => "leadership_lost",
            FindingRule::SecretPrinted => "secret_printed",
            FindingRule::TargetHidden => "target_hidden",
        }
    }

    /// The rule called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }
}
