//! The `docker` backend: every `awa` is a container, through the Docker API.
//!
//! Same observable behaviour as the process backend: one container per
//! worker, producer, migrate, flip and fence run, on the host network (so
//! it reaches the loopback PostgreSQL), with the cell's `AWA_*`
//! environment; stdout lines from the log stream are typed [`Event`]s,
//! stderr lines are kept in the log, every line with the engine's time of
//! it (see `EngineLines`); a hard kill is SIGKILL through the
//! API, a graceful stop SIGTERM, a suspend the engine's pause (resumed by
//! unpause); the exit status comes from the wait API
//! (`128 + N` reported as signal N, as the process backend reports it).
//!
//! Every container carries the labels `rehearse.run`, `rehearse.cell`,
//! `rehearse.role`, `rehearse.version`, `rehearse.artifact`, and the
//! pid and host of the rehearse that started it: `prepare` removes the
//! containers of runs whose rehearse is gone (a crash, a SIGKILL), never
//! those of a run still going; `shutdown` removes this run's. A container
//! is removed as soon as its process has ended and its log is read,
//! unless `--keep`.
//!
//! CPU time: containers are children of the engine, not of rehearse, so
//! `RUSAGE_CHILDREN` never sees them. On a local engine with the
//! `cgroupfs` driver they run under one parent cgroup per run, whose
//! kernel counter is read at shutdown: every container's whole CPU, short
//! ones included ([`super::cgroup`]). Elsewhere the engine's stats stream
//! is sampled (about once a second per container; the CPU of a container's
//! last second, and of one shorter than a second, is missed), and the
//! report says which of the two it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, ContainerStateStatusEnum, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, KillContainerOptions, ListContainersOptions, LogsOptions,
    RemoveContainerOptions, StartContainerOptions, StatsOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::cgroup::RunCgroup;
use super::process::{Log, NOTE_PREFIX, log_env, log_line, open_log, report_exit, report_line};
use super::{
    ContainerCpu, Control, CpuSource, ExitInfo, Fleet, FleetError, Handle, Order, Prepared, Report,
    Runnable, Shutdown, Sink, Spec, send_report,
};
use crate::image::Engine;
use crate::stamp::parse_rfc3339;

/// Container labels.
pub mod label {
    /// The run id (the report folder's name).
    pub const RUN: &str = "rehearse.run";
    /// The cell.
    pub const CELL: &str = "rehearse.cell";
    /// `worker`, `producer`, `migrate`, `flip`, `fence`, `probe`, ...
    pub const ROLE: &str = "rehearse.role";
    /// The version the binary reports.
    pub const VERSION: &str = "rehearse.version";
    /// The matrix artifact.
    pub const ARTIFACT: &str = "rehearse.artifact";
    /// The process name (`previous-worker-2`).
    pub const NAME: &str = "rehearse.name";
    /// The pid of the rehearse that started it.
    pub const PID: &str = "rehearse.pid";
    /// The host that rehearse ran on.
    pub const HOST: &str = "rehearse.host";
}

/// How long to wait for a container's log stream to end after its exit.
const LOG_DRAIN: Duration = Duration::from_secs(5);

/// Runs `awa` as containers of images.
#[derive(Clone, Debug)]
pub struct DockerFleet {
    engine: Engine,
    run_id: String,
    keep: bool,
    /// Last CPU sample (ns) of every container not under the run's cgroup.
    cpu_ns: Arc<Mutex<HashMap<String, u64>>>,
    /// The run's parent cgroup, when the engine places containers where
    /// rehearse can read them (set by `prepare`).
    cgroup: Arc<Mutex<Option<RunCgroup>>>,
    /// The parent cgroup's CPU (ns), read at shutdown.
    cgroup_ns: Arc<Mutex<Option<u64>>>,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Whether a process with this pid exists on this machine.
pub(super) fn alive(pid: i32) -> bool {
    // Signal 0 only checks that the process exists.
    pid > 0
        && match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
            Ok(()) => true,
            Err(e) => e == nix::errno::Errno::EPERM,
        }
}

