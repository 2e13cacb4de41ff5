//! The `awa` command line: flags and `AWA_*` variables, mapped onto the
//! library's configurations, and errors mapped onto exit codes.

use crate::duration::parse_duration;
use crate::error::{Error, Result};
use crate::events::{self, Event, emit, refused};
use crate::producer::ProducerConfig;
use crate::schema::{MigrateOptions, MigrateOutcome};
use crate::store::cron::Schedule;
use crate::timings::Timings;
use crate::version::VERSION;
use crate::worker::WorkerConfig;
use crate::workload::{KIND, Mix, Mode};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use std::time::Duration;

/// A Postgres job-queue runtime with ring-partitioned storage.
#[derive(Debug, Parser)]
#[command(name = "awa", version = VERSION)]
pub struct Cli {
    /// PostgreSQL connection URL.
    // `--help` must not print the password the environment carries.
    #[arg(long, env = "AWA_DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    /// Before the command, wait until this advisory lock can be shared (its holder starts the command ahead and lets it go at the moment it must act).
    #[arg(long, env = "AWA_START_GATE_KEY", global = true)]
    start_gate: Option<i64>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the embedded migrations (one transaction, advisory-locked).
    Migrate {
        /// Proceed even while runtimes below a migration's version floor heartbeat.
        #[arg(long, env = "AWA_ALLOW_LIVE_RUNTIMES")]
        allow_live_runtimes: bool,
        /// Heartbeat age after which a runtime no longer counts as live.
        #[arg(long, env = "AWA_STALE_AFTER", default_value = "10s", value_parser = parse_duration)]
        stale_after: Duration,
        /// Hold the migration transaction open this long after the preflight.
        #[arg(long, env = "AWA_MIGRATE_PAUSE", default_value = "0ms", value_parser = parse_duration)]
        pause: Duration,
        /// With a pause: end it once this advisory lock is free (its holder lets the migration go).
        #[arg(long, env = "AWA_MIGRATE_HOLD_KEY")]
        hold_key: Option<i64>,
    },
    /// Run a worker: claim and run jobs; compete for maintenance leadership.
    Worker(WorkerArgs),
    /// Enqueue rehearsal jobs at a rate with a mode mix.
    Produce(ProduceArgs),
    /// Cron schedules.
    #[command(subcommand)]
    Cron(CronCommand),
    /// Operator actions on single jobs.
    #[command(subcommand)]
    Job(JobCommand),
    /// Storage administration.
    #[command(subcommand)]
    Storage(StorageCommand),
    /// Print the schema, ring cursors, runtimes and counts.
    Status {
        /// Print JSON (the only format).
        #[arg(long)]
        json: bool,
        /// Heartbeat age after which a runtime counts as gone.
        #[arg(long, env = "AWA_STALE_AFTER", default_value = "10s", value_parser = parse_duration)]
        stale_after: Duration,
        /// Give up (exit 3, naming the holders) after waiting this long for a lock.
        #[arg(long, env = "AWA_LOCK_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
        lock_timeout: Duration,
    },
}

#[derive(Debug, Subcommand)]
enum CronCommand {
    /// Create or replace an interval schedule of rehearsal jobs.
    Upsert {
        #[arg(long)]
        name: String,
        /// Interval between fire times, like 2s.
        #[arg(long, value_parser = parse_duration)]
        every: Duration,
        #[arg(long, default_value = "default")]
        queue: String,
        /// Rehearsal mode of the fired jobs.
        #[arg(long, default_value = "complete")]
        mode: String,
        #[arg(long, default_value_t = 3)]
        max_attempts: i32,
    },
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// Cancel a live job (any state), as an operator.
    Cancel { job_id: i64 },
}

#[derive(Debug, Subcommand)]
enum StorageCommand {
    /// Flip the ring-cursor authority from columns to ledger (one way).
    FlipRingAuthority {
        /// Flip although fresh runtimes are not flip-aware.
        #[arg(long)]
        force: bool,
        /// Only report whether the flip would proceed (exit 2 when blocked).
        #[arg(long)]
        check: bool,
        /// Heartbeat age after which a runtime no longer counts as fresh.
        #[arg(long, env = "AWA_STALE_AFTER", default_value = "10s", value_parser = parse_duration)]
        stale_after: Duration,
        /// Give up (exit 3, naming the holders) after waiting this long for a lock.
        #[arg(long, env = "AWA_LOCK_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
        lock_timeout: Duration,
    },
}

