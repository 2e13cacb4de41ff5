//! Placement: every ready entry, claim and lease sits in the slot its
//! ring's cursor and generation give it.
//!
//! Rotation opens a slot only when it holds no rows, so a row of slot `s`
//! carries the generation at which `s` was last opened; anything else was
//! written by a cursor the ring never had. A misrouted entry that a
//! claimer picks up within a second leaves no other trace (it is neither
//! lost nor stuck), so the monitor reads the rows every tick and
//! reconciliation once more at the end; both read through the runtime's
//! audit API (`awa_runtime::store::audit::misplaced`), which knows where
//! each representation keeps the cursor.

use std::collections::BTreeMap;

use awa_runtime::store::audit::{MAX_IDS, Misplaced};

use super::rules::{RECONCILE, phase_at};
use crate::matrix::FindingRule;
use crate::observe::{self, Finding, Observations};

/// What was seen of one ring and kind of row: when first (`None`: only
/// at the end), the most rows at once, their ids, the first offender.
type Seen<'a> = (Option<u64>, i64, Vec<i64>, &'a Misplaced);

/// One finding per ring and kind of row that was ever seen misplaced, by
/// the monitor (`obs.misplaced`) or at the end (`end`).
pub(super) fn findings(end: &[Misplaced], obs: &Observations) -> Vec<Finding> {
    let mut seen: BTreeMap<(&str, &str), Seen<'_>> = BTreeMap::new();
    let ticks = obs
        .misplaced
        .iter()
        .flat_map(|s| s.rows.iter().map(move |m| (Some(s.at_ms), m)));
    for (at_ms, m) in ticks.chain(end.iter().map(|m| (None, m))) {
        let entry =
            seen.entry((m.ring.as_str(), m.kind.as_str()))
                .or_insert((at_ms, 0, Vec::new(), m));
        entry.1 = entry.1.max(m.count);
        entry.2.extend(&m.ids);
    }
    seen.into_iter()
        .map(|((ring, kind), (at_ms, most, mut ids, first))| {
            ids.sort_unstable();
            ids.dedup();
            ids.truncate(MAX_IDS);
            let most = u64::try_from(most).unwrap_or(0);
            let when = at_ms.map_or_else(
                || "at the end".to_owned(),
                |at| format!("from {}", observe::duration(at)),
            );
            Finding {
                rule: FindingRule::Misplaced,
                phase: at_ms
                    .and_then(|at| phase_at(obs, at))
                    .unwrap_or(RECONCILE)
                    .into(),
                message: format!(
                    "{} {} of the {ring} ring sat outside the slot its cursor gives {} ({when}, up to {most} at once): the first, {}",
                    observe::thousands(most),
                    rows_of(most, kind),
                    observe::agree(most, "it", "them"),
                    first.describe_first()
                ),
                ids,
                count: most,
                at_ms,
            }
        })
        .collect()
}

/// `ready entry`, `ready entries`.
fn rows_of(n: u64, kind: &str) -> String {
    match kind.strip_suffix('y') {
        Some(stem) if n != 1 => format!("{stem}ies"),
        _ if n != 1 => format!("{kind}s"),
        _ => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{MisplacedSample, Phase};

    fn misplaced(kind: &str, ids: &[i64]) -> Misplaced {
        Misplaced {
            ring: "queue".into(),
            kind: kind.into(),
            cursor: 11,
            count: ids.len() as i64,
            ids: ids.to_vec(),
            first: [ids[0], 4, 11, 4],
        }
    }

    #[test]
    fn rows_in_their_slots_find_nothing() {
        assert_eq!(findings(&[], &Observations::default()), []);
    }

    #[test]
    fn a_misrouted_entry_seen_by_one_tick_only_is_a_finding() {
        let obs = Observations {
            phases: vec![Phase {
                step: 2,
                name: "load".into(),
                detail: String::new(),
                start_ms: 1_000,
                end_ms: 9_000,
                outcome: crate::observe::StepOutcome::Ok,
            }],
            misplaced: vec![
                MisplacedSample {
                    at_ms: 2_500,
                    rows: vec![misplaced("ready entry", &[41, 42])],
                },
                MisplacedSample {
                    at_ms: 2_750,
                    rows: vec![misplaced("ready entry", &[42, 43, 44])],
                },
            ],
            ..Observations::default()
        };
        let found = findings(&[], &obs);
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f.rule, FindingRule::Misplaced);
        assert_eq!(
            (f.phase.as_str(), f.at_ms, f.count),
            ("load", Some(2_500), 3)
        );
        assert_eq!(f.ids, [41, 42, 43, 44]);
        assert_eq!(
            f.message,
            "3 ready entries of the queue ring sat outside the slot its cursor gives them (from 2.5s, up to 3 at once): \
             the first, ready entry of job 41 in slot 4 at generation 11, where the queue ring's cursor (generation 11) \
             last opened slot 4 at generation 4"
        );
    }

    #[test]
    fn rows_left_misplaced_at_the_end_are_found_by_reconciliation() {
        let found = findings(&[misplaced("lease", &[7])], &Observations::default());
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].phase.as_str(), found[0].at_ms), (RECONCILE, None));
        assert!(
            found[0].message.starts_with("1 lease of the queue ring"),
            "{}",
            found[0].message
        );
    }
}
