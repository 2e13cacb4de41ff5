//! Embedded migrations and the schema checks every command runs first.
//!
//! Migrations are applied in one transaction under an advisory lock, so
//! other sessions see the schema before or after the whole set.

use crate::error::{Error, Result};
use crate::version::{EXPAND_MIGRATION_VERSION, SCHEMA_VERSION, VERSION};
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
    Migration { version: 1, name: "core", sql: include_str!("../migrations/v001_core.sql") },
    Migration { version: 2, name: "cron", sql: include_str!("../migrations/v002_cron.sql") },
];

/// Serialises migrators (transaction-scoped advisory lock).
const MIGRATE_LOCK_KEY: i64 = 0x6177_615f_6d67_7274;

const BOOTSTRAP: &str = "CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_version (
    version    int PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);";
const HAS_VERSION_TABLE: &str = "SELECT to_regclass('awa.schema_version') IS NOT NULL";
const MAX_VERSION: &str = "SELECT coalesce(max(version), 0) FROM awa.schema_version";
const RECORD_VERSION: &str = "INSERT INTO awa.schema_version (version) VALUES ($1)";

/// What `awa migrate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrateOutcome {
    /// Migrations `from+1..=to` were applied.
    Applied { from: i32, to: i32 },
    /// Nothing to do.
    UpToDate { version: i32 },
    /// The schema is at the 0.7 expand migration in `columns` authority,
    /// which this release runs on unchanged: nothing to do.
    AheadCompatible { found: i32 },
}

/// Options of `awa migrate`.
#[derive(Debug, Clone, Default)]
pub struct MigrateOptions {
    /// Accepted for the rehearsal contract; this release has no runtime
    /// version floors to override.
    pub allow_live_runtimes: bool,
}

/// The schema's current version, or `None` when no schema is installed.
pub async fn current_version(client: &impl tokio_postgres::GenericClient) -> Result<Option<i32>> {
    let has: bool = client
        .query_one(HAS_VERSION_TABLE, &[])
        .await
        .map_err(|e| Error::db("reading the schema version", e))?
        .get(0);
    if !has {
        return Ok(None);
    }
    let v: i32 = client
        .query_one(MAX_VERSION, &[])
        .await
        .map_err(|e| Error::db("reading the schema version", e))?
        .get(0);
    Ok(Some(v))
}

/// Bring the schema to this binary's version.
pub async fn migrate(client: &mut Client, _opts: &MigrateOptions) -> Result<MigrateOutcome> {
    let tx = client.transaction().await.map_err(|e| Error::db("starting the migration", e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK_KEY])
        .await
        .map_err(|e| Error::db("taking the migration lock", e))?;
    let found = current_version(&tx).await?;
    let from = found.unwrap_or(0);
    if from > SCHEMA_VERSION {
        // Fail closed before any write: only the expand migration in
        // compat authority is a schema this release may run on.
        check_ahead(&tx, from).await?;
        tx.rollback().await.map_err(|e| Error::db("finishing the migration", e))?;
        return Ok(MigrateOutcome::AheadCompatible { found: from });
    }
    if from == SCHEMA_VERSION {
        tx.commit().await.map_err(|e| Error::db("finishing the migration", e))?;
        return Ok(MigrateOutcome::UpToDate { version: from });
    }
    tx.batch_execute(BOOTSTRAP).await.map_err(|e| Error::db("creating the awa schema", e))?;
    for m in MIGRATIONS.iter().filter(|m| m.version > from) {
        tx.batch_execute(m.sql)
            .await
            .map_err(|e| Error::db(format!("applying migration v{} ({})", m.version, m.name), e))?;
        tx.execute(RECORD_VERSION, &[&m.version])
            .await
            .map_err(|e| Error::db(format!("recording migration v{}", m.version), e))?;
    }
    tx.commit().await.map_err(|e| Error::db("committing the migration", e))?;
    Ok(MigrateOutcome::Applied { from, to: SCHEMA_VERSION })
}

const HAS_AUTHORITY: &str = "SELECT to_regclass('awa.ring_cursor_authority') IS NOT NULL";
const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority";

/// The forward-schema guard: a schema newer than this binary is accepted
/// only when it is exactly the 0.7 expand migration and the ring-cursor
/// authority is still `columns`; anything else is refused (nothing has
/// been written when this runs).
async fn check_ahead(client: &impl tokio_postgres::GenericClient, found: i32) -> Result<()> {
    if found != EXPAND_MIGRATION_VERSION {
        return Err(Error::Refused(format!(
            "the schema is at version {found}, newer than awa {VERSION} knows (it runs on {SCHEMA_VERSION}, \
             or on {EXPAND_MIGRATION_VERSION} while the ring-cursor authority is `columns`); refusing before any write; \
             run an awa release that matches the schema"
        )));
    }
    let has: bool = client
        .query_one(HAS_AUTHORITY, &[])
        .await
        .map_err(|e| Error::db("reading the ring-cursor authority", e))?
        .get(0);
    let authority: Option<String> = if has {
        client
            .query_opt(AUTHORITY, &[])
            .await
            .map_err(|e| Error::db("reading the ring-cursor authority", e))?
            .map(|r| r.get(0))
    } else {
        None
    };
    match authority.as_deref() {
        Some("columns") => Ok(()),
        Some(other) => Err(Error::Refused(format!(
            "the ring-cursor authority is `{other}`: the cursor columns awa {VERSION} uses were retired by the flip; \
             refusing before any write; run awa 0.7 or later (rollback across the flip is not supported)"
        ))),
        None => Err(Error::Refused(format!(
            "the schema is at version {found} but has no ring-cursor authority row; refusing before any write; \
             finish the migration with awa 0.7 or later"
        ))),
    }
}

/// The check a worker or producer runs before it writes anything: the
/// schema must be installed, at least at this binary's version, and pass
/// the forward-schema guard when newer.
pub async fn check_for_runtime(client: &Client) -> Result<i32> {
    match current_version(client).await? {
        None => Err(Error::Refused(format!(
            "no awa schema in this database; run `awa migrate` (awa {VERSION}) first"
        ))),
        Some(v) if v < SCHEMA_VERSION => Err(Error::Refused(format!(
            "the schema is at version {v} but awa {VERSION} needs version {SCHEMA_VERSION}; run `awa migrate` first"
        ))),
        Some(v) if v > SCHEMA_VERSION => {
            check_ahead(client, v).await?;
            Ok(v)
        }
        Some(v) => Ok(v),
    }
}
