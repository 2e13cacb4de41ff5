//! `awa worker`: claim, run, close; heartbeat; and, when it wins the
//! advisory lock, maintenance leadership.
//!
//! Tasks: the claim loop (this task), one handler task per attempt, a
//! closer that records outcomes, a heartbeat task and the maintenance
//! task. Each owns its connection. A permanent storage failure in any of
//! them stops the process with a non-zero exit: an old binary that meets
//! a fence must fail loudly, never limp on.

use crate::db::{Conn, Patience};
use crate::error::{Error, Result};
use crate::events::{self, AttemptOutcome, Event, Fatal, LeaseRef, ProcessKind, emit};
use crate::maintenance::{self, Identity};
use crate::store::claim::{self, Claimed};
use crate::store::finish::{self, Closed, Outcome};
use crate::store::instances;
use crate::timings::{Timings, new_instance_id};
use crate::workload::{self, HandlerTimings};
use crate::{schema, version::VERSION};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};

/// Configuration of `awa worker`.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub database_url: String,
    pub name: String,
    pub queues: Vec<String>,
    pub concurrency: usize,
    /// Whether this worker competes for maintenance leadership.
    pub maintenance: bool,
    pub timings: Timings,
}

/// Attempts in flight: (job id, run lease) -> handle to abort its handler.
///
/// Keyed by the attempt, not the job: a rescued job can be claimed again
/// by this same worker (a new run lease) before the heartbeat has noticed
/// that the old lease is gone. Keyed by job id, the new attempt replaced
/// the old one's entry, so the old handler was never stopped and kept its
/// concurrency slot for as long as it ran (an `overrun_deadline` attempt:
/// ten minutes); a worker that rescued its own overruns lost one slot per
/// such job until it claimed one job at a time.
type InFlight = Arc<Mutex<HashMap<(i64, i64), Option<AbortHandle>>>>;

/// Stop the handlers of `job_id`'s attempts older than `run_lease`: a
/// newer run lease of the job proves their leases were rescued or
/// cancelled. Returns the stopped attempts' leases.
fn stop_superseded(
    map: &mut HashMap<(i64, i64), Option<AbortHandle>>,
    job_id: i64,
    run_lease: i64,
) -> Vec<(i64, i64)> {
    let old: Vec<(i64, i64)> = map
        .keys()
        .filter(|(j, l)| *j == job_id && *l < run_lease)
        .copied()
        .collect();
    // The seeded defect forgets the old attempt as a map keyed by job id
    // did: its entry goes, its handler runs on, and nothing is said.
    let forget = crate::failpoint::armed(crate::failpoint::WORKER_KEYS_ATTEMPTS_BY_JOB);
    for key in &old {
        if let Some(Some(handle)) = map.remove(key)
            && !forget
        {
            handle.abort();
        }
    }
    if forget { Vec::new() } else { old }
}

struct Done {
    job: Claimed,
    outcome: Outcome,
    _permit: OwnedSemaphorePermit,
}

