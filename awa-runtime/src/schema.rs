//! Embedded migrations and the schema checks every command runs first.
//!
//! Migrations are applied in one transaction under an advisory lock, so
//! other sessions see the schema before or after the whole set.

use crate::error::{Error, Result};
use crate::version::{SCHEMA_VERSION, VERSION};
use tokio_postgres::Client;

/// One embedded migration.
pub struct Migration {
    /// The version it brings the schema to.
    pub version: i32,
    /// A short name for logs and reports.
    pub name: &'static str,
    /// The SQL, applied as one batch.
    pub sql: &'static str,
}

/// The migration set of this binary, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "core",
        sql: include_str!("../migrations/v001_core.sql"),
    },
    Migration {
        version: 2,
        name: "cron",
        sql: include_str!("../migrations/v002_cron.sql"),
    },
    Migration {
        version: 3,
        name: "expand_ring_ledgers",
        sql: include_str!("../migrations/v003_expand_ring_ledgers.sql"),
    },
];

/// Runtime version floors: applying migration `.0` requires every fresh
/// runtime to run at least version `.1` (ADR-041 §3). The expand
/// migration needs the 0.6.2 stepping-stone: older 0.6 binaries
/// misclassify a newer schema.
pub const MIGRATION_RUNTIME_VERSION_FLOORS: &[(i32, &str)] = &[(3, "0.6.2")];

/// Migrations with no rolling-compatible shape: applying one requires no
/// fresh runtime at all (ADR-041 §8). Empty: adding an entry needs a
/// design review, a header justification and an operator procedure.
pub const EXCLUSIVE_WINDOW_MIGRATIONS: &[i32] = &[];

pub use crate::locks::MIGRATE_LOCK_KEY;
pub use crate::store::read::current_version;

/// The advisory lock a rehearsal holds to keep a paused migration open
/// (`AWA_MIGRATE_HOLD_KEY`): the pause ends once the migration's session
/// can take it shared, so whoever holds it decides when the migration goes
/// on, up to the pause.
pub const MIGRATE_HOLD_KEY: i64 = 0x6177_615f_686f_6c64;

/// Whether the holder of the hold lock has let the migration go on (the
/// lock, once taken, is kept to commit: harmless, nobody waits on it).
const TRY_HOLD: &str = "SELECT pg_try_advisory_xact_lock_shared($1)";

/// How often a held migration checks whether it was let go.
const HOLD_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// How often a migration that deadlocked with live traffic is retried.
const DEADLOCK_RETRIES: u32 = 3;

const BOOTSTRAP: &str = "CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_version (
    version    int PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);";
const RECORD_VERSION: &str = "INSERT INTO awa.schema_version (version) VALUES ($1)";
/// Held until the migration commits, so no runtime can register or
/// heartbeat its way past the preflight (blocks INSERT and UPDATE).
const LOCK_RUNTIMES: &str = "LOCK TABLE awa.runtime_instances IN SHARE ROW EXCLUSIVE MODE";
const FRESH_RUNTIMES: &str = "
SELECT instance_id, name, version, (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint
FROM awa.runtime_instances
WHERE heartbeat_at > now() - $1::float8 * interval '1 millisecond'
ORDER BY started_at, instance_id";

/// What `awa migrate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrateOutcome {
    /// Migrations `from+1..=to` were applied.
    Applied { from: i32, to: i32 },
    /// Nothing to do.
    UpToDate { version: i32 },
}

/// Options of `awa migrate`.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// Proceed although fresh runtimes are below a migration's floor, or
    /// an exclusive-window migration is pending while runtimes are live.
    pub allow_live_runtimes: bool,
    /// Heartbeat age below which a runtime counts as live.
    pub stale_ms: f64,
    /// Hold the migration transaction open this long after the preflight
    /// (rehearsals use it to act during a migration).
    pub pause: std::time::Duration,
    /// With a pause: end it as soon as the advisory lock of this key can be
    /// taken shared (its holder lets the migration go), the pause being
    /// the longest it waits.
    pub hold_key: Option<i64>,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        MigrateOptions {
            allow_live_runtimes: false,
            stale_ms: 10_000.0,
            pause: std::time::Duration::ZERO,
            hold_key: None,
        }
    }
}

fn newer_schema(found: i32) -> Error {
    Error::Refused(format!(
        "the schema is at version {found}, newer than awa {VERSION} knows ({SCHEMA_VERSION}); refusing before any write; \
         run an awa release that matches the schema"
    ))
}

