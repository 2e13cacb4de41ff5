//! A whole run: artifacts, PostgreSQL, the cells (`--jobs` at a time),
//! the report folder, the summary, the exit code.
//!
//! Ctrl-C (SIGINT) or SIGTERM to rehearse interrupts the run: every cell
//! that is running stops its processes (SIGTERM, then SIGKILL after 3 s),
//! is reported as inconclusive, and no further cell starts; the cluster is
//! stopped and the report of what ran is written. Children die with
//! rehearse even if it is SIGKILLed (see `fleet::process`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use awa_runtime::pgtemp::Cluster;
use nix::sys::resource::UsageWho;
use tokio::sync::{Mutex, Semaphore, watch};

use super::CellContext;
use super::database::{Server, connect, redact};
use super::ledger::Cancel;
use crate::Error;
use crate::artifacts::{self, Repo, Resolution};
use crate::cli::Backend;
use crate::exit::Outcome;
use crate::fleet::ProcessFleet;
use crate::observe::{StepOutcome, Verdict};
use crate::plan::Plan;
use crate::report::{self, ArtifactInfo, CellReport, FORMAT_VERSION, RunInfo, RunReport};

/// Overrides where report folders are created (default: `<repo>/reports`).
pub const REPORTS_DIR_ENV: &str = "REHEARSE_REPORTS_DIR";

