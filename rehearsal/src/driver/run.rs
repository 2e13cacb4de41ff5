//! A whole run: PostgreSQL, the signal handler, the cells (`--jobs` at a
//! time, longest first: see [`crate::schedule`]), each reporting through
//! the run's event stream.
//!
//! Ctrl-C (SIGINT) or SIGTERM to rehearse interrupts the run: every cell
//! that is running stops its processes (SIGTERM, then SIGKILL after 3 s),
//! is reported as inconclusive, and no further cell starts; the cluster is
//! stopped and the stream ends, so the report of what ran is written. Children die with
//! rehearse even if it is SIGKILLed (see `fleet::process`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use awa_harness::pgtemp::Cluster;
use nix::sys::resource::UsageWho;
use tokio::sync::{Mutex, watch};

use super::CellContext;
use super::cell::{Reconcile, Retry};
use super::database::{Server, connect, redact};
use super::ledger::Cancel;
use crate::artifacts::Resolution;
use crate::fleet::Fleet;
use crate::observe::ArtifactInfo;
use crate::plan::Plan;
use crate::schedule::growth::Growth;
use crate::schedule::pressure::{self, Holds};
use crate::servers::{Major, ServerInfo, Spec};
use crate::stream::{CellTry, Events, HeldBack, Note, RunEnd, RunEvent, RunHeader, RunStart};

/// Why a run could not run at all: the library's `Error` wraps it (as
/// `Harness` and `Postgres`, so a caller sees the same kinds as before).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The harness failed outside any cell (the async runtime).
    #[error("{0}")]
    Harness(String),
    /// No PostgreSQL to run against: a throwaway cluster that would not
    /// start, a `--database-url` that does not answer.
    #[error("no PostgreSQL to run the cells against: {0}")]
    Postgres(String),
}

/// Overrides where report folders are created (default: `<repo>/reports`).
pub const REPORTS_DIR_ENV: &str = "REHEARSE_REPORTS_DIR";

/// What `rehearse run` was asked to do, validated, with its artifacts
/// resolved and its report folder made.
pub struct RunRequest {
    /// The expanded plan.
    pub plan: Plan,
    /// The artifacts, each binary built or unpacked.
    pub resolution: Resolution,
    /// The run's report folder (process logs go under it).
    pub report_dir: PathBuf,
    /// The report folder's name.
    pub run_id: String,
    /// When the run began, RFC 3339 in UTC.
    pub started_at: String,
    /// When the run began, for its wall time (artifacts included).
    pub wall: Instant,
    /// The PostgreSQL servers the cells are planned on, found before anything started.
    pub servers: Vec<crate::servers::Spec>,
    /// The backend that starts processes, and its name for the report.
    pub fleet: Arc<dyn Fleet>,
    /// `process` or `docker`, as resolved.
    pub backend: String,
    /// Why that backend (printed, and in the report).
    pub backend_reason: String,
    /// The Docker engine's version and address, on the docker backend.
    pub engine: Option<String>,
    /// How many cells at once, in which order.
    pub schedule: crate::schedule::Schedule,
    /// `--keep`.
    pub keep: bool,
    /// The command line, for the record (secrets redacted).
    pub command_line: String,
    /// `rehearse selftest`: score the run against the runtime's seeded defects.
    pub selftest: bool,
    /// Whether and how an inconclusive cell is tried again (`None`: never).
    pub retry: Option<Arc<dyn Retry>>,
    /// `--stress`: the busy processes running beside the cells, for the report.
    pub stress: Option<crate::stress::StressInfo>,
}

