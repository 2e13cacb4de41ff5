//! The validated matrix: what a cell means once matrix.toml has passed every check.
//!
//! These types are what the rest of rehearse consumes (plan, driver,
//! report). They serialize to JSON for `--json` and for report.json, and
//! deserialize back so `rehearse report DIR` can re-render a run. The
//! shape of the file itself, with spans for error messages, lives in
//! `raw.rs`; the checks that turn one into the other in `validate.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::duration::Duration;

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
/// survived) the matrix must kill for `rehearse mutate` to exit 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MutatePolicy {
    /// From 0 to 1; `None`: any score passes.
    pub min_score: Option<f64>,
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

/// One runtime version the rehearsal can start: where it comes from, what is armed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Where the binary comes from.
    pub source: ArtifactSource,
    /// A seeded defect armed in this build (a "defective candidate"), if any.
    pub failpoint: Option<String>,
}

/// The single source of an artifact's binary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactSource {
    /// A frozen release archive listed in `artifacts/manifest.toml`.
    Release(Version),
    /// Built from this repository.
    Build(BuildSource),
    /// A container image, pulled by digest as production would.
    Image(ImageSource),
}

/// An image artifact: a reference (a tag or a digest), or a repository
/// plus a release line resolved in its registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSource {
    /// As written (`127.0.0.1:5000/awa-runtime`, `...@sha256:...`).
    pub reference: String,
    /// The release line to resolve among the registry's tags, if any.
    pub line: Option<ImageLine>,
}

/// `line = "0.6"`, `floor = "0.6.2"`, `prerelease = false`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageLine {
    /// The line's major version.
    pub major: u64,
    /// The line's minor version.
    pub minor: u64,
    /// The oldest acceptable release on the line.
    pub floor: Option<Version>,
    /// Whether a pre-release tag (`0.6.3-rc.1`) may be picked.
    pub prerelease: bool,
}

impl fmt::Display for ImageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reference)?;
        if let Some(line) = &self.line {
            write!(f, " line {}.{}", line.major, line.minor)?;
            if let Some(floor) = &line.floor {
                write!(f, " floor {floor}")?;
            }
            if line.prerelease {
                f.write_str(" with pre-releases")?;
            }
        }
        Ok(())
    }
}

/// What a `build = "..."` source builds; only the workspace today.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildSource {
    /// The workspace's `awa-runtime` crate.
    Workspace,
}

impl fmt::Display for ArtifactSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArtifactSource::Release(v) => write!(f, "release {v}"),
            ArtifactSource::Build(BuildSource::Workspace) => f.write_str("workspace build"),
            ArtifactSource::Image(r) => write!(f, "image {r}"),
        }
    }
}

impl fmt::Display for Artifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(fp) = &self.failpoint {
            write!(f, " with failpoint {fp}")?;
        }
        Ok(())
    }
}

/// A release version `X.Y.Z` (no pre-release or build suffix: releases are
/// plain), ordered by the semver rules.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(semver::Version);

impl Version {
    /// `major.minor.patch`.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Version(semver::Version::new(major, minor, patch))
    }

    /// The version under the semver rules (to compare with registry tags).
    pub fn as_semver(&self) -> &semver::Version {
        &self.0
    }
}

impl FromStr for Version {
    type Err = &'static str;

    /// Accepts exactly three dot-separated decimal numbers without leading zeros.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const PLAIN: &str = "a release version is three plain numbers, like \"0.6.2\"";
        if s.split('.').count() != 3 {
            return Err("a release version has three numbers, like \"0.6.2\"");
        }
        match semver::Version::parse(s) {
            Ok(v) if v.pre.is_empty() && v.build.is_empty() => Ok(Version(v)),
            Ok(_) => Err(PLAIN),
            Err(_) if s.split('.').any(|p| p.len() > 1 && p.starts_with('0')) => {
                Err("version numbers have no leading zeros")
            }
            Err(_) => Err(PLAIN),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

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
    /// A `hold` until `slot_zero_free` saw its condition before it ran
    /// out, and the flip after it found no ring's cursor in slot 0: the
    /// flip met every ring busy and slot 0 free, the window a
    /// stale-discipline rotation needs.
    SlotZeroFree,
}

impl Reach {
    /// Every interleaving, in the order `rehearse list` shows them.
    pub const ALL: [Reach; 8] = [
        Reach::MixedClaims,
        Reach::LeaderFrozenAcrossFlip,
        Reach::LeaderTakeover,
        Reach::RescuedByCurrent,
        Reach::LateResultDuringRerun,
        Reach::FencedByResolver,
        Reach::FencedByTrigger,
        Reach::SlotZeroFree,
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
            Reach::SlotZeroFree => "slot_zero_free",
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
    /// rescue) the monitor never saw its lease's heartbeat late.
    UnexplainedInterruption,
}

impl FindingRule {
    /// Every rule, in documentation order.
    pub const ALL: [FindingRule; 26] = [
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
        FindingRule::SchemaDrift,
        FindingRule::UnstoppedHandler,
        FindingRule::EarlyStart,
        FindingRule::UnreachableReady,
        FindingRule::Misplaced,
        FindingRule::CancelIgnored,
        FindingRule::UnexplainedInterruption,
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
                | FindingRule::SchemaDrift
                | FindingRule::UnstoppedHandler
                | FindingRule::EarlyStart
                | FindingRule::UnreachableReady
                | FindingRule::Misplaced
                | FindingRule::CancelIgnored
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
            FindingRule::SchemaDrift => "schema_drift",
            FindingRule::UnstoppedHandler => "unstopped_handler",
            FindingRule::EarlyStart => "early_start",
            FindingRule::UnreachableReady => "unreachable_ready",
            FindingRule::Misplaced => "misplaced",
            FindingRule::CancelIgnored => "cancel_ignored",
            FindingRule::UnexplainedInterruption => "unexplained_interruption",
        }
    }

