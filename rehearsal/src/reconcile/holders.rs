//! `holder_misreported`: a command that gave up on a held lock names each
//! holder with the age of its transaction, which is what an operator acts
//! on (resume or stop that process, or terminate that backend). The age
//! must be the database's.
//!
//! The runtime reads it as `now() - xact_start` of `pg_stat_activity` once
//! its lock wait ran out; right after the command ended, the driver reads
//! the same transaction's age by the same clock (the holder is still
//! frozen inside it). The command's read came before the driver's and
//! after the request, so the printed age lies between the driver's
//! reading less the time from the request to that reading, and the
//! driver's reading. A busy machine only widens that window, so the rule
//! does not depend on timing; the slack covers the millisecond rounding
//! of both readings. A holder the driver found in a transaction younger
//! than the time since the request is not frozen in the one it held
//! (a live session that committed and began another): that reading says
//! nothing of the printed age, and the holder is not judged.

use super::rules::phase_at;
use crate::matrix::FindingRule;
use crate::observe::{Finding, FlipRecord, HolderAge, Observations};

/// Rounding of the two ages (each rounded to the millisecond) and the
/// cell's clock against the server's.
pub(super) const SLACK_MS: i64 = 50;

/// One finding per flip whose `blocked` event named a holder's
/// transaction age outside what the database allows.
pub(super) fn findings(obs: &Observations) -> Vec<Finding> {
    obs.flips
        .iter()
        .filter_map(|flip| misreported(obs, flip))
        .collect()
}

/// The lowest and highest age the command can have printed.
fn bounds(h: &HolderAge) -> (i64, i64) {
    let window = i64::try_from(h.window_ms).unwrap_or(i64::MAX);
    (
        h.read_ms.saturating_sub(window).saturating_sub(SLACK_MS),
        h.read_ms.saturating_add(SLACK_MS),
    )
}

/// Whether the driver's reading can be of the transaction the command
/// named: one open since before the command was asked.
fn still_in_it(h: &HolderAge) -> bool {
    let window = i64::try_from(h.window_ms).unwrap_or(i64::MAX);
    h.read_ms.saturating_add(SLACK_MS) >= window
}

fn misreported(obs: &Observations, flip: &FlipRecord) -> Option<Finding> {
    let off: Vec<(&HolderAge, (i64, i64))> = flip
        .holder_ages
        .iter()
        .filter(|h| still_in_it(h))
        .map(|h| (h, bounds(h)))
        .filter(|(h, (low, high))| h.named_ms < *low || h.named_ms > *high)
        .collect();
    if off.is_empty() {
        return None;
    }
    let wrong: Vec<String> = off
        .iter()
        .map(|(h, (low, high))| {
            format!(
                "backend pid {} named as in a transaction open for {} ms, but the database's clock puts that transaction at {low}..{high} ms then (it read {} ms once the flip had ended, {} ms after it was asked)",
                h.pid, h.named_ms, h.read_ms, h.window_ms
            )
        })
        .collect();
    let mut ids: Vec<i64> = off.iter().map(|(h, _)| i64::from(h.pid)).collect();
    ids.sort_unstable();
    Some(Finding {
        rule: FindingRule::HolderMisreported,
        phase: phase_at(obs, flip.at_ms).unwrap_or("flip").to_owned(),
        message: format!(
            "the flip that gave up on a held lock misreported its holders: {}; an operator deciding whom to stop reads that age",
            wrong.join("; ")
        ),
        count: ids.len() as u64,
        ids,
        at_ms: Some(flip.at_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{FlipMode, Outcome};

    fn flip(ages: &[(i64, i64, u64)]) -> Observations {
        Observations {
            flips: vec![FlipRecord {
                mode: FlipMode::Manual,
                expected: Outcome::Blocked,
                exit_code: Some(3),
                at_ms: 9_000,
                output: vec![],
                ids_drawn_before: None,
                holder_ages: ages
                    .iter()
                    .map(|&(named_ms, read_ms, window_ms)| HolderAge {
                        pid: 4242,
                        named_ms,
                        read_ms,
                        window_ms,
                    })
                    .collect(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn an_age_inside_the_window_the_database_allows_is_no_finding() {
        // Asked 5.6 s before the read; the lock wait was 5 s; the holder's
        // transaction was 7.3 s old at the read.
        for named in [1_700, 2_300, 7_000, 7_300, 7_340] {
            assert_eq!(findings(&flip(&[(named, 7_300, 5_600)])), vec![], "{named}");
        }
        // No holder checked: nothing to judge.
        assert_eq!(findings(&flip(&[])), vec![]);
    }

    #[test]
    fn an_age_a_minute_off_is_holder_misreported() {
        let found = findings(&flip(&[(67_250, 7_300, 5_600)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, FindingRule::HolderMisreported);
        assert_eq!(found[0].ids, [4242]);
        assert_eq!(found[0].at_ms, Some(9_000));
        assert!(
            found[0].message.contains(
                "backend pid 4242 named as in a transaction open for 67250 ms, but the database's clock puts that transaction at 1650..7350 ms then"
            ),
            "{}",
            found[0].message
        );
        // Too young: an age taken from the wrong clock or the wrong column.
        let found = findings(&flip(&[(1_000, 7_300, 5_600)]));
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn a_holder_found_in_a_younger_transaction_is_not_judged() {
        // The flip was asked 5.6 s before the read, but the holder's
        // transaction then was 300 ms old: it committed and began another
        // (a live session), so the reading says nothing of what was printed.
        assert_eq!(findings(&flip(&[(4_000, 300, 5_600)])), vec![]);
        // Frozen since before the request, the same printed age is judged.
        assert_eq!(findings(&flip(&[(67_250, 5_600, 5_600)])).len(), 1);
    }
}
