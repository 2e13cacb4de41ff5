//! Machine-readable events: one JSON object per line on stdout, the
//! channel the orchestrator reads. Everything else goes to stderr.
//!
//! [`Event`] is the whole contract, written by [`emit`] and read by
//! [`parse`], so the runtime and its readers cannot drift apart. The
//! contract is frozen from 0.6.1 on and later releases only add to it:
//! every field a frozen release writes is here (its extra flags as
//! defaults), an event kind from a newer release parses as
//! [`Parsed::Unknown`], and a line that is not an event as
//! [`Parsed::Garbled`]; neither is an error, both keep their line.
//!
//! ```
//! use awa_runtime::events::{Event, Parsed, parse};
//! let line = r#"{"event":"migrated","from":2,"to":3,"version":"0.7.0"}"#;
//! assert!(matches!(parse(line), Parsed::Event(Event::Migrated(m)) if m.to == 3));
//! assert!(matches!(parse(r#"{"event":"from_the_future"}"#), Parsed::Unknown { .. }));
//! ```

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::locks::Blocked;
use crate::store::authority::{Authority, Blocker, RingFlip};
use crate::store::rescue::RescueReason;
use crate::workload::Mode;

pub use crate::outcome::AttemptOutcome;

/// One event line, tagged by its `event` field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The process registered and is running (`worker` or `producer`).
    Ready(Ready),
    /// A producer's job committed.
    Accepted(Accepted),
    /// A batch whose commit's fate is unknown.
    Uncertain(Uncertain),
    /// A worker started an attempt.
    Started(Started),
    /// A worker recorded an attempt's outcome.
    Finished(Finished),
    /// A worker released an attempt it still held at a clean stop.
    Released(LeaseRef),
    /// A worker found one of its attempts' leases gone (rescued elsewhere).
    LeaseLost(LeaseRef),
    /// This process won maintenance leadership.
    Leader(Leader),
    /// The leader rescued an attempt.
    Rescued(Rescued),
    /// The leader fired a cron time.
    CronFired(CronFired),
    /// (0.7) the leader's fold of rollup deltas stood down for sessions pinning old snapshots.
    FoldStoodDown(FoldStoodDown),
    /// A guard or fence refused (the process exits 2).
    Refused(Refused),
    /// A permanent failure (the process exits non-zero).
    Fatal(Fatal),
    /// (0.7) an operator command or the auto-flip gave up waiting for locks.
    Blocked(Blocked),
    /// A graceful stop completed.
    Stopped(Stopped),
    /// `awa migrate` finished.
    Migrated(Migrated),
    /// `awa cron upsert` wrote its schedule.
    CronUpserted(CronUpserted),
    /// `awa job cancel` finished.
    Cancelled(Cancelled),
    /// (0.7) the ring-cursor authority was flipped, or found flipped.
    Flipped(Flipped),
    /// (0.7) the flip's readiness.
    FlipCheck(FlipCheck),
}

impl Event {
    /// Every `event` name of the contract, as written on the wire.
    pub const NAMES: [&'static str; 20] = [
        "ready",
        "accepted",
        "uncertain",
        "started",
        "finished",
        "released",
        "lease_lost",
        "leader",
        "rescued",
        "cron_fired",
        "fold_stood_down",
        "refused",
        "fatal",
        "blocked",
        "stopped",
        "migrated",
        "cron_upserted",
        "cancelled",
        "flipped",
        "flip_check",
    ];

    /// The `event` name, as written on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Ready(_) => "ready",
            Event::Accepted(_) => "accepted",
            Event::Uncertain(_) => "uncertain",
            Event::Started(_) => "started",
            Event::Finished(_) => "finished",
            Event::Released(_) => "released",
            Event::LeaseLost(_) => "lease_lost",
            Event::Leader(_) => "leader",
            Event::Rescued(_) => "rescued",
            Event::CronFired(_) => "cron_fired",
            Event::FoldStoodDown(_) => "fold_stood_down",
            Event::Refused(_) => "refused",
            Event::Fatal(_) => "fatal",
            Event::Blocked(_) => "blocked",
            Event::Stopped(_) => "stopped",
            Event::Migrated(_) => "migrated",
            Event::CronUpserted(_) => "cron_upserted",
            Event::Cancelled(_) => "cancelled",
            Event::Flipped(_) => "flipped",
            Event::FlipCheck(_) => "flip_check",
        }
    }

    /// The event as its one JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("an event serialises")
    }
}

/// Which process wrote `ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    /// `awa worker`.
    Worker,
    /// `awa produce`.
    Producer,
}

/// `ready`: the process registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// Worker or producer.
    pub role: ProcessKind,
    /// The runtime_instances key.
    pub instance_id: String,
    /// `AWA_NAME`.
    pub name: String,
    /// The binary's version.
    pub version: String,
    /// Its process id.
    pub pid: u32,
    /// (0.7 workers) the seeded defects armed in this process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failpoints: Option<Vec<String>>,
}

/// `accepted`: a producer's job committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The job.
    pub job_id: i64,
    /// Its workload mode.
    pub mode: Mode,
    /// Attempts it may take.
    pub max_attempts: i32,
    /// For scheduled jobs, when it becomes available (Unix ms).
    #[serde(default)]
    pub run_at_ms: Option<i64>,
    /// The producer's version.
    pub version: String,
}

/// `uncertain`: a batch whose commit's fate is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uncertain {
    /// The batch's reserved ids.
    pub job_ids: Vec<i64>,
    /// Their modes, index for index.
    pub modes: Vec<Mode>,
}