/// A container name the engine accepts, unique per run and process.
fn container_name(run_id: &str, cell: &str, name: &str) -> String {
    let raw = format!("rehearse-{run_id}-{cell}-{name}");
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl DockerFleet {
    /// A fleet for run `run_id` on `engine`; `keep` leaves containers in place.
    pub fn new(engine: Engine, run_id: &str, keep: bool) -> DockerFleet {
        DockerFleet {
            engine,
            run_id: run_id.to_owned(),
            keep,
            cpu_ns: Arc::default(),
            cgroup: Arc::default(),
            cgroup_ns: Arc::default(),
        }
    }

    /// The parent cgroup of this run's containers, if the engine's driver
    /// takes a path (`cgroupfs`; `systemd` wants slices, left alone).
    async fn choose_cgroup(&self) -> Option<RunCgroup> {
        use bollard::models::SystemInfoCgroupDriverEnum as Driver;
        let info = self.engine.docker.info().await.ok()?;
        (info.cgroup_driver == Some(Driver::CGROUPFS)).then(|| RunCgroup::new(&self.run_id))
    }

    fn run_cgroup(&self) -> Option<RunCgroup> {
        self.cgroup.lock().ok()?.clone()
    }

    /// The engine it runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The labels every container (and image probe) of this run carries.
    pub fn run_labels(&self, cell: &str, role: &str) -> HashMap<String, String> {
        HashMap::from([
            (label::RUN.to_owned(), self.run_id.clone()),
            (label::CELL.to_owned(), cell.to_owned()),
            (label::ROLE.to_owned(), role.to_owned()),
            (label::PID.to_owned(), std::process::id().to_string()),
            (label::HOST.to_owned(), hostname()),
        ])
    }

    fn lifecycle(action: &'static str, e: impl std::fmt::Display) -> FleetError {
        FleetError::Lifecycle {
            backend: "docker",
            action,
            detail: e.to_string(),
        }
    }

    /// Containers carrying `label[=value]`, with their labels.
    async fn containers(
        &self,
        filter: String,
    ) -> Result<Vec<(String, HashMap<String, String>)>, FleetError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_owned(), vec![filter])])),
            ..Default::default()
        };
        let list = self
            .engine
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| Self::lifecycle("listing containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
            .collect())
    }

    async fn remove(&self, id: &str) -> Result<(), FleetError> {
        match self
            .engine
            .docker
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => Ok(()),
            // Already gone (removed by its own task meanwhile).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(Self::lifecycle("removing a container", e)),
        }
    }

    async fn prepare_now(&self) -> Result<Prepared, FleetError> {
        let host = hostname();
        let mut removed = Vec::new();
        for (id, labels) in self.containers(label::RUN.to_owned()).await? {
            let same_host = labels.get(label::HOST).is_some_and(|h| *h == host);
            let owner = labels.get(label::PID).and_then(|p| p.parse::<i32>().ok());
            let live_run = labels.get(label::RUN) == Some(&self.run_id)
                || (same_host
                    && owner.is_some_and(|pid| pid as u32 != std::process::id() && alive(pid)));
            if live_run {
                continue;
            }
            self.remove(&id).await?;
            let name = labels.get(label::NAME).cloned().unwrap_or_default();
            let run = labels.get(label::RUN).cloned().unwrap_or_default();
            removed.push(format!("{} ({name} of run {run})", &id[..id.len().min(12)]));
        }
        // Their now empty parent cgroups, too.
        RunCgroup::remove_stale(alive);
        let cgroup = self.choose_cgroup().await;
        if let Ok(mut slot) = self.cgroup.lock() {
            *slot = cgroup;
        }
        Ok(Prepared { removed })
    }

    async fn shutdown_now(&self) -> Result<Shutdown, FleetError> {
        let mut done = Shutdown::default();
        for (id, labels) in self
            .containers(format!("{}={}", label::RUN, self.run_id))
            .await?
        {
            let what = format!(
                "{} ({})",
                &id[..id.len().min(12)],
                labels.get(label::NAME).map_or("probe", String::as_str)
            );
            if self.keep {
                done.kept.push(what);
            } else {
                self.remove(&id).await?;
                done.removed.push(what);
            }
        }
        // Every container is gone (or kept): the counter holds all their CPU.
        if let Some(cgroup) = self.run_cgroup() {
            let usage = cgroup.usage_ns();
            if let Ok(mut slot) = self.cgroup_ns.lock() {
                *slot = usage;
            }
            if !self.keep {
                tokio::task::spawn_blocking(move || cgroup.remove())
                    .await
                    .map_err(|e| Self::lifecycle("removing the run's cgroup", e))?;
            }
        }
        Ok(done)
    }

    async fn start(&self, spec: Spec, sink: Sink) -> Result<Handle, FleetError> {
        let Runnable::Image {
            reference,
            id: image,
        } = &spec.runnable
        else {
            return Err(FleetError::Unsupported {
                backend: "docker",
                runnable: spec.runnable.clone(),
            });
        };
        let log = open_log(&spec.log)?;
        let container = self.create_and_start(&spec, reference, image, &log).await?;
        let control = self.watch_container(&container, spec.id, sink, log);
        Ok(Handle::container(spec.id, container, control))
    }

    /// What the engine creates for `spec`: its image, command, environment
    /// and labels, on the host network, under the run's cgroup if any.
    fn container_body(&self, spec: &Spec, image: &str) -> ContainerCreateBody {
        let mut labels = self.run_labels(&spec.labels.cell, &spec.labels.role);
        labels.extend([
            (label::VERSION.to_owned(), spec.labels.version.clone()),
            (label::ARTIFACT.to_owned(), spec.labels.artifact.clone()),
            (label::NAME.to_owned(), spec.name.clone()),
        ]);
        ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(spec.args.clone()),
            env: Some(spec.env_words()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some("host".into()),
                cgroup_parent: self.run_cgroup().map(|c| c.parent()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Creates and starts the container of `spec`, noting each step (and
    /// a failure) in its log; a container that fails to start is removed.
    /// Returns the container's id.
    async fn create_and_start(
        &self,
        spec: &Spec,
        reference: &str,
        image: &str,
        log: &Log,
    ) -> Result<String, FleetError> {
        let spawn_error = |e: bollard::errors::Error| FleetError::Spawn {
            name: spec.name.clone(),
            runnable: spec.runnable.clone(),
            source: std::io::Error::other(e.to_string()),
        };
        let name = container_name(&self.run_id, &spec.labels.cell, &spec.name);
        log_line(
            log,
            &format!(
                "{NOTE_PREFIX}container {name} of image {reference} ({image}): awa {}",
                spec.args.join(" ")
            ),
        );
        log_env(log, spec);
        let created = self
            .engine
            .docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name),
                    ..Default::default()
                }),
                self.container_body(spec, image),
            )
            .await
            .map_err(|e| {
                log_line(log, &format!("{NOTE_PREFIX}failed to create: {e}"));
                spawn_error(e)
            })?;
        let container = created.id;
        if let Err(e) = self
            .engine
            .docker
            .start_container(&container, None::<StartContainerOptions>)
            .await
        {
            log_line(log, &format!("{NOTE_PREFIX}failed to start: {e}"));
            let _ = self.remove(&container).await;
            return Err(spawn_error(e));
        }
        log_line(log, &format!("{NOTE_PREFIX}container id {container}"));
        Ok(container)
    }

    /// Starts the tasks that follow a started container (its log stream,
    /// its CPU where the kernel's counter is not readable, its end) and
    /// returns where the driver's controls for it go.
    fn watch_container(
        &self,
        container: &str,
        id: usize,
        sink: Sink,
        log: Log,
    ) -> mpsc::UnboundedSender<Order> {
        let (exited, told) = oneshot::channel();
        let logs = LogFollower {
            task: tokio::spawn(read_logs(
                self.engine.clone(),
                container.to_owned(),
                id,
                sink.clone(),
                log.clone(),
                told,
            )),
            exited,
        };
        let counted = self.run_cgroup().is_some_and(|c| c.holds(container));
        let stats = (!counted).then(|| {
            tokio::spawn(sample_cpu(
                self.engine.clone(),
                container.to_owned(),
                self.cpu_ns.clone(),
            ))
        });
        let (control, controls) = mpsc::unbounded_channel::<Order>();
        tokio::spawn(watch(
            self.clone(),
            container.to_owned(),
            id,
            sink,
            log,
            controls,
            logs,
            stats,
        ));
        control
    }

    /// One control through the engine's API. A pause or unpause is
    /// checked against the engine's own view of the container afterwards:
    /// an engine can fail to freeze a cgroup under load (and say so only
    /// in the call's error), and a step that goes on believing the
    /// process stopped judges a cell on something that did not happen.
    async fn apply(&self, container: &str, control: Control) -> Result<(), String> {
        let docker = &self.engine.docker;
        match control {
            Control::Terminate => {
                let sent = self.signal(container, "SIGTERM").await;
                // A paused container would hold the SIGTERM until unpaused:
                // a graceful stop must not wait on a cell that left it so.
                let _ = docker.unpause_container(container).await;
                sent
            }
            Control::Kill => self.signal(container, "SIGKILL").await,
            // The engine's pause freezes the container's cgroup: the
            // process keeps its state and resumes where it stopped.
            Control::Suspend => {
                docker
                    .pause_container(container)
                    .await
                    .map_err(|e| format!("the engine could not pause it: {e}"))?;
                self.paused_is(container, true).await
            }
            Control::Resume => {
                docker
                    .unpause_container(container)
                    .await
                    .map_err(|e| format!("the engine could not unpause it: {e}"))?;
                self.paused_is(container, false).await
            }
        }
    }

    /// Whether the engine reports the container paused as `want`.
    async fn paused_is(&self, container: &str, want: bool) -> Result<(), String> {
        let state = self
            .engine
            .docker
            .inspect_container(container, None)
            .await
            .map_err(|e| format!("the engine could not say whether it is paused: {e}"))?
            .state;
        // The status says it in one word on every engine (some report a
        // paused container as not running); the flag, where there is no status.
        let status = state.as_ref().and_then(|s| s.status);
        let paused = match status {
            Some(ContainerStateStatusEnum::PAUSED) => Some(true),
            Some(ContainerStateStatusEnum::RUNNING) => Some(false),
            Some(other) => {
                return Err(format!("the engine reports it {other}, not running"));
            }
            None => state.as_ref().and_then(|s| s.paused),
        };
        match paused {
            Some(p) if p == want => Ok(()),
            Some(true) => Err("the engine reports it still paused after the call".into()),
            Some(false) => Err("the engine reports it not paused after the call".into()),
            None => Err("the engine reports it in no known pause state".into()),
        }
    }

    async fn signal(&self, container: &str, signal: &str) -> Result<(), String> {
        self.engine
            .docker
            .kill_container(
                container,
                Some(KillContainerOptions {
                    signal: signal.to_owned(),
                }),
            )
            .await
            .map_err(|e| format!("the engine could not send {signal}: {e}"))
    }
}

