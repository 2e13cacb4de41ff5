//! Databases on a throwaway cluster, set up the way a fleet leaves them.

use awa_harness::pgtemp::Cluster;
use awa_runtime::schema::MIGRATIONS;
use tokio_postgres::Client;

/// The version table as the runtime's bootstrap creates it.
pub const BOOTSTRAP: &str = "CREATE SCHEMA awa;
CREATE TABLE awa.schema_version (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())";

/// Records a migration as applied.
pub const RECORD_VERSION: &str = "INSERT INTO awa.schema_version (version) VALUES ($1)";

/// A new database `name` on `cluster` on the 0.6 schema (migrations 1
/// and 2 only, recorded in the version table), and a client of it.
pub async fn on_06_schema(cluster: &Cluster, name: &str) -> Client {
    cluster
        .create_database(name)
        .await
        .expect("create database");
    let client = cluster.connect(name).await.expect("connect");
    client.batch_execute(BOOTSTRAP).await.unwrap();
    for m in MIGRATIONS.iter().filter(|m| m.version <= 2) {
        client.batch_execute(m.sql).await.unwrap();
        client.execute(RECORD_VERSION, &[&m.version]).await.unwrap();
    }
    client
}
