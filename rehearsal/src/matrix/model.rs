//! The validated matrix: what a cell means once matrix.toml has passed every check.
//!
//! These types are what the rest of rehearse consumes (plan, driver,
//! report). They serialize to JSON for `--json` and for report.json, and
//! deserialize back so `rehearse report DIR` can re-render a run. The
//! shape of the file itself, with spans for error messages, lives in
//! `raw.rs`; the checks that turn one into the other in `validate.rs`.
//!
//! The matrix, its workload, timings, cells and upgrade paths are here;
//! `artifact`, `finding_rule`, `step_kinds`, `check` and `step_text`
//! (the steps as one line of text) hold the rest, re-exported from here.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::duration::Duration;

mod artifact;
mod check;
mod finding_rule;
mod step_kinds;
mod step_text;

pub use artifact::{Artifact, ArtifactSource, BuildSource, ImageLine, ImageSource, Version};
pub use check::{CHECK_NAMES, Check, LEADER_IS};
pub use finding_rule::FindingRule;
pub use step_kinds::{
    AssertStep, CancelStep, DrainStep, FenceStep, FleetStep, FlipMode, FlipStep, HeldRing,
    HoldStep, KillStep, KillTarget, LoadStep, MigrateStep, Outcome, PgCrashStep, ResumeSignal,
    ResumeStep, RevokeStep, RollStep, RollbackStep, STEP_NAMES, Signal, Step, SuspendAt,
    SuspendStep, Until, When,
};

/// A validated matrix.toml: artifacts, workload, timings, cells, named matrices.
///
/// Build one with [`crate::matrix::parse`] or [`crate::matrix::load`]; the
/// plan relies on the invariants validation established (every artifact a
/// step names is declared, every named matrix lists known cells).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// Declared artifacts by name (`previous`, `current`, ...).
    pub artifacts: BTreeMap<String, Artifact>,
    /// The job load every cell runs under.
    pub workload: Workload,
    /// Compressed runtime timings handed to every runtime process.
    pub timings: Timings,
    /// Cells in file order.
    pub cells: Vec<Cell>,
    /// Named matrices (`smoke`, `full`, ...) by name.
    pub matrices: BTreeMap<String, NamedMatrix>,
    /// `[schema]`: what `schema_matches_fresh` accepts as intended.
    #[serde(default)]
    pub schema: SchemaPolicy,
    /// `[postgres] servers`: the majors every cell runs on unless
    /// `--postgres` says otherwise; empty: the first server found.
    #[serde(default)]
    pub servers: Vec<crate::vocab::major::Major>,
    /// `[schedule]`: what `--jobs auto` packs by before any report covers the cells.
    #[serde(default)]
    pub schedule: ScheduleEstimate,
    /// `[[checklist]]`: the items of ADR-041 §9, each with the cells that
    /// cover it, in file order; the report's first table.
    #[serde(default)]
    pub checklist: Vec<ChecklistItem>,
    /// `[mutate]`: what `rehearse mutate` must score.
    #[serde(default)]
    pub mutate: MutatePolicy,
}

/// `[mutate] min_score = 0.9`: the share of viable mutants (killed or
/// survived, less the survivors explained as equivalent) the matrix must
/// kill for `rehearse mutate` to exit 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MutatePolicy {
    /// From 0 to 1; `None`: any score passes.
    pub min_score: Option<f64>,
    /// `[[mutate.equivalent]]`: mutants (by the id `--list` prints) that
    /// no matrix can kill because they change nothing the product
    /// promises, each with the reason a reviewer accepted; the report
    /// shows them apart, with the reason, and leaves them out of the score.
    #[serde(default)]
    pub equivalent: std::collections::BTreeMap<String, String>,
}

/// An item of ADR-041 §9 ("validation precedes release") and the cells
/// of the matrix that cover it: a run covers the item when one of these
/// cells passed in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecklistItem {
    /// The item, as the ADR words it.
    pub item: String,
    /// The cells that cover it (cells that expect to pass).
    pub cells: Vec<String>,
    /// `all = true`: covered only when every one of the cells passed (an
    /// item that names several things, like the three orderings);
    /// otherwise one passing cell covers it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

