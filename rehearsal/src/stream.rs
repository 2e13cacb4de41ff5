//! The run as a stream of typed events: everything the driver tells the
//! rest of the program goes through here, to one receiver.
//!
//! The driver sends [`RunEvent`]s into an [`Events`] handle (cheap to
//! clone, usable from every cell's task), each finished cell followed by
//! its verdict ([`RunEvent::CellJudged`], judged through the reconciliation
//! `pipeline.rs` wires into the driver); `pipeline.rs` receives them on its
//! own thread and hands every event to the reporters: the terminal (bars,
//! notes), the report files (`report::Collector`) and the recording
//! (`events.jsonl`). Because
//! every event is plain data, a recorded stream renders the same report
//! as the run that produced it.
//!
//! ```
//! use rehearsal::stream::{self, Note, RunEvent};
//!
//! let (events, mut rx) = stream::channel();
//! events.send(RunEvent::Note(Note::progress(None, "resolving artifacts")));
//! drop(events);
//! let got = rx.blocking_recv().unwrap();
//! assert!(matches!(got, RunEvent::Note(n) if n.text == "resolving artifacts"));
//! assert!(rx.blocking_recv().is_none(), "the stream ends with its last sender");
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::matrix::{Expectation, Reach};
use crate::observe::{
    ArtifactInfo, CensusSample, Doubt, Finding, KillRecord, Observations, Phase, ProvedFacts,
    RingSample, Verdict,
};
use crate::plan::CellPlan;
use crate::vocab::detection::Detection;

/// One thing that happened in a run, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "RunStarted is sent once per run; boxing it would only add indirection"
)]
pub enum RunEvent {
    /// Artifacts are resolved, the report folder exists and PostgreSQL is up.
    RunStarted(RunStart),
    /// Something to tell the person watching (never part of a report).
    Note(Note),
    /// A cell begins (`index` is its place in the plan).
    CellStarted {
        /// Its place in the plan.
        index: usize,
        /// Its name.
        cell: String,
        /// Setup, its steps and reconciliation.
        phases: u64,
    },
    /// A phase of a cell begins: setup, a step, the final drain, reconciliation.
    StepStarted {
        /// The cell.
        cell: String,
        /// What the phase does, in words (`roll to current one at a time`).
        what: String,
    },
    /// A phase ended, with its typed outcome and timings.
    StepFinished {
        /// The cell.
        cell: String,
        /// The phase as the timeline records it.
        phase: Phase,
    },
    /// The driver started a process.
    ProcessStarted {
        /// The cell.
        cell: String,
        /// The process's name (`previous-worker-2`).
        process: String,
        /// Its role (`worker`, `migrate`, ...).
        role: String,
        /// Its binary's version.
        version: String,
        /// Ms since the cell started.
        at_ms: u64,
    },
    /// A process of the cell was reaped.
    ProcessExited {
        /// The cell.
        cell: String,
        /// The process's name.
        process: String,
        /// Its exit code, if it exited by itself.
        code: Option<i32>,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
        /// Ms since the cell started.
        at_ms: u64,
    },
    /// The driver injected a fault.
    FaultInjected {
        /// The cell.
        cell: String,
        /// What it did.
        fault: Fault,
    },
    /// What the monitor read from a running cell's database in one
    /// snapshot: at most one a [`crate::monitor::EVENT_EVERY`], and at
    /// every change of a ring's authority (the report keeps the whole
    /// series in the cell's observations; this is the live view for other
    /// tools reading `--format json`).
    MonitorSample {
        /// The cell.
        cell: String,
        /// The census of the tick: events by version, fresh runtimes,
        /// rollup deltas, lock waits.
        census: CensusSample,
        /// Each ring's cursors in both representations and its authority.
        rings: Vec<RingSample>,
    },
    /// A try of a cell came out inconclusive for the harness's own
    /// reasons and the cell runs again with a new seed (`--retries`).
    CellRetried {
        /// The cell's place in the plan.
        index: usize,
        /// The cell.
        cell: String,
        /// The try that ended.
        attempt: CellTry,
    },
    /// A cell's run is over: what it observed and what reconciliation found.
    CellFinished(Box<CellRun>),
    /// Reconciliation's verdict on a finished cell.
    CellJudged {
        /// The cell's place in the plan.
        index: usize,
        /// The cell.
        cell: String,
        /// Whether it met its expectation.
        verdict: Verdict,
        /// For a `detect` cell: how the defect was caught.
        detection: Option<Detection>,
        /// Why, in one line.
        reason: String,
        /// Why the harness could not judge it: the run's own harness
        /// error, or a fault that did not fire.
        harness_error: Option<String>,
        /// Each interleaving the cell declares (`reach`), as reconciliation
        /// judged it: the report's readers render these, and judge nothing.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reached: Vec<Reached>,
    },
    /// The run is over (every cell finished, or it was interrupted).
    RunFinished(RunEnd),
}