/// Waits for the container to end, delivering controls meanwhile; then
/// reports the exit, waits for the log stream to end, and removes it.
#[expect(
    clippy::too_many_arguments,
    reason = "one task's whole state, moved in once"
)]
async fn watch(
    fleet: DockerFleet,
    container: String,
    id: usize,
    sink: Sink,
    log: Log,
    mut controls: mpsc::UnboundedReceiver<Order>,
    logs: LogFollower,
    stats: Option<tokio::task::JoinHandle<()>>,
) {
    let mut wait = fleet
        .engine
        .docker
        .wait_container(&container, None::<WaitContainerOptions>);
    let mut listening = true;
    let status = loop {
        tokio::select! {
            status = wait.next() => break status,
            order = controls.recv(), if listening => match order {
                Some(order) => {
                    let result = fleet.apply(&container, order.control).await;
                    order.applied(result);
                }
                None => listening = false,
            },
        }
    };
    let info = match status {
        Some(Ok(response)) => Ok(ExitInfo::from_container_status(response.status_code)),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
            Ok(ExitInfo::from_container_status(code))
        }
        other => {
            // The wait failed (the engine restarted?): ask for the state instead.
            let state = fleet
                .engine
                .docker
                .inspect_container(&container, None)
                .await
                .ok()
                .and_then(|c| c.state);
            match state.and_then(|s| s.exit_code) {
                Some(code) => Ok(ExitInfo::from_container_status(code)),
                None => Err(format!("{other:?}")),
            }
        }
    };
    report_exit(info, id, &sink, &log);
    let _ = logs.exited.send(());
    let _ = tokio::time::timeout(LOG_DRAIN, logs.task).await;
    if let Some(stats) = stats {
        stats.abort();
    }
    if !fleet.keep {
        let _ = fleet.remove(&container).await;
    }
}

