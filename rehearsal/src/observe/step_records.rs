//! What the cell's steps did: each phase and how it ended, the steps
//! that failed, the faults and their evidence, and each kind of step's
//! own record (flips, fences, fleets started mid-migration, holds,
//! cancels, `rings_pruned_back` and the schema checks).

use awa_runtime::events::Event;
use serde::{Deserialize, Serialize};

use crate::matrix::{FlipMode, Outcome};

use super::wording::{count, duration};

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
    /// Each holder a `blocked` event named whose transaction was still
    /// open when the command had ended: its age as printed, against the
    /// database's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holder_ages: Vec<HolderAge>,
    /// The job-id sequence's last value, read once the flip was seen to
    /// have committed (the command exited 0, or the auto-flip's authority
    /// read `ledger`): an id above it was drawn after the flip. Absent
    /// when the flip did not happen or the read failed (added in 1.31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids_drawn_before: Option<i64>,
}

/// A lock holder a blocked command named: the age of its transaction as
/// the command printed it, and the same transaction's age by the server's
/// clock when the harness read `pg_stat_activity` right after the command
/// ended. The command read the age inside `window_ms` before that read,
/// so it cannot be above `read_ms`, nor below `read_ms - window_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderAge {
    /// The holder's backend pid.
    pub pid: i32,
    /// What the command printed (`transaction_age_ms`).
    pub named_ms: i64,
    /// The age the database gave when the harness read it.
    pub read_ms: i64,
    /// From the command's request (its start, or its start gate opening)
    /// to that read, by the cell's clock.
    pub window_ms: u64,
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

/// A `hold` with `lock_ring`: what its client saw while it held the
/// ring's partitions (ACCESS SHARE, in transactions of a few prune waits
/// with gaps between them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionHold {
    /// The hold's step (1-based).
    pub step: usize,
    pub ring: crate::matrix::HeldRing,
    /// Transactions that held the partitions.
    pub holds: u32,
    /// The maintenance leader's prune lock requests (ACCESS EXCLUSIVE on
    /// a partition of the ring) seen waiting on them.
    pub waits: u32,
    /// Of those, the ones that stopped waiting while the partitions were
    /// still held: the prune gave up on its lock.
    pub gave_up: u32,
    /// When the first gave up (ms since the cell started).
    pub first_gave_up_ms: Option<u64>,
    /// When the hold ended (ms since the cell started).
    pub at_ms: u64,
    /// A `deadlock` hold's: the deadlocks the cell's database counted
    /// while it ran (`pg_stat_database`); `None` for a plain hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlocks: Option<u64>,
}

impl PartitionHold {
    /// A hold of `ring` by step `step` that has done nothing yet.
    pub fn new(step: usize, ring: crate::matrix::HeldRing) -> PartitionHold {
        PartitionHold {
            step,
            ring,
            holds: 0,
            waits: 0,
            gave_up: 0,
            first_gave_up_ms: None,
            at_ms: 0,
            deadlocks: None,
        }
    }
}

/// A refusal the cell asked for (a migrate or flip expected to be
/// refused or blocked, a fenced binary) or met by design (a binary-first
/// start on the N-1 schema), and how long it took to come: from the
/// request (the command's start, or its start gate opening) to its
/// `refused` or `blocked` event, else its exit. A refusal decided before
/// any write has no reason to wait; one that took about the runtime's
/// patience was retried as if the database could change its mind. Kept
/// in the cell's observations (events.jsonl); the `slow_refusal` finding
/// carries it into the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalTiming {
    /// The step (1-based) whose request was refused.
    pub step: usize,
    /// What was refused: `migrate`, `flip`, `fence` or `fleet`.
    pub kind: String,
    /// The refusing process and its version.
    pub process: String,
    pub version: String,
    /// `refused` or `blocked`.
    pub outcome: StepOutcome,
    /// When it was asked (ms since the cell started).
    pub requested_ms: u64,
    /// When it said no (ms since the cell started).
    pub answered_ms: u64,
    /// A wait the command declares before it gives up (a blocked flip's
    /// `lock_timeout_ms`), which the refusal may take on top.
    #[serde(default)]
    pub declared_wait_ms: u64,
}

impl RefusalTiming {
    /// How long the refusal took, its declared wait left out.
    pub fn took_ms(&self) -> u64 {
        self.answered_ms
            .saturating_sub(self.requested_ms)
            .saturating_sub(self.declared_wait_ms)
    }
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
    /// The first few of the rows left, read when the check gave up on
    /// the ring, so a failure says what stayed (added in 1.30).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<LeftRow>,
}

