//! `migration_misrecorded`: `awa.schema_version` records each migration
//! once, by the run that applied it.
//!
//! Every release applies its pending migrations in one transaction and
//! records each version with `applied_at DEFAULT now()`, the transaction's
//! start: the rows one `awa migrate` adds share one `applied_at`, and a
//! later run's rows come later. So, whatever the cell did:
//!
//! - at the end, the versions are exactly `1..=newest`, each once (a gap is
//!   a migration skipped, a second row one recorded twice);
//! - no version was recorded after a higher one (a migration re-applied
//!   after those that build on it);
//! - between two records (setup, then each migrate step), the rows added
//!   share one `applied_at`, and when the migrate printed a `migrated`
//!   event, the schema went from its `from` to its `to` and gained exactly
//!   the versions between (an up-to-date migrate adds nothing; one that
//!   re-ran its current migration, or took the upgrade branch on a fresh
//!   install, says or records something else).
//!
//! Rows removed or rewritten between two records are `schema_rewritten`'s
//! (reconcile/schema.rs); such a pair is left to it here, so one fault
//! makes one finding.

use std::collections::BTreeMap;

use super::rules::RECONCILE;
use crate::matrix::FindingRule;
use crate::observe::{Finding, MigratedRange, Observations, SchemaRecord, SchemaVersionRow};

/// Every finding of this module; `end` is `schema_version` at reconciliation.
pub(super) fn findings(obs: &Observations, end: &[SchemaVersionRow]) -> Vec<Finding> {
    let mut out: Vec<Finding> = end_state(end).into_iter().collect();
    let empty = SchemaRecord {
        step: 0,
        by: String::new(),
        at_ms: 0,
        rows: Vec::new(),
        reported: None,
    };
    let mut before = &empty;
    for after in &obs.schema_history {
        out.extend(between(obs, before, after));
        before = after;
    }
    out
}

