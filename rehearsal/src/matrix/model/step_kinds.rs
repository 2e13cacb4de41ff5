//! The steps of a validated cell: the `Step` enum and each kind's options,
//! as planned and as written.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Check;
use crate::matrix::duration::Duration;

/// One step of a cell. `K` is the kill step's shape: as written in the
/// matrix ([`KillStep`]) or with its random choices resolved by the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step<K = KillStep, S = SuspendStep> {
    /// Start workers and producers of an artifact.
    Fleet(FleetStep),
    /// Turn live enqueue on or off.
    Load(LoadStep),
    /// Run an artifact's `awa migrate`.
    Migrate(MigrateStep),
    /// Replace running processes of other artifacts with this one.
    Roll(RollStep),
    /// Retire every other artifact's processes and run this one alone.
    Rollback(RollbackStep),
    /// Hard-kill a worker, the leader or a producer.
    Kill(K),
    /// Stop a worker, the leader or a producer without killing it (SIGSTOP).
    Suspend(S),
    /// Let the process an open `suspend` stopped go on (or SIGKILL it).
    Resume(ResumeStep),
    /// Immediate-mode stop and restart of PostgreSQL.
    PgCrash(PgCrashStep),
    /// Flip ring-cursor authority to the ledgers.
    Flip(FlipStep),
    /// Start an artifact's worker after the flip; it must refuse and change nothing.
    Fence(FenceStep),
    /// Let the fleet run as it is.
    Hold(HoldStep),
    /// Stop the fleet gracefully and wait for all work to finish.
    Drain(DrainStep),
    /// Check a named condition now.
    Assert(AssertStep),
    /// Cancel running and available jobs as an operator (`awa job cancel`).
    Cancel(CancelStep),
    /// Start workers and producers of an artifact as a database role of
    /// their own, then revoke its privileges: a permanent error each must
    /// surface at once.
    Revoke(RevokeStep),
}

/// The step names, in the order error messages list them.
pub const STEP_NAMES: [&str; 16] = [
    "fleet", "load", "migrate", "roll", "rollback", "kill", "suspend", "resume", "pg_crash",
    "flip", "fence", "hold", "drain", "assert", "cancel", "revoke",
];

impl<K, S> Step<K, S> {
    /// The step's key in matrix.toml.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Fleet(_) => "fleet",
            Step::Load(_) => "load",
            Step::Migrate(_) => "migrate",
            Step::Roll(_) => "roll",
            Step::Rollback(_) => "rollback",
            Step::Kill(_) => "kill",
            Step::Suspend(_) => "suspend",
            Step::Resume(_) => "resume",
            Step::PgCrash(_) => "pg_crash",
            Step::Flip(_) => "flip",
            Step::Fence(_) => "fence",
            Step::Hold(_) => "hold",
            Step::Drain(_) => "drain",
            Step::Assert(_) => "assert",
            Step::Cancel(_) => "cancel",
            Step::Revoke(_) => "revoke",
        }
    }
}

/// `{ fleet = "previous", workers = 2, producers = 1, leader = true }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStep {
    /// Artifact whose binary the processes run.
    pub artifact: String,
    /// Workers to start.
    pub workers: u32,
    /// Producers to start.
    pub producers: u32,
    /// Start the first worker alone and wait until it reports maintenance leadership.
    pub leader: bool,
    /// `now`, or `during_migrate`: start them inside the next migration
    /// (a runtime arriving while the migration holds its preflight).
    #[serde(default)]
    pub when: When,
    /// Its workers claim nothing and promote, rescue and fire cron only
    /// when they start: they serve a queue nobody enqueues to, poll
    /// seldom, and as leader do little but rotate and prune. An old
    /// leader whose only write path after a flip is the cursor advance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
}

/// `{ load = "on" }`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadStep {
    /// Whether producers enqueue from now on.
    pub on: bool,
}

/// Whether a migration or flip must succeed or be refused by a guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Must succeed.
    Ok,
    /// Must be refused (exit code 2 and a refusal event), changing nothing.
    Refused,
    /// Must give up waiting for a lock another session holds (exit code 3
    /// and a `blocked` event naming the holder), changing nothing: the flip
    /// behind a suspended process. Flip only.
    Blocked,
}

/// `{ migrate = "current", allow_live_runtimes = false, expect = "ok" }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateStep {
    /// Artifact whose migrations run.
    pub artifact: String,
    /// Pass `--allow-live-runtimes` (override the runtime version floor).
    pub allow_live_runtimes: bool,
    /// Required result.
    pub expect: Outcome,
}