#[derive(Debug, Args)]
struct TimingArgs {
    #[arg(long, env = "AWA_HEARTBEAT_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    heartbeat_interval: Duration,
    #[arg(long, env = "AWA_STALE_AFTER", default_value = "10s", value_parser = parse_duration)]
    stale_after: Duration,
    #[arg(long, env = "AWA_RESCUE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    rescue_interval: Duration,
    #[arg(long, env = "AWA_ROTATE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    rotate_interval: Duration,
    #[arg(long, env = "AWA_PROMOTE_INTERVAL", default_value = "200ms", value_parser = parse_duration)]
    promote_interval: Duration,
    #[arg(long, env = "AWA_CRON_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    cron_interval: Duration,
    #[arg(long, env = "AWA_POLL_INTERVAL", default_value = "50ms", value_parser = parse_duration)]
    poll_interval: Duration,
    #[arg(long, env = "AWA_RETRY_BACKOFF", default_value = "1s", value_parser = parse_duration)]
    retry_backoff: Duration,
    #[arg(long, env = "AWA_SNOOZE", default_value = "500ms", value_parser = parse_duration)]
    snooze: Duration,
    #[arg(long, env = "AWA_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    #[arg(long, env = "AWA_DB_PATIENCE", default_value = "30s", value_parser = parse_duration)]
    db_patience: Duration,
    /// The leader's rollup tick: fold deltas and trim ledgers.
    #[arg(long, env = "AWA_FOLD_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    fold_interval: Duration,
    /// Auto-flip once every fresh runtime is flip-aware for this long; `off` disables.
    #[arg(long, env = "AWA_AUTO_FLIP", default_value = "5m", value_parser = parse_auto_flip)]
    auto_flip: AutoFlip,
    /// The server ends a session of this runtime idle inside a transaction this long.
    #[arg(long, env = "AWA_IDLE_IN_TRANSACTION_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    idle_in_transaction_timeout: Duration,
}

/// `off`, or the stability period of the auto-flip.
#[derive(Debug, Clone, Copy)]
struct AutoFlip(Option<Duration>);

// A String: `--auto-flip`'s value parser hands it to clap, which prints it as it is.
fn parse_auto_flip(s: &str) -> Result<AutoFlip, String> {
    if s.trim() == "off" {
        Ok(AutoFlip(None))
    } else {
        parse_duration(s).map(|d| AutoFlip(Some(d)))
    }
}

impl TimingArgs {
    fn timings(&self) -> Timings {
        Timings {
            heartbeat: self.heartbeat_interval,
            stale_after: self.stale_after,
            rescue_every: self.rescue_interval,
            rotate_every: self.rotate_interval,
            promote_every: self.promote_interval,
            cron_every: self.cron_interval,
            poll: self.poll_interval,
            retry_backoff: self.retry_backoff,
            snooze: self.snooze,
            shutdown_grace: self.shutdown_grace,
            db_patience: self.db_patience,
            fold_every: self.fold_interval,
            auto_flip_after: self.auto_flip.0,
            idle_in_transaction: self.idle_in_transaction_timeout,
        }
    }
}

#[derive(Debug, Args)]
struct WorkerArgs {
    /// Name shown in runtime_instances.
    #[arg(long, env = "AWA_NAME")]
    name: Option<String>,
    /// Comma-separated queues to claim from.
    #[arg(
        long,
        env = "AWA_QUEUES",
        default_value = "default",
        value_delimiter = ','
    )]
    queues: Vec<String>,
    /// Attempts run at once.
    #[arg(long, env = "AWA_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,
    /// Never take maintenance leadership.
    #[arg(long, env = "AWA_NO_MAINTENANCE")]
    no_maintenance: bool,
    #[command(flatten)]
    timings: TimingArgs,
}

#[derive(Debug, Args)]
struct ProduceArgs {
    #[arg(long, env = "AWA_NAME")]
    name: Option<String>,
    #[arg(long, env = "AWA_QUEUE", default_value = "default")]
    queue: String,
    /// Jobs per second (0: as fast as possible).
    #[arg(long, env = "AWA_RATE", default_value_t = 100.0)]
    rate: f64,
    /// Stop after this many jobs (0: until SIGTERM).
    #[arg(long, env = "AWA_COUNT", default_value_t = 0)]
    count: u64,
    /// Mode weights, like complete=60,retry_once=8,sleep=10.
    #[arg(long, env = "AWA_MIX", default_value = "complete=1")]
    mix: String,
    #[arg(long, env = "AWA_BATCH", default_value_t = 200)]
    batch: usize,
    #[arg(long, env = "AWA_PRIORITY", default_value_t = 0)]
    priority: i16,
    #[arg(long, env = "AWA_MAX_ATTEMPTS", default_value_t = 3)]
    max_attempts: i32,
    #[arg(long, env = "AWA_SCHEDULE_DELAY", default_value = "2s", value_parser = parse_duration)]
    schedule_delay: Duration,
    #[arg(long, env = "AWA_SLEEP", default_value = "200ms", value_parser = parse_duration)]
    sleep: Duration,
    /// Per-attempt deadline of overrun_deadline jobs.
    #[arg(long, env = "AWA_DEADLINE", default_value = "2s", value_parser = parse_duration)]
    deadline: Duration,
    #[command(flatten)]
    timings: TimingArgs,
}