impl Matrix {
    /// The cell called `name`, if declared.
    pub fn cell(&self, name: &str) -> Option<&Cell> {
        self.cells.iter().find(|c| c.name == name)
    }

    /// Cell names in file order.
    pub fn cell_names(&self) -> Vec<&str> {
        self.cells.iter().map(|c| c.name.as_str()).collect()
    }
}

/// The artifact a non-fresh cell's database is prepared with (the N-1 schema).
pub const PREVIOUS: &str = "previous";
/// The build under test: migrates fresh installs and flips by default.
pub const CURRENT: &str = "current";

/// The job load: a banked backlog, a live enqueue rate, a mix of job modes, cron.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Jobs per second the producers enqueue while load is on.
    pub rate_per_s: u32,
    /// Jobs enqueued before the first step.
    pub backlog: u64,
    /// Relative weights of the job modes; the total is positive.
    pub mix: BTreeMap<JobMode, u32>,
    /// A cron schedule the maintenance leader fires, if any.
    pub cron: Option<Cron>,
    /// How long a `sleep` job sleeps (holding its claim and lease, with
    /// heartbeats): past a ring wrap, it keeps live work in a slot while
    /// the ring comes round to it.
    #[serde(default = "default_sleep")]
    pub sleep: Duration,
}

/// `sleep` when the matrix does not say.
pub const DEFAULT_SLEEP: Duration = Duration::from_millis(100);

fn default_sleep() -> Duration {
    DEFAULT_SLEEP
}

/// A cell's own `workload = { ... }`: what it changes of the matrix's
/// `[workload]` (cron is the matrix's alone).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadOverride {
    /// Replaces `rate_per_s`.
    pub rate_per_s: Option<u32>,
    /// Replaces `backlog`.
    pub backlog: Option<u64>,
    /// Replaces the whole `mix`.
    pub mix: Option<BTreeMap<JobMode, u32>>,
    /// Replaces `sleep`.
    pub sleep: Option<Duration>,
    /// Replaces the cron schedule's period (a cell cannot turn cron off).
    pub cron: Option<Cron>,
}

impl Workload {
    /// This workload with a cell's override applied.
    pub fn with(&self, o: &WorkloadOverride) -> Workload {
        Workload {
            rate_per_s: o.rate_per_s.unwrap_or(self.rate_per_s),
            backlog: o.backlog.unwrap_or(self.backlog),
            mix: o.mix.clone().unwrap_or_else(|| self.mix.clone()),
            cron: o.cron.or(self.cron),
            sleep: o.sleep.unwrap_or(self.sleep),
        }
    }
}

/// The modes of the runtime's built-in `rehearsal` job, plus scheduled
/// jobs: the runtime's own type, so the matrix can never name a mode the
/// runtime (and reconciliation's designed terminals) does not know.
pub use awa_runtime::workload::Mode as JobMode;

/// A cron schedule: one job per fire time, fired by the maintenance leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cron {
    /// Interval between fire times.
    pub every: Duration,
}

/// `[schedule]`: the CPU a running cell is expected to keep busy, so that
/// `--jobs auto` on a machine with no report of these cells packs them
/// by a measured figure instead of guessing one cell per core (which left
/// two cores half idle: a cell spends most of its time in holds).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleEstimate {
    /// Cores a running cell keeps busy on average (CPU time over the
    /// cells' wall time, as a run's report measures it).
    pub cores_per_cell: f64,
    /// The same on the docker backend, when it differs: a cell there
    /// waits longer on the engine (creates, starts, stops) between its
    /// bursts, so it keeps fewer cores busy and more cells fit at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_cores_per_cell: Option<f64>,
}

impl ScheduleEstimate {
    /// The estimate for cells run on `backend` (`process`, `docker`, as
    /// report.json names it).
    pub fn cores_per_cell_on(&self, backend: &str) -> f64 {
        match (backend, self.docker_cores_per_cell) {
            ("docker", Some(docker)) => docker,
            _ => self.cores_per_cell,
        }
    }
}

