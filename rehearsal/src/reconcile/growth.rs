//! Bookkeeping that must stay bounded under steady load (ADR-040): the
//! leader's folds trim each ring ledger back to one wrap and drain the
//! rollup deltas every fold interval, standing down only while a backend
//! genuinely pins the MVCC horizon. A ledger or delta table that keeps
//! growing for many fold intervals, never once trimmed, is a fold gate
//! that stands down when it should not (or a fold that never runs).
//!
//! The monitor's samples show it: ring samples carry each ledger's row
//! count, census samples the unfolded delta rows. A ledger is judged on
//! its rows beyond one wrap (a fresh ledger filling its first wrap is not
//! growth; the folds keep exactly one). A single jump (the flip's
//! backfill, a backlog's first prune) is not growth either; growth is a
//! run of many increases with no decrease in between, spread over at
//! least [`WINDOW_MS`].

use super::rules::{RECONCILE, phase_at};
use super::storage::Storage;
use crate::matrix::FindingRule;
use crate::observe::{Finding, Observations, duration, thousands};

/// How long a table may grow without a single trim: five of the leader's
/// fold intervals (the driver gives every runtime `AWA_FOLD_INTERVAL=2s`).
pub(super) const WINDOW_MS: u64 = 10_000;
/// How many separate increases make growth (not one jump).
const MIN_INCREASES: usize = 5;
/// Ledger rows beyond one wrap that make it unbounded: a fold interval
/// adds about two (one rotation a second), so eight are four missed folds.
const MIN_LEDGER_GROWTH: i64 = 8;
/// A ring's size when the end state does not say (the runtime's default).
const DEFAULT_SLOT_COUNT: i64 = 8;
/// Delta rows beyond the start of the run that make it unbounded.
const MIN_DELTA_GROWTH: i64 = 10;

/// A stretch of samples in which a count never fell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    from_ms: u64,
    to_ms: u64,
    from: i64,
    to: i64,
    increases: usize,
}

/// The longest-lasting run without a decrease, timed from its first
/// increase to its last (flat stretches before and after do not count).
fn longest_growth(series: &[(u64, i64)]) -> Option<Run> {
    let mut best: Option<Run> = None;
    let mut current: Option<Run> = None;
    for pair in series.windows(2) {
        let ((_, before), (at, after)) = (pair[0], pair[1]);
        if after < before {
            current = None;
            continue;
        }
        if after == before {
            continue;
        }
        let run = current.get_or_insert(Run {
            from_ms: pair[0].0,
            to_ms: at,
            from: before,
            to: after,
            increases: 0,
        });
        run.to_ms = at;
        run.to = after;
        run.increases += 1;
        if best.is_none_or(|b| run.to_ms - run.from_ms > b.to_ms - b.from_ms) {
            best = Some(*run);
        }
    }
    best
}

fn unbounded(run: &Run, min_growth: i64) -> bool {
    run.to_ms - run.from_ms >= WINDOW_MS
        && run.increases >= MIN_INCREASES
        && run.to - run.from >= min_growth
}

/// Every unbounded-growth finding: one per ring ledger, one for the deltas.
pub(super) fn findings(storage: &Storage, obs: &Observations) -> Vec<Finding> {
    let mut out = Vec::new();
    for ring in ["queue", "claim", "lease"] {
        let wrap = storage
            .ledgers
            .iter()
            .flatten()
            .find(|l| l.ring == ring)
            .map_or(DEFAULT_SLOT_COUNT, |l| i64::from(l.slot_count));
        let series: Vec<(u64, i64)> = obs
            .rings
            .iter()
            .filter(|s| s.ring == ring && s.authority != "none")
            .map(|s| (s.at_ms, s.ledger_rows))
            .collect();
        let beyond: Vec<(u64, i64)> = series
            .iter()
            .map(|&(t, n)| (t, (n - wrap).max(0)))
            .collect();
        if let Some(run) = longest_growth(&beyond).filter(|r| unbounded(r, MIN_LEDGER_GROWTH)) {
            let rows = Run {
                from: run.from + wrap,
                to: run.to + wrap,
                ..run
            };
            out.push(finding(
                obs,
                &rows,
                &format!("the {ring} ring's ledger ({wrap} slots)"),
            ));
        }
    }
    let deltas: Vec<(u64, i64)> = obs.census.iter().map(|c| (c.at_ms, c.delta_rows)).collect();
    if let Some(run) = longest_growth(&deltas).filter(|r| unbounded(r, MIN_DELTA_GROWTH)) {
        out.push(finding(obs, &run, "queue_terminal_rollup_deltas"));
    }
    out
}

