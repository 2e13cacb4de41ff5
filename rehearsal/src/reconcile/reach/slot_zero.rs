//! `slot_zero_free`: a hold until slot 0 was free, and the flip it let
//! go finding every ring past slot 0.

use awa_runtime::events::Event;

use super::list;
use crate::matrix::Until;
use crate::observe::{Observations, duration};

/// A hold until `until` whose condition held before it ran out.
fn until_held(until: Until, obs: &Observations) -> (bool, String) {
    let holds: Vec<_> = obs.untils.iter().filter(|u| u.until == until).collect();
    if let Some(h) = holds.iter().find(|h| h.held) {
        return (
            true,
            format!("{until} held at {} (step {})", duration(h.at_ms), h.step),
        );
    }
    let seen = if holds.is_empty() {
        format!("no hold until {until} ran")
    } else {
        format!(
            "the hold until {until} ran out at {} without it",
            list(holds.iter().map(|h| duration(h.at_ms)))
        )
    };
    (false, seen)
}

/// Slot 0 free when it matters: at the flip, not only when the hold saw
/// it. A flip takes a moment to start after the hold lets it go (most of
/// a second in a container), and a ring that entered slot 0 meanwhile
/// fills it again: the flip's own report of each ring's cursor is the
/// evidence, since a ring whose cursor is at slot 0 writes there.
pub(super) fn slot_zero_free_at_flip(obs: &Observations) -> (bool, String) {
    let (held, evidence) = until_held(Until::SlotZeroFree, obs);
    let Some(hold) = obs
        .untils
        .iter()
        .find(|u| u.until == Until::SlotZeroFree && u.held)
    else {
        return (held, evidence);
    };
    let Some(flip) = obs.flips.iter().find(|f| f.at_ms >= hold.at_ms) else {
        return (false, format!("{evidence}, but no flip ran after it"));
    };
    let rings: Vec<&awa_runtime::store::authority::RingFlip> = flip
        .output
        .iter()
        .filter_map(|e| match e {
            Event::Flipped(f) => Some(f.rings.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    if rings.is_empty() {
        return (
            false,
            format!(
                "{evidence}, but the flip at {} reported no ring",
                duration(flip.at_ms)
            ),
        );
    }
    let at_zero: Vec<&str> = rings
        .iter()
        .filter(|r| r.columns_slot == 0)
        .map(|r| r.ring.as_str())
        .collect();
    if at_zero.is_empty() {
        return (
            true,
            format!(
                "{evidence}, and the flip at {} found every ring past slot 0 ({})",
                duration(flip.at_ms),
                list(
                    rings
                        .iter()
                        .map(|r| format!("{} in slot {}", r.ring, r.columns_slot))
                )
            ),
        );
    }
    (
        false,
        format!(
            "{evidence}, but by the flip at {} the {} ring had entered slot 0 again",
            duration(flip.at_ms),
            list(at_zero.iter().map(|r| (*r).to_owned()))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{flip, one};
    use super::*;
    use crate::matrix::Reach;
    use crate::observe::FlipRecord;

    #[test]
    fn slot_zero_free_is_reached_only_by_a_hold_whose_condition_held() {
        use crate::observe::UntilRecord;
        let mut obs = Observations::default();
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (false, "no hold until slot_zero_free ran")
        );
        obs.untils.push(UntilRecord {
            step: 5,
            until: Until::SlotZeroFree,
            held: false,
            at_ms: 21_000,
        });
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "the hold until slot_zero_free ran out at 21.0s without it"
            )
        );
        obs.untils[0].held = true;
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "slot_zero_free held at 21.0s (step 5), but no flip ran after it"
            )
        );
    }

    fn flipped_at(at_ms: u64, slots: &[(&str, i32)]) -> FlipRecord {
        let rings = slots
            .iter()
            .map(|&(ring, slot)| awa_runtime::store::authority::RingFlip {
                ring: ring.into(),
                columns_slot: slot,
                columns_generation: 8,
                ledger_slot: slot,
                ledger_generation: 8,
                backfilled: 0,
            })
            .collect();
        FlipRecord {
            holder_ages: Vec::new(),
            ids_drawn_before: None,
            output: vec![Event::Flipped(awa_runtime::events::Flipped {
                rings,
                ..Default::default()
            })],
            ..flip(at_ms)
        }
    }

    #[test]
    fn slot_zero_free_counts_only_when_the_flip_found_no_ring_in_slot_0() {
        use crate::observe::UntilRecord;
        let mut obs = Observations::default();
        obs.untils.push(UntilRecord {
            step: 5,
            until: Until::SlotZeroFree,
            held: true,
            at_ms: 21_000,
        });
        // The flip took long enough to start that the claim ring went round
        // into slot 0 again: the stale rotation's window was gone.
        obs.flips = vec![flipped_at(
            21_000,
            &[("queue", 5), ("claim", 0), ("lease", 6)],
        )];
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert_eq!(
            (r.reached, r.evidence.as_str()),
            (
                false,
                "slot_zero_free held at 21.0s (step 5), but by the flip at 21.0s the claim ring had entered slot 0 again"
            )
        );
        obs.flips = vec![flip(21_000)];
        assert!(!one(Reach::SlotZeroFree, &obs, &[]).reached);
        // A flip before the hold is not the one the hold let go.
        obs.flips = vec![
            flipped_at(3_000, &[("queue", 5)]),
            flipped_at(21_000, &[("queue", 5), ("claim", 3), ("lease", 6)]),
        ];
        let r = one(Reach::SlotZeroFree, &obs, &[]);
        assert!(r.reached, "{r:?}");
        assert_eq!(
            r.evidence,
            "slot_zero_free held at 21.0s (step 5), and the flip at 21.0s found every ring past slot 0 (queue in slot 5, claim in slot 3, lease in slot 6)"
        );
    }
}