/// Run a worker until SIGTERM/SIGINT (clean stop, exit 0) or a failure.
// Long on purpose: the claim loop and the clean stop after it share the
// channels, the semaphore and the handler set made here; the parts with
// one job each (start, spawn_background, claim_patiently, spawn_attempt,
// drain_inflight, release_left) are out already.
pub async fn run(cfg: WorkerConfig) -> Result<()> {
    let mut shutdown = shutdown_signal()?;
    let (me, mut conn) = start(&cfg).await?;

    let t = cfg.timings.clone();
    let inflight: InFlight = Arc::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (fatal_tx, mut fatal_rx) = mpsc::channel::<Error>(8);
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Done>();
    let mut background = spawn_background(&cfg, &me, &inflight, stop_rx, fatal_tx, done_rx);

    let sem = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut handlers = JoinSet::new();
    let handler_t = HandlerTimings {
        retry_backoff: t.retry_backoff,
        snooze: t.snooze,
    };
    let mut patience = Patience::new(t.db_patience);
    let mut turn = 0usize;
    let result: Result<()> = loop {
        while handlers.try_join_next().is_some() {}
        // Wait for capacity, a stop request or a failure elsewhere; the
        // claim itself is never cancelled half-way.
        let first = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            Some(e) = fatal_rx.recv() => break Err(e),
            p = sem.clone().acquire_owned() => p.expect("semaphore never closes"),
        };
        let mut permits = vec![first];
        while let Ok(p) = sem.clone().try_acquire_owned() {
            permits.push(p);
        }
        // Serve the queues in turn.
        let queue = &cfg.queues[turn % cfg.queues.len()];
        turn = turn.wrapping_add(1);
        let n = permits.len() as i64;
        let batch = match claim_patiently(&mut conn, &mut patience, queue, n, &me).await {
            Ok(batch) => batch,
            Err(e) => break Err(e),
        };
        let idle = batch.is_empty();
        for (job, permit) in batch.into_iter().zip(permits) {
            spawn_attempt(
                job,
                permit,
                &me,
                &inflight,
                &mut handlers,
                &done_tx,
                &handler_t,
            );
        }
        if idle {
            tokio::select! {
                _ = tokio::time::sleep(t.poll) => {}
                _ = shutdown.changed() => break Ok(()),
                Some(e) = fatal_rx.recv() => break Err(e),
            }
        }
    };

    if let Err(e) = result {
        // Loud failure: say what happened and leave the rest to rescue.
        return Err(fatal(e));
    }

    // Clean stop: no more claims; let attempts in flight finish, then
    // release whatever is left so it does not wait for rescue.
    drain_inflight(&inflight, &mut fatal_rx, t.shutdown_grace).await?;
    handlers.abort_all();
    let released = release_left(&mut conn, &inflight).await?;
    let _ = stop_tx.send(true);
    drop(done_tx);
    while background.join_next().await.is_some() {}
    instances::deregister(conn.client().await?, &me.instance_id).await?;
    emit(&Event::Stopped(events::Stopped {
        instance_id: me.instance_id.clone(),
        released: Some(released),
        sent: None,
    }));
    Ok(())
}

/// The worker's identity and connection: the session named, the schema
/// checked, the instance registered, and `ready` said (with the armed
/// failpoints).
async fn start(cfg: &WorkerConfig) -> Result<(Identity, Conn)> {
    let me = Identity {
        instance_id: new_instance_id(&cfg.name),
        name: cfg.name.clone(),
        version: VERSION.to_string(),
    };
    crate::db::set_session_identity(crate::db::SessionIdentity {
        instance_id: Some(me.instance_id.clone()),
        idle_in_transaction: cfg.timings.idle_in_transaction,
    });
    let mut conn = Conn::open(&cfg.database_url).await?;
    schema::check_for_runtime(conn.client().await?).await?;
    instances::register(
        conn.client().await?,
        &me.instance_id,
        &me.name,
        VERSION,
        "worker",
    )
    .await?;
    emit(&Event::Ready(events::Ready {
        role: ProcessKind::Worker,
        instance_id: me.instance_id.clone(),
        name: me.name.clone(),
        version: VERSION.to_owned(),
        pid: std::process::id(),
        failpoints: Some(
            crate::failpoint::armed_list()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        ),
    }));
    Ok((me, conn))
}

/// The tasks beside the claim loop, each on its own connection: the
/// heartbeat, the closer, and (when this worker competes for it)
/// maintenance.
fn spawn_background(
    cfg: &WorkerConfig,
    me: &Identity,
    inflight: &InFlight,
    stop_rx: watch::Receiver<bool>,
    fatal_tx: mpsc::Sender<Error>,
    done_rx: mpsc::UnboundedReceiver<Done>,
) -> JoinSet<()> {
    let t = &cfg.timings;
    let mut background = JoinSet::new();
    background.spawn(heartbeat(
        cfg.database_url.clone(),
        me.instance_id.clone(),
        t.clone(),
        inflight.clone(),
        stop_rx.clone(),
        fatal_tx.clone(),
    ));
    background.spawn(closer(
        cfg.database_url.clone(),
        t.clone(),
        inflight.clone(),
        done_rx,
        fatal_tx.clone(),
    ));
    if cfg.maintenance {
        background.spawn(maintenance::run(
            cfg.database_url.clone(),
            me.clone(),
            t.clone(),
            stop_rx.clone(),
            fatal_tx.clone(),
        ));
    }
    background
}

