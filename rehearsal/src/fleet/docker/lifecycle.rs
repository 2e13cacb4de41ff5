//! A container's life: created and started for a process's spec,
//! controlled (stopped, killed, paused, let go) through the engine's API,
//! waited on for its exit status, and removed once its log is read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bollard::models::{ContainerCreateBody, ContainerStateStatusEnum, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, KillContainerOptions, StartContainerOptions, StatsOptions,
    WaitContainerOptions,
};
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::super::process::{Log, NOTE_PREFIX, confirm, log_env, log_line, open_log, report_exit};
use super::super::{Control, ExitInfo, FleetError, Handle, Order, ReportSender, Runnable, Spec};
use super::engine_logs::{LogFollower, read_logs};
use super::{DockerFleet, LOG_DRAIN, SuspendBy, label};
use crate::image::Engine;

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

/// How the driver holds a container's process, as its controls left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Running (or never held).
    Running,
    /// Paused by the engine (its cgroup frozen).
    Paused,
    /// Stopped by SIGSTOP through the engine.
    Signalled,
}

/// Why a container's process has no pid to signal and check here.
#[derive(Debug)]
enum HostPid {
    /// The engine reports no running process: it ended.
    Ended,
    /// The engine could not be asked.
    Unknown(String),
    /// The engine's pid is not the container's process on this machine.
    NotHere(u32),
}

impl std::fmt::Display for HostPid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPid::Ended => write!(f, "the engine gives no pid for it (it is not running)"),
            HostPid::Unknown(e) => write!(f, "the engine could not give its pid: {e}"),
            HostPid::NotHere(pid) => write!(
                f,
                "its pid {pid} is not the container's process here (the engine runs in \
                 another pid namespace), so a stop by signal cannot be checked"
            ),
        }
    }
}

impl DockerFleet {
    pub(super) async fn start(&self, spec: Spec, sink: ReportSender) -> Result<Handle, FleetError> {
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
        let log = open_log(&spec.log, &spec.watch)?;
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
                // The process is the container's first: a suspend by
                // signal stops it, not an init the engine put before it.
                init: Some(false),
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
        sink: ReportSender,
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
    /// Where the pause fails (or the fleet is set to [`SuspendBy::Signal`]),
    /// the container's process is stopped as the process backend stops
    /// one: SIGSTOP through the engine, checked in `/proc` by its pid on
    /// this machine; `held` says which, so the resume undoes the same.
    // A String: it goes to `Order::applied`, whose waiter only words it.
    async fn apply(
        &self,
        container: &str,
        control: Control,
        held: &mut Held,
        log: &Log,
    ) -> Result<(), String> {
        let docker = &self.engine.docker;
        match control {
            Control::Terminate => {
                let sent = self.signal(container, "SIGTERM").await;
                // A paused or stopped container would hold the SIGTERM
                // until let go: a graceful stop must not wait on a cell
                // that left it so.
                let _ = docker.unpause_container(container).await;
                if *held == Held::Signalled {
                    let _ = self.signal(container, "SIGCONT").await;
                }
                *held = Held::Running;
                sent
            }
            Control::Kill => self.signal(container, "SIGKILL").await,
            // The engine's pause freezes the container's cgroup: the
            // process keeps its state and resumes where it stopped.
            Control::Suspend => {
                let paused = match self.suspend_by {
                    SuspendBy::Pause => docker.pause_container(container).await.err(),
                    SuspendBy::Signal => None,
                };
                match (self.suspend_by, paused) {
                    (SuspendBy::Pause, None) => {
                        self.paused_is(container, true).await?;
                        *held = Held::Paused;
                    }
                    (_, failed) => {
                        if let Some(e) = &failed {
                            log_line(
                                log,
                                &format!(
                                    "{NOTE_PREFIX}the engine could not pause it ({e}): stopping it by SIGSTOP"
                                ),
                            );
                        }
                        let stopped = self.stopped_by_signal(container, true, held).await;
                        stopped.map_err(|s| match failed {
                            Some(e) => format!("the engine could not pause it ({e}), and {s}"),
                            None => s,
                        })?;
                    }
                }
                Ok(())
            }
            Control::Resume if *held == Held::Signalled => {
                self.stopped_by_signal(container, false, held).await
            }
            Control::Resume => {
                docker
                    .unpause_container(container)
                    .await
                    .map_err(|e| format!("the engine could not unpause it: {e}"))?;
                self.paused_is(container, false).await?;
                *held = Held::Running;
                Ok(())
            }
        }
    }

    /// Sends SIGSTOP (`stop`) or SIGCONT through the engine, and waits
    /// until every thread of the container's process is stopped or none
    /// is, as `/proc` shows it on this machine (the engine's host). `held`
    /// follows the signal sent, whether or not the check then holds, so a
    /// resume or a stop sends SIGCONT to a process a SIGSTOP reached.
    // A String: `apply`'s, which passes it on.
    async fn stopped_by_signal(
        &self,
        container: &str,
        stop: bool,
        held: &mut Held,
    ) -> Result<(), String> {
        let pid = match self.host_pid(container).await {
            Ok(pid) => pid,
            // Let go, it ran and ended: a resume took (as `paused_is` says).
            Err(HostPid::Ended) if !stop => {
                *held = Held::Running;
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        };
        self.signal(container, if stop { "SIGSTOP" } else { "SIGCONT" })
            .await?;
        *held = if stop { Held::Signalled } else { Held::Running };
        confirm(pid, stop).await
    }

    /// The pid of the container's process on this machine, checked to be
    /// the container's (its `/proc/<pid>/cgroup` names the container): an
    /// engine in another pid namespace (a VM, rehearse in a container)
    /// gives a pid that means nothing here.
    async fn host_pid(&self, container: &str) -> Result<u32, HostPid> {
        let state = self
            .engine
            .docker
            .inspect_container(container, None)
            .await
            .map_err(|e| HostPid::Unknown(e.to_string()))?
            .state;
        let pid = state
            .and_then(|s| s.pid)
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p > 0)
            .ok_or(HostPid::Ended)?;
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let id = container.get(..12).unwrap_or(container);
        if cgroup.contains(id) {
            Ok(pid)
        } else {
            Err(HostPid::NotHere(pid))
        }
    }

    /// Whether the engine reports the container paused as `want`.
    // A String: `apply`'s, which passes it on.
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
            // Let go, it ran and ended before the engine was asked: a
            // frozen cgroup cannot end, so the unpause took (an N-1
            // leader resumed after a flip meets the fence and exits within
            // a tick; under load the check came after that). The step's
            // proof sees the end and says so.
            Some(ContainerStateStatusEnum::EXITED | ContainerStateStatusEnum::DEAD) if !want => {
                Some(false)
            }
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

    // A String: `apply`'s, which passes it on.
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
    sink: ReportSender,
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
    let mut held = Held::Running;
    let status = loop {
        tokio::select! {
            status = wait.next() => break status,
            order = controls.recv(), if listening => match order {
                Some(order) => {
                    let result = fleet.apply(&container, order.control, &mut held, &log).await;
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

#[cfg(test)]
mod tests {
    use super::*;

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
