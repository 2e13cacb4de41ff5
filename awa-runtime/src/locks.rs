//! The runtime's locks as words every layer shares: the advisory lock
//! keys, and who held locks on the runtime's tables when an operator
//! command gave up waiting ([`Blocked`], which the error type carries and
//! `blocked` events report). A leaf: it names no other module, so the
//! error type, the store, maintenance and migrations all build on it.

use serde::{Deserialize, Serialize};

/// The session advisory lock key of maintenance leadership. The store's
/// lock waits match a 0.6 session to the leader by it.
pub const LEADER_LOCK_KEY: i64 = 0x6177_615f_6c65_6164;

/// Serialises migrators (transaction-scoped advisory lock). Public so an
/// observer (the rehearsal) can see a migration in flight in `pg_locks`.
pub const MIGRATE_LOCK_KEY: i64 = 0x6177_615f_6d67_7274;

/// The runtime a lock-holding session belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HolderRuntime {
    pub instance_id: String,
    pub name: String,
    pub version: String,
    pub binary_version: Option<String>,
    pub role: String,
    pub leader: bool,
    pub heartbeat_age_ms: i64,
    /// `application_name` or `leader_lock`: how the session was matched.
    pub matched_by: String,
}

/// A session that held locks on `awa` tables while we waited.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: i32,
    pub application_name: String,
    /// `pg_stat_activity.state` (`idle in transaction` for a suspended client).
    pub state: String,
    pub transaction_age_ms: i64,
    /// `Mode on relation`, e.g. `AccessExclusiveLock on awa.claim_receipts_3`.
    pub locks: Vec<String>,
    pub runtime: Option<HolderRuntime>,
}

impl LockHolder {
    /// One line naming the holder, its runtime and its locks.
    pub fn describe(&self) -> String {
        let who = match &self.runtime {
            Some(r) => format!(
                "runtime {} ({}, version {}, binary_version {}, {}{}, heartbeat {} ms ago)",
                r.name,
                r.instance_id,
                r.version,
                r.binary_version.as_deref().unwrap_or("NULL"),
                r.role,
                if r.leader { ", maintenance leader" } else { "" },
                r.heartbeat_age_ms
            ),
            None if self.application_name.is_empty() => "a session of no known runtime".into(),
            None => format!("a session of {:?}", self.application_name),
        };
        format!(
            "{who}: backend pid {}, {} for {} ms, holding {}",
            self.pid,
            self.state,
            self.transaction_age_ms,
            self.locks.join(", ")
        )
    }
}

/// What an operation gave up on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Blocked {
    /// `the flip`, `status`.
    pub operation: String,
    pub lock_timeout_ms: u64,
    pub holders: Vec<LockHolder>,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} gave up after waiting {} ms for a lock; nothing was changed; ",
            self.operation, self.lock_timeout_ms
        )?;
        if self.holders.is_empty() {
            write!(
                f,
                "no session held locks on awa tables for that long any more (the holder has gone); retry"
            )
        } else {
            let names: Vec<String> = self.holders.iter().map(LockHolder::describe).collect();
            let pids: Vec<String> = self.holders.iter().map(|h| h.pid.to_string()).collect();
            write!(
                f,
                "held by {}; a suspended or wedged process keeps its locks until it runs again or its session ends: \
                 resume or stop that process (or end its session with SELECT pg_terminate_backend(pid) for pid {}), then retry",
                names.join("; "),
                pids.join(", ")
            )
        }
    }
}