/// `cores_per_cell` when matrix.toml has no `[schedule]`: the heavier end
/// of what the full matrix measured on 2 cores (0.52 to 0.70 cores a
/// cell), which packs 5 cells on 2 cores, the concurrency that ran all 38
/// cells at 1.08x the floor.
pub const DEFAULT_CORES_PER_CELL: f64 = 0.70;

/// The `cores_per_cell` values matrix.toml accepts: below a tenth of a
/// core a cell would do no work between its holds, and above four it
/// would need more than its fleet's processes can use; either is a typo
/// (`0.07` or `7` for `0.7`).
pub const CORES_PER_CELL_RANGE: std::ops::RangeInclusive<f64> = 0.1..=4.0;

impl Default for ScheduleEstimate {
    fn default() -> ScheduleEstimate {
        ScheduleEstimate {
            cores_per_cell: DEFAULT_CORES_PER_CELL,
            docker_cores_per_cell: None,
        }
    }
}

/// Runtime timings, compressed so a cell sees many rotations, rescues and heartbeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// How often workers heartbeat their attempts and instances.
    pub heartbeat: Duration,
    /// A heartbeat older than this is stale (crash and heartbeat rescue).
    pub stale_after: Duration,
    /// How often the leader looks for attempts to rescue.
    pub rescue_every: Duration,
    /// How often the leader rotates the rings.
    pub rotate_every: Duration,
    /// Claim deadline for jobs (deadline rescue).
    pub deadline: Duration,
    /// How long a drain (and `rings_pruned_back`'s wait for the workload)
    /// waits without progress, and a kill waits for its trigger, before
    /// the driver gives up.
    pub drain_timeout: Duration,
    /// How long a cell may run, setup to final drain, before it is
    /// stopped and called inconclusive: `[timings] budget`, or the
    /// cell's own `budget` in a cell's plan.
    #[serde(default = "default_budget")]
    pub budget: Duration,
}

/// `budget` when neither the cell nor `[timings]` says: far above any
/// cell of the shipped matrix, so only a stuck cell reaches it.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(5 * 60 * 1_000);

fn default_budget() -> Duration {
    DEFAULT_BUDGET
}

/// A named list of cells, such as `smoke`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedMatrix {
    /// The entries as written (`"*"` means every cell).
    pub entries: Vec<String>,
    /// The cells it selects, in order, without duplicates.
    pub cells: Vec<String>,
}

/// One scenario: its steps and what its verdict must be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Unique name (lowercase letters, digits, dashes).
    pub name: String,
    /// One-line description for `rehearse list` and the report.
    pub about: String,
    /// The verdict this cell must reach.
    pub expect: Expectation,
    /// Start on an empty database migrated by `current` instead of the N-1 schema.
    pub fresh_install: bool,
    /// What the cell changes of the matrix's workload.
    pub workload: WorkloadOverride,
    /// Its own time budget (`None`: `[timings] budget`).
    #[serde(default)]
    pub budget: Option<Duration>,
    /// Steps, executed in order.
    pub steps: Vec<Step>,
    /// The releases the cell walks the fleet through, in order; its
    /// database is created by the first. `None`: it starts on `previous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<UpgradePath>,
    /// The interleavings the cell exists for: a run that did not reach
    /// one of them is inconclusive (and tried again), not a verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<Reach>,
}

