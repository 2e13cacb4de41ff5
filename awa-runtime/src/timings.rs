//! The runtime's timings. Defaults suit production; a rehearsal cell
//! compresses them (through flags or `AWA_*` variables) so that rescue,
//! rotation and deadlines happen within seconds.

use std::time::Duration;

/// Every interval and threshold the runtime uses.
#[derive(Debug, Clone)]
pub struct Timings {
    /// How often a runtime refreshes its heartbeat and its attempts'.
    pub heartbeat: Duration,
    /// Heartbeat age after which a runtime or attempt counts as gone.
    pub stale_after: Duration,
    /// How often the leader looks for attempts to rescue.
    pub rescue_every: Duration,
    /// How often the leader prunes and rotates each ring.
    pub rotate_every: Duration,
    /// How often the leader promotes due scheduled jobs.
    pub promote_every: Duration,
    /// How often the leader fires due cron times.
    pub cron_every: Duration,
    /// How long an idle worker waits before polling again.
    pub poll: Duration,
    /// First retry backoff (doubles per attempt).
    pub retry_backoff: Duration,
    /// How long a snooze defers a job.
    pub snooze: Duration,
    /// How long a stopping worker waits for attempts in flight.
    pub shutdown_grace: Duration,
    /// How long transient database failures are retried before giving up.
    pub db_patience: Duration,
    /// The leader's rollup tick: fold rollup deltas and trim the ledgers.
    pub fold_every: Duration,
    /// Auto-flip once every fresh runtime has been flip-aware this long
    /// (`None`: never auto-flip).
    pub auto_flip_after: Option<Duration>,
    /// The server ends a session of this runtime that sits idle inside a
    /// transaction this long (a suspended process must not hold its locks
    /// without bound).
    pub idle_in_transaction: Duration,
}

/// The shortest wait [`Timings::prune_lock_wait`] gives a prune: under it,
/// a prune beside steady traffic would be busy nearly every time.
pub const PRUNE_LOCK_WAIT_MIN: Duration = Duration::from_millis(50);
/// The longest: the fixed wait a prune had before it followed `stale_after`.
pub const PRUNE_LOCK_WAIT_MAX: Duration = Duration::from_secs(2);

impl Default for Timings {
    fn default() -> Self {
        Timings {
            heartbeat: Duration::from_secs(1),
            stale_after: Duration::from_secs(10),
            rescue_every: Duration::from_secs(1),
            rotate_every: Duration::from_secs(1),
            promote_every: Duration::from_millis(200),
            cron_every: Duration::from_millis(250),
            poll: Duration::from_millis(50),
            retry_backoff: Duration::from_secs(1),
            snooze: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(10),
            db_patience: Duration::from_secs(30),
            fold_every: Duration::from_secs(30),
            auto_flip_after: Some(Duration::from_secs(300)),
            idle_in_transaction: crate::db::DEFAULT_IDLE_IN_TRANSACTION,
        }
    }
}

impl Timings {
    /// How long a prune may wait for its partitions' ACCESS EXCLUSIVE lock:
    /// a quarter of `stale_after`, within [`PRUNE_LOCK_WAIT_MIN`] and
    /// [`PRUNE_LOCK_WAIT_MAX`]. While the request waits in the lock queue,
    /// every statement that touches the ring's parent table queues behind
    /// it, lease heartbeats included; a wait near `stale_after` lets the
    /// leader's own rescue take healthy attempts whose heartbeats were
    /// queued (with the fixed 2 s wait, that was every `stale_after`
    /// under 2 s plus a heartbeat). A prune that does not get the lock
    /// in time is `Busy` and tries again at the next rotation tick.
    pub fn prune_lock_wait(&self) -> Duration {
        (self.stale_after / 4).clamp(PRUNE_LOCK_WAIT_MIN, PRUNE_LOCK_WAIT_MAX)
    }

    /// `stale_after` in milliseconds, as SQL takes it.
    pub fn stale_ms(&self) -> f64 {
        self.stale_after.as_secs_f64() * 1000.0
    }
}

/// A unique id for this process's `runtime_instances` row.
pub fn new_instance_id(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{name}-{}-{:x}", std::process::id(), nanos & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prune_waits_a_quarter_of_stale_after_within_its_bounds() {
        let with = |stale_ms| Timings {
            stale_after: Duration::from_millis(stale_ms),
            ..Timings::default()
        };
        assert_eq!(with(1500).prune_lock_wait(), Duration::from_millis(375));
        assert_eq!(with(100).prune_lock_wait(), PRUNE_LOCK_WAIT_MIN);
        assert_eq!(with(60_000).prune_lock_wait(), PRUNE_LOCK_WAIT_MAX);
    }
}
