//! Fleet: starting, signalling and watching `awa` processes.
//!
//! The driver asks a [`Fleet`] backend to start a process described by a
//! [`Spec`]; the backend answers with a [`Handle`] (to stop or kill it)
//! and from then on reports everything about the process as
//! [`FleetMsg`]s on the cell's channel: each stdout line as a typed
//! [`Parsed`] line (an [`Event`], an unknown event, or garbage), each stderr line, the end of its
//! output, and its exit. Backends differ in how a process runs (a child
//! process, a container); the driver sees the same messages from both.
//!
//! Two backends: [`process::ProcessFleet`] (child processes of a binary)
//! and [`docker::DockerFleet`] (one container per process, through the
//! Docker API). What a backend starts is a [`Runnable`]: a binary, or an
//! image pinned by id. Spawning is async (a container is created and
//! started over the engine's API). A backend has a lifecycle: `prepare`
//! before the first cell (remove leftovers of crashed earlier runs) and
//! `shutdown` after the last (remove everything of this run, also after
//! Ctrl-C). An exit by signal is reported as a signal on both backends.

pub mod backend_choice;
pub mod cgroup;
pub mod docker;
pub mod events;
pub mod process;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

pub use docker::DockerFleet;
pub use events::{Event, Parsed};
pub use process::ProcessFleet;

/// What a backend starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runnable {
    /// An `awa` binary on this machine (the process backend).
    Binary(PathBuf),
    /// An image (the docker backend): started by its engine id, named by its reference.
    Image {
        /// `awa-runtime:0.6.2` or `127.0.0.1:5000/awa-runtime@sha256:...`.
        reference: String,
        /// The engine's image id (`sha256:...`).
        id: String,
    },
}

impl Runnable {
    /// What the fleet starts of a resolved artifact: its image when there
    /// is one, else its binary.
    pub fn of(resolved: &crate::artifacts::Resolved) -> Runnable {
        match &resolved.image {
            Some(image) => Runnable::Image {
                reference: image.reference.clone(),
                id: image.id.clone(),
            },
            None => Runnable::Binary(resolved.binary.clone()),
        }
    }
}

impl std::fmt::Display for Runnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Runnable::Binary(path) => write!(f, "{}", path.display()),
            Runnable::Image { reference, .. } => write!(f, "image {reference}"),
        }
    }
}

/// Who a process is, beyond its name: what the docker backend labels its container with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    /// The cell.
    pub cell: String,
    /// `worker`, `producer`, `migrate`, `flip`, `fence`, ...
    pub role: String,
    /// The matrix artifact (`previous`).
    pub artifact: String,
    /// The version its binary reports (`0.6.2`).
    pub version: String,
}

/// Index of a process in its cell's ledger: assigned by the driver before the spawn.
pub type ProcId = usize;

/// Everything a backend needs to start one process.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The driver's id for it; every message about it carries this.
    pub id: ProcId,
    /// Unique within the cell (`previous-worker-2`); also its `AWA_NAME`.
    pub name: String,
    /// The `awa` binary or image.
    pub runnable: Runnable,
    /// Cell, role, artifact and version (container labels).
    pub labels: Labels,
    /// Arguments (`worker`, `migrate --allow-live-runtimes`, ...).
    pub args: Vec<String>,
    /// The complete `AWA_*` environment; inherited `AWA_*` variables are removed.
    pub env: Vec<(String, String)>,
    /// Log file for its stdout and stderr (created, with its folder).
    pub log: PathBuf,
    /// What its output is held to, when it was handed a secret (empty
    /// otherwise).
    pub watch: Watch,
}

/// What a process's output is held to when it was handed a secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// Words it was handed in confidence (its password's): a line of its
    /// output that holds one is reported as [`Report::SecretPrinted`].
    pub words: Vec<String>,
    /// The DSN it was handed, as a correct redaction prints it.
    pub target: Option<Target>,
}

/// A handed DSN as it must be printed: a line that holds `marker` (the
/// part that names the server and database) and the mask printed the DSN
/// masked, and must hold `expected` (the DSN with its password, and
/// nothing else, masked); else it is reported as [`Report::TargetHidden`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// What names the DSN's server and database.
    pub marker: String,
    /// The DSN with its password, and nothing else, masked.
    pub expected: String,
}