/// `{ roll = "current", one_at_a_time = true, pause = "2s", producers = true }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollStep {
    /// Artifact every replaced process runs afterwards.
    pub artifact: String,
    /// Replace one process at a time (else all at once).
    pub one_at_a_time: bool,
    /// Wait between replacements.
    pub pause: Duration,
    /// Roll producers too, not only workers.
    pub producers: bool,
}

/// `{ rollback = "previous", workers = 3 }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackStep {
    /// Artifact that runs alone afterwards.
    pub artifact: String,
    /// Workers of it afterwards; `None` keeps the current worker count.
    pub workers: Option<u32>,
}

/// Which process a kill hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillTarget {
    /// A worker (possibly the leader).
    Worker,
    /// The process holding maintenance leadership when the kill fires.
    Leader,
    /// A producer.
    Producer,
}

impl KillTarget {
    /// The name used in matrix.toml.
    pub fn name(self) -> &'static str {
        match self {
            KillTarget::Worker => "worker",
            KillTarget::Leader => "leader",
            KillTarget::Producer => "producer",
        }
    }
}

/// When a fault fires.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// As this step runs.
    #[default]
    Now,
    /// While the next `migrate` step's migration runs.
    DuringMigrate,
    /// While the next `flip` step's flip runs.
    DuringFlip,
}

impl When {
    /// Human wording for plans.
    pub(super) fn describe(self) -> &'static str {
        match self {
            When::Now => "now",
            When::DuringMigrate => "during the next migrate",
            When::DuringFlip => "during the next flip",
        }
    }
}

/// The signal a kill sends; only SIGKILL, the crash a supervisor cannot soften.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// SIGKILL.
    Kill,
}

/// `{ kill = "worker", of = "current", when = "now", after_started = 20, signal = "kill" }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillStep {
    /// Which kind of process.
    pub target: KillTarget,
    /// Only processes of this artifact are candidates.
    pub of: Option<String>,
    /// When it fires.
    pub when: When,
    /// Fire once the victim has reported starting this many jobs (0: do not wait).
    pub after_started: u64,
    /// Signal sent.
    pub signal: Signal,
}

/// `{ suspend = "leader", of = "previous", for = "5s" }`: SIGSTOP the
/// process (its heartbeat goes stale, its work is rescued, its locks and
/// connections stay) and SIGCONT it `for` later, while the next steps run;
/// without `for` it stays stopped until a later `resume` step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspendStep {
    /// Which kind of process (the same choices as a kill's).
    pub target: KillTarget,
    /// Only processes of this artifact are candidates.
    pub of: Option<String>,
    /// How long it stays stopped; `None`: until a `resume` step.
    pub duration: Option<Duration>,
    /// Where in its work it is caught.
    pub at: SuspendAt,
}

/// Where a suspension catches its process. The driver stops it, looks at
/// the database, and lets it go and tries again until the moment matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuspendAt {
    /// Wherever it is.
    Any,
    /// With no session of the cell's database left inside a transaction:
    /// it holds no lock while stopped.
    BetweenTransactions,
    /// Inside a transaction that holds a lock on a ring singleton (a
    /// rotation or prune): the flip must wait for it.
    HoldingRingLocks,
}

impl SuspendAt {
    /// The name used in matrix.toml.
    pub fn name(self) -> &'static str {
        match self {
            SuspendAt::Any => "any",
            SuspendAt::BetweenTransactions => "between_transactions",
            SuspendAt::HoldingRingLocks => "holding_ring_locks",
        }
    }
}

/// How a `resume` step ends a suspension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeSignal {
    /// SIGCONT: it goes on from where it stopped and tries to finish what it held.
    Cont,
    /// SIGKILL: it never comes back (its session, locks and leadership end with it).
    Kill,
}

/// `{ resume = "leader", of = "previous", signal = "cont" }`: ends the
/// open suspension with the same target and `of`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeStep {
    /// The target of the suspension it ends.
    pub target: KillTarget,
    /// The `of` of the suspension it ends.
    pub of: Option<String>,
    /// Continue it or kill it.
    pub signal: ResumeSignal,
}

/// `{ pg_crash = "during_flip" }`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgCrashStep {
    /// When the crash fires. A migrate or flip it interrupts is run once more
    /// after PostgreSQL is back, as an operator would; its `expect` applies to that run.
    pub when: When,
}

/// How the flip is triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlipMode {
    /// `awa storage flip-ring-authority`.
    Manual,
    /// `awa storage flip-ring-authority --force`.
    Force,
    /// Wait for the leader's auto-flip.
    Auto,
}

impl FlipMode {
    /// The name used in matrix.toml.
    pub fn name(self) -> &'static str {
        match self {
            FlipMode::Manual => "manual",
            FlipMode::Force => "force",
            FlipMode::Auto => "auto",
        }
    }
}