/// Bring the schema to this binary's version: one transaction under an
/// advisory lock, after the preflight; retried whole on deadlock.
pub async fn migrate(client: &mut Client, opts: &MigrateOptions) -> Result<MigrateOutcome> {
    let mut attempt = 0;
    loop {
        match migrate_once(client, opts).await {
            Err(Error::Db { detail, .. })
                if detail.contains("SQLSTATE 40P01") && attempt < DEADLOCK_RETRIES =>
            {
                attempt += 1;
                eprintln!(
                    "awa: the migration deadlocked with live traffic ({detail}); retrying ({attempt}/{DEADLOCK_RETRIES})"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100 * u64::from(attempt)))
                    .await;
            }
            other => return other,
        }
    }
}

async fn migrate_once(client: &mut Client, opts: &MigrateOptions) -> Result<MigrateOutcome> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| Error::db("starting the migration", e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK_KEY])
        .await
        .map_err(|e| Error::db("taking the migration lock", e))?;
    let from = current_version(&tx).await?.unwrap_or(0);
    if from > SCHEMA_VERSION {
        // Fail closed before legacy detection, normalisation or any write.
        return Err(newer_schema(from));
    }
    if from == SCHEMA_VERSION {
        tx.commit()
            .await
            .map_err(|e| Error::db("finishing the migration", e))?;
        return Ok(MigrateOutcome::UpToDate { version: from });
    }
    let pending: Vec<i32> = MIGRATIONS
        .iter()
        .filter(|m| m.version > from)
        .map(|m| m.version)
        .collect();
    if from > 0 {
        preflight(
            &tx,
            &pending,
            MIGRATION_RUNTIME_VERSION_FLOORS,
            EXCLUSIVE_WINDOW_MIGRATIONS,
            opts,
        )
        .await?;
    }
    if !opts.pause.is_zero() {
        hold_open(&tx, opts).await?;
    }
    tx.batch_execute(BOOTSTRAP)
        .await
        .map_err(|e| Error::db("creating the awa schema", e))?;
    for m in MIGRATIONS.iter().filter(|m| m.version > from) {
        tx.batch_execute(m.sql)
            .await
            .map_err(|e| Error::db(format!("applying migration v{} ({})", m.version, m.name), e))?;
        if m.version == crate::version::EXPAND_MIGRATION_VERSION
            && crate::failpoint::armed(crate::failpoint::EXPAND_DROPS_COLUMNS)
        {
            // The seeded defect: the first design of the expand migration
            // dropped the columns 0.6 binaries still use.
            tx.batch_execute(
                "ALTER TABLE awa.queue_ring_state DROP COLUMN current_slot, DROP COLUMN generation;
                 ALTER TABLE awa.claim_ring_state DROP COLUMN current_slot, DROP COLUMN generation;
                 ALTER TABLE awa.lease_ring_state DROP COLUMN current_slot, DROP COLUMN generation;
                 UPDATE awa.ring_cursor_authority SET authority = 'ledger', flipped_at = now();",
            )
            .await
            .map_err(|e| Error::db("dropping the compat columns", e))?;
        }
        tx.execute(RECORD_VERSION, &[&m.version])
            .await
            .map_err(|e| Error::db(format!("recording migration v{}", m.version), e))?;
    }
    if from == 0 {
        // A fresh install: no old binary can exist, start on the ledger.
        crate::store::authority::promote_ledger(&tx).await?;
    }
    tx.commit()
        .await
        .map_err(|e| Error::db("committing the migration", e))?;
    Ok(MigrateOutcome::Applied {
        from,
        to: SCHEMA_VERSION,
    })
}