impl Spec {
    /// Its environment as `KEY=value` words (a container's env, a log's note).
    fn env_words(&self) -> Vec<String> {
        self.env.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }
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
impl ExitInfo {
    /// A container's exit status as the engine reports it: `128 + N` is
    /// the shell convention for "ended by signal N" (docker's 137 is a
    /// SIGKILL), reported as the signal, like the process backend does.
    pub fn from_container_status(status: i64) -> ExitInfo {
        match status {
            129..=192 => ExitInfo {
                code: None,
                signal: Some((status - 128) as i32),
            },
            code => ExitInfo {
                code: i32::try_from(code).ok(),
                signal: None,
            },
        }
    }
}

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
    /// One stdout line, read against the runtime's event contract.
    Line(Parsed),
    /// One stderr line.
    Stderr(String),
    /// stdout and stderr are both closed: every line has been reported.
    OutputClosed,
    /// The process ended (reaped).
    Exited(ExitInfo),
    /// The line reported next (a [`Report::Line`] or [`Report::Stderr`])
    /// held a word of [`Spec::watch`]. Every line is reported redacted;
    /// this says one printed a secret, with the line as redacted, so a
    /// process that prints a credential is a finding and the credential
    /// still reaches no log or report.
    SecretPrinted {
        /// On stderr (else stdout).
        stderr: bool,
        /// The line, redacted.
        line: String,
    },
    /// The line reported next printed the DSN the process was handed
    /// ([`Watch::target`]), naming its server and database, with more
    /// than its password masked (the user's name, or other text beside
    /// the password).
    TargetHidden {
        /// On stderr (else stdout).
        stderr: bool,
        /// The line, redacted.
        line: String,
    },
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
pub type ReportSender = mpsc::UnboundedSender<FleetMsg>;

/// Sends `report` about process `id`, stamped now: every backend reports
/// through this (or [`send_report_at`]). A closed sink (the cell is over) drops it.
fn send_report(sink: &ReportSender, id: ProcId, report: Report) {
    send_report_at(sink, id, Instant::now(), report);
}

/// [`send_report`] stamped `at`: a backend that also logs the line takes
/// one instant for both, so the log's timeline and the ledger's agree.
fn send_report_at(sink: &ReportSender, id: ProcId, at: Instant, report: Report) {
    let _ = sink.send(FleetMsg { id, at, report });
}

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

/// A control on its way to a backend, and whom to tell once the backend
/// has applied it and checked that it took (for a suspend: every thread
/// of the process stopped, or the engine reports the container paused).
#[derive(Debug)]
pub struct Order {
    /// What to do.
    pub control: Control,
    // A String, as in `applied`: the waiter words it into its own harness error.
    applied: Option<oneshot::Sender<Result<(), String>>>,
}

impl Order {
    /// Tells the sender, if it waits, whether the control took effect
    /// (`Err` says what the backend saw instead).
    // A String: no caller asks how a control failed; each words it into a harness abort as it is.
    pub fn applied(self, result: Result<(), String>) {
        if let Some(tell) = self.applied {
            let _ = tell.send(result);
        }
    }

    /// Whether the sender waits to hear how it went: only then is it
    /// worth checking that the control took.
    pub fn awaited(&self) -> bool {
        self.applied.is_some()
    }
}

/// The driver's grip on one started process. Signals to a process that
/// already ended are dropped, never sent to a recycled pid.
#[derive(Clone, Debug)]
pub struct Handle {
    /// The driver's id.
    pub id: ProcId,
    /// The operating-system process id, where there is one.
    pub pid: Option<u32>,
    /// The container id, on the docker backend.
    pub container: Option<String>,
    control: mpsc::UnboundedSender<Order>,
    /// Whether the driver holds it stopped, and when that last changed:
    /// its heartbeat is then late on purpose, not for want of CPU.
    held: Arc<Mutex<Held>>,
}

/// A process the driver stopped (or let go), as starvation reads it.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    stopped: bool,
    changed: Option<Instant>,
}

impl Handle {
    /// A handle that forwards controls to `control` (for backends).
    pub fn new(id: ProcId, pid: Option<u32>, control: mpsc::UnboundedSender<Order>) -> Self {
        Handle {
            id,
            pid,
            container: None,
            control,
            held: Arc::default(),
        }
    }

    /// A handle for a container (for the docker backend).
    pub fn container(id: ProcId, container: String, control: mpsc::UnboundedSender<Order>) -> Self {
        Handle {
            id,
            pid: None,
            container: Some(container),
            control,
            held: Arc::default(),
        }
    }

    /// Whether the driver stopped it, or let it go less than `grace` ago
    /// (a resumed runtime's first beat is still to come).
    pub fn held_within(&self, grace: Duration) -> bool {
        let held = *self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.stopped || held.changed.is_some_and(|t| t.elapsed() < grace)
    }