/// Runs every cell of the plan, sending the run's events to `events`
/// (from `run_started` to `run_finished`); `reconcile` reads each cell's
/// findings from its database and judges each finished cell. Fails only when nothing could run (no
/// PostgreSQL, no async runtime).
pub fn execute(
    req: RunRequest,
    events: Events,
    reconcile: Arc<dyn Reconcile>,
) -> Result<(), RunError> {
    let children_before = cpu_ms(UsageWho::RUSAGE_CHILDREN);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Harness(format!("could not start the async runtime: {e}")))?;
    let ran = runtime.block_on(run_cells(&req, &events, reconcile));
    // Everything of this run goes, whatever happened (a failed cell, Ctrl-C).
    let shutdown = runtime.block_on(req.fleet.shutdown());
    // Stopping the cluster reaps it, so its CPU time counts below.
    let ran = ran.map(|mut ran| {
        for server in std::mem::take(&mut ran.servers) {
            ran.notes.extend(stop_server(server, req.keep));
        }
        ran
    });
    drop(runtime);
    let ran = ran?;
    match shutdown {
        Ok(done) if !done.kept.is_empty() => events.send(RunEvent::Note(Note::always(
            None,
            format!(
                "kept {} of this run (--keep): {}",
                crate::observe::count(done.kept.len() as u64, "container"),
                done.kept.join(", ")
            ),
        ))),
        Ok(done) if !done.removed.is_empty() => events.send(RunEvent::Note(Note::always(
            None,
            format!(
                "removed {} of this run at shutdown: {}",
                crate::observe::count(done.removed.len() as u64, "container"),
                done.removed.join(", ")
            ),
        ))),
        Ok(_) => {}
        Err(e) => events.send(RunEvent::Note(Note::always(
            None,
            format!("shutdown: {}", awa_runtime::error::chain(&e)),
        ))),
    }
    for note in ran.notes {
        events.send(RunEvent::Note(Note::always(None, note)));
    }
    if let Some(held) = ran.held_back.filter(|h| h.times > 0) {
        events.send(RunEvent::Note(Note::always(
            None,
            format!("jobs auto {}", held.describe()),
        )));
    }
    let containers = req.fleet.container_cpu();
    events.send(RunEvent::RunFinished(RunEnd {
        finished_at: crate::stamp::utc(SystemTime::now()).rfc3339,
        wall_ms: req.wall.elapsed().as_millis() as u64,
        harness_cpu_ms: cpu_ms(UsageWho::RUSAGE_SELF),
        children_cpu_ms: cpu_ms(UsageWho::RUSAGE_CHILDREN).saturating_sub(children_before)
            + containers.map_or(0, |c| c.ms + c.engine_ms.unwrap_or(0)),
        container_cpu_ms: containers.map(|c| c.ms),
        container_cpu_source: containers.map(|c| c.source),
        engine_cpu_ms: containers.and_then(|c| c.engine_ms),
        interrupted: ran.interrupted,
        held_back: ran.held_back,
    }));
    Ok(())
}

/// What the asynchronous part of a run produced.
struct Ran {
    interrupted: bool,
    servers: Vec<Server>,
    notes: Vec<String>,
    held_back: Option<HeldBack>,
}

/// Ctrl-C or SIGTERM sets `cancel_tx`; a second signal is acknowledged.
fn watch_signals(cancel_tx: watch::Sender<bool>, events: Events) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        events.send(RunEvent::Note(Note::always(
            None,
            format!(
                "rehearse: {name}: stopping every process, then writing the report of what ran"
            ),
        )));
        let _ = cancel_tx.send(true);
        // A second signal is acknowledged, not acted on: the cleanup is already bounded.
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            events.send(RunEvent::Note(Note::always(
                None,
                "rehearse: already stopping (at most a few seconds per cell)",
            )));
        }
    })
}

/// The servers of a run, by the planned major of the cells they take.
type Servers = BTreeMap<Option<Major>, Server>;

/// A throwaway cluster per spec, or the server `--database-url` names;
/// with what report.json records of each.
async fn open_servers(specs: &[Spec]) -> Result<(Servers, Vec<ServerInfo>), RunError> {
    let mut servers = Servers::new();
    let mut infos = Vec::new();
    for spec in specs {
        let (server, bindir, origin) = match spec {
            Spec::Throwaway { install, .. } => {
                let cluster = Cluster::start_in(install.bindir.clone())
                    .await
                    .map_err(|e| RunError::Postgres(e.to_string()))?;
                let server = Server::Throwaway {
                    cluster: Arc::new(Mutex::new(cluster)),
                    bindir: install.bindir.clone(),
                };
                (
                    server,
                    Some(install.bindir.clone()),
                    install.origin.to_string(),
                )
            }
            Spec::External { url, .. } => {
                connect(url).await.map_err(|e| {
                    RunError::Postgres(format!("{e}; check --database-url {}", redact(url)))
                })?;
                let server = Server::External {
                    url: url.to_owned(),
                };
                (server, None, "--database-url".to_owned())
            }
        };
        let version = server
            .version()
            .await
            .unwrap_or_else(|e| format!("unknown ({e})"));
        infos.push(ServerInfo {
            major: spec.key(),
            version,
            bindir,
            origin,
        });
        servers.insert(spec.key(), server);
    }
    Ok((servers, infos))
}

