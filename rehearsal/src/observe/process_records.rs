//! What ran in a cell: the artifacts as obtained, the processes the
//! driver started, and what it did to them (kills, suspensions), with
//! the fence layer a refused process's last words name.

use serde::{Deserialize, Serialize};

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
    /// Lines it printed that held a word of the password it was handed
    /// (the log has them hidden). Added in 1.33.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub secret_lines: u64,
    /// The first of those lines, redacted. Added in 1.33.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_secret_line: Option<SecretLine>,
    /// Lines that printed the DSN it was handed with more than the
    /// password masked. Added in 1.34.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub target_hidden_lines: u64,
    /// The first of those lines, redacted. Added in 1.34.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_target_hidden_line: Option<SecretLine>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A line a process printed that carried a secret, as redacted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretLine {
    /// When it was read (ms since the cell started).
    pub at_ms: u64,
    /// On stderr (else stdout).
    pub stderr: bool,
    /// The line with the secret hidden.
    pub line: String,
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

/// An attempt a worker reported `started` and had not reported
/// `finished` when it was killed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub job_id: i64,
    pub attempt: i32,
    pub run_lease: i64,
}

/// One term of maintenance leadership: a runtime's `leader` event, with
/// what the harness asked of that runtime, from which `leadership_lost`
/// judges whether the term's end had a cause. A term ends when the next
/// one begins (another runtime's `leader` event, or its own again).
/// Added in report format 1.27.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderTerm {
    /// The process that reported leadership.
    pub process: String,
    pub artifact: String,
    pub version: String,
    /// When it reported it (ms since the cell started).
    pub from_ms: u64,
    /// When the harness first asked that process to stop, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_asked_ms: Option<u64>,
    /// When that process ended (was reaped), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
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