/// `AWA_MIGRATE_PAUSE`: the migration's transaction held open (its locks
/// taken, nothing applied yet) for the pause, or until the advisory lock
/// `AWA_MIGRATE_HOLD_KEY` names is free, whichever comes first.
async fn hold_open(tx: &tokio_postgres::Transaction<'_>, opts: &MigrateOptions) -> Result<()> {
    // The pause idles inside the transaction on purpose: widen this
    // session's bound on that by the pause.
    let bound = opts.pause + crate::db::DEFAULT_IDLE_IN_TRANSACTION;
    tx.batch_execute(&format!(
        "SET LOCAL idle_in_transaction_session_timeout = {}",
        bound.as_millis()
    ))
    .await
    .map_err(|e| Error::db("widening the idle-in-transaction bound", e))?;
    match opts.hold_key {
        None => {
            eprintln!(
                "awa: holding the migration open for {:?} (AWA_MIGRATE_PAUSE)",
                opts.pause
            );
            tokio::time::sleep(opts.pause).await;
        }
        Some(key) => {
            eprintln!(
                "awa: holding the migration open for up to {:?} (AWA_MIGRATE_PAUSE), until advisory lock {key} is free (AWA_MIGRATE_HOLD_KEY)",
                opts.pause
            );
            let started = std::time::Instant::now();
            let released = loop {
                let free: bool = tx
                    .query_one(TRY_HOLD, &[&key])
                    .await
                    .map_err(|e| Error::db("checking the migration's hold", e))?
                    .get(0);
                if free {
                    break true;
                }
                let left = opts.pause.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break false;
                }
                tokio::time::sleep(left.min(HOLD_POLL)).await;
            };
            if released {
                eprintln!(
                    "awa: the migration was let go after {:?}",
                    started.elapsed()
                );
            } else {
                eprintln!(
                    "awa: the migration's hold was not let go within {:?}; going on",
                    opts.pause
                );
            }
        }
    }
    Ok(())
}

/// The migration preflight (ADR-041 §3, §8): with `runtime_instances`
/// locked until commit, refuse while a fresh runtime is below the floor
/// of a pending migration, or while any runtime is live and a pending
/// migration needs an exclusive window; `allow_live_runtimes` overrides.
/// Public so its refusal paths can be tested with other lists.
pub async fn preflight(
    tx: &tokio_postgres::Transaction<'_>,
    pending: &[i32],
    floors: &[(i32, &str)],
    exclusive: &[i32],
    opts: &MigrateOptions,
) -> Result<()> {
    use crate::store::authority::parse_version;
    if !crate::failpoint::armed(crate::failpoint::PREFLIGHT_NO_LOCK) {
        tx.batch_execute(LOCK_RUNTIMES)
            .await
            .map_err(|e| Error::db("locking runtime_instances", e))?;
    }
    let fresh = tx
        .query(FRESH_RUNTIMES, &[&opts.stale_ms])
        .await
        .map_err(|e| Error::db("reading runtime_instances", e))?;
    let fresh: Vec<(String, String, String, i64)> = fresh
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let describe = |rows: &[&(String, String, String, i64)]| -> String {
        let mut s: Vec<String> = rows
            .iter()
            .take(5)
            .map(|(id, name, v, age)| format!("{name} ({id}, version {v}, heartbeat {age} ms ago)"))
            .collect();
        if rows.len() > 5 {
            s.push(format!("and {} more", rows.len() - 5));
        }
        s.join(", ")
    };
    for v in pending {
        if exclusive.contains(v) && !fresh.is_empty() && !opts.allow_live_runtimes {
            let all: Vec<_> = fresh.iter().collect();
            return Err(Error::Refused(format!(
                "migration v{v} needs an exclusive window but {} runtime(s) are live: {}; stop them first, or pass --allow-live-runtimes",
                fresh.len(),
                describe(&all)
            )));
        }
        for (fv, floor) in floors.iter().filter(|(fv, _)| fv == v) {
            let min = parse_version(floor).expect("floors are X.Y.Z");
            let below: Vec<_> = fresh
                .iter()
                .filter(|(_, _, ver, _)| parse_version(ver).is_none_or(|x| x < min))
                .collect();
            if !below.is_empty() && !opts.allow_live_runtimes {
                return Err(Error::Refused(format!(
                    "migration v{fv} requires every live runtime at {floor} or later, but {} is older: {}; \
                     stop or upgrade it (to {floor}), or pass --allow-live-runtimes",
                    below.len(),
                    describe(&below)
                )));
            }
        }
    }
    Ok(())
}

/// The check a worker or producer runs before it writes anything: the
/// schema must be installed and at exactly this binary's version (older:
/// run `awa migrate`; newer: fail closed).
pub async fn check_for_runtime(client: &Client) -> Result<i32> {
    match current_version(client).await? {
        None => Err(Error::Refused(format!(
            "no awa schema in this database; run `awa migrate` (awa {VERSION}) first"
        ))),
        Some(v) if v < SCHEMA_VERSION => Err(Error::Refused(format!(
            "the schema is at version {v} but awa {VERSION} needs version {SCHEMA_VERSION}; run `awa migrate` (awa {VERSION}) first"
        ))),
        Some(v) if v > SCHEMA_VERSION => Err(newer_schema(v)),
        Some(v) => Ok(v),
    }
}