/// `{ flip = "auto", timeout = "30s", by = "current", expect = "ok" }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlipStep {
    /// How the flip is triggered.
    pub mode: FlipMode,
    /// Required result.
    pub expect: Outcome,
    /// For `auto`: how long to wait for the leader to flip.
    pub timeout: Option<Duration>,
    /// Artifact whose binary runs the flip command (or whose leader auto-flips).
    pub by: String,
}

/// `{ cancel = "previous", running = 2, available = 2 }`: an operator
/// cancels that many running jobs (sleep jobs in flight, so the cancel
/// lands while they run) and available ones (not yet claimed) with the
/// artifact's `awa job cancel`, one job a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelStep {
    /// Artifact whose binary cancels.
    pub artifact: String,
    /// Running jobs to cancel.
    pub running: u32,
    /// Available jobs to cancel.
    pub available: u32,
}

/// `{ revoke = "current", workers = 1, producers = 1 }`: that many
/// workers and producers of the artifact connect as a database role of
/// their own, granted everything on the `awa` schema, and do some work;
/// then the role's privileges are revoked, as a security change or a
/// mistaken grant script does. That is a permanent error (SQLSTATE
/// 42501): each must surface it (exit 1, a worker's `fatal` event) at
/// once instead of retrying it as transient for its patience, and the
/// rest of the fleet rescues what its workers held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeStep {
    /// Artifact whose binary runs as the role.
    pub artifact: String,
    /// Workers started as the role.
    pub workers: u32,
    /// Producers started as the role.
    pub producers: u32,
}

/// `{ fence = "previous" }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceStep {
    /// Artifact whose worker must refuse.
    pub artifact: String,
}

/// `{ hold = "5s" }`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldStep {
    /// How long.
    pub duration: Duration,
    /// `reads = "1500ms"`: meanwhile a client runs back-to-back read
    /// statements this long (a reporting query): a live `backend_xmin` the
    /// whole time, never a pinned horizon (no transaction outlives its
    /// statement), so the leader's folds must go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<Duration>,
    /// `until = "slot_zero_free"`: end the hold early, once the condition
    /// holds (the duration is then the longest it waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Until>,
    /// `lock_ring = "queue"`: meanwhile a client keeps that ring's
    /// partitions locked now and then, as a long reporting transaction
    /// would, so the leader's prunes meet a held partition: each must give
    /// up within its bound and try again later, the leader leading on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_ring: Option<HeldRing>,
    /// `deadlock = true` (with `lock_ring = "claim"`): the client takes
    /// the ring's tables one at a time, in the other order from a prune's,
    /// and asks for the first only once a prune waits on it: the two
    /// close a lock cycle, which the prune's session finds (the cell's
    /// database detects deadlocks within half a prune's lock wait), and
    /// the prune must lose it as it loses a lock wait, the leader leading on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deadlock: bool,
}

/// A ring a `hold` keeps locked (`lock_ring`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldRing {
    /// Ready entries.
    Queue,
    /// Claim receipts and closures.
    Claim,
    /// Run leases.
    Lease,
}

impl HeldRing {
    /// Whether a client can close a lock cycle with a prune of this ring:
    /// it has more than one table, so a prune holds one partition while it
    /// waits for the next.
    pub fn can_deadlock(self) -> bool {
        self.ring().tables().len() > 1
    }

    /// Every ring, as matrix.toml names them.
    pub const ALL: [(&'static str, HeldRing); 3] = [
        ("queue", HeldRing::Queue),
        ("claim", HeldRing::Claim),
        ("lease", HeldRing::Lease),
    ];

    /// The runtime's ring.
    pub fn ring(self) -> awa_runtime::store::Ring {
        match self {
            HeldRing::Queue => awa_runtime::store::Ring::Queue,
            HeldRing::Claim => awa_runtime::store::Ring::Claim,
            HeldRing::Lease => awa_runtime::store::Ring::Lease,
        }
    }
}

impl fmt::Display for HeldRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ring().name())
    }
}

/// A condition a hold can end on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    /// Every ring holds rows and none in slot 0: the slot an old-style
    /// rotator advances to from the poisoned cursor (-1), so a flip now
    /// lets a stale-discipline rotation reach the fence instead of
    /// finding its next slot busy.
    SlotZeroFree,
}

impl fmt::Display for Until {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Until::SlotZeroFree => f.write_str("slot_zero_free"),
        }
    }
}

/// `{ drain = "60s" }`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStep {
    /// Longest wait without progress (no job finishing) for the queue to
    /// empty; a drain that keeps finishing jobs goes on, within the budget.
    pub timeout: Duration,
}

/// `{ assert = "leader_is:current" }`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssertStep {
    /// The condition checked.
    pub check: Check,
}