    /// The rule called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }
}

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
}

/// The step names, in the order error messages list them.
pub const STEP_NAMES: [&str; 15] = [
    "fleet", "load", "migrate", "roll", "rollback", "kill", "suspend", "resume", "pg_crash",
    "flip", "fence", "hold", "drain", "assert", "cancel",
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
    fn describe(self) -> &'static str {
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

/// The named checks an `assert` step can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// The expand migration has been applied.
    SchemaExpanded,
    /// Ring-cursor authority is `columns`.
    AuthorityColumns,
    /// Ring-cursor authority is `ledger`.
    AuthorityLedger,
    /// The old-binary fence trigger is active and the cursor columns poisoned.
    FenceActive,
    /// Workers of both versions have claimed jobs.
    MixedFleetClaimed,
    /// Deadline-overrun claims are waiting for a flip-aware leader to rescue them.
    DeadlineRescuePending,
    /// Those deadline-overrun claims have been rescued.
    DeadlineRescued,
    /// The maintenance leader runs this artifact.
    LeaderIs(String),
    /// Once the workload's jobs are all done, every ring rotates and
    /// prunes away each row written before then, within a wrap and a few
    /// rotations (the check waits; a ring that does not is `ring_stalled`).
    RingsPrunedBack,
    /// The schema equals a fresh install of the current build on the same
    /// server, but for the differences `[schema]` declares intended (any
    /// other is `schema_drift`).
    SchemaMatchesFresh,
}

/// Check names without an argument, in documentation order.
pub const CHECK_NAMES: [&str; 9] = [
    "schema_expanded",
    "authority_columns",
    "authority_ledger",
    "fence_active",
    "mixed_fleet_claimed",
    "deadline_rescue_pending",
    "deadline_rescued",
    "rings_pruned_back",
    "schema_matches_fresh",
];

/// The prefix of the one check that takes an argument.
pub const LEADER_IS: &str = "leader_is:";

impl FromStr for Check {
    type Err = ();

    /// Parses a check name; the artifact of `leader_is:` is not checked here.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "schema_expanded" => Check::SchemaExpanded,
            "authority_columns" => Check::AuthorityColumns,
            "authority_ledger" => Check::AuthorityLedger,
            "fence_active" => Check::FenceActive,
            "mixed_fleet_claimed" => Check::MixedFleetClaimed,
            "deadline_rescue_pending" => Check::DeadlineRescuePending,
            "deadline_rescued" => Check::DeadlineRescued,
            "rings_pruned_back" => Check::RingsPrunedBack,
            "schema_matches_fresh" => Check::SchemaMatchesFresh,
            _ => match s.strip_prefix(LEADER_IS) {
                Some(artifact) if !artifact.is_empty() => Check::LeaderIs(artifact.to_owned()),
                _ => return Err(()),
            },
        })
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Check::SchemaExpanded => CHECK_NAMES[0],
            Check::AuthorityColumns => CHECK_NAMES[1],
            Check::AuthorityLedger => CHECK_NAMES[2],
            Check::FenceActive => CHECK_NAMES[3],
            Check::MixedFleetClaimed => CHECK_NAMES[4],
            Check::DeadlineRescuePending => CHECK_NAMES[5],
            Check::DeadlineRescued => CHECK_NAMES[6],
            Check::RingsPrunedBack => CHECK_NAMES[7],
            Check::SchemaMatchesFresh => CHECK_NAMES[8],
            Check::LeaderIs(artifact) => return write!(f, "{LEADER_IS}{artifact}"),
        };
        f.write_str(name)
    }
}