/// The task that follows a container's log stream, and how it is told
/// the container has ended.
struct LogFollower {
    task: tokio::task::JoinHandle<()>,
    exited: oneshot::Sender<()>,
}

/// Follows the container's log stream, splitting stdout and stderr into
/// lines, each logged with the engine's time of it.
///
/// A followed stream can end before it has carried the container's last
/// output (the engine closes it when the container stops, and on this
/// engine a last line without its newline was lost that way about one
/// run in two). So once the container has ended, the log is read once
/// more, from the second of the last frame seen, and every frame not yet
/// seen is taken: no output is lost to that race.
async fn read_logs(
    engine: Engine,
    container: String,
    id: usize,
    sink: Sink,
    log: Log,
    exited: oneshot::Receiver<()>,
) {
    let (mut out, mut err) = (EngineLines::default(), EngineLines::default());
    let take = |chunk: LogOutput, out: &mut EngineLines, err: &mut EngineLines| match chunk {
        LogOutput::StdErr { message } => forward(err, &message, true, id, &sink, &log),
        LogOutput::StdOut { message } | LogOutput::Console { message } => {
            forward(out, &message, false, id, &sink, &log);
        }
        LogOutput::StdIn { .. } => {}
    };
    let options = |follow: bool, since: i32| LogsOptions {
        follow,
        stdout: true,
        stderr: true,
        timestamps: true,
        since,
        ..Default::default()
    };
    let mut stream = engine.docker.logs(&container, Some(options(true, 0)));
    while let Some(Ok(chunk)) = stream.next().await {
        take(chunk, &mut out, &mut err);
    }
    drop(stream);
    // Read again only once the container has ended (its output is then
    // all in the engine's log), and only where every frame had a time.
    if tokio::time::timeout(LOG_DRAIN, exited)
        .await
        .is_ok_and(|r| r.is_ok())
        && out.seen.comparable()
        && err.seen.comparable()
    {
        let since = [out.seen.second(), err.seen.second()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(0);
        let (mut out_seen, mut err_seen) = (out.seen.rewound(), err.seen.rewound());
        let mut again = engine.docker.logs(&container, Some(options(false, since)));
        while let Some(Ok(chunk)) = again.next().await {
            let unseen = match &chunk {
                LogOutput::StdErr { message } => err_seen.is_new(message),
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    out_seen.is_new(message)
                }
                LogOutput::StdIn { .. } => false,
            };
            if unseen {
                take(chunk, &mut out, &mut err);
            }
        }
    }
    // A last line without its newline still counts.
    for (lines, is_stderr) in [(&mut out, false), (&mut err, true)] {
        if let Some((time, raw)) = lines.finish() {
            report_line(&raw, is_stderr, id, &sink, &log, time);
        }
    }
    send_report(&sink, id, Report::OutputClosed);
}

