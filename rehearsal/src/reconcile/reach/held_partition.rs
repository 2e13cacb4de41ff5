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
    }
}