/// `started`: a worker started an attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The job.
    pub job_id: i64,
    /// 1-based attempt number.
    pub attempt: i32,
    /// The attempt's lease, which guards its completion.
    pub run_lease: i64,
    /// Workload mode (`null` for a job that is not a workload job).
    #[serde(default)]
    pub mode: Option<Mode>,
    /// The worker's runtime instance.
    pub instance_id: String,
    /// The worker's version.
    pub version: String,
}

/// `finished`: a worker recorded an attempt's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The job.
    pub job_id: i64,
    /// The attempt.
    pub attempt: i32,
    /// The attempt's lease.
    pub run_lease: i64,
    /// What became of it.
    pub outcome: AttemptOutcome,
    /// Workload mode (`null` for a job that is not a workload job).
    #[serde(default)]
    pub mode: Option<Mode>,
    /// The worker's version.
    pub version: String,
}

/// `released` and `lease_lost`: one attempt by its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRef {
    /// The job.
    pub job_id: i64,
    /// The attempt's lease.
    pub run_lease: i64,
}

/// `leader`: this process won maintenance leadership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// The leader's runtime instance.
    pub instance_id: String,
    /// Its `AWA_NAME`.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// `rescued`: the leader rescued an attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rescued {
    /// The job.
    pub job_id: i64,
    /// The rescued attempt's lease.
    pub run_lease: i64,
    /// Which rescue took it.
    pub reason: RescueReason,
    /// Dead-lettered rather than re-queued.
    pub dead: bool,
}

/// `cron_fired`: the leader fired a cron time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronFired {
    /// The schedule.
    pub name: String,
    /// The fire time (Unix ms, a multiple of the interval).
    pub fire_ms: i64,
    /// The job it produced.
    pub job_id: i64,
}

/// `fold_stood_down`: the fold waited for sessions pinning old snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldStoodDown {
    /// Their backend pids.
    pub pinned_by: Vec<i32>,
}

/// `refused`: a guard or fence said no.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Why, as the runtime words it.
    pub reason: String,
}

/// `fatal`: a permanent failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fatal {
    /// The error.
    pub error: String,
}

/// `stopped`: a graceful stop completed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopped {
    /// The runtime instance that stopped.
    pub instance_id: String,
    /// (workers) attempts released at the stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<u64>,
    /// (producers) jobs sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
}

/// `migrated`: `awa migrate` finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migrated {
    /// Schema version before.
    pub from: i64,
    /// Schema version after.
    pub to: i64,
    /// The migrating binary's version.
    pub version: String,
    /// (0.6.1 only) it rewrote a newer `schema_version` it did not know.
    #[serde(default, skip_serializing_if = "is_false")]
    pub legacy_rewrite: bool,
    /// (0.6.2 only) it found the expand schema it accepts and left it alone.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ahead_compatible: bool,
}

/// `cron_upserted`: a schedule was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronUpserted {
    /// The schedule.
    pub name: String,
    /// Its interval.
    pub every_ms: u64,
}

/// `cancelled`: an operator cancel finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// The job.
    pub job_id: i64,
    /// It was live, so the cancel changed it.
    pub was_live: bool,
}

/// `flipped`: the ring-cursor authority is `ledger`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flipped {
    /// It was `ledger` already; nothing was flipped.
    #[serde(default, skip_serializing_if = "is_false")]
    pub already: bool,
    /// Each ring as the flip found and left it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<RingFlip>,
    /// `--force` overrode the readiness check (absent when nothing was flipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<bool>,
    /// The leader's auto-flip did it, not the command.
    #[serde(default, skip_serializing_if = "is_false")]
    pub auto: bool,
    /// The command's version (absent for the auto-flip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `flip_check`: whether the flip may go ahead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlipCheck {
    /// The authority now (absent when a flip found itself blocked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<Authority>,
    /// The flip would go ahead.
    pub ready: bool,
    /// (`--check`) fresh runtimes counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_runtimes: Option<u64>,
    /// The fresh runtimes that are not flip-aware.
    #[serde(default)]
    pub blocking: Vec<Blocker>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One stdout line as read.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// An event of the contract.
    Event(Event),
    /// A JSON object with an `event` name this contract does not have
    /// (a newer release's event): counted and kept, never an error.
    Unknown {
        /// Its `event` field.
        name: String,
        /// The line as written.
        line: String,
    },
    /// Not an event: not a JSON object with an `event` string, or a
    /// known event without a field it must carry.
    Garbled {
        /// The line as written.
        line: String,
    },
}

impl Parsed {
    /// The event, when it is one.
    pub fn event(&self) -> Option<&Event> {
        match self {
            Parsed::Event(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads one stdout line.
pub fn parse(line: &str) -> Parsed {
    let garbled = || Parsed::Garbled {
        line: line.to_owned(),
    };
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return garbled();
    };
    let Some(name) = value.get("event").and_then(Value::as_str) else {
        return garbled();
    };
    if !Event::NAMES.contains(&name) {
        return Parsed::Unknown {
            name: name.to_owned(),
            line: line.to_owned(),
        };
    }
    match serde_json::from_value::<Event>(value) {
        Ok(event) => Parsed::Event(event),
        Err(_) => garbled(),
    }
}

/// Print one event line and flush it, so a reader sees it at once.
pub fn emit(event: &Event) {
    let line = event.to_line();
    let out = std::io::stdout();
    let mut lock = out.lock();
    // A closed stdout (the reader went away) must not kill the worker.
    let _ = writeln!(lock, "{line}");
    let _ = lock.flush();
}

/// Emit a `refused` event with the reason.
pub fn refused(reason: &str) {
    emit(&Event::Refused(Refused {
        reason: reason.to_owned(),
    }));
}

#[cfg(test)]
mod tests;