/// What `rehearse run` was asked to do, validated.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The expanded plan.
    pub plan: Plan,
    /// The repository (artifacts, builds).
    pub repo: Repo,
    /// Where the run's report folder is created.
    pub reports_root: PathBuf,
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--backend`.
    pub backend: Backend,
    /// `--jobs`.
    pub jobs: u32,
    /// `--keep`.
    pub keep: bool,
    /// `--quiet`.
    pub quiet: bool,
    /// `--json`: report.json on stdout.
    pub json: bool,
    /// The command line, for the record.
    pub command_line: String,
    /// `rehearse selftest`: score the run against the runtime's seeded defects.
    pub selftest: bool,
}

/// A finished run: its report and the folder it was written to.
#[derive(Clone, Debug)]
pub struct Finished {
    /// What `report.json` holds.
    pub report: RunReport,
    /// The run's report folder.
    pub dir: PathBuf,
}

/// Runs every cell of the plan and writes the report.
pub fn execute(
    req: RunRequest,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, Error> {
    Ok(execute_report(req, out, err)?.report.outcome())
}

/// [`execute`], handing back the report and where it was written.
pub fn execute_report(
    req: RunRequest,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Finished, Error> {
    let started = SystemTime::now();
    let wall = Instant::now();
    let stamp = report::utc(started);
    let backend = match req.backend {
        Backend::Process => "process",
        Backend::Docker => {
            return Err(Error::BadFlag {
                flag: "--backend",
                message:
                    "the docker backend is not implemented yet; use --backend process (the default)"
                        .into(),
            });
        }
        Backend::Auto => {
            writeln!(
                err,
                "backend auto: using process (the docker backend is not implemented yet)"
            )?;
            "process"
        }
    };

    // Artifacts: every source checked, then each binary built once.
    let mut wanted = BTreeMap::new();
    for cell in &req.plan.cells {
        for (name, artifact) in &cell.artifacts {
            wanted.insert(name.clone(), artifact.clone());
        }
    }
    let quiet = req.quiet;
    let resolution = {
        let mut progress = |line: String| {
            if !quiet {
                let _ = writeln!(err, "{line}");
            }
        };
        artifacts::resolve(&req.repo, &wanted, &mut progress)?
    };
    let children_before = cpu_ms(UsageWho::RUSAGE_CHILDREN);

    let mut dir = report::report_dir(&req.reports_root, &stamp.compact, resolution.git.short());
    for n in 2.. {
        if !dir.exists() {
            break;
        }
        let name = format!(
            "{}-{n}",
            report::report_dir(&req.reports_root, &stamp.compact, resolution.git.short()).display()
        );
        dir = PathBuf::from(name);
    }
    std::fs::create_dir_all(&dir).map_err(Error::Output)?;
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !quiet {
        writeln!(
            err,
            "run {run_id}: {} cell(s), report in {}",
            req.plan.cells.len(),
            dir.display()
        )?;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Harness(format!("could not start the async runtime: {e}")))?;
    let ran = runtime.block_on(run_cells(&req, &resolution, dir.clone(), run_id.clone()));
    // Stopping the cluster reaps it, so its CPU time counts below.
    let ran = ran.map(|mut ran| {
        if let Some(server) = ran.server.take() {
            ran.notes.extend(stop_server(server, req.keep));
        }
        ran
    });
    drop(runtime);
    let ran = ran.inspect_err(|_| {
        // Nothing ran: leave no empty report folder behind.
        let _ = std::fs::remove_dir(&dir);
    })?;
    for note in &ran.notes {
        writeln!(err, "{note}")?;
    }

    let finished = SystemTime::now();
    let report = RunReport {
        format_version: FORMAT_VERSION.to_owned(),
        run: RunInfo {
            run_id,
            started_at: stamp.rfc3339,
            finished_at: report::utc(finished).rfc3339,
            seed: req.plan.seed,
            command_line: req.command_line.clone(),
            matrix: req.plan.selection.matrix.clone(),
            replay: req.plan.replay.clone(),
            backend: backend.to_owned(),
            postgres_version: ran.postgres_version,
            migration_checksums: migration_checksums(),
            git_commit: resolution.git.commit.clone(),
            git_dirty: resolution.git.dirty,
            wall_ms: wall.elapsed().as_millis() as u64,
            harness_cpu_ms: cpu_ms(UsageWho::RUSAGE_SELF),
            children_cpu_ms: cpu_ms(UsageWho::RUSAGE_CHILDREN).saturating_sub(children_before),
            interrupted: ran.interrupted,
        },
        artifacts: artifact_infos(&resolution),
        selftest: req
            .selftest
            .then(|| crate::selftest::Score::of(&awa_runtime::failpoint::ALL, &ran.cells)),
        cells: ran.cells,
    };
    report::write_all(&dir, &report).map_err(|e| Error::Harness(awa_runtime::error::chain(&e)))?;

    let color = report::terminal::use_color();
    let summary = report::terminal::summary_table(&report, color && !req.json);
    if req.json {
        out.write_all(
            report::to_json(&report)
                .map_err(|e| Error::Harness(awa_runtime::error::chain(&e)))?
                .as_bytes(),
        )?;
        err.write_all(summary.as_bytes())?;
    } else {
        out.write_all(summary.as_bytes())?;
    }
    for cell in report.cells.iter().filter(|c| c.verdict == Verdict::Fail) {
        for phase in cell
            .timeline
            .iter()
            .filter(|p| p.outcome == StepOutcome::Failed)
        {
            writeln!(
                err,
                "{}: step {} ({}) failed: {}",
                cell.name, phase.step, phase.name, phase.detail
            )?;
        }
    }
    if ran.interrupted {
        writeln!(err, "interrupted: the report covers the cells that ran")?;
    }
    if let Some(score) = &report.selftest {
        for line in score.lines() {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(err, "report: {}", dir.display())?;
    Ok(Finished { report, dir })
}

/// What the asynchronous part of a run produced.
struct Ran {
    cells: Vec<CellReport>,
    postgres_version: String,
    interrupted: bool,
    server: Option<Server>,
    notes: Vec<String>,
}

async fn run_cells(
    req: &RunRequest,
    resolution: &Resolution,
    report_dir: PathBuf,
    run_id: String,
) -> Result<Ran, Error> {
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancel = Cancel::new(cancel_rx);
    let signals = tokio::spawn(async move {
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
        eprintln!("rehearse: {name}: stopping every process, then writing the report of what ran");
        let _ = cancel_tx.send(true);
        // A second signal is acknowledged, not acted on: the cleanup is already bounded.
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            eprintln!("rehearse: already stopping (at most a few seconds per cell)");
        }
    });

    let server = match &req.database_url {
        None => {
            let cluster = Cluster::start()
                .await
                .map_err(|e| Error::Postgres(e.to_string()))?;
            Server::Throwaway(Arc::new(Mutex::new(cluster)))
        }
        Some(url) => {
            connect(url).await.map_err(|e| {
                Error::Postgres(format!("{e}; check --database-url {}", redact(url)))
            })?;
            Server::External { url: url.clone() }
        }
    };
    let postgres_version = server
        .version()
        .await
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let ctx = CellContext {
        fleet: Arc::new(ProcessFleet),
        artifacts: Arc::new(resolution.artifacts.clone()),
        report_dir,
        run_id,
        server: server.clone(),
        keep: req.keep,
        cancel: cancel.clone(),
        expand_version: resolution.expand_version,
    };
    let progress = Arc::new(report::terminal::Progress::new(req.quiet));
    let slots = Arc::new(Semaphore::new(req.jobs.max(1) as usize));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, plan) in req.plan.cells.iter().cloned().enumerate() {
        // Cells start in plan order: the next waits here for a free slot.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = cancel.fired() => break,
        };
        if cancel.is_set() {
            break;
        }
        let (ctx, progress) = (ctx.clone(), progress.clone());
        tasks.spawn(async move {
            let _slot = slot;
            let bar = progress.start_cell(&plan.name, plan.steps.len() as u64 + 2);
            let report = super::cell::run_cell(&ctx, &plan, &bar).await;
            bar.finish(report.verdict);
            (index, Some(report))
        });
    }
    let mut cells = Vec::new();
    let mut notes = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Some(report))) => cells.push((index, report)),
            Ok((_, None)) => {}
            Err(e) => notes.push(format!("a cell's task failed: {e}")),
        }
    }
    cells.sort_by_key(|(i, _)| *i);
    let not_run: Vec<&str> = req
        .plan
        .cells
        .iter()
        .enumerate()
        .filter(|(i, _)| !cells.iter().any(|(j, _)| j == i))
        .map(|(_, c)| c.name.as_str())
        .collect();
    if !not_run.is_empty() {
        notes.push(format!("not run: {}", not_run.join(", ")));
    }
    signals.abort();
    drop(ctx);
    Ok(Ran {
        cells: cells.into_iter().map(|(_, r)| r).collect(),
        postgres_version,
        interrupted: cancel.is_set(),
        server: Some(server),
        notes,
    })
}

/// Stops the throwaway cluster (or keeps it); returns a note for the user.
fn stop_server(server: Server, keep: bool) -> Option<String> {
    let Server::Throwaway(cluster) = server else {
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
            binary: a.binary.display().to_string(),
            failpoint: a.failpoint.clone(),
        })
        .collect()
}

/// sha256 of each migration the current build embeds, by `v{version}`.
pub fn migration_checksums() -> BTreeMap<String, String> {
    awa_runtime::schema::MIGRATIONS
        .iter()
        .map(|m| {
            let hex = awa_runtime::release::sha256_hex(m.sql.as_bytes());
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