/// Sends (and logs) every line one frame of the engine's log stream completes.
fn forward(
    lines: &mut EngineLines,
    frame: &[u8],
    is_stderr: bool,
    id: usize,
    sink: &Sink,
    log: &Log,
) {
    for (time, raw) in lines.push(frame) {
        report_line(&raw, is_stderr, id, sink, log, time);
    }
}

/// One output stream of a container (stdout or stderr), from the engine's
/// frames to lines.
///
/// Asked for timestamps, the engine starts every frame with the time it
/// received that output (RFC 3339 to the nanosecond) and a space, then
/// the output itself: one line, or a part of a line longer than the
/// engine's buffer, each part with a time of its own. The time is taken
/// off each frame before its bytes join the line, so a stdout line is
/// read against the event contract exactly as the process wrote it; a
/// line carries the time of the frame that completed it (as the process
/// backend stamps a line when its newline is read). A frame that does
/// not start with a time (an engine that ignores the option) keeps all
/// its bytes, and its lines are stamped when read.
#[derive(Debug, Default)]
struct EngineLines {
    /// Bytes of a line whose newline has not come yet.
    pending: Vec<u8>,
    /// The time of the last frame that added to `pending`.
    time: Option<SystemTime>,
    /// The frames taken so far, by their time.
    seen: Seen,
}

