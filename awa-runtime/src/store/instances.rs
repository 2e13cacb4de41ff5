//! `runtime_instances`: who is running, of which version, and whether
//! alive. Liveness is heartbeat age, never a flag.

use crate::error::{Error, Result};
use tokio_postgres::Client;

/// `binary_version` is the flip capability the auto-flip and the manual
/// flip check (ADR-041): this binary's version.
const REGISTER: &str =
    "INSERT INTO awa.runtime_instances (instance_id, name, version, role, binary_version)
VALUES ($1, $2, $3, $4, $3)
ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = now()";
const HEARTBEAT: &str =
    "UPDATE awa.runtime_instances SET heartbeat_at = now() WHERE instance_id = $1";
/// Refreshes the heartbeat of every lease of ours it can lock without
/// waiting, and reports as held every lease that still exists.
///
/// A lease row locked by someone else is being deleted by a close or a
/// rescue, so it is about to go anyway: waiting for it would stall this
/// heartbeat behind our own closer (or deadlock with it, the two locking
/// rows in different orders) until the other leases go stale and are
/// rescued although healthy. It is still reported held (it existed at the
/// statement's snapshot), so the worker's handler keeps running; once the
/// deletion commits, the next heartbeat reports it missing.
const HEARTBEAT_LEASES: &str = "
WITH wanted AS (SELECT * FROM unnest($2::int8[], $3::int8[]) AS w(job_id, run_lease))
, free AS (
    SELECT l.job_id, l.run_lease FROM awa.leases l JOIN wanted w USING (job_id, run_lease)
    WHERE l.instance_id = $1
    FOR NO KEY UPDATE OF l SKIP LOCKED
)
, beat AS (
    UPDATE awa.leases l SET heartbeat_at = now() FROM free f
    WHERE l.instance_id = $1 AND l.job_id = f.job_id AND l.run_lease = f.run_lease
)
SELECT l.job_id, l.run_lease FROM awa.leases l JOIN wanted w USING (job_id, run_lease)
WHERE l.instance_id = $1";
const DEREGISTER: &str = "DELETE FROM awa.runtime_instances WHERE instance_id = $1";
const MARK_LEADER: &str =
    "UPDATE awa.runtime_instances SET leader = (instance_id = $1) WHERE leader OR instance_id = $1";

/// Record this process as a runtime.
pub async fn register(
    client: &Client,
    instance_id: &str,
    name: &str,
    version: &str,
    role: &str,
) -> Result<()> {
    client
        .execute(REGISTER, &[&instance_id, &name, &version, &role])
        .await
        .map_err(|e| Error::db("registering in runtime_instances", e))?;
    Ok(())
}

/// Refresh the runtime's heartbeat and those of its attempts in flight;
/// returns the leases still held (a missing one was rescued or cancelled).
pub async fn heartbeat(
    client: &Client,
    instance_id: &str,
    leases: &[(i64, i64)],
) -> Result<Vec<(i64, i64)>> {
    client
        .execute(HEARTBEAT, &[&instance_id])
        .await
        .map_err(|e| Error::db("heartbeating runtime_instances", e))?;
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let jobs: Vec<i64> = leases.iter().map(|l| l.0).collect();
    let runs: Vec<i64> = leases.iter().map(|l| l.1).collect();
    let held = client
        .query(HEARTBEAT_LEASES, &[&instance_id, &jobs, &runs])
        .await
        .map_err(|e| Error::db("heartbeating leases", e))?;
    Ok(held.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Remove the runtime's row at a clean stop.
pub async fn deregister(client: &Client, instance_id: &str) -> Result<()> {
    client
        .execute(DEREGISTER, &[&instance_id])
        .await
        .map_err(|e| Error::db("leaving runtime_instances", e))?;
    Ok(())
}

/// Record which runtime holds maintenance leadership (informational; the
/// advisory lock is what decides).
pub async fn mark_leader(client: &Client, instance_id: &str) -> Result<()> {
    client
        .execute(MARK_LEADER, &[&instance_id])
        .await
        .map_err(|e| Error::db("recording leadership", e))?;
    Ok(())
}
