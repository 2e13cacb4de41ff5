//! One process's entry in the fleet view: what it is for ([`Role`]) and
//! everything it reported ([`Proc`]), with the few readings steps take of
//! it (alive, done, its exit code, why it ended, its attempts in flight).

use std::collections::{BTreeMap, VecDeque};

use crate::fleet::{Event, ExitInfo, Handle};
use crate::observe::{ContractCount, InFlight, SecretLine};

/// What a process is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `awa worker`.
    Worker,
    /// `awa produce` under live load.
    Producer,
    /// The one-shot backlog producer.
    Backlog,
    /// `awa migrate`.
    Migrate,
    /// `awa cron upsert`.
    Cron,
    /// `awa storage flip-ring-authority`.
    Flip,
    /// A worker started after the flip to prove the fence.
    Fence,
    /// A maintenance-free worker that finishes cron jobs fired during the final stop.
    Mopup,
    /// `awa job cancel`, as an operator.
    Operator,
}

impl Role {
    /// The word used in process names and reports.
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Producer => "producer",
            Role::Backlog => "backlog",
            Role::Migrate => "migrate",
            Role::Cron => "cron",
            Role::Flip => "flip",
            Role::Fence => "fence",
            Role::Mopup => "mopup",
            Role::Operator => "operator",
        }
    }

    /// Long-running runtimes (as opposed to commands that run to completion).
    pub fn is_runtime(self) -> bool {
        matches!(self, Role::Worker | Role::Producer | Role::Mopup)
    }
}

/// One process of the cell and everything it said.
#[derive(Debug)]
pub struct Proc {
    /// Unique within the cell.
    pub name: String,
    /// Matrix artifact.
    pub artifact: String,
    /// Its binary's version.
    pub version: String,
    /// What it is for.
    pub role: Role,
    /// Log file, relative to the report folder.
    pub log: String,
    /// When it was spawned (ms since the cell started).
    pub spawned_ms: u64,
    /// The backend's handle.
    pub handle: Option<Handle>,
    /// Its `runtime_instances` key, from its `ready`.
    pub instance_id: Option<String>,
    /// It printed `ready`.
    pub ready: bool,
    /// When it first printed `ready` (ms since the cell started).
    pub ready_ms: Option<u64>,
    /// The reason of its `refused` event.
    pub refused: Option<String>,
    /// When it first said no: its `refused`, `blocked` or `fatal` event
    /// (ms since the cell started). How long a refusal took is judged
    /// from it.
    pub answered_ms: Option<u64>,
    /// The error of its `fatal` event.
    pub fatal: Option<String>,
    /// `started` events.
    pub started: u64,
    /// `finished` events.
    pub finished: u64,
    /// Attempts started and neither finished, released nor reported
    /// lost: (job_id, run_lease) -> attempt.
    pub in_flight: BTreeMap<(i64, i64), i32>,
    /// It printed `leader` (and when, ms since the cell started).
    pub leader_at_ms: Option<u64>,
    /// Every event (kept for migrate, flip, fence and cron commands,
    /// and a runtime's flip events).
    pub json: Vec<Event>,
    /// Its stdout lines read against the event contract.
    pub contract: ContractCount,
    /// The last stderr lines.
    pub stderr_tail: VecDeque<String>,
    /// stdout and stderr are closed.
    pub output_closed: bool,
    /// How it ended, once reaped.
    pub exit: Option<ExitInfo>,
    /// When it was reaped (ms since the cell started).
    pub ended_ms: Option<u64>,
    /// The driver SIGKILLed it.
    pub killed: bool,
    /// The driver asked it to stop (SIGTERM), so its exit is expected.
    pub stopping: bool,
    /// When the driver first asked it to stop (ms since the cell started).
    pub stop_asked_ms: Option<u64>,
    /// Lines it printed that carried a secret.
    pub secret_lines: u64,
    /// The first of them, redacted.
    pub first_secret_line: Option<SecretLine>,
    /// Lines that printed its DSN with more than the password masked.
    pub target_hidden_lines: u64,
    /// The first of them, redacted.
    pub first_target_hidden_line: Option<SecretLine>,
}

impl Proc {
    /// Still running (not reaped).
    pub fn alive(&self) -> bool {
        self.exit.is_none()
    }

    /// Ended and every line read.
    pub fn done(&self) -> bool {
        self.exit.is_some() && self.output_closed
    }

    /// The exit code, if it exited by itself.
    pub fn code(&self) -> Option<i32> {
        self.exit.and_then(|e| e.code)
    }

    /// The last stderr lines, joined.
    pub fn stderr_tail(&self, lines: usize) -> String {
        let skip = self.stderr_tail.len().saturating_sub(lines);
        self.stderr_tail
            .iter()
            .skip(skip)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Why it stopped, in a few words for a phase detail.
    pub fn why_ended(&self) -> String {
        let exit = self
            .exit
            .map_or("still running".to_owned(), |e| e.to_string());
        if let Some(reason) = &self.refused {
            format!("{exit}, refused: {reason}")
        } else if let Some(error) = &self.fatal {
            format!("{exit}, fatal: {error}")
        } else {
            match self.stderr_tail.back() {
                Some(last) => format!("{exit}: {last}"),
                None => exit,
            }
        }
    }

    /// Attempts in flight now, by job id.
    pub fn in_flight(&self) -> Vec<InFlight> {
        self.in_flight
            .iter()
            .map(|(&(job_id, run_lease), &attempt)| InFlight {
                job_id,
                attempt,
                run_lease,
            })
            .collect()
    }
}