/// One interleaving a cell declares (`reach = [...]`) and what its run
/// showed of it, as reconciliation judged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reached {
    /// The interleaving.
    pub reach: Reach,
    /// Whether the run reached it.
    pub reached: bool,
    /// The evidence, or what was seen instead.
    pub evidence: String,
}

/// A try of a cell that did not give a verdict and was tried again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellTry {
    /// 1 for the first try.
    pub attempt: u32,
    /// The seed its plan was drawn with (`None`: the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Why it was inconclusive.
    pub why: String,
    /// How long it ran.
    pub elapsed_ms: u64,
    /// Its process logs, relative to the report folder.
    pub logs: String,
}

/// A fault the driver injected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// A process was SIGKILLed on purpose.
    Kill(KillRecord),
    /// PostgreSQL was crashed and came back.
    PgCrash {
        /// When it was back, in ms since the cell started.
        at_ms: u64,
        /// How long crash recovery took.
        recovery_ms: u64,
    },
}

/// What the run is, once it has started: its header, and what only the
/// stream needs (where the report goes, what it runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStart {
    /// Who runs what, when, where, and how to replay it: `report.json`'s
    /// `run` holds the same header.
    #[serde(flatten)]
    pub header: RunHeader,
    /// The report folder.
    pub report_dir: PathBuf,
    /// Every artifact the run uses.
    pub artifacts: Vec<ArtifactInfo>,
    /// The cells, in plan order.
    pub cells: Vec<String>,
    /// `rehearse selftest`: the report scores the run against the runtime's seeded defects.
    #[serde(default)]
    pub selftest: bool,
}

/// The run as known when it starts: enough to reproduce it and to judge
/// its environment. Declared once, for the stream's [`RunStart`] and
/// `report.json`'s `run` (`report::RunInfo`), whose fields it lies flat
/// among; the "Added in" notes are `report.json` format versions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunHeader {
    /// Unique name of the run; also the report folder's name (`20261130T014512Z-3f2a9c1`).
    pub run_id: String,
    /// When the run started, RFC 3339 in UTC (`2026-11-30T01:45:12Z`).
    pub started_at: String,
    /// The seed every random choice came from: written as `seed` (a
    /// number, for 1.x readers) and `seed_string` (exact in any JSON reader).
    #[serde(flatten, with = "seed_fields")]
    pub seed: u64,
    /// The command line as typed, secrets redacted, for the record.
    pub command_line: String,
    /// The named matrix run (`smoke`), if one was selected.
    pub matrix: Option<String>,
    /// The command that replays exactly this run.
    pub replay: String,
    /// `process` or `docker`, as resolved (never `auto`).
    pub backend: String,
    /// Why that backend (`backend auto: docker, because an engine answers: ...`). Added in 1.4.
    #[serde(default)]
    pub backend_reason: String,
    /// The Docker engine's version and address, on the docker backend. Added in 1.4.
    #[serde(default)]
    pub engine: Option<String>,
    /// `server_version` of the PostgreSQL the cells ran against
    /// (`15.18 (pg15), 18.6 (pg18)` for several).
    pub postgres_version: String,
    /// Every server the cells ran on: planned major, version, binaries
    /// and where they were found. Added in 1.5.
    #[serde(default)]
    pub servers: Vec<crate::servers::ServerInfo>,
    /// sha256 (hex) of each migration the current build embeds, by migration name (`v1`).
    pub migration_checksums: BTreeMap<String, String>,
    /// The workspace commit (full hex).
    pub git_commit: String,
    /// Whether the work tree had uncommitted changes: the commit alone does not describe the build.
    pub git_dirty: bool,
    /// Cores of the machine it ran on, as the scheduler counts them (0: not recorded). Added in 1.5.
    #[serde(default)]
    pub cores: u32,
    /// Cells it ran at once (0: not recorded). Added in 1.5.
    #[serde(default)]
    pub jobs: u32,
    /// How `--jobs` was chosen and the cells ordered, in one line. Added in 1.5.
    #[serde(default)]
    pub schedule: String,
    /// sha256 (hex) of the matrix file's bytes (empty: not recorded). Added in 1.10.
    #[serde(default)]
    pub matrix_checksum: String,
    /// `--partition`: which share of the selection the run covered, and
    /// every cell of the whole selection (null: the whole selection ran). Added in 1.10.
    #[serde(default)]
    pub partition: Option<crate::vocab::partition::PartitionInfo>,
    /// `--stress`: the busy processes the cells ran beside (null: none). Added in 1.15.
    #[serde(default)]
    pub stress: Option<crate::vocab::stress::StressInfo>,
    /// matrix.toml's `[[checklist]]`: ADR-041 §9, each item with the cells
    /// that cover it (empty: none declared). Added in 1.16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checklist: Vec<crate::matrix::ChecklistItem>,
}