fn default_name(role: &str) -> String {
    format!("{role}-{}", std::process::id())
}

/// Parse the command line, run, and return the process exit code.
pub fn main() -> i32 {
    crate::redact::install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    if let Some(url) = &cli.database_url {
        crate::redact::register_dsn(url);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("awa: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(dispatch(cli)) {
        Ok(()) => 0,
        Err(e) => {
            match &e {
                Error::Refused(reason) => refused(reason),
                Error::Blocked(blocked) => emit(&Event::Blocked((**blocked).clone())),
                _ => {}
            }
            eprintln!("awa: {}", crate::redact::redact(&e.to_string()));
            e.exit_code()
        }
    }
}

async fn dispatch(cli: Cli) -> Result<()> {
    let Some(url) = cli.database_url else {
        return Err(Error::Config(
            "no database given; pass --database-url or set AWA_DATABASE_URL".into(),
        ));
    };
    if let Some(key) = cli.start_gate {
        crate::gate::wait(&url, key).await?;
    }
    match cli.command {
        Command::Migrate {
            allow_live_runtimes,
            stale_after,
            pause,
            hold_key,
        } => {
            let opts = MigrateOptions {
                allow_live_runtimes,
                stale_ms: stale_after.as_secs_f64() * 1000.0,
                pause,
                hold_key,
            };
            migrate_command(&url, &opts).await
        }
        Command::Worker(a) => worker_command(url, a).await,
        Command::Produce(a) => produce_command(url, a).await,
        Command::Cron(cron) => cron_command(&url, cron).await,
        Command::Job(JobCommand::Cancel { job_id }) => cancel_command(&url, job_id).await,
        Command::Storage(StorageCommand::FlipRingAuthority {
            force,
            check,
            stale_after,
            lock_timeout,
        }) => {
            let mut client = crate::db::connect(&url).await?;
            crate::schema::check_for_runtime(&client).await?;
            flip_command(
                &mut client,
                force,
                check,
                stale_after.as_secs_f64() * 1000.0,
                lock_timeout,
            )
            .await
        }
        Command::Status {
            stale_after,
            lock_timeout,
            ..
        } => status_command(&url, stale_after, lock_timeout).await,
    }
}

/// `awa migrate`: the schema brought to this binary's version, said on stdout.
async fn migrate_command(url: &str, opts: &MigrateOptions) -> Result<()> {
    let mut client = crate::db::connect(url).await?;
    match crate::schema::migrate(&mut client, opts).await? {
        MigrateOutcome::Applied { from, to } => emit(&migrated(from, to)),
        MigrateOutcome::UpToDate { version } => emit(&migrated(version, version)),
    }
    Ok(())
}

/// `awa worker`: its flags checked, then the worker until it is stopped.
async fn worker_command(url: String, a: WorkerArgs) -> Result<()> {
    if a.concurrency == 0 {
        return Err(Error::Config("--concurrency must be at least 1".into()));
    }
    crate::worker::run(WorkerConfig {
        database_url: url,
        name: a.name.unwrap_or_else(|| default_name("worker")),
        queues: a.queues,
        concurrency: a.concurrency,
        maintenance: !a.no_maintenance,
        timings: a.timings.timings(),
    })
    .await
}

/// `awa produce`: its flags checked, then the producer until its count or a stop.
async fn produce_command(url: String, a: ProduceArgs) -> Result<()> {
    let mix = Mix::parse(&a.mix).map_err(|e| Error::Config(format!("--mix / AWA_MIX: {e}")))?;
    if !(a.rate >= 0.0 && a.rate.is_finite()) {
        return Err(Error::Config(format!(
            "--rate must be a number >= 0, got {}",
            a.rate
        )));
    }
    if a.batch == 0 || a.max_attempts < 1 {
        return Err(Error::Config(
            "--batch and --max-attempts must be at least 1".into(),
        ));
    }
    crate::producer::run(ProducerConfig {
        database_url: url,
        name: a.name.unwrap_or_else(|| default_name("producer")),
        queue: a.queue,
        rate: a.rate,
        count: a.count,
        mix,
        batch: a.batch,
        priority: a.priority,
        max_attempts: a.max_attempts,
        schedule_delay: a.schedule_delay,
        sleep: a.sleep,
        deadline: a.deadline,
        timings: a.timings.timings(),
    })
    .await
}

/// `awa cron upsert`: the schedule created or replaced, said on stdout.
async fn cron_command(url: &str, cron: CronCommand) -> Result<()> {
    let CronCommand::Upsert {
        name,
        every,
        queue,
        mode,
        max_attempts,
    } = cron;
    let mode = Mode::parse(&mode)
        .ok_or_else(|| Error::Config(format!("unknown mode {mode:?} for --mode")))?;
    let client = crate::db::connect(url).await?;
    crate::schema::check_for_runtime(&client).await?;
    crate::store::cron::upsert(
        &client,
        &Schedule {
            name: name.clone(),
            every_ms: every.as_millis() as i64,
            queue,
            kind: KIND.into(),
            args: json!({ "mode": mode.name() }),
            priority: 0,
            max_attempts,
        },
    )
    .await?;
    emit(&Event::CronUpserted(events::CronUpserted {
        name,
        every_ms: every.as_millis() as u64,
    }));
    Ok(())
}

/// `awa job cancel`: the job cancelled as an operator, said on stdout.
async fn cancel_command(url: &str, job_id: i64) -> Result<()> {
    let client = crate::db::connect(url).await?;
    crate::schema::check_for_runtime(&client).await?;
    let done = crate::store::finish::cancel_by_operator(&client, job_id).await?;
    emit(&Event::Cancelled(events::Cancelled {
        job_id,
        was_live: done,
    }));
    Ok(())
}

/// `awa status`: the runtime's state as JSON on stdout.
async fn status_command(url: &str, stale_after: Duration, lock_timeout: Duration) -> Result<()> {
    let client = crate::db::connect(url).await?;
    let s = crate::store::read::status_bounded(
        &client,
        stale_after.as_secs_f64() * 1000.0,
        lock_timeout,
    )
    .await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&s).expect("status serialises")
    );
    Ok(())
}