/// The versions as a list for a message: `v2, v3`.
fn list(versions: &[i32]) -> String {
    versions
        .iter()
        .map(|v| format!("v{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn newest(rows: &[SchemaVersionRow]) -> i32 {
    rows.iter().map(|r| r.version).max().unwrap_or(0)
}

fn finding(phase: String, message: String, mut ids: Vec<i64>) -> Finding {
    ids.sort_unstable();
    ids.dedup();
    Finding {
        rule: FindingRule::MigrationMisrecorded,
        phase,
        message,
        count: ids.len().max(1) as u64,
        ids,
        at_ms: None,
    }
}

/// The end state: every version from 1 to the newest once, in the order
/// of their versions.
fn end_state(end: &[SchemaVersionRow]) -> Option<Finding> {
    let mut by_version: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in end {
        by_version
            .entry(r.version)
            .or_default()
            .push(r.applied_at_us);
    }
    let top = newest(end);
    let missing: Vec<i32> = (1..=top).filter(|v| !by_version.contains_key(v)).collect();
    let twice: Vec<i32> = by_version
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(v, _)| *v)
        .collect();
    let first = |v: i32| by_version.get(&v).and_then(|at| at.iter().min().copied());
    let last = |v: i32| by_version.get(&v).and_then(|at| at.iter().max().copied());
    let late: Vec<(i32, i32)> = by_version
        .keys()
        .flat_map(|&lower| {
            by_version
                .keys()
                .filter(move |&&higher| higher > lower)
                .map(move |&higher| (lower, higher))
        })
        .filter(
            |&(lower, higher)| matches!((last(lower), first(higher)), (Some(l), Some(h)) if l > h),
        )
        .collect();
    let mut what = Vec::new();
    if !missing.is_empty() {
        what.push(format!("{} missing below v{top}", list(&missing)));
    }
    if !twice.is_empty() {
        what.push(format!("{} recorded more than once", list(&twice)));
    }
    if !late.is_empty() {
        let pairs: Vec<String> = late
            .iter()
            .map(|(lower, higher)| format!("v{lower} after v{higher}"))
            .collect();
        what.push(format!(
            "{} recorded (a migration re-applied after one that builds on it)",
            pairs.join(", ")
        ));
    }
    if what.is_empty() {
        return None;
    }
    let ids = missing
        .iter()
        .chain(&twice)
        .chain(late.iter().map(|(lower, _)| lower))
        .map(|&v| i64::from(v))
        .collect();
    Some(finding(
        RECONCILE.to_owned(),
        format!(
            "schema_version at the end does not record each migration once, in order: {}",
            what.join("; ")
        ),
        ids,
    ))
}

/// What the migrate between `before` and `after` recorded, against one
/// transaction and its own `migrated` event.
fn between(obs: &Observations, before: &SchemaRecord, after: &SchemaRecord) -> Option<Finding> {
    if !before.rows.iter().all(|r| after.rows.contains(r)) {
        // Removed or rewritten: schema_rewritten's finding.
        return None;
    }
    let added: Vec<&SchemaVersionRow> = after
        .rows
        .iter()
        .filter(|r| !before.rows.contains(r))
        .collect();
    let (from, to) = (newest(&before.rows), newest(&after.rows));
    let mut what = Vec::new();
    let mut ids: Vec<i64> = Vec::new();
    let stamps: std::collections::BTreeSet<i64> = added.iter().map(|r| r.applied_at_us).collect();
    if stamps.len() > 1 {
        let versions: Vec<i32> = added.iter().map(|r| r.version).collect();
        what.push(format!(
            "{} were recorded by {} transactions, though one migrate ran (it applies its migrations in one)",
            list(&versions),
            stamps.len()
        ));
        ids.extend(versions.iter().map(|&v| i64::from(v)));
    }
    if let Some(MigratedRange {
        from: said_from,
        to: said_to,
    }) = after.reported
    {
        let expected: Vec<i32> = ((from + 1)..=to).collect();
        let got: Vec<i32> = added.iter().map(|r| r.version).collect();
        if said_from != i64::from(from) || said_to != i64::from(to) || got != expected {
            let gained = if got.is_empty() {
                "gained no row".to_owned()
            } else {
                format!("gained {}", list(&got))
            };
            what.push(format!(
                "it said it migrated v{said_from} -> v{said_to}, but schema_version went from v{from} to v{to} and {gained}"
            ));
            ids.extend(got.iter().map(|&v| i64::from(v)));
            ids.push(said_to);
        }
    }
    if what.is_empty() {
        return None;
    }
    let phase = obs
        .phases
        .iter()
        .find(|p| p.step == after.step)
        .map_or(if after.step == 0 { "setup" } else { "migrate" }, |p| {
            p.name.as_str()
        })
        .to_owned();
    let step = if after.step == 0 {
        "setup".to_owned()
    } else {
        format!("step {}", after.step)
    };
    let message = format!("{step} ({phase} by {}): {}", after.by, what.join("; "));
    Some(finding(phase, message, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(rows: &[(i32, i64)]) -> Vec<SchemaVersionRow> {
        rows.iter()
            .map(|&(version, applied_at_us)| SchemaVersionRow {
                version,
                applied_at_us,
            })
            .collect()
    }

    fn record(step: usize, r: &[(i32, i64)], reported: Option<(i64, i64)>) -> SchemaRecord {
        SchemaRecord {
            step,
            by: "current 0.7.0".into(),
            at_ms: step as u64 * 1_000,
            rows: rows(r),
            reported: reported.map(|(from, to)| MigratedRange { from, to }),
        }
    }

    /// Setup (0.6.2, v1 and v2 at t=100), a migrate up to date, the
    /// expand migration at t=500, another up to date.
    fn clean() -> Observations {
        Observations {
            schema_history: vec![
                record(0, &[(1, 100), (2, 100)], Some((0, 2))),
                record(4, &[(1, 100), (2, 100)], Some((2, 2))),
                record(6, &[(1, 100), (2, 100), (3, 500)], Some((2, 3))),
                record(9, &[(1, 100), (2, 100), (3, 500)], Some((3, 3))),
            ],
            ..Default::default()
        }
    }

    fn end() -> Vec<SchemaVersionRow> {
        rows(&[(1, 100), (2, 100), (3, 500)])
    }

    #[test]
    fn a_clean_history_and_end_state_find_nothing() {
        assert_eq!(findings(&clean(), &end()), vec![]);
        // A refused or failed migrate (no event) that changed nothing.
        let mut obs = clean();
        obs.schema_history
            .insert(1, record(3, &[(1, 100), (2, 100)], None));
        assert_eq!(findings(&obs, &end()), vec![]);
        // Nothing recorded, no schema: nothing to judge.
        assert_eq!(findings(&Observations::default(), &[]), vec![]);
        // A fresh install by the current build: v1..v3 in one transaction.
        let fresh = Observations {
            schema_history: vec![record(0, &[(1, 7), (2, 7), (3, 7)], Some((0, 3)))],
            ..Default::default()
        };
        assert_eq!(findings(&fresh, &rows(&[(1, 7), (2, 7), (3, 7)])), vec![]);
    }

    #[test]
    fn a_gap_or_a_version_recorded_twice_at_the_end_is_found() {
        let found = findings(&clean(), &rows(&[(1, 100), (3, 500)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, FindingRule::MigrationMisrecorded);
        assert_eq!(found[0].phase, RECONCILE);
        assert_eq!(
            found[0].message,
            "schema_version at the end does not record each migration once, in order: v2 missing below v3"
        );
        // A second v3 row (a table without its key, re-applied in another run).
        let found = findings(&clean(), &rows(&[(1, 100), (2, 100), (3, 500), (3, 900)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].message.contains("v3 recorded more than once"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn a_lower_version_recorded_after_a_higher_one_is_found() {
        let found = findings(
            &Observations::default(),
            &rows(&[(1, 100), (2, 900), (3, 500)]),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].message.contains(
                "v2 after v3 recorded (a migration re-applied after one that builds on it)"
            ),
            "{}",
            found[0].message
        );
        assert_eq!(found[0].ids, [2]);
    }

    #[test]
    fn one_migrate_recording_its_versions_in_two_transactions_is_found() {
        let obs = Observations {
            schema_history: vec![record(0, &[(1, 7), (2, 8)], Some((0, 2)))],
            ..Default::default()
        };
        let found = findings(&obs, &rows(&[(1, 7), (2, 8)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].message,
            "setup (setup by current 0.7.0): v1, v2 were recorded by 2 transactions, though one migrate ran (it applies its migrations in one)"
        );
    }

    #[test]
    fn a_migrate_that_says_other_versions_than_it_recorded_is_found() {
        // The upgrade said v2 -> v3 but recorded nothing new (its current
        // migration re-applied in place of the pending one).
        let mut obs = clean();
        obs.schema_history[2] = record(6, &[(1, 100), (2, 100)], Some((2, 3)));
        obs.schema_history.truncate(3);
        let found = findings(&obs, &rows(&[(1, 100), (2, 100)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].message,
            "step 6 (migrate by current 0.7.0): it said it migrated v2 -> v3, but schema_version went from v2 to v2 and gained no row"
        );
        // An up-to-date schema reported as applied again (from its own version).
        let mut obs = clean();
        obs.schema_history[3].reported = Some(MigratedRange { from: 2, to: 3 });
        let found = findings(&obs, &end());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .starts_with("step 9 (migrate by current 0.7.0): it said it migrated v2 -> v3, but schema_version went from v3 to v3"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn rows_rewritten_between_records_are_left_to_schema_rewritten() {
        let mut obs = clean();
        // 0.6.1's legacy rewrite: v3 deleted, v1 and v2 recorded again.
        obs.schema_history
            .push(record(11, &[(1, 900), (2, 900)], Some((0, 2))));
        assert_eq!(findings(&obs, &rows(&[(1, 900), (2, 900)])), vec![]);
    }
}