/// `seed` and `seed_string` (`report.json` 1.3) for one u64.
mod seed_fields {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct Out {
        seed: u64,
        seed_string: String,
    }

    #[derive(Deserialize)]
    struct In {
        seed: Option<u64>,
        seed_string: Option<String>,
    }

    pub(super) fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
        Out {
            seed: *seed,
            seed_string: seed.to_string(),
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let read = In::deserialize(d)?;
        match (read.seed_string, read.seed) {
            (Some(text), _) => text.parse().map_err(|_| {
                serde::de::Error::custom(format!("seed_string \"{text}\" is not a u64"))
            }),
            (None, Some(seed)) => Ok(seed),
            (None, None) => Err(serde::de::Error::missing_field("seed")),
        }
    }
}

/// How the run ended: the stream's last event, and the end of
/// `report.json`'s `run` (`report::RunInfo`), whose fields it lies flat among.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd {
    /// When it ended, RFC 3339 in UTC.
    pub finished_at: String,
    /// Wall-clock duration of the whole run.
    pub wall_ms: u64,
    /// Of `wall_ms`, the time before the cells' window opened: artifacts
    /// built or unpacked, images made or pulled. The CPU figures below
    /// count only the window (a build's compilers are reaped before it,
    /// and the harness's own CPU is counted from it), so the floor is
    /// weighed against the window's wall time, not the run's. 0 in
    /// reports older than 1.29.
    #[serde(default)]
    pub prepare_ms: u64,
    /// CPU time of the harness process itself, from the cells' window on
    /// (in reports older than 1.29, from its start).
    pub harness_cpu_ms: u64,
    /// CPU time of what it started: reaped child processes (PostgreSQL;
    /// workers and producers on the process backend) plus, on the docker
    /// backend, the containers' CPU (see `container_cpu_source`).
    pub children_cpu_ms: u64,
    /// The containers' share of `children_cpu_ms`. Added in 1.4.
    #[serde(default)]
    pub container_cpu_ms: Option<u64>,
    /// How it was counted: `cgroup` (the kernel's counter of the run's
    /// parent cgroup: every container's whole CPU) or `stats` (the engine's
    /// stats sampled about once a second: a lower bound). Added in 1.9.
    #[serde(default)]
    pub container_cpu_source: Option<crate::vocab::cpu::CpuSource>,
    /// On the docker backend, the container engine's own CPU meanwhile
    /// (its daemons, shims and storage driver: work the run's containers
    /// cause outside their cgroup), also in `children_cpu_ms`; metered
    /// once a second, a lower bound. Added in 1.21.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_cpu_ms: Option<u64>,
    /// The run was cut short (Ctrl-C or SIGTERM): cells not listed never ran.
    pub interrupted: bool,
    /// `--jobs auto` where the kernel reports CPU pressure: how often and
    /// how long a cell with room waited for the pressure to fall (null:
    /// no such gate). Added in 1.15.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_back: Option<HeldBack>,
}

