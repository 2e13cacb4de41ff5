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
    /// The schema carried a version this binary does not know; it was
    /// taken for a legacy schema, `schema_version` was rewritten and the
    /// migration set re-applied.
    LegacyRewritten { found: i32, to: i32 },
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
    let mut from = found.unwrap_or(0);
    let mut legacy = None;
    if from > SCHEMA_VERSION {
        // An unknown, higher version: treat it as a legacy layout and
        // normalise the version table before re-applying our migrations.
        eprintln!("awa: schema version {from} is not one this binary knows; treating it as a legacy schema and normalising");
        tx.batch_execute("DELETE FROM awa.schema_version")
            .await
            .map_err(|e| Error::db("normalising schema_version", e))?;
        legacy = Some(from);
        from = 0;
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
    Ok(match legacy {
        Some(found) => MigrateOutcome::LegacyRewritten { found, to: SCHEMA_VERSION },
        None => MigrateOutcome::Applied { from, to: SCHEMA_VERSION },
    })
}

/// The check a worker or producer runs before it writes anything: the
/// schema must be installed and at least at this binary's version.
pub async fn check_for_runtime(client: &Client) -> Result<i32> {
    match current_version(client).await? {
        None => Err(Error::Refused(format!(
            "no awa schema in this database; run `awa migrate` (awa {VERSION}) first"
        ))),
        Some(v) if v < SCHEMA_VERSION => Err(Error::Refused(format!(
            "the schema is at version {v} but awa {VERSION} needs version {SCHEMA_VERSION}; run `awa migrate` first"
        ))),
        Some(v) => Ok(v),
    }
}
