//! Reachability: whether a cell reached the interleavings it declares
//! (`reach = [...]` in matrix.toml), read from what it observed.
//!
//! A cell written for a race proves nothing when the race did not happen:
//! a flip "under a frozen leader" that ran after the leader was let go, a
//! "takeover" in which nobody took over. Such a run is inconclusive,
//! naming what was missing (and `--retries` tries it again with a new
//! seed); a reached interleaving is one of the cell's proved sentences.

use crate::matrix::Reach;
use crate::observe::{FenceLayer, Observations};

mod claims;
mod fence;
mod held_partition;
mod leadership;
mod rescue;
mod slot_zero;

pub use crate::stream::Reached;

/// Each of `wanted` judged against `obs`; `claimed_by` are the versions
/// whose workers started attempts.
pub fn reached(wanted: &[Reach], obs: &Observations, claimed_by: &[String]) -> Vec<Reached> {
    wanted
        .iter()
        .map(|&reach| {
            let (reached, evidence) = match reach {
                Reach::MixedClaims => claims::mixed_claims(claimed_by),
                Reach::LeaderFrozenAcrossFlip => leadership::frozen_across_flip(obs),
                Reach::LeaderTakeover => leadership::takeover(obs),
                Reach::RescuedByCurrent => rescue::rescued_by_current(obs),
                Reach::LateResultDuringRerun => rescue::late_result_during_rerun(obs),
                Reach::FencedByResolver => fence::fenced_by(FenceLayer::Resolver, obs),
                Reach::FencedByTrigger => fence::fenced_by(FenceLayer::Trigger, obs),
                Reach::OldRotationAfterFlip => fence::old_rotation_after_flip(obs),
                Reach::SlotZeroFree => slot_zero::slot_zero_free_at_flip(obs),
                Reach::PruneMetHeldPartition => held_partition::prune_met_held_partition(obs),
                Reach::PruneLostDeadlock => held_partition::prune_lost_deadlock(obs),
            };
            Reached {
                reach,
                reached,
                evidence,
            }
        })
        .collect()
}

/// Why the cell is inconclusive for want of an interleaving, if it is.
pub fn unreached(wanted: &[Reach], obs: &Observations, claimed_by: &[String]) -> Option<String> {
    missed(&reached(wanted, obs, claimed_by))
}

/// Why the cell is inconclusive for want of an interleaving, from what
/// [`reached`] judged of each.
pub fn missed(reached: &[Reached]) -> Option<String> {
    let missed: Vec<String> = reached
        .iter()
        .filter(|r| !r.reached)
        .map(|r| format!("{} ({})", r.reach.name(), r.evidence))
        .collect();
    (!missed.is_empty()).then(|| {
        format!(
            "the cell did not reach what it exists for: {}",
            missed.join("; ")
        )
    })
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// What the tests of every reach kind share.
#[cfg(test)]
mod test_support {
    use super::*;
    use crate::matrix::{FlipMode, Outcome};
    use crate::observe::FlipRecord;

    pub(super) use crate::report::fixture::worker_process as process;

    pub(super) fn flip(at_ms: u64) -> FlipRecord {
        FlipRecord {
            holder_ages: Vec::new(),
            ids_drawn_before: None,
            mode: FlipMode::Manual,
            expected: Outcome::Ok,
            exit_code: Some(0),
            at_ms,
            output: vec![],
        }
    }

    pub(super) fn one(reach: Reach, obs: &Observations, claimed_by: &[String]) -> Reached {
        reached(&[reach], obs, claimed_by).remove(0)
    }
}
