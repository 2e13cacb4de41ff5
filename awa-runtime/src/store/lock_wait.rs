//! Bounded lock waits for operator commands. A process suspended (or
//! wedged) inside a transaction keeps its locks until it runs again or its
//! session ends: a 0.6.2 leader frozen inside a prune holds ACCESS
//! EXCLUSIVE on claim-ring partitions. The flip and `awa status` must not
//! queue behind it without bound; they give up after a lock timeout and
//! name the sessions holding locks on the runtime's tables, joined to the
//! runtime each belongs to, and what to do.
//!
//! A session is tied to its runtime by `application_name` (0.7 sets
//! `awa <version> <instance_id>`, see [`crate::db::application_name`]) or,
//! for releases that set none (0.6.x), by holding the maintenance leader's
//! advisory lock: the leader's maintenance session is the one that holds
//! transactions open (rotate, prune, rescue), so that is the runtime a
//! lock-holding 0.6 session most often belongs to.

use crate::error::{Error, Result};
use std::time::Duration;
use tokio_postgres::GenericClient;

pub use crate::locks::{Blocked, HolderRuntime, LockHolder};

/// The SQLSTATE of `lock_timeout` expiring.
pub const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Sessions (other than ours) of this database inside a transaction at
/// least `$1` ms old that hold relation locks on `awa` tables, with the
/// runtime each belongs to.
const HOLDERS: &str = "
WITH h AS (
    SELECT a.pid, coalesce(a.application_name, '') AS app, coalesce(a.state, '') AS state,
           (extract(epoch FROM now() - a.xact_start) * 1000)::bigint AS xact_ms,
           array_agg(l.mode || ' on ' || l.relation::regclass::text ORDER BY l.relation::regclass::text, l.mode) AS locks
    FROM pg_stat_activity a
    JOIN pg_locks l ON l.pid = a.pid AND l.granted AND l.locktype = 'relation'
    JOIN pg_class c ON c.oid = l.relation
    JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'awa'
    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
      AND a.xact_start <= now() - $1::float8 * interval '1 millisecond'
    GROUP BY 1, 2, 3, 4
)
SELECT h.pid, h.app, h.state, h.xact_ms, h.locks,
       ri.instance_id, ri.name, ri.version, ri.binary_version, ri.role, ri.leader,
       (extract(epoch FROM now() - ri.heartbeat_at) * 1000)::bigint, ri.matched_by
FROM h
LEFT JOIN LATERAL (
    SELECT ri.*, CASE WHEN left('awa ' || ri.version || ' ' || ri.instance_id, 63) = h.app
                      THEN 'application_name' ELSE 'leader_lock' END AS matched_by
    FROM awa.runtime_instances ri
    WHERE left('awa ' || ri.version || ' ' || ri.instance_id, 63) = h.app
       OR (ri.leader AND EXISTS (
              SELECT 1 FROM pg_locks x
              WHERE x.pid = h.pid AND x.granted AND x.locktype = 'advisory' AND x.objsubid = 1
                AND x.classid = ($2::bigint >> 32)::oid AND x.objid = ($2::bigint & 4294967295)::oid))
    ORDER BY (left('awa ' || ri.version || ' ' || ri.instance_id, 63) = h.app) DESC, ri.heartbeat_at DESC
    LIMIT 1
) ri ON true
ORDER BY h.xact_ms DESC, h.pid";

/// Sessions holding locks on `awa` tables in a transaction open since at
/// least `min_age` (the operation's own wait, so they were there before
/// it began waiting).
pub async fn holders(client: &impl GenericClient, min_age: Duration) -> Result<Vec<LockHolder>> {
    let min_ms = min_age.as_secs_f64() * 1000.0;
    let rows = client
        .query(HOLDERS, &[&min_ms, &crate::locks::LEADER_LOCK_KEY])
        .await
        .map_err(|e| Error::db("naming the sessions that hold the locks", e))?;
    Ok(rows
        .iter()
        .map(|r| LockHolder {
            pid: r.get(0),
            application_name: r.get(1),
            state: r.get(2),
            transaction_age_ms: r.get(3),
            locks: r.get(4),
            runtime: r
                .get::<_, Option<String>>(5)
                .map(|instance_id| HolderRuntime {
                    instance_id,
                    name: r.get(6),
                    version: r.get(7),
                    binary_version: r.get(8),
                    role: r.get(9),
                    leader: r.get(10),
                    heartbeat_age_ms: r.get(11),
                    matched_by: r.get(12),
                }),
        })
        .collect())
}

/// Bound this session's lock waits (`SET lock_timeout`).
pub async fn bound_session(client: &impl GenericClient, timeout: Duration) -> Result<()> {
    client
        .batch_execute(&format!(
            "SET lock_timeout = {}",
            timeout.as_millis().max(1)
        ))
        .await
        .map_err(|e| Error::db("setting lock_timeout", e))
}

/// Turn a lock timeout of `operation` into [`Error::Blocked`] naming the
/// holders (read on the same session, once its transaction is gone); any
/// other result passes through.
pub async fn name_holders<T>(
    client: &impl GenericClient,
    operation: &str,
    timeout: Duration,
    result: Result<T>,
) -> Result<T> {
    match result {
        Err(e) if e.sqlstate() == Some(LOCK_NOT_AVAILABLE) => {
            // Slack for the clocks of the two statements.
            let min_age = timeout.saturating_sub(Duration::from_millis(50));
            let holders = holders(client, min_age).await?;
            Err(Error::Blocked(Box::new(Blocked {
                operation: operation.into(),
                lock_timeout_ms: timeout.as_millis() as u64,
                holders,
            })))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(runtime: Option<HolderRuntime>) -> LockHolder {
        LockHolder {
            pid: 4242,
            application_name: String::new(),
            state: "idle in transaction".into(),
            transaction_age_ms: 7000,
            locks: vec!["AccessExclusiveLock on awa.claim_receipts_3".into()],
            runtime,
        }
    }

    #[test]
    fn a_blocked_operation_names_the_runtime_its_locks_and_what_to_do() {
        let b = Blocked {
            operation: "the flip".into(),
            lock_timeout_ms: 5000,
            holders: vec![holder(Some(HolderRuntime {
                instance_id: "old-1-ab".into(),
                name: "old".into(),
                version: "0.6.2".into(),
                binary_version: None,
                role: "worker".into(),
                leader: true,
                heartbeat_age_ms: 6500,
                matched_by: "leader_lock".into(),
            }))],
        };
        let text = b.to_string();
        for want in [
            "the flip gave up after waiting 5000 ms",
            "runtime old (old-1-ab, version 0.6.2, binary_version NULL, worker, maintenance leader, heartbeat 6500 ms ago)",
            "backend pid 4242, idle in transaction for 7000 ms",
            "AccessExclusiveLock on awa.claim_receipts_3",
            "resume or stop that process",
            "pg_terminate_backend(pid) for pid 4242",
        ] {
            assert!(text.contains(want), "{want:?} missing from {text}");
        }
    }

    #[test]
    fn a_holder_of_no_known_runtime_is_still_named_by_pid() {
        let text = holder(None).describe();
        assert!(
            text.starts_with("a session of no known runtime: backend pid 4242"),
            "{text}"
        );
        let gone = Blocked {
            operation: "status".into(),
            lock_timeout_ms: 100,
            holders: vec![],
        };
        assert!(gone.to_string().contains("the holder has gone"), "{gone}");
    }
}