fn finding(obs: &Observations, run: &Run, what: &str) -> Finding {
    Finding {
        rule: FindingRule::UnboundedGrowth,
        phase: phase_at(obs, run.from_ms).unwrap_or(RECONCILE).to_owned(),
        message: format!(
            "{what} grew from {} to {} rows over {} ({} increases, from {}) and was never trimmed, \
             though the leader folds every 2.0s",
            thousands(run.from.unsigned_abs()),
            thousands(run.to.unsigned_abs()),
            duration(run.to_ms - run.from_ms),
            run.increases,
            duration(run.from_ms)
        ),
        ids: vec![run.from, run.to],
        count: u64::try_from(run.to - run.from).unwrap_or(0),
        at_ms: Some(run.from_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{CensusSample, RingSample};

    fn ring(at_ms: u64, ring: &str, rows: i64) -> RingSample {
        RingSample {
            at_ms,
            ring: ring.into(),
            authority: "ledger".into(),
            column_slot: Some(-1),
            column_generation: Some(-1),
            ledger_generation: Some(rows),
            ledger_slot: Some((rows % 8) as i32),
            ledger_rows: rows,
            ledger_gaps: 0,
        }
    }

    fn tick(at_ms: u64, delta_rows: i64) -> CensusSample {
        CensusSample {
            at_ms,
            by_version: Default::default(),
            fresh_runtimes: Default::default(),
            delta_rows,
            lock_waits: 0,
            xacts: None,
            scans: Default::default(),
        }
    }

    /// One sample a second for `secs` seconds of `rows(t)`.
    fn claim_ring(secs: u64, rows: impl Fn(u64) -> i64) -> Vec<RingSample> {
        (0..=secs)
            .map(|t| ring(t * 1000, "claim", rows(t)))
            .collect()
    }

    #[test]
    fn a_ledger_that_grows_for_many_fold_intervals_is_unbounded_with_its_figures() {
        // The seeded defect: one row per rotation, never trimmed.
        let obs = Observations {
            rings: claim_ring(20, |t| 8 + t as i64),
            ..Default::default()
        };
        let found = findings(&Storage::default(), &obs);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, FindingRule::UnboundedGrowth);
        assert_eq!(
            found[0].message,
            "the claim ring's ledger (8 slots) grew from 8 to 28 rows over 20.0s (20 increases, from 0ms) \
             and was never trimmed, though the leader folds every 2.0s"
        );
        assert_eq!((found[0].ids.clone(), found[0].count), (vec![8, 28], 20));
        assert_eq!(found[0].at_ms, Some(0), "where the growth began");
    }

    #[test]
    fn a_fresh_ledger_filling_its_first_wrap_is_not_growth() {
        // One row a second from 1, trimmed back to one wrap (8) every 2 s
        // once it has more.
        let obs = Observations {
            rings: claim_ring(40, |t| {
                if t < 8 {
                    1 + t as i64
                } else {
                    8 + (t % 2) as i64
                }
            }),
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
        // A ring of 16 slots fills for 16 s.
        let storage = Storage {
            ledgers: Some(vec![awa_runtime::store::audit::Ledger {
                ring: "claim".into(),
                slot_count: 16,
                top: Some(40),
                rows: 16,
                gaps: 0,
                misplaced: 0,
                written: None,
            }]),
            ..Default::default()
        };
        let obs = Observations {
            rings: claim_ring(40, |t| {
                if t < 16 {
                    1 + t as i64
                } else {
                    16 + (t % 2) as i64
                }
            }),
            ..Default::default()
        };
        assert_eq!(findings(&storage, &obs), vec![]);
    }

    #[test]
    fn a_ledger_trimmed_every_fold_is_bounded() {
        // Grows by a row a second, trimmed back to 8 every 2 s.
        let obs = Observations {
            rings: claim_ring(60, |t| 8 + (t % 2) as i64),
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
        // Trimmed every 8 s: still bounded (below the window).
        let obs = Observations {
            rings: claim_ring(60, |t| 8 + (t % 8) as i64),
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
    }

    #[test]
    fn one_jump_is_not_growth() {
        // The flip backfills 30 generations at once after a quiet N-1 stretch.
        let mut rings = vec![ring(0, "queue", 8), ring(30_000, "queue", 38)];
        rings.extend((31..=35).map(|t| ring(t * 1000, "queue", 38 - (t as i64 - 30))));
        let obs = Observations {
            rings,
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
    }

    #[test]
    fn deltas_that_are_never_folded_are_unbounded() {
        let census: Vec<CensusSample> = (0..=60).map(|i| tick(i * 250, i as i64 * 3)).collect();
        let obs = Observations {
            census,
            ..Default::default()
        };
        let found = findings(&Storage::default(), &obs);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .starts_with("queue_terminal_rollup_deltas grew from 0 to 180 rows over 15.0s"),
            "{}",
            found[0].message
        );
        // Folded to zero every 2 s: bounded.
        let census: Vec<CensusSample> = (0..=240)
            .map(|i| tick(i * 250, (i % 8) as i64 * 3))
            .collect();
        let obs = Observations {
            census,
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
    }

    #[test]
    fn growth_before_the_expand_migration_is_not_judged() {
        let rings: Vec<RingSample> = (0..=20)
            .map(|t| RingSample {
                authority: "none".into(),
                ..ring(t * 1000, "lease", t as i64)
            })
            .collect();
        let obs = Observations {
            rings,
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
    }
}