impl EngineLines {
    /// Takes one frame; returns the lines it completed (newline
    /// included), each with the engine's time of the frame.
    fn push(&mut self, frame: &[u8]) -> Vec<(Option<SystemTime>, Vec<u8>)> {
        let (time, output) = split_engine_time(frame);
        self.seen.note(time);
        self.pending.extend_from_slice(output);
        self.time = time;
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            lines.push((time, self.pending.drain(..=end).collect()));
        }
        lines
    }

    /// The last line, when the stream ended without its newline.
    fn finish(&mut self) -> Option<(Option<SystemTime>, Vec<u8>)> {
        (!self.pending.is_empty()).then(|| (self.time, std::mem::take(&mut self.pending)))
    }
}

/// Which frames of one output stream were taken, by the engine's time of
/// each: enough to pass only the frames after them when the log is read again.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    /// The time of the latest frame.
    last: Option<SystemTime>,
    /// How many frames carried exactly that time.
    at_last: usize,
    /// Whether a frame came without a time (then frames cannot be matched).
    untimed: bool,
}

impl Seen {
    fn note(&mut self, time: Option<SystemTime>) {
        match time {
            None => self.untimed = true,
            Some(t) if self.last == Some(t) => self.at_last += 1,
            Some(t) => {
                self.last = Some(t);
                self.at_last = 1;
            }
        }
    }

    /// Whether frames read again can be told from these by their time.
    fn comparable(&self) -> bool {
        !self.untimed
    }

    /// The whole second of the latest frame, as the engine's `since` takes it.
    fn second(&self) -> Option<i32> {
        let secs = self
            .last?
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .as_secs();
        i32::try_from(secs).ok()
    }

    /// A filter over the same stream read again from an earlier point.
    fn rewound(&self) -> Unseen {
        Unseen {
            last: self.last,
            skip: self.at_last,
        }
    }
}

/// Passes the frames of a stream read again that come after those [`Seen`].
#[derive(Debug)]
struct Unseen {
    last: Option<SystemTime>,
    /// Frames at exactly `last` still to pass over.
    skip: usize,
}

impl Unseen {
    fn is_new(&mut self, frame: &[u8]) -> bool {
        let (Some(time), Some(last)) = (split_engine_time(frame).0, self.last) else {
            return true;
        };
        if time < last {
            return false;
        }
        if time == last && self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }
}

/// The engine's time at the start of a log frame, and the output after
/// it; `(None, frame)` when the frame does not start with a time and a space.
fn split_engine_time(frame: &[u8]) -> (Option<SystemTime>, &[u8]) {
    // `2026-12-04T15:31:22.123456789+14:00`: 35 bytes at most.
    let head = &frame[..frame.len().min(40)];
    let time = head.iter().position(|&b| b == b' ').and_then(|space| {
        let text = std::str::from_utf8(&frame[..space]).ok()?;
        Some((parse_rfc3339(text)?, space))
    });
    match time {
        Some((time, space)) => (Some(time), &frame[space + 1..]),
        None => (None, frame),
    }
}

/// Keeps the container's latest CPU total (ns) from the engine's stats stream.
async fn sample_cpu(engine: Engine, container: String, cpu: Arc<Mutex<HashMap<String, u64>>>) {
    let mut stream = engine.docker.stats(
        &container,
        Some(StatsOptions {
            stream: true,
            one_shot: false,
        }),
    );
    while let Some(Ok(sample)) = stream.next().await {
        let total = sample
            .cpu_stats
            .and_then(|c| c.cpu_usage)
            .and_then(|u| u.total_usage)
            .unwrap_or(0);
        if let Ok(mut map) = cpu.lock() {
            let entry = map.entry(container.clone()).or_default();
            *entry = (*entry).max(total);
        }
    }
}