/// `awa storage flip-ring-authority`: events on stdout, exit 2 when the
/// flip is blocked (or, with `--check`, would be).
async fn flip_command(
    client: &mut tokio_postgres::Client,
    force: bool,
    check: bool,
    stale_ms: f64,
    lock_timeout: Duration,
) -> Result<()> {
    use crate::store::authority::{self, Authority, FlipOutcome};
    if check {
        let current = authority::read(&*client).await?;
        let (blocking, fresh) = authority::flip_readiness(&*client, stale_ms).await?;
        let ready = current == Authority::Ledger || blocking.is_empty();
        emit(&Event::FlipCheck(events::FlipCheck {
            authority: Some(current),
            ready,
            fresh_runtimes: Some(fresh as u64),
            blocking: blocking.clone(),
        }));
        return if ready {
            Ok(())
        } else {
            Err(Error::Refused(blocked_message(&blocking)))
        };
    }
    match authority::flip_bounded(client, stale_ms, force, lock_timeout).await? {
        FlipOutcome::Flipped { rings, forced } => {
            emit(&Event::Flipped(events::Flipped {
                rings,
                forced: Some(forced),
                version: Some(VERSION.to_owned()),
                ..events::Flipped::default()
            }));
            Ok(())
        }
        FlipOutcome::Already => {
            emit(&Event::Flipped(events::Flipped {
                already: true,
                version: Some(VERSION.to_owned()),
                ..events::Flipped::default()
            }));
            Ok(())
        }
        FlipOutcome::Blocked { blocking } => {
            emit(&Event::FlipCheck(events::FlipCheck {
                authority: None,
                ready: false,
                fresh_runtimes: None,
                blocking: blocking.clone(),
            }));
            Err(Error::Refused(blocked_message(&blocking)))
        }
    }
}

/// The `migrated` event of this binary.
fn migrated(from: i32, to: i32) -> Event {
    Event::Migrated(events::Migrated {
        from: from.into(),
        to: to.into(),
        version: VERSION.to_owned(),
        legacy_rewrite: false,
        ahead_compatible: false,
    })
}

fn blocked_message(blocking: &[crate::store::authority::Blocker]) -> String {
    let names: Vec<String> = blocking.iter().map(|b| b.describe()).collect();
    format!(
        "the flip is blocked: {} fresh runtime(s) are not flip-aware: {}; stop or upgrade them (or wait until their heartbeat is stale), or pass --force",
        blocking.len(),
        names.join(", ")
    )
}