/// One ring row a `rings_pruned_back` check found left, and the job it
/// belongs to as it stood then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftRow {
    /// The ring's table: `queue_entries`, `claim_receipts`,
    /// `claim_closures` or `leases`.
    pub table: String,
    pub job_id: i64,
    /// The attempt's run lease (a ready entry has none).
    pub run_lease: Option<i64>,
    pub slot: i32,
    pub generation: i64,
    /// The runtime instance a receipt or a lease names.
    pub holder: Option<String>,
    /// How long ago a lease was last heartbeated, by the server's clock.
    pub heartbeat_age_ms: Option<i64>,
    /// The job's state and run lease in `awa.jobs` then; `None` once the
    /// job has left it (terminal).
    pub job: Option<(String, i64)>,
}

impl LeftRow {
    /// `job 8245 run 2 in leases slot 3 (generation 27), held by w-1,
    /// heartbeat 120ms ago; its job is running, run lease 2`.
    pub fn describe(&self) -> String {
        let mut out = format!("job {}", self.job_id);
        if let Some(run) = self.run_lease {
            out.push_str(&format!(" run {run}"));
        }
        out.push_str(&format!(
            " in {} slot {} (generation {})",
            self.table, self.slot, self.generation
        ));
        if let Some(holder) = &self.holder {
            out.push_str(&format!(", held by {holder}"));
        }
        if let Some(age) = self.heartbeat_age_ms {
            out.push_str(&format!(
                ", heartbeat {} ago",
                duration(u64::try_from(age).unwrap_or(0))
            ));
        }
        out.push_str(&match &self.job {
            Some((state, run)) => format!("; its job is {state}, run lease {run}"),
            None => "; the job has left awa.jobs".to_owned(),
        });
        out
    }
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

    /// `; the oldest as the check ended: job 8245 run 2 in leases ... |
    /// job 8246 ...`, or nothing when no row was read. The rows are read
    /// once every ring is done, so they may be fewer than `rows_left`.
    pub fn left_rows(&self) -> String {
        if self.left.is_empty() {
            return String::new();
        }
        let rows: Vec<String> = self.left.iter().map(LeftRow::describe).collect();
        format!("; the oldest as the check ended: {}", rows.join(" | "))
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
    /// What the migrate said it did (its `migrated` event's versions):
    /// absent when it printed none (refused, failed) and when it ran more
    /// than once in its step (a re-run after a PostgreSQL crash reports
    /// only its own run, not what the crashed one may have committed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<MigratedRange>,
}

/// The versions a migrate's `migrated` event names: it brought the schema
/// from `from` to `to` (equal when it was up to date).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedRange {
    pub from: i64,
    pub to: i64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(job_id: i64, job: Option<(&str, i64)>) -> LeftRow {
        LeftRow {
            table: "leases".into(),
            job_id,
            run_lease: Some(2),
            slot: 3,
            generation: 27,
            holder: Some("w-1".into()),
            heartbeat_age_ms: Some(120),
            job: job.map(|(s, r)| (s.to_owned(), r)),
        }
    }

    #[test]
    fn a_left_row_says_where_it_is_who_holds_it_and_what_its_job_is_now() {
        assert_eq!(
            lease(8_245, Some(("running", 2))).describe(),
            "job 8245 run 2 in leases slot 3 (generation 27), held by w-1, heartbeat 120ms ago; \
             its job is running, run lease 2"
        );
        let entry = LeftRow {
            table: "queue_entries".into(),
            run_lease: None,
            holder: None,
            heartbeat_age_ms: None,
            ..lease(7, Some(("available", 0)))
        };
        assert_eq!(
            entry.describe(),
            "job 7 in queue_entries slot 3 (generation 27); its job is available, run lease 0"
        );
    }

    #[test]
    fn a_ring_names_the_rows_it_read_one_by_one() {
        let mut ring = RingPrunedBack {
            ring: "lease".into(),
            through_generation: 27,
            rows_left: 1,
            generation: 27,
            still_ms: 13_700,
            left: Vec::new(),
        };
        assert_eq!(ring.left_rows(), "", "no row read, nothing said");
        ring.left = vec![lease(8_245, None), lease(8_246, Some(("running", 2)))];
        assert_eq!(
            ring.left_rows(),
            "; the oldest as the check ended: job 8245 run 2 in leases slot 3 (generation 27), held by w-1, \
             heartbeat 120ms ago; the job has left awa.jobs | job 8246 run 2 in leases slot 3 (generation 27), \
             held by w-1, heartbeat 120ms ago; its job is running, run lease 2"
        );
    }
}