/// An interleaving a cell must reach for its verdict to mean anything,
/// read from what the run observed (`reach = [...]` in matrix.toml).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Workers of two versions both started attempts.
    MixedClaims,
    /// A flip ran while the maintenance leader was held stopped by a
    /// `suspend` step.
    LeaderFrozenAcrossFlip,
    /// After a kill or suspend of the leader, another runtime reported
    /// leadership.
    LeaderTakeover,
    /// A runtime of the `current` artifact rescued attempts (crash,
    /// heartbeat or deadline rescue as the new leader).
    RescuedByCurrent,
    /// A worker reported the result of an attempt that had been rescued
    /// while the job's next attempt ran elsewhere: the race the run-lease
    /// guard exists for.
    LateResultDuringRerun,
    /// A pre-flip binary running across the flip was stopped by the
    /// fenced legacy resolver (its claim or enqueue path).
    FencedByResolver,
    /// A pre-flip binary running across the flip was stopped by the
    /// cursor trigger (its rotate path).
    FencedByTrigger,
    /// A pre-flip leader's rotation met the flipped cursor: the cursor
    /// trigger stopped it, or it moved the poisoned columns. Either way
    /// its old write path ran after the flip; a 0.6 rotator whose next
    /// slot (slot 0, after the poison's -1) never came free never tries.
    OldRotationAfterFlip,
    /// A `hold` until `slot_zero_free` saw its condition before it ran
    /// out, and the flip after it found no ring's cursor in slot 0: the
    /// flip met every ring busy and slot 0 free, the window a
    /// stale-discipline rotation needs.
    SlotZeroFree,
    /// A `hold` with `lock_ring` saw a prune's lock request wait on the
    /// partitions it held and give up while they were still held: the
    /// prune met a held partition and timed out.
    PruneMetHeldPartition,
    /// A `hold` with `lock_ring` and `deadlock` closed a lock cycle with a
    /// prune that waited on it, the prune gave up while the client still
    /// held the partitions, and the database counted a deadlock meanwhile:
    /// the prune lost a deadlock.
    PruneLostDeadlock,
}

impl Reach {
    /// Every interleaving, in the order `rehearse list` shows them.
    pub const ALL: [Reach; 11] = [
        Reach::MixedClaims,
        Reach::LeaderFrozenAcrossFlip,
        Reach::LeaderTakeover,
        Reach::RescuedByCurrent,
        Reach::LateResultDuringRerun,
        Reach::FencedByResolver,
        Reach::FencedByTrigger,
        Reach::OldRotationAfterFlip,
        Reach::SlotZeroFree,
        Reach::PruneMetHeldPartition,
        Reach::PruneLostDeadlock,
    ];

    /// The name matrix.toml uses.
    pub fn name(self) -> &'static str {
        match self {
            Reach::MixedClaims => "mixed_claims",
            Reach::LeaderFrozenAcrossFlip => "leader_frozen_across_flip",
            Reach::LeaderTakeover => "leader_takeover",
            Reach::RescuedByCurrent => "rescued_by_current",
            Reach::LateResultDuringRerun => "late_result_during_rerun",
            Reach::FencedByResolver => "fenced_by_resolver",
            Reach::FencedByTrigger => "fenced_by_trigger",
            Reach::OldRotationAfterFlip => "old_rotation_after_flip",
            Reach::SlotZeroFree => "slot_zero_free",
            Reach::PruneMetHeldPartition => "prune_met_held_partition",
            Reach::PruneLostDeadlock => "prune_lost_deadlock",
        }
    }

    /// The interleaving named `name`.
    pub fn from_name(name: &str) -> Option<Reach> {
        Reach::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// `path = ["pre_guard", "previous", "current"]`: a walk through several
/// releases, each later than the one before (earlier with `downgrade = true`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradePath {
    /// The releases, in walking order (at least two).
    pub releases: Vec<PathStop>,
    /// The versions go down along the path (declared with `downgrade = true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub downgrade: bool,
}

/// One release on an upgrade path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathStop {
    /// The artifact's name in matrix.toml.
    pub artifact: String,
    /// Its version as the matrix knows it (`0.6.1`; a line as `0.6.x`).
    pub version: String,
}

impl UpgradePath {
    /// The artifact the cell's database is created with.
    pub fn start(&self) -> &str {
        &self.releases[0].artifact
    }

    /// Where `artifact` stands on the path, if it is on it.
    pub fn position(&self, artifact: &str) -> Option<usize> {
        self.releases.iter().position(|r| r.artifact == artifact)
    }
}

impl fmt::Display for UpgradePath {
    /// `pre_guard 0.6.1 -> previous 0.6.2 -> current 0.7.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stops: Vec<String> = self
            .releases
            .iter()
            .map(|r| format!("{} {}", r.artifact, r.version))
            .collect();
        f.write_str(&stops.join(" -> "))?;
        if self.downgrade {
            f.write_str(" (a downgrade)")?;
        }
        Ok(())
    }
}

