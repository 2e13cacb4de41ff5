//! `awa produce`: live enqueue at a rate with a mode mix. An `accepted`
//! event is printed for each job only after its batch committed; when a
//! commit's fate is unknown (the connection died mid-commit) the batch's
//! ids are reported as `uncertain` so reconciliation can settle them.

use crate::db::{Conn, Patience};
use crate::error::{Error, Result};
use crate::events::{self, Event, ProcessKind, emit};
use crate::store::enqueue::{self, NewJob};
use crate::store::instances;
use crate::timings::{Timings, new_instance_id};
use crate::workload::{KIND, Mix, Mode};
use crate::{schema, version::VERSION};
use serde_json::json;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Configuration of `awa produce`.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub database_url: String,
    pub name: String,
    pub queue: String,
    /// Jobs per second; 0 means as fast as the database takes them.
    pub rate: f64,
    /// Stop after this many jobs; 0 means until SIGTERM.
    pub count: u64,
    pub mix: Mix,
    /// Largest batch per statement.
    pub batch: usize,
    pub priority: i16,
    pub max_attempts: i32,
    /// How far ahead `scheduled` jobs are scheduled.
    pub schedule_delay: Duration,
    /// How long `sleep` jobs sleep.
    pub sleep: Duration,
    /// The per-attempt deadline of `overrun_deadline` jobs.
    pub deadline: Duration,
    pub timings: Timings,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn make_job(cfg: &ProducerConfig, mode: Mode) -> NewJob {
    let mut args = json!({ "mode": mode.name(), "producer": cfg.name });
    if mode == Mode::Sleep {
        args["ms"] = json!(cfg.sleep.as_millis() as u64);
    }
    NewJob {
        kind: KIND.to_string(),
        queue: cfg.queue.clone(),
        args,
        priority: cfg.priority,
        max_attempts: cfg.max_attempts,
        deadline_ms: (mode == Mode::OverrunDeadline)
            .then(|| cfg.deadline.as_millis().min(i32::MAX as u128) as i32),
        run_at_ms: (mode == Mode::Scheduled)
            .then(|| now_ms() + cfg.schedule_delay.as_millis() as i64),
    }
}

/// The producer's start: its session identity set, its connection
/// opened, the schema checked, and the runtime registered and `ready`.
/// Returns its instance id and connection.
async fn register_producer(cfg: &ProducerConfig) -> Result<(String, Conn)> {
    let instance_id = new_instance_id(&cfg.name);
    crate::db::set_session_identity(crate::db::SessionIdentity {
        instance_id: Some(instance_id.clone()),
        idle_in_transaction: cfg.timings.idle_in_transaction,
    });
    let mut conn = Conn::open(&cfg.database_url).await?;
    schema::check_for_runtime(conn.client().await?).await?;
    instances::register(
        conn.client().await?,
        &instance_id,
        &cfg.name,
        VERSION,
        "producer",
    )
    .await?;
    emit(&Event::Ready(events::Ready {
        role: ProcessKind::Producer,
        instance_id: instance_id.clone(),
        name: cfg.name.clone(),
        version: VERSION.to_owned(),
        pid: std::process::id(),
        failpoints: None,
    }));
    Ok((instance_id, conn))
}

/// How many jobs the next batch enqueues, `sent` so far, `start` the
/// producer's start: what `rate` asks by now (a full batch when it is 0),
/// within `count`, at most a batch.
fn batch_size(cfg: &ProducerConfig, start: Instant, sent: u64) -> usize {
    let target = if cfg.rate > 0.0 {
        (cfg.rate * start.elapsed().as_secs_f64()) as u64
    } else {
        sent + cfg.batch as u64
    };
    let target = if cfg.count > 0 {
        target.min(cfg.count)
    } else {
        target
    };
    target.saturating_sub(sent).min(cfg.batch as u64) as usize
}

/// Run a producer until `count` jobs are accepted or SIGTERM/SIGINT.
pub async fn run(mut cfg: ProducerConfig) -> Result<()> {
    let mut shutdown = crate::worker::shutdown_signal()?;
    let (instance_id, mut conn) = register_producer(&cfg).await?;

    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut last_beat = Instant::now();
    let mut patience = Patience::new(cfg.timings.db_patience);
    loop {
        if *shutdown.borrow() || (cfg.count > 0 && sent >= cfg.count) {
            break;
        }
        let n = batch_size(&cfg, start, sent);
        if n == 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        let modes: Vec<Mode> = (0..n).map(|_| cfg.mix.next_mode()).collect();
        let jobs: Vec<NewJob> = modes.iter().map(|m| make_job(&cfg, *m)).collect();
        match produce_batch(&mut conn, &jobs).await {
            Ok(ids) => {
                patience.ok();
                for ((id, mode), job) in ids.iter().zip(&modes).zip(&jobs) {
                    emit(&Event::Accepted(events::Accepted {
                        job_id: *id,
                        mode: *mode,
                        max_attempts: job.max_attempts,
                        run_at_ms: job.run_at_ms,
                        version: VERSION.to_owned(),
                    }));
                }
                sent += n as u64;
            }
            Err(BatchError::Uncertain(ids, e)) => {
                eprintln!(
                    "awa: the commit of a batch of {} jobs may or may not have happened: {e}",
                    ids.len()
                );
                emit(&Event::Uncertain(events::Uncertain {
                    job_ids: ids,
                    modes,
                }));
                sent += n as u64;
                conn.reset();
            }
            Err(BatchError::Failed(e)) => match patience.failed("enqueueing", e) {
                Some(e) => return Err(e),
                None => {
                    conn.reset();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            },
        }
        if last_beat.elapsed() >= cfg.timings.heartbeat {
            if let Ok(c) = conn.client().await {
                // A missed producer heartbeat is not worth stopping for.
                let _ = instances::heartbeat(c, &instance_id, &[]).await;
            }
            last_beat = Instant::now();
        }
    }
    if let Ok(c) = conn.client().await {
        instances::deregister(c, &instance_id).await?;
    }
    emit(&Event::Stopped(events::Stopped {
        instance_id,
        released: None,
        sent: Some(sent),
    }));
    Ok(())
}

enum BatchError {
    /// Nothing was committed.
    Failed(Error),
    /// The insert was sent but its result never came back.
    Uncertain(Vec<i64>, Error),
}

async fn produce_batch(
    conn: &mut Conn,
    jobs: &[NewJob],
) -> std::result::Result<Vec<i64>, BatchError> {
    let client = conn.client().await.map_err(BatchError::Failed)?;
    let ids = enqueue::reserve_ids(client, jobs.len())
        .await
        .map_err(BatchError::Failed)?;
    match enqueue::insert_with_ids(client, &ids, jobs).await {
        Ok(()) => Ok(ids),
        // A server error means the statement did not commit; a transport
        // error after sending leaves its fate unknown.
        Err(e @ Error::Db { .. }) if client.is_closed() => Err(BatchError::Uncertain(ids, e)),
        Err(e) => Err(BatchError::Failed(e)),
    }
}