/// Starts `--jobs auto` held back while the CPU was under pressure: the
/// figure that says a run's concurrency was lower than its schedule line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBack {
    /// Stretches during which a cell that had room waited.
    pub times: u32,
    /// Their lengths added up, in ms.
    pub ms: u64,
    /// How recently a running cell must have ticked starved for it to
    /// hold back, in ms.
    pub within_ms: u64,
    /// The most cells at once while the cores idled, when `--jobs auto`
    /// grew above its schedule (see `schedule::growth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grew_to: Option<u32>,
    /// The fewest cells at once while cells kept starving, when `--jobs
    /// auto` went below its schedule (see `schedule::growth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrank_to: Option<u32>,
}

impl RunEnd {
    /// The cells' window: the run's wall time after its preparation.
    pub fn window_ms(&self) -> u64 {
        self.wall_ms.saturating_sub(self.prepare_ms)
    }
}

impl HeldBack {
    /// `held a cell back 3 times (1m12s in all) while a running cell had
    /// ticked starved in the last 10.0s`, or `never held a cell back`: for
    /// the terminal and report.md.
    pub fn describe(&self) -> String {
        let mut text = self.held();
        if let Some(n) = self.grew_to {
            text.push_str(&format!("; grew to {n} at once while the cores idled"));
        }
        if let Some(n) = self.shrank_to {
            text.push_str(&format!(
                "; went down to {n} at once while cells kept starving"
            ));
        }
        text
    }

    fn held(&self) -> String {
        match self.times {
            0 => "never held a cell back".to_owned(),
            n => format!(
                "held a cell back {} ({} in all) while a running cell had ticked starved in the last {}",
                if n == 1 {
                    "once".to_owned()
                } else {
                    format!("{n} times")
                },
                crate::observe::duration(self.ms),
                crate::observe::duration(self.within_ms)
            ),
        }
    }
}

/// One cell's run, before its verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellRun {
    /// Its place in the plan.
    pub index: usize,
    /// The plan that was executed.
    pub plan: CellPlan,
    /// What the run observed.
    pub observations: Observations,
    /// What the cell showed beyond the observations, for the report's
    /// "proved" sentences.
    pub proved: ProvedFacts,
    /// What reconciliation (and the monitor) found.
    pub findings: Vec<Finding>,
    /// The rules reconciliation could not judge the cell on, for want of
    /// evidence. Added in report format 1.28.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub doubts: Vec<Doubt>,
    /// Why the harness could not reach a verdict, if it could not.
    pub harness_error: Option<String>,
    /// Wall time of the whole cell.
    pub elapsed_ms: u64,
    /// Of which reconciliation.
    pub reconcile_ms: u64,
}

impl CellRun {
    /// The cell's name.
    pub fn name(&self) -> &str {
        &self.plan.name
    }

    /// What the cell had to show.
    pub fn expect(&self) -> Expectation {
        self.plan.expect
    }
}

/// A line for the person watching.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// The cell it is about, if any.
    pub cell: Option<String>,
    /// The text.
    pub text: String,
    /// Progress (left out by `--quiet`) or something to always show.
    pub always: bool,
}

impl Note {
    /// A progress line (`--quiet` leaves it out).
    pub fn progress(cell: Option<&str>, text: impl Into<String>) -> Note {
        Note {
            cell: cell.map(str::to_owned),
            text: text.into(),
            always: false,
        }
    }

    /// A line shown even with `--quiet` (a kept cluster, an interruption).
    pub fn always(cell: Option<&str>, text: impl Into<String>) -> Note {
        Note {
            cell: cell.map(str::to_owned),
            text: text.into(),
            always: true,
        }
    }
}

/// Where the driver sends its events. Sending never blocks and never
/// fails: once the receiver is gone, events are dropped.
#[derive(Clone, Debug)]
pub struct Events(mpsc::UnboundedSender<RunEvent>);

impl Events {
    /// Sends one event.
    pub fn send(&self, event: RunEvent) {
        let _ = self.0.send(event);
    }

    /// A handle whose events go nowhere (tests of parts that emit).
    pub fn discard() -> Events {
        channel().0
    }
}

/// A stream: the sending handle and the receiver.
pub fn channel() -> (Events, mpsc::UnboundedReceiver<RunEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Events(tx), rx)
}