/// `[schema]`: differences between an upgraded database and a fresh
/// install of the current build that are intended (until the contract
/// release removes what the upgrade keeps).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaPolicy {
    /// Each intended difference, in file order.
    #[serde(default)]
    pub intended: Vec<IntendedDifference>,
}

/// `{ object = "column awa.*_ring_state.current_slot", reason = "..." }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntendedDifference {
    /// The kind of schema object.
    pub kind: crate::vocab::schema::ObjectKind,
    /// Its qualified name; `*` matches any run of characters.
    pub name: String,
    /// Why the difference is intended, and until when.
    pub reason: String,
}

impl IntendedDifference {
    /// Whether this declaration covers the object `kind name`.
    pub fn covers(&self, kind: crate::vocab::schema::ObjectKind, name: &str) -> bool {
        self.kind == kind && glob_matches(&self.name, name)
    }
}

impl fmt::Display for IntendedDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// `*` matches any run of characters (none included); all else literally.
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// What a cell must produce: a clean pass, or a named finding (for seeded defects).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expectation {
    /// Reconciliation and the monitor find nothing.
    Pass,
    /// This reconciliation or monitor rule must fire.
    Detect(FindingRule),
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::Pass => f.write_str("pass"),
            Expectation::Detect(rule) => write!(f, "detect {}", rule.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_accepted_and_rejected() {
        assert_eq!("0.6.2".parse(), Ok(Version::new(0, 6, 2)));
        assert_eq!(
            "10.20.30".parse::<Version>().map(|v| v.to_string()),
            Ok("10.20.30".to_owned())
        );
        for bad in [
            "0.6",
            "0.6.2.1",
            "v0.6.2",
            "0.6.2-rc1",
            "0.06.2",
            "",
            "..",
            "0.6.x",
            "0.6.2 ",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn checks_round_trip_through_their_names() {
        for name in CHECK_NAMES.into_iter().chain(["leader_is:previous"]) {
            let check: Check = name.parse().unwrap();
            assert_eq!(check.to_string(), name);
        }
        assert!("leader_is:".parse::<Check>().is_err());
        assert!("leader_is".parse::<Check>().is_err());
        assert!("fenced".parse::<Check>().is_err());
    }

    #[test]
    fn globs_match_runs_of_characters() {
        for (pattern, text, want) in [
            ("awa.jobs", "awa.jobs", true),
            ("awa.jobs", "awa.jobs2", false),
            (
                "awa.*_ring_state.current_slot",
                "awa.queue_ring_state.current_slot",
                true,
            ),
            (
                "awa.*_ring_state.current_slot",
                "awa.queue_ring_slots.current_slot",
                false,
            ),
            ("awa.*", "awa.", true),
            ("*", "", true),
            (
                "*.ring_cursor_fence",
                "awa.queue_ring_state.ring_cursor_fence",
                true,
            ),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(glob_matches(pattern, text), want, "{pattern} {text}");
        }
    }

    #[test]
    fn finding_rules_round_trip_through_their_names() {
        for rule in FindingRule::ALL {
            assert_eq!(FindingRule::from_name(rule.name()), Some(rule));
            assert_eq!(
                serde_json::to_string(&rule).unwrap(),
                format!("\"{}\"", rule.name())
            );
        }
        assert_eq!(FindingRule::from_name("fence-breached"), None);
    }

    #[test]
    fn steps_serialize_with_a_step_tag() {
        let step: Step = Step::Hold(HoldStep {
            duration: Duration::from_secs(5),
            reads: None,
            until: None,
            lock_ring: None,
            deadlock: false,
        });
        assert_eq!(
            serde_json::to_string(&step).unwrap(),
            r#"{"step":"hold","duration":"5s"}"#
        );
        let back: Step = serde_json::from_str(r#"{"step":"hold","duration":"5s"}"#).unwrap();
        assert_eq!(back, step);
        let expect =
            serde_json::to_string(&Expectation::Detect(FindingRule::FenceBreached)).unwrap();
        assert_eq!(expect, r#"{"detect":"fence_breached"}"#);
        assert_eq!(
            serde_json::to_string(&Expectation::Pass).unwrap(),
            r#""pass""#
        );
    }
}
