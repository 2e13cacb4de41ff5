//! `prune_met_held_partition`: the leader's prune met ring partitions a
//! long reader held, and gave up on its lock within its bound.

use super::list;
use crate::observe::{Observations, duration};

/// A `lock_ring` hold that saw a prune's lock request wait on its
/// partitions and give up while they were still held. The hold counts
/// only the prune's requests: the maintenance leader's session (the one
/// holding the leader's advisory lock) asking ACCESS EXCLUSIVE of a
/// partition of the held ring, which of the leader's duties only a prune
/// does (see the `hold` step); another session's wait on them (a
/// migration's, an operator's) is no prune meeting the hold.
pub(super) fn prune_met_held_partition(obs: &Observations) -> (bool, String) {
    let holds = &obs.partition_holds;
    if let Some(h) = holds.iter().find(|h| h.gave_up > 0) {
        return (
            true,
            format!(
                "{} of {} waiting on the {} ring's held partitions (step {}) gave up while they were held, the first at {}",
                h.gave_up,
                crate::observe::count(u64::from(h.waits), "prune lock request"),
                h.ring,
                h.step,
                h.first_gave_up_ms
                    .map_or("an unknown time".to_owned(), duration)
            ),
        );
    }
    let seen = if holds.is_empty() {
        "no hold with lock_ring ran".to_owned()
    } else {
        format!(
            "no prune lock request gave up on the held partitions ({})",
            list(holds.iter().map(|h| format!(
                "the {} ring held {} in step {}, {} waited and got it once let go",
                h.ring,
                crate::observe::count(u64::from(h.holds), "time"),
                h.step,
                crate::observe::count(u64::from(h.waits), "prune lock request"),
            )))
        )
    };
    (false, seen)
}

/// A `deadlock` hold that closed a lock cycle with a prune waiting on it,
/// saw the prune give up while it still held the partitions, and during
/// which the database counted a deadlock: the prune's session found the
/// cycle and was rolled back (a prune that timed out counts none).
pub(super) fn prune_lost_deadlock(obs: &Observations) -> (bool, String) {
    let holds: Vec<_> = obs
        .partition_holds
        .iter()
        .filter_map(|h| h.deadlocks.map(|d| (h, d)))
        .collect();
    if let Some((h, d)) = holds.iter().find(|(h, d)| h.gave_up > 0 && *d > 0) {
        return (
            true,
            format!(
                "{} of {} that met the {} ring's partitions held in the other order (step {}) gave up while they were held, and the database counted {} meanwhile",
                h.gave_up,
                crate::observe::count(u64::from(h.waits), "prune lock request"),
                h.ring,
                h.step,
                crate::observe::count(*d, "deadlock")
            ),
        );
    }
    let seen = if holds.is_empty() {
        "no hold with deadlock ran".to_owned()
    } else {
        format!(
            "no prune lost a deadlock ({})",
            list(holds.iter().map(|(h, d)| format!(
                "in step {}, {} closed a cycle, {} gave up while held, the database counted {}",
                h.step,
                crate::observe::count(u64::from(h.waits), "prune lock request"),
                h.gave_up,
                crate::observe::count(*d, "deadlock")
            )))
        )
    };
    (false, seen)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::one;
    use crate::matrix::Reach;
    use crate::observe::Observations;

    #[test]
    fn a_held_partition_is_met_only_by_a_prune_that_gave_up_while_it_was_held() {
        use crate::matrix::HeldRing;
        use crate::observe::PartitionHold;
        let mut obs = Observations::default();
        let r = one(Reach::PruneMetHeldPartition, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (false, "no hold with lock_ring ran")
        );
        // Prunes came, but each waited out the hold and got the lock.
        obs.partition_holds.push(PartitionHold {
            step: 3,
            ring: HeldRing::Queue,
            holds: 4,
            waits: 2,
            gave_up: 0,
            first_gave_up_ms: None,
            at_ms: 12_000,
            deadlocks: None,
        });
        let r = one(Reach::PruneMetHeldPartition, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "no prune lock request gave up on the held partitions (the queue ring held 4 times in step 3, 2 prune lock requests waited and got it once let go)"
            )
        );
        obs.partition_holds[0].waits = 5;
        obs.partition_holds[0].gave_up = 3;
        obs.partition_holds[0].first_gave_up_ms = Some(4_250);
        let r = one(Reach::PruneMetHeldPartition, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                true,
                "3 of 5 prune lock requests waiting on the queue ring's held partitions (step 3) gave up while they were held, the first at 4.2s"
            )
        );
        // A plain hold is no deadlock, however many prunes gave up.
        assert_eq!(
            one(Reach::PruneLostDeadlock, &obs, &[]).evidence,
            "no hold with deadlock ran"
        );
    }

    #[test]
    fn a_prune_lost_a_deadlock_when_it_gave_up_and_the_database_counted_one() {
        use crate::matrix::HeldRing;
        use crate::observe::PartitionHold;
        let mut obs = Observations::default();
        obs.partition_holds.push(PartitionHold {
            step: 4,
            ring: HeldRing::Claim,
            holds: 6,
            waits: 3,
            gave_up: 3,
            first_gave_up_ms: Some(5_000),
            at_ms: 20_000,
            deadlocks: Some(0),
        });
        // The prunes timed out before the cycle was found: no deadlock.
        let r = one(Reach::PruneLostDeadlock, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "no prune lost a deadlock (in step 4, 3 prune lock requests closed a cycle, 3 gave up while held, the database counted 0 deadlocks)"
            )
        );
        obs.partition_holds[0].deadlocks = Some(2);
        let r = one(Reach::PruneLostDeadlock, &obs, &[]);
        assert!(r.reached, "{r:?}");
        assert_eq!(
            r.evidence,
            "3 of 3 prune lock requests that met the claim ring's partitions held in the other order (step 4) gave up while they were held, and the database counted 2 deadlocks meanwhile"
        );
    }
}