    fn mark(&self, control: Control) {
        let stopped = match control {
            Control::Suspend => true,
            Control::Resume => false,
            Control::Terminate | Control::Kill => return,
        };
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        *held = Held {
            stopped,
            changed: Some(Instant::now()),
        };
    }

    fn send(&self, control: Control) {
        self.mark(control);
        let _ = self.control.send(Order {
            control,
            applied: None,
        });
    }

    /// Sends SIGTERM (no-op once the process has ended).
    pub fn terminate(&self) {
        self.send(Control::Terminate);
    }

    /// Sends SIGKILL (no-op once the process has ended).
    pub fn kill(&self) {
        self.send(Control::Kill);
    }

    /// Stops the process where it is, without ending it, and returns once
    /// the backend has seen it stopped (every thread of the process in
    /// the stopped state; the engine reporting the container paused).
    /// `Err` says why it is not: the signal or the engine's call failed,
    /// the process did not stop within the backend's bound, or it had
    /// already ended.
    // A String: kill and suspend abort the step as the harness's own error with these words.
    pub async fn suspended(&self) -> Result<(), String> {
        self.order(Control::Suspend).await
    }

    /// Lets a suspended process run again (no-op once ended, or when running).
    pub fn resume(&self) {
        self.send(Control::Resume);
    }

    /// Lets a suspended process run again and returns once the backend has
    /// seen it running (no thread left stopped; the container unpaused).
    // A String: resume aborts the step as the harness's own error with these words.
    pub async fn resumed(&self) -> Result<(), String> {
        self.order(Control::Resume).await
    }

    // A String: what the backend said (`Order::applied`), handed on as it is.
    async fn order(&self, control: Control) -> Result<(), String> {
        self.mark(control);
        let (tell, told) = oneshot::channel();
        let order = Order {
            control,
            applied: Some(tell),
        };
        if self.control.send(order).is_err() {
            return Err("it had already ended".into());
        }
        told.await
            .unwrap_or_else(|_| Err("it ended before the backend could apply it".into()))
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
    /// The operating system (or the engine) refused to start it.
    #[error("failed to start {name} ({runnable})")]
    Spawn {
        /// The process name.
        name: String,
        /// The binary or image.
        runnable: Runnable,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// This backend cannot start that kind of runnable.
    #[error("the {backend} backend cannot start {runnable}")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// What it was asked to start.
        runnable: Runnable,
    },
    /// The engine failed a lifecycle request (listing or removing containers).
    #[error("the {backend} backend failed {action}: {detail}")]
    Lifecycle {
        /// The backend.
        backend: &'static str,
        /// What it was doing.
        action: &'static str,
        /// The engine's words.
        detail: String,
    },
}

/// What `prepare` found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Leftovers of crashed earlier runs that were removed (container ids or names).
    pub removed: Vec<String>,
}

/// What `shutdown` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shutdown {
    /// This run's leftovers removed at the end (containers that outlived their process).
    pub removed: Vec<String>,
    /// Kept on purpose (`--keep`).
    pub kept: Vec<String>,
}

/// A way of running `awa` processes: one trait, one backend per engine.
pub trait Fleet: Send + Sync {
    /// The backend's name for reports (`process`, `docker`).
    fn backend(&self) -> &'static str;

    /// Starts `spec`; from now on every report about it goes to `sink`.
    /// Must be awaited inside the tokio runtime, which watches the process.
    fn spawn(&self, spec: Spec, sink: ReportSender) -> BoxFuture<'_, Result<Handle, FleetError>>;

    /// Before the first cell: removes what crashed earlier runs left behind.
    fn prepare(&self) -> BoxFuture<'_, Result<Prepared, FleetError>> {
        Box::pin(async { Ok(Prepared::default()) })
    }

    /// After the last cell (and after Ctrl-C): removes everything of this run.
    fn shutdown(&self) -> BoxFuture<'_, Result<Shutdown, FleetError>> {
        Box::pin(async { Ok(Shutdown::default()) })
    }

    /// CPU time of everything this backend ran, when the operating
    /// system's child accounting does not see it (containers are children
    /// of the engine, not of rehearse): `None` means "use RUSAGE_CHILDREN".
    /// Final once `shutdown` has returned.
    fn container_cpu(&self) -> Option<ContainerCpu> {
        None
    }
}

pub use crate::vocab::cpu::CpuSource;

/// The CPU time of a run's containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerCpu {
    /// User plus system time, in ms.
    pub ms: u64,
    /// How it was counted.
    pub source: CpuSource,
    /// The engine's own CPU meanwhile, outside the containers (its
    /// daemons, shims and storage driver), in ms; `None` where no engine
    /// process runs on this machine.
    pub engine_ms: Option<u64>,
}
