//! The `docker` backend: every `awa` is a container, through the Docker API.
//!
//! Same observable behaviour as the process backend: one container per
//! worker, producer, migrate, flip and fence run, on the host network (so
//! it reaches the loopback PostgreSQL), with the cell's `AWA_*`
//! environment; stdout lines from the log stream are typed [`Event`]s,
//! stderr lines are kept in the log, every line with the engine's time of
//! it (see `engine_logs`); a hard kill is SIGKILL through the
//! API, a graceful stop SIGTERM, a suspend the engine's pause (resumed by
//! unpause; SIGSTOP and SIGCONT through the engine where the pause
//! fails, as it can under load); the exit status comes from the wait API
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
//!
//! This file holds the fleet (its labels, preparing and shutting down a
//! run's containers, the CPU they used); a container's life, from its
//! creation to its removal, is in `lifecycle`, and its log stream read
//! as lines in `engine_logs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use futures_util::future::BoxFuture;

use super::cgroup::RunCgroup;
use super::{
    ContainerCpu, CpuSource, Fleet, FleetError, Handle, Prepared, ReportSender, Shutdown, Spec,
};
use crate::image::Engine;

mod engine_cpu;
mod engine_logs;
mod lifecycle;

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
    /// The engine's own CPU, metered from `prepare` to `shutdown`.
    engine_meter: Arc<Mutex<Option<engine_cpu::EngineMeter>>>,
    /// What the meter gave at shutdown, in ms.
    engine_ms: Arc<Mutex<Option<u64>>>,
    /// How a suspend stops a container.
    suspend_by: SuspendBy,
}

/// How the docker backend suspends a container's process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SuspendBy {
    /// The engine's pause (its cgroup frozen), and SIGSTOP through the
    /// engine where the pause fails (an engine under load can fail to
    /// freeze a cgroup: "unable to freeze").
    #[default]
    Pause,
    /// SIGSTOP through the engine, always: for an engine whose pause
    /// cannot be used (and to test the fallback on one whose can).
    Signal,
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
            engine_meter: Arc::default(),
            engine_ms: Arc::default(),
            suspend_by: SuspendBy::default(),
        }
    }

    /// The same fleet, suspending containers `by` this means.
    pub fn suspending_by(self, by: SuspendBy) -> DockerFleet {
        DockerFleet {
            suspend_by: by,
            ..self
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
        if let Ok(mut slot) = self.engine_meter.lock() {
            *slot = Some(engine_cpu::EngineMeter::start());
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
        let meter = self.engine_meter.lock().ok().and_then(|mut m| m.take());
        if let Some(meter) = meter {
            let ms = tokio::task::spawn_blocking(move || meter.stop())
                .await
                .ok()
                .flatten();
            if let Ok(mut slot) = self.engine_ms.lock() {
                *slot = ms;
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
}

impl Fleet for DockerFleet {
    fn backend(&self) -> &'static str {
        "docker"
    }

    fn spawn(&self, spec: Spec, sink: ReportSender) -> BoxFuture<'_, Result<Handle, FleetError>> {
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
        let engine_ms = self.engine_ms.lock().ok().and_then(|n| *n);
        Some(match counted {
            Some(ns) => ContainerCpu {
                ms: (ns + sampled) / 1_000_000,
                source: CpuSource::Cgroup,
                engine_ms,
            },
            None => ContainerCpu {
                ms: sampled / 1_000_000,
                source: CpuSource::Stats,
                engine_ms,
            },
        })
    }
}