/// Claim up to `n` jobs of `queue` with the prepared claim statement. A
/// failure the worker's patience still covers resets the connection and
/// claims nothing; one beyond it is the worker's error.
async fn claim_patiently(
    conn: &mut Conn,
    patience: &mut Patience,
    queue: &str,
    n: i64,
    me: &Identity,
) -> Result<Vec<Claimed>> {
    let claimed = match conn.prepare(claim::CLAIM).await {
        Ok(stmt) => match conn.client().await {
            Ok(c) => claim::claim_with(c, &stmt, queue, n, &me.instance_id, VERSION).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match claimed {
        Ok(batch) => {
            patience.ok();
            Ok(batch)
        }
        Err(e) => match patience.failed("claiming", e) {
            Some(e) => Err(e),
            None => {
                conn.reset();
                Ok(Vec::new())
            }
        },
    }
}

/// Say a failure that stops the worker (`fatal`), and give it back.
fn fatal(e: Error) -> Error {
    emit(&Event::Fatal(Fatal {
        error: e.to_string(),
    }));
    e
}

/// On a clean stop, wait up to `grace` for the attempts in flight to
/// finish; a failure elsewhere meanwhile is fatal.
async fn drain_inflight(
    inflight: &InFlight,
    fatal_rx: &mut mpsc::Receiver<Error>,
    grace: std::time::Duration,
) -> Result<()> {
    let deadline = Instant::now() + grace;
    while !inflight.lock().expect("inflight lock").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        if let Ok(e) = fatal_rx.try_recv() {
            return Err(fatal(e));
        }
    }
    Ok(())
}

/// Start a claimed attempt: record it in flight (stopping the handlers of
/// the attempts of the same job it supersedes), say `started`, and run
/// its handler, which hands the outcome to the closer with the permit.
fn spawn_attempt(
    job: Claimed,
    permit: OwnedSemaphorePermit,
    me: &Identity,
    inflight: &InFlight,
    handlers: &mut JoinSet<()>,
    done_tx: &mpsc::UnboundedSender<Done>,
    handler_t: &HandlerTimings,
) {
    let (job_id, run_lease) = (job.job_id, job.run_lease);
    let superseded = {
        let mut map = inflight.lock().expect("inflight lock");
        map.insert((job_id, run_lease), None);
        stop_superseded(&mut map, job_id, run_lease)
    };
    for (job_id, run_lease) in superseded {
        emit(&Event::LeaseLost(LeaseRef { job_id, run_lease }));
    }
    emit(&Event::Started(events::Started {
        job_id: job.job_id,
        attempt: job.attempt,
        run_lease: job.run_lease,
        mode: workload::mode_of(&job.args),
        instance_id: me.instance_id.clone(),
        version: VERSION.to_owned(),
    }));
    let tx = done_tx.clone();
    let ht = handler_t.clone();
    let handle = handlers.spawn(async move {
        let outcome = if job.kind == workload::KIND {
            workload::run(&job.args, job.attempt, job.deadline_ms, &ht).await
        } else {
            eprintln!(
                "awa: no handler for job kind {:?} (job {}); failing it",
                job.kind, job.job_id
            );
            Outcome::Failed
        };
        let _ = tx.send(Done {
            job,
            outcome,
            _permit: permit,
        });
    });
    if let Some(entry) = inflight
        .lock()
        .expect("inflight lock")
        .get_mut(&(job_id, run_lease))
    {
        *entry = Some(handle);
    }
}

/// On a clean stop, release the attempts still in flight once their
/// handlers are aborted, so they do not wait for rescue. Returns how many
/// were left (released or not).
async fn release_left(conn: &mut Conn, inflight: &InFlight) -> Result<u64> {
    let left: Vec<(i64, i64)> = inflight
        .lock()
        .expect("inflight lock")
        .drain()
        .map(|(key, _)| key)
        .collect();
    for (job_id, run_lease) in &left {
        match finish::release(conn.client().await?, *job_id, *run_lease).await {
            Ok(true) => emit(&Event::Released(LeaseRef {
                job_id: *job_id,
                run_lease: *run_lease,
            })),
            Ok(false) => {}
            Err(e) => eprintln!("awa: could not release job {job_id}: {e}"),
        }
    }
    Ok(left.len() as u64)
}

/// Record outcomes, one statement each, retrying transient failures.
async fn closer(
    url: String,
    t: Timings,
    inflight: InFlight,
    mut rx: mpsc::UnboundedReceiver<Done>,
    fatal: mpsc::Sender<Error>,
) {
    let Some(mut conn) = Conn::open_or_report(&url, &fatal).await else {
        return;
    };
    while let Some(first) = rx.recv().await {
        // Take whatever else is ready too: one statement closes the batch.
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(d) => batch.push(d),
                Err(_) => break,
            }
        }
        let input: Vec<(i64, i64, Outcome)> = batch
            .iter()
            .map(|d| (d.job.job_id, d.job.run_lease, d.outcome.clone()))
            .collect();
        let start = Instant::now();
        let closed = loop {
            let res = match conn.prepare(finish::terminal_statement()).await {
                Ok(stmt) => match conn.client().await {
                    Ok(c) => finish::finish_many_with(c, &stmt, &input).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match res {
                Err(e) if e.is_transient() && start.elapsed() < t.db_patience => {
                    eprintln!(
                        "awa: recording {} outcomes failed, retrying: {e}",
                        input.len()
                    );
                    conn.reset();
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                other => break other,
            }
        };
        let closed = match closed {
            Ok(c) => c,
            Err(e) => {
                let _ = fatal.send(e).await;
                return;
            }
        };
        let mut map = inflight.lock().expect("inflight lock");
        for (d, c) in batch.iter().zip(closed) {
            let outcome = match c {
                Closed::Accepted => d.outcome.attempt_outcome(),
                Closed::DeadLettered => AttemptOutcome::DeadLettered,
                Closed::Stale => AttemptOutcome::Stale,
            };
            emit(&Event::Finished(events::Finished {
                job_id: d.job.job_id,
                attempt: d.job.attempt,
                run_lease: d.job.run_lease,
                outcome,
                mode: workload::mode_of(&d.job.args),
                version: VERSION.to_owned(),
            }));
            map.remove(&(d.job.job_id, d.job.run_lease));
        }
    }
}

/// Keep this runtime's heartbeat and its attempts' heartbeats fresh, and
/// notice attempts whose lease is gone (rescued by the leader, cancelled
/// by an operator): their handlers are stopped, freeing their slots. A
/// lease counts as gone only when two heartbeats in a row miss it (a
/// close in progress deletes the lease just before it leaves `inflight`).
async fn heartbeat(
    url: String,
    instance_id: String,
    t: Timings,
    inflight: InFlight,
    mut stop: watch::Receiver<bool>,
    fatal: mpsc::Sender<Error>,
) {
    let Some(mut conn) = Conn::open_or_report(&url, &fatal).await else {
        return;
    };
    let mut patience = Patience::new(t.db_patience);
    let mut suspects: std::collections::HashSet<(i64, i64)> = Default::default();
    while !*stop.borrow() {
        let leases: Vec<(i64, i64)> = inflight
            .lock()
            .expect("inflight lock")
            .keys()
            .copied()
            .collect();
        let res = match conn.client().await {
            Ok(c) => instances::heartbeat(c, &instance_id, &leases).await,
            Err(e) => Err(e),
        };
        match res {
            Ok(held) => {
                patience.ok();
                let missing: std::collections::HashSet<(i64, i64)> = leases
                    .iter()
                    .filter(|l| !held.contains(l))
                    .copied()
                    .collect();
                let mut map = inflight.lock().expect("inflight lock");
                for key in missing.intersection(&suspects) {
                    if let Some(handle) = map.remove(key) {
                        if let Some(handle) = handle {
                            handle.abort();
                        }
                        emit(&Event::LeaseLost(LeaseRef {
                            job_id: key.0,
                            run_lease: key.1,
                        }));
                    }
                }
                suspects = missing;
            }
            Err(e) => match patience.failed("heartbeating", e) {
                Some(e) => {
                    let _ = fatal.send(e).await;
                    return;
                }
                None => conn.reset(),
            },
        }
        tokio::select! {
            _ = tokio::time::sleep(t.heartbeat) => {}
            _ = stop.changed() => {}
        }
    }
}

/// A watch that turns true on SIGTERM or SIGINT.
pub(crate) fn shutdown_signal() -> Result<watch::Receiver<bool>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
        // Keep the sender alive so receivers never see a closed channel.
        std::future::pending::<()>().await;
    });
    Ok(rx)
}