impl Fleet for DockerFleet {
    fn backend(&self) -> &'static str {
        "docker"
    }

    fn spawn(&self, spec: Spec, sink: Sink) -> BoxFuture<'_, Result<Handle, FleetError>> {
        Box::pin(self.start(spec, sink))
    }

    fn prepare(&self) -> BoxFuture<'_, Result<Prepared, FleetError>> {
        Box::pin(self.prepare_now())
    }

    fn shutdown(&self) -> BoxFuture<'_, Result<Shutdown, FleetError>> {
        Box::pin(self.shutdown_now())
    }

    fn container_cpu(&self) -> Option<ContainerCpu> {
        let sampled: u64 = self.cpu_ns.lock().ok()?.values().sum();
        let counted = self.cgroup_ns.lock().ok().and_then(|n| *n);
        Some(match counted {
            Some(ns) => ContainerCpu {
                ms: (ns + sampled) / 1_000_000,
                source: CpuSource::Cgroup,
            },
            None => ContainerCpu {
                ms: sampled / 1_000_000,
                source: CpuSource::Stats,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Event, Parsed};

    const T1: &str = "2026-12-04T15:31:22.123456789Z";
    const T2: &str = "2026-12-04T15:31:22.200000001Z";

    #[test]
    fn the_engines_time_is_taken_off_each_frame_and_a_line_has_the_time_that_completed_it() {
        type Line = (Option<&'static str>, &'static str);
        let t1 = format!("{T1} ");
        let t2 = format!("{T2} ");
        let cases: Vec<(&str, Vec<String>, Vec<Line>)> = vec![
            (
                "an event, as the engine frames it",
                vec![format!("{t1}{{\"event\":\"ready\"}}\n")],
                vec![(Some(T1), "{\"event\":\"ready\"}\n")],
            ),
            (
                "a frame without a time keeps its bytes",
                vec!["plain output\n".into()],
                vec![(None, "plain output\n")],
            ),
            (
                "a line longer than the engine's buffer, in two timed parts",
                vec![format!("{t1}{{\"event\":"), format!("{t2}\"ready\"}}\n")],
                vec![(Some(T2), "{\"event\":\"ready\"}\n")],
            ),
            (
                "the process's own time stays in its line",
                vec![format!("{t1}2026-01-01T00:00:00Z INFO awa: started\n")],
                vec![(Some(T1), "2026-01-01T00:00:00Z INFO awa: started\n")],
            ),
            (
                "an empty line",
                vec![format!("{t1}\n")],
                vec![(Some(T1), "\n")],
            ),
            (
                "two lines in one frame share its time",
                vec![format!("{t1}a\nb\n")],
                vec![(Some(T1), "a\n"), (Some(T1), "b\n")],
            ),
            (
                "a last line without its newline, at the end of the stream",
                vec![format!("{t1}done\n"), format!("{t2}tail")],
                vec![(Some(T1), "done\n"), (Some(T2), "tail")],
            ),
            (
                "a time not followed by a space is output",
                vec![format!("{T1}\n")],
                vec![(None, "2026-12-04T15:31:22.123456789Z\n")],
            ),
            (
                "a word that is no time is output",
                vec!["stderr: 2026-12-04T15:31:22Z boom\n".into()],
                vec![(None, "stderr: 2026-12-04T15:31:22Z boom\n")],
            ),
        ];
        for (what, frames, want) in cases {
            let mut lines = EngineLines::default();
            let mut got: Vec<(Option<SystemTime>, Vec<u8>)> = Vec::new();
            for frame in &frames {
                got.extend(lines.push(frame.as_bytes()));
            }
            got.extend(lines.finish());
            let want: Vec<(Option<SystemTime>, Vec<u8>)> = want
                .iter()
                .map(|(time, text)| {
                    (
                        time.map(|t| parse_rfc3339(t).unwrap()),
                        text.as_bytes().to_vec(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_log_read_again_passes_only_the_frames_after_those_seen() {
        let frame = |t: &str, text: &str| format!("{t} {text}").into_bytes();
        let t0 = "2026-12-04T15:31:21.900000000Z";
        // Seen: one frame at T0, two at T1 (the engine's time to the ns can repeat).
        let mut lines = EngineLines::default();
        for f in [frame(t0, "a\n"), frame(T1, "b\n"), frame(T1, "c\n")] {
            lines.push(&f);
        }
        assert!(lines.seen.comparable());
        let second = lines.seen.second().unwrap();
        let t1 = parse_rfc3339(T1).unwrap();
        assert_eq!(
            i64::from(second),
            t1.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
        );
        // Read again from that second: T0 and both T1 frames were taken; a
        // third T1 frame and a later one were not.
        let mut unseen = lines.seen.rewound();
        let again = [
            frame(t0, "a\n"),
            frame(T1, "b\n"),
            frame(T1, "c\n"),
            frame(T1, "d\n"),
            frame(T2, "tail"),
        ];
        let passed: Vec<bool> = again.iter().map(|f| unseen.is_new(f)).collect();
        assert_eq!(passed, [false, false, false, true, true]);
        // A stream that saw nothing passes everything; one untimed frame
        // makes the stream unmatched.
        let mut empty = Seen::default().rewound();
        assert!(empty.is_new(&frame(t0, "x\n")));
        let mut untimed = EngineLines::default();
        untimed.push(b"plain\n");
        assert!(!untimed.seen.comparable());
        assert_eq!(Seen::default().second(), None);
    }

    #[test]
    fn docker_lines_are_logged_with_the_engines_time_and_parsed_without_it() {
        let dir =
            std::env::temp_dir().join(format!("rehearse-docker-lines-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = open_log(&dir.join("w.log")).unwrap();
        let (sink, mut reports) = mpsc::unbounded_channel();
        let (mut out, mut err) = (EngineLines::default(), EngineLines::default());
        forward(
            &mut err,
            format!("{T1} oops\n").as_bytes(),
            true,
            4,
            &sink,
            &log,
        );
        let event = r#"{"event":"refused","reason":"fenced"}"#;
        forward(
            &mut out,
            format!("{T2} {event}\n").as_bytes(),
            false,
            4,
            &sink,
            &log,
        );
        forward(&mut out, b"untimed\n", false, 4, &sink, &log);
        let text = std::fs::read_to_string(dir.join("w.log")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "2026-12-04T15:31:22.123456Z stderr| oops");
        assert_eq!(lines[1], format!("2026-12-04T15:31:22.200000Z {event}"));
        // Stamped when read: now, to the microsecond.
        let (time, rest) = super::super::process::parse_log_line(lines[2]).unwrap();
        assert_eq!(rest, "untimed");
        assert!(
            time.elapsed().unwrap() < Duration::from_secs(60),
            "{}",
            lines[2]
        );
        let got: Vec<Report> = std::iter::from_fn(|| reports.try_recv().ok())
            .map(|m| m.report)
            .collect();
        assert!(
            matches!(&got[0], Report::Stderr(l) if l == "oops"),
            "{got:?}"
        );
        assert!(
            matches!(&got[1], Report::Line(Parsed::Event(Event::Refused(r))) if r.reason == "fenced"),
            "{got:?}"
        );
        assert!(
            matches!(&got[2], Report::Line(Parsed::Garbled { line }) if line == "untimed"),
            "{got:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn container_statuses_above_128_are_signals() {
        assert_eq!(
            ExitInfo::from_container_status(137),
            ExitInfo {
                code: None,
                signal: Some(nix::sys::signal::Signal::SIGKILL as i32)
            }
        );
        assert_eq!(
            ExitInfo::from_container_status(143).to_string(),
            "killed by SIGTERM"
        );
        assert_eq!(
            ExitInfo::from_container_status(2).to_string(),
            "exit code 2"
        );
        assert_eq!(ExitInfo::from_container_status(0).code, Some(0));
        assert_eq!(ExitInfo::from_container_status(255).code, Some(255));
    }

    #[test]
    fn container_names_are_what_the_engine_accepts() {
        assert_eq!(
            container_name(
                "20261201T0850Z-c861534",
                "migrate-first",
                "previous-worker-2"
            ),
            "rehearse-20261201T0850Z-c861534-migrate-first-previous-worker-2"
        );
        assert_eq!(container_name("r", "a b", "x/y"), "rehearse-r-a-b-x-y");
    }
}