impl Serialize for Check {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse()
            .map_err(|()| serde::de::Error::custom(format!("unknown check \"{name}\"")))
    }
}

impl fmt::Display for KillStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kill {}", self.target.name())?;
        if let Some(of) = &self.of {
            write!(f, " of {of}")?;
        }
        write!(f, ": {}", self.when.describe())?;
        if self.after_started > 0 {
            write!(f, ", once it has started {} jobs", self.after_started)?;
        }
        Ok(())
    }
}

impl<K: fmt::Display, S: fmt::Display> fmt::Display for Step<K, S> {
    /// One line for `rehearse plan`, e.g. `roll to current one at a time, pause 2s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Fleet(s) => {
                write!(f, "fleet {}:", s.artifact)?;
                let mut parts = Vec::new();
                if s.workers > 0 {
                    parts.push(plural(s.workers, "worker"));
                }
                if s.producers > 0 {
                    parts.push(plural(s.producers, "producer"));
                }
                write!(f, " {}", parts.join(", "))?;
                if s.leader {
                    f.write_str(", first worker becomes leader")?;
                }
                if s.idle {
                    f.write_str(", idle (claims nothing, rotates only)")?;
                }
                if s.when != When::Now {
                    write!(f, ", {}", s.when.describe())?;
                }
                Ok(())
            }
            Step::Load(s) => write!(f, "load {}", if s.on { "on" } else { "off" }),
            Step::Migrate(s) => {
                write!(f, "migrate with {}", s.artifact)?;
                if s.allow_live_runtimes {
                    f.write_str(" --allow-live-runtimes")?;
                }
                if s.expect == Outcome::Refused {
                    f.write_str(", must be refused")?;
                }
                Ok(())
            }
            Step::Roll(s) => {
                write!(f, "roll to {}", s.artifact)?;
                if s.one_at_a_time {
                    write!(f, " one at a time, pause {}", s.pause)?;
                } else {
                    f.write_str(" all at once")?;
                }
                if !s.producers {
                    f.write_str(", workers only")?;
                }
                Ok(())
            }
            Step::Rollback(s) => {
                write!(f, "rollback to {}", s.artifact)?;
                if let Some(n) = s.workers {
                    write!(f, " with {}", plural(n, "worker"))?;
                }
                Ok(())
            }
            Step::Kill(k) => write!(f, "{k}"),
            Step::Suspend(s) => write!(f, "{s}"),
            Step::Resume(s) => {
                let verb = match s.signal {
                    ResumeSignal::Cont => "resume (SIGCONT)",
                    ResumeSignal::Kill => "SIGKILL",
                };
                write!(f, "{verb} the suspended {}", s.target.name())?;
                if let Some(of) = &s.of {
                    write!(f, " of {of}")?;
                }
                Ok(())
            }
            Step::PgCrash(s) => write!(f, "pg_crash {}", s.when.describe()),
            Step::Flip(s) => {
                write!(f, "flip {} by {}", s.mode.name(), s.by)?;
                if let Some(t) = s.timeout {
                    write!(f, ", timeout {t}")?;
                }
                match s.expect {
                    Outcome::Refused => f.write_str(", must be refused")?,
                    Outcome::Blocked => f.write_str(", must give up on a held lock")?,
                    Outcome::Ok => {}
                }
                Ok(())
            }
            Step::Fence(s) => write!(
                f,
                "fence {}: its worker must refuse and change nothing",
                s.artifact
            ),
            Step::Hold(s) => {
                match s.until {
                    Some(until) => write!(f, "hold up to {}, until {until}", s.duration)?,
                    None => write!(f, "hold {}", s.duration)?,
                }
                if let Some(reads) = s.reads {
                    write!(f, ", a client reading in {reads} statements meanwhile")?;
                }
                Ok(())
            }
            Step::Drain(s) => write!(f, "drain, until {} without progress", s.timeout),
            Step::Assert(s) => write!(f, "assert {}", s.check),
            Step::Cancel(s) => write!(
                f,
                "cancel {} and {} as an operator with {}",
                plural(s.running, "running job"),
                plural(s.available, "available job"),
                s.artifact
            ),
        }
    }
}

/// "1 worker", "3 workers".
pub(crate) fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

impl fmt::Display for SuspendStep {
    /// `suspend the leader of previous for 5s`, as written (before planning).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "suspend a {}", self.target.name())?;
        if let Some(of) = &self.of {
            write!(f, " of {of}")?;
        }
        if self.at != SuspendAt::Any {
            write!(f, ", caught {}", self.at.name())?;
        }
        match self.duration {
            Some(d) => write!(f, " for {d}"),
            None => f.write_str(" until resumed"),
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
