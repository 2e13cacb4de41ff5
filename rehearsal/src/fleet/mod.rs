//! Fleet: starting, signalling and watching `awa` processes.
//!
//! The driver asks a [`Fleet`] backend to start a process described by a
//! [`Spec`]; the backend answers with a [`Handle`] (to stop or kill it)
//! and from then on reports everything about the process as
//! [`FleetMsg`]s on the cell's channel: each stdout line as a typed
//! [`Event`] (with the raw line), each stderr line, the end of its
//! output, and its exit. Backends differ in how a process runs (a child
//! process, a container); the driver sees the same messages from both.
//!
//! Only the `process` backend exists today ([`process::ProcessFleet`]);
//! `--backend docker` is refused with exit code 2 before anything starts.

pub mod events;
pub mod process;

use std::path::PathBuf;
use std::time::Instant;

use tokio::sync::mpsc;

pub use events::Event;
pub use process::ProcessFleet;

/// Index of a process in its cell's ledger: assigned by the driver before the spawn.
pub type ProcId = usize;

/// Everything a backend needs to start one process.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The driver's id for it; every message about it carries this.
    pub id: ProcId,
    /// Unique within the cell (`previous-worker-2`); also its `AWA_NAME`.
    pub name: String,
    /// The `awa` binary.
    pub program: PathBuf,
    /// Arguments (`worker`, `migrate --allow-live-runtimes`, ...).
    pub args: Vec<String>,
    /// The complete `AWA_*` environment; inherited `AWA_*` variables are removed.
    pub env: Vec<(String, String)>,
    /// Log file for its stdout and stderr (created, with its folder).
    pub log: PathBuf,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code, if it exited by itself.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
}

use nix::sys::signal::Signal;

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
                Ok(name @ (Signal::SIGKILL | Signal::SIGTERM)) => write!(f, "killed by {name}"),
                _ => write!(f, "killed by signal {signal}"),
            },
            (None, None) => f.write_str("ended without a status"),
        }
    }
}

/// What a backend reports about a process.
#[derive(Clone, Debug)]
pub enum Report {
    /// One stdout line.
    Line {
        /// Parsed.
        event: Event,
        /// As printed.
        raw: String,
    },
    /// One stderr line.
    Stderr(String),
    /// stdout and stderr are both closed: every line has been reported.
    OutputClosed,
    /// The process ended (reaped).
    Exited(ExitInfo),
}

/// A report about process `id`, stamped when the backend saw it.
#[derive(Clone, Debug)]
pub struct FleetMsg {
    /// Which process.
    pub id: ProcId,
    /// When the backend read or noticed it.
    pub at: Instant,
    /// What happened.
    pub report: Report,
}

/// Where a backend sends its reports: the cell's ledger reads the other end.
pub type Sink = mpsc::UnboundedSender<FleetMsg>;

/// What the driver may ask of a running process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// SIGTERM: a graceful stop (finish or release in-flight work).
    Terminate,
    /// SIGKILL: a crash nothing can soften.
    Kill,
    /// Stop the process without ending it (SIGSTOP; an engine's pause): it
    /// keeps its memory, connections and locks, and its heartbeat goes stale.
    Suspend,
    /// Let a suspended process run again (SIGCONT; an engine's unpause).
    Resume,
}

/// The driver's grip on one started process. Signals to a process that
/// already ended are dropped, never sent to a recycled pid.
#[derive(Clone, Debug)]
pub struct Handle {
    /// The driver's id.
    pub id: ProcId,
    /// The operating-system process id, where there is one.
    pub pid: Option<u32>,
    control: mpsc::UnboundedSender<Control>,
}

impl Handle {
    /// A handle that forwards controls to `control` (for backends).
    pub fn new(id: ProcId, pid: Option<u32>, control: mpsc::UnboundedSender<Control>) -> Self {
        Handle { id, pid, control }
    }

    /// Sends SIGTERM (no-op once the process has ended).
    pub fn terminate(&self) {
        let _ = self.control.send(Control::Terminate);
    }

    /// Sends SIGKILL (no-op once the process has ended).
    pub fn kill(&self) {
        let _ = self.control.send(Control::Kill);
    }

    /// Stops the process where it is, without ending it (no-op once ended).
    pub fn suspend(&self) {
        let _ = self.control.send(Control::Suspend);
    }

    /// Lets a suspended process run again (no-op once ended, or when running).
    pub fn resume(&self) {
        let _ = self.control.send(Control::Resume);
    }
}

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The log file or its folder could not be created.
    #[error("failed to create log file {}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The operating system refused to start the binary.
    #[error("failed to start {name} ({})", program.display())]
    Spawn {
        /// The process name.
        name: String,
        /// The binary.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A way of running `awa` processes: one trait, one backend per engine.
pub trait Fleet: Send + Sync {
    /// The backend's name for reports (`process`).
    fn backend(&self) -> &'static str;

    /// Starts `spec`; from now on every report about it goes to `sink`.
    /// Must be called inside the tokio runtime, which watches the process.
    fn spawn(&self, spec: Spec, sink: Sink) -> Result<Handle, FleetError>;
}