/// `server_version` of the run's servers, for the one-line record:
/// `15.18`, or `15.18 (pg15), 18.6 (pg18)` for several.
fn versions_line(infos: &[ServerInfo]) -> String {
    match infos {
        [one] => one.version.clone(),
        _ => infos
            .iter()
            .map(|i| match i.major {
                Some(m) => format!("{} ({m})", i.version),
                None => i.version.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn run_start(req: &RunRequest, servers: Vec<ServerInfo>) -> RunStart {
    RunStart {
        header: RunHeader {
            run_id: req.run_id.clone(),
            started_at: req.started_at.clone(),
            seed: req.plan.seed,
            command_line: req.command_line.clone(),
            matrix: req.plan.selection.matrix.clone(),
            replay: req.plan.replay.clone(),
            backend: req.backend.clone(),
            backend_reason: req.backend_reason.clone(),
            engine: req.engine.clone(),
            postgres_version: versions_line(&servers),
            servers,
            migration_checksums: migration_checksums(),
            git_commit: req.resolution.git.commit.clone(),
            git_dirty: req.resolution.git.dirty,
            cores: req.schedule.cores,
            jobs: req.schedule.jobs,
            schedule: req.schedule.describe.clone(),
            matrix_checksum: req.plan.matrix_checksum.clone(),
            partition: req.plan.partition.clone(),
            stress: req.stress,
            checklist: req.plan.checklist.clone(),
        },
        report_dir: req.report_dir.clone(),
        artifacts: artifact_infos(&req.resolution),
        cells: req.plan.cells.iter().map(|c| c.name.clone()).collect(),
        selftest: req.selftest,
    }
}

async fn run_cells(
    req: &RunRequest,
    events: &Events,
    reconcile: Arc<dyn Reconcile>,
) -> Result<Ran, RunError> {
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancel = Cancel::new(cancel_rx);
    let signals = watch_signals(cancel_tx, events.clone());
    let (servers, infos) = match open_servers(&req.servers).await {
        Ok(opened) => opened,
        Err(e) => {
            signals.abort();
            return Err(e);
        }
    };
    events.send(RunEvent::RunStarted(run_start(req, infos)));
    let Some(first) = servers.values().next().cloned() else {
        return Err(RunError::Postgres("no server was planned".into()));
    };
    let ctx = CellContext {
        fleet: req.fleet.clone(),
        artifacts: Arc::new(req.resolution.artifacts.clone()),
        report_dir: req.report_dir.clone(),
        run_id: req.run_id.clone(),
        server: first,
        keep: req.keep,
        cancel: cancel.clone(),
        expand_version: req.resolution.expand_version,
        events: events.clone(),
        attempt: 1,
        starving: Arc::default(),
    };
    let (notes, held_back) = run_each_cell(req, &ctx, &servers, reconcile).await;
    signals.abort();
    drop(ctx);
    Ok(Ran {
        interrupted: cancel.is_set(),
        servers: servers.into_values().collect(),
        notes,
        held_back,
    })
}

/// Starts the cells in the schedule's order as the schedule's admission
/// lets them (`--jobs` at a time, timing-sensitive cells with room to
/// spare) and, under the schedule's gate, while the CPU is not under
/// pressure, each on its server, and waits for every one; stops starting
/// when the run is interrupted. Under the gate, `--jobs auto` also grows
/// while the cores idle and shrinks back while a cell ticks starved
/// ([`Growth`]). Notes a task that failed and the cells that never
/// started; counts the starts the gate held back and how far it grew.
async fn run_each_cell(
    req: &RunRequest,
    ctx: &CellContext,
    servers: &Servers,
    reconcile: Arc<dyn Reconcile>,
) -> (Vec<String>, Option<HeldBack>) {
    let admission = &req.schedule.admission;
    let mut waiting: Vec<usize> = req.schedule.order.clone();
    let mut running: Vec<usize> = Vec::new();
    let mut ran: Vec<usize> = Vec::new();
    let mut notes = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut task_cell = std::collections::HashMap::new();
    let mut holds = Holds::default();
    let mut growth = Growth::of(&req.schedule, req.plan.cells.len());
    loop {
        let starved = ctx.starving.within(pressure::STARVED_WITHIN);
        let limit = growth.as_mut().map_or(req.schedule.jobs, |g| {
            g.look(admission, &waiting, &running, starved)
        });
        while !ctx.cancel.is_set()
            && let Some(index) = admission.next_within(&waiting, &running, limit)
        {
            if req.schedule.gate && !pressure::may_start(starved, running.len(), limit) {
                holds.hold(Instant::now());
                break;
            }
            holds.release(Instant::now());
            waiting.retain(|&i| i != index);
            running.push(index);
            let task = tasks.spawn(run_one_cell(
                ctx.clone(),
                servers,
                req.plan.cells[index].clone(),
                index,
                reconcile.clone(),
                req.retry.clone(),
            ));
            task_cell.insert(task.id(), index);
        }
        if running.is_empty() {
            break;
        }
        let holding = holds.holding();
        let growing = growth.is_some() && !waiting.is_empty() && !ctx.cancel.is_set();
        let joined = tokio::select! {
            joined = tasks.join_next() => joined,
            // Interrupted: start nothing more, then wait for the running cells.
            _ = ctx.cancel.fired(), if !waiting.is_empty() => {
                waiting.clear();
                holds.release(Instant::now());
                continue;
            }
            // A held-back cell looks again, as does growth at the cores' idle time.
            () = tokio::time::sleep(pressure::RECHECK), if holding || growing => continue,
        };
        match joined {
            Some(Ok(index)) => {
                running.retain(|&i| i != index);
                ran.push(index);
            }
            Some(Err(e)) => {
                let cell = task_cell.get(&e.id()).copied();
                running.retain(|&i| Some(i) != cell);
                let name = cell.map_or("?", |i| req.plan.cells[i].name.as_str());
                notes.push(format!("the task of cell {name} failed: {e}"));
            }
            None => break,
        }
    }
    notes.extend(not_run(req, &ran));
    holds.release(Instant::now());
    let grew_to = growth.as_ref().and_then(Growth::grew_to);
    let held_back = HeldBack {
        grew_to,
        ..holds.tally()
    };
    (notes, req.schedule.gate.then_some(held_back))
}

/// The cells that never ran to their end (interrupted before they
/// started, or their task failed), as a note; none when every cell ran.
fn not_run(req: &RunRequest, ran: &[usize]) -> Option<String> {
    let not_run: Vec<&str> = req
        .plan
        .cells
        .iter()
        .enumerate()
        .filter(|(i, _)| !ran.contains(i))
        .map(|(_, c)| c.name.as_str())
        .collect();
    (!not_run.is_empty()).then(|| format!("not run: {}", not_run.join(", ")))
}

/// One cell on its server, within its budget, from its start event to
/// its finish event; yields its index. A try that `retry` wants tried
/// again (an inconclusive one, for the harness's own reasons) is recorded
/// as a [`RunEvent::CellRetried`], its logs moved to a folder of their
/// own, and the cell runs again on the plan `retry` gives it (a new seed);
/// the last try is the cell's finish, followed by its verdict.
fn run_one_cell(
    mut ctx: CellContext,
    servers: &Servers,
    plan: crate::plan::CellPlan,
    index: usize,
    reconcile: Arc<dyn Reconcile>,
    retry: Option<Arc<dyn Retry>>,
) -> impl std::future::Future<Output = usize> + Send + 'static {
    if let Some(server) = servers.get(&plan.server) {
        ctx.server = server.clone();
    }
    async move {
        let mut plan = plan;
        let mut seed = None;
        let all = ctx.cancel.clone();
        for attempt in 1.. {
            // The budget runs from the try's start (not while it waited its turn).
            ctx.cancel = all.with_budget(plan.timings.budget.to_std());
            ctx.attempt = attempt;
            if attempt == 1 {
                ctx.events.send(RunEvent::CellStarted {
                    index,
                    cell: plan.name.clone(),
                    phases: plan.steps.len() as u64 + 2,
                });
            }
            let (run, unretryable) =
                super::cell::run_cell(&ctx, index, &plan, reconcile.as_ref()).await;
            let judged = reconcile.judged(&run);
            let again = retry.as_ref().filter(|_| !all.is_set()).and_then(|r| {
                Some((
                    r.again(&judged, unretryable, attempt)?,
                    r.replan(&plan, attempt + 1)?,
                ))
            });
            let Some((why, (next, next_seed))) = again else {
                ctx.events.send(RunEvent::CellFinished(Box::new(run)));
                ctx.events.send(judged);
                break;
            };
            let logs = match super::cell::set_logs_aside(&ctx.report_dir, &plan.name, attempt) {
                Ok(aside) => aside,
                Err(why) => {
                    ctx.events.send(RunEvent::Note(Note::always(
                        Some(&plan.name),
                        format!("{}: {why}", plan.name),
                    )));
                    super::step_ctx::cell_dir(&plan.name)
                }
            };
            ctx.events.send(RunEvent::Note(Note::always(
                Some(&plan.name),
                format!(
                    "{}: try {attempt} inconclusive ({why}); trying again with seed {next_seed} (that try alone: rehearse --cell {} --seed {next_seed})",
                    plan.name, plan.name
                ),
            )));
            ctx.events.send(RunEvent::CellRetried {
                index,
                cell: plan.name.clone(),
                attempt: CellTry {
                    attempt,
                    seed,
                    why,
                    elapsed_ms: run.elapsed_ms,
                    logs,
                },
            });
            plan = next;
            seed = Some(next_seed);
        }
        index
    }
}

/// Stops the throwaway cluster (or keeps it); returns a note for the user.
fn stop_server(server: Server, keep: bool) -> Option<String> {
    let Server::Throwaway { cluster, .. } = server else {
        return None;
    };
    let cluster = Arc::try_unwrap(cluster).ok()?.into_inner();
    if keep {
        let dir = cluster.keep();
        Some(format!(
            "kept the throwaway PostgreSQL cluster at {} (stop it with: pg_ctl -D {}/data stop -m immediate)",
            dir.display(),
            dir.display()
        ))
    } else {
        drop(cluster);
        None
    }
}

fn artifact_infos(resolution: &Resolution) -> Vec<ArtifactInfo> {
    resolution
        .artifacts
        .values()
        .map(|a| ArtifactInfo {
            name: a.name.clone(),
            version: a.version.clone(),
            source: a.source.clone(),
            digest: a.digest.clone(),
            obtained: a.obtained.clone(),
            binary: crate::fleet::Runnable::of(a).to_string(),
            failpoint: a.failpoint.clone(),
            image: a.image.clone(),
        })
        .collect()
}

/// sha256 of each migration the current build embeds, by `v{version}`.
pub fn migration_checksums() -> BTreeMap<String, String> {
    awa_runtime::schema::MIGRATIONS
        .iter()
        .map(|m| {
            let hex = awa_harness::release::sha256_hex(m.sql.as_bytes());
            (format!("v{}", m.version), hex)
        })
        .collect()
}

/// User plus system CPU time of `who` (`RUSAGE_SELF`, `RUSAGE_CHILDREN`), in ms.
fn cpu_ms(who: UsageWho) -> u64 {
    let Ok(usage) = nix::sys::resource::getrusage(who) else {
        return 0;
    };
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000 + t.tv_usec() as u64 / 1_000;
    ms(usage.user_time()) + ms(usage.system_time())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_checksums_cover_every_embedded_migration() {
        let sums = migration_checksums();
        assert_eq!(sums.len(), awa_runtime::schema::MIGRATIONS.len());
        assert!(sums.contains_key("v1"));
        assert!(
            sums.values()
                .all(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }

    #[test]
    fn cpu_time_is_measured() {
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed().as_millis() < 30 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ms(UsageWho::RUSAGE_SELF) > 0);
    }
}
