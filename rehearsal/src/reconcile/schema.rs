//! Findings about the schema itself.
//!
//! - `schema_rewritten`: `awa.schema_version` only ever grows. The driver
//!   records it after setup and after every migrate step, and
//!   reconciliation reads it once more at the end; a row that vanished or
//!   whose `applied_at` changed between two records was rewritten. That
//!   is the destructive fail-open of ADR-041's first failure class: a
//!   pre-guard binary (0.6.1) that meets a newer schema takes it for a
//!   legacy one, deletes the version rows and re-applies its own
//!   migrations (which also puts its own `awa.ring_cursor` back over the
//!   authority-aware one).
//! - `schema_drift`: every difference between the upgraded schema and a
//!   fresh install that a `schema_matches_fresh` step found and `[schema]`
//!   does not declare intended, one finding per object.

use super::rules::RECONCILE;
use crate::matrix::FindingRule;
use crate::observe::{Finding, Observations, SchemaRecord, SchemaVersionRow};

/// Every finding of this module; `end` is `schema_version` at reconciliation.
pub(super) fn findings(obs: &Observations, end: &[SchemaVersionRow]) -> Vec<Finding> {
    let mut out = rewritten(obs, end);
    out.extend(drift(obs));
    out
}

fn rewritten(obs: &Observations, end: &[SchemaVersionRow]) -> Vec<Finding> {
    let last = SchemaRecord {
        step: usize::MAX,
        by: String::new(),
        at_ms: u64::MAX,
        rows: end.to_vec(),
        reported: None,
    };
    let records: Vec<&SchemaRecord> = obs.schema_history.iter().chain([&last]).collect();
    records
        .windows(2)
        .filter_map(|pair| rewrite_between(obs, pair[0], pair[1]))
        .collect()
}

/// The rows of `before` that `after` no longer holds as they were.
fn rewrite_between(
    obs: &Observations,
    before: &SchemaRecord,
    after: &SchemaRecord,
) -> Option<Finding> {
    let mut removed = Vec::new();
    let mut rerecorded = Vec::new();
    for row in &before.rows {
        match after.rows.iter().find(|r| r.version == row.version) {
            None => removed.push(row.version),
            Some(r) if r.applied_at_us != row.applied_at_us => rerecorded.push(row.version),
            Some(_) => {}
        }
    }
    if removed.is_empty() && rerecorded.is_empty() {
        return None;
    }
    let list = |vs: &[i32]| {
        vs.iter()
            .map(|v| format!("v{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut what = Vec::new();
    if !removed.is_empty() {
        what.push(format!("{} removed", list(&removed)));
    }
    if !rerecorded.is_empty() {
        what.push(format!(
            "{} recorded again with a new applied_at (migrations re-applied)",
            list(&rerecorded)
        ));
    }
    let (when, phase) = if after.step == usize::MAX {
        (format!("after step {}", before.step), RECONCILE.to_owned())
    } else {
        let phase = obs
            .phases
            .iter()
            .find(|p| p.step == after.step)
            .map_or("migrate", |p| p.name.as_str());
        (
            format!("by step {} ({phase} by {})", after.step, after.by),
            phase.to_owned(),
        )
    };
    let max = |rows: &[SchemaVersionRow]| rows.iter().map(|r| r.version).max().unwrap_or(0);
    let mut ids: Vec<i64> = removed
        .iter()
        .chain(&rerecorded)
        .map(|&v| i64::from(v))
        .collect();
    ids.sort_unstable();
    Some(Finding {
        rule: FindingRule::SchemaRewritten,
        phase,
        message: format!(
            "schema_version was rewritten {when}: {}; it went from v{} to v{}",
            what.join("; "),
            max(&before.rows),
            max(&after.rows)
        ),
        count: ids.len() as u64,
        ids,
        at_ms: None,
    })
}

fn drift(obs: &Observations) -> Vec<Finding> {
    obs.schema_checks
        .iter()
        .flat_map(|check| {
            check.judged.undeclared.iter().map(move |d| Finding {
                rule: FindingRule::SchemaDrift,
                phase: "assert".into(),
                message: format!(
                    "step {}: {d}; a fresh install of {} differs from the upgraded database here: fix the migration, or declare the difference intended in [schema] with a reason",
                    check.step, check.fresh_by
                ),
                ids: vec![],
                count: 1,
                at_ms: Some(check.at_ms),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::SchemaCheck;
    use crate::schema::{Difference, Judged, ObjectKind};

    fn rows(rows: &[(i32, i64)]) -> Vec<SchemaVersionRow> {
        rows.iter()
            .map(|&(version, applied_at_us)| SchemaVersionRow {
                version,
                applied_at_us,
            })
            .collect()
    }

    fn record(step: usize, by: &str, r: &[(i32, i64)]) -> SchemaRecord {
        SchemaRecord {
            step,
            by: by.into(),
            at_ms: step as u64 * 1_000,
            rows: rows(r),
            reported: None,
        }
    }

    /// Setup by 0.6.1 at t=100, the expand migration at t=500.
    fn clean() -> Observations {
        Observations {
            schema_history: vec![
                record(0, "pre_guard 0.6.1", &[(1, 100), (2, 100)]),
                // A refused migration changes nothing.
                record(5, "current 0.7.0", &[(1, 100), (2, 100)]),
                record(9, "current 0.7.0", &[(1, 100), (2, 100), (3, 500)]),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_clean_upgrade_only_ever_appends_versions() {
        let end = rows(&[(1, 100), (2, 100), (3, 500)]);
        assert_eq!(findings(&clean(), &end), vec![]);
        // Nothing recorded (a fresh install, or an old report) judges nothing.
        assert_eq!(findings(&Observations::default(), &end), vec![]);
    }

    #[test]
    fn a_pre_guard_migrate_on_the_expanded_schema_is_schema_rewritten() {
        let mut obs = clean();
        // 0.6.1 took v3 for a legacy schema: deleted every row, re-applied v1 and v2.
        obs.schema_history
            .push(record(11, "pre_guard 0.6.1", &[(1, 900), (2, 900)]));
        let found = findings(&obs, &rows(&[(1, 900), (2, 900)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, FindingRule::SchemaRewritten);
        assert_eq!(
            found[0].message,
            "schema_version was rewritten by step 11 (migrate by pre_guard 0.6.1): v3 removed; \
             v1, v2 recorded again with a new applied_at (migrations re-applied); it went from v3 to v2"
        );
        assert_eq!(found[0].ids, [1, 2, 3]);
        assert_eq!(found[0].count, 3);
    }

    #[test]
    fn a_rewrite_seen_only_at_the_end_points_at_reconciliation() {
        let found = findings(&clean(), &rows(&[(1, 100), (2, 100), (3, 777)]));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].phase, RECONCILE);
        assert!(
            found[0]
                .message
                .starts_with("schema_version was rewritten after step 9: v3 recorded again"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn undeclared_differences_are_schema_drift_naming_the_object() {
        let missing = Difference {
            kind: ObjectKind::Index,
            name: "awa.claim_batches_deadline".into(),
            upgraded: None,
            fresh: Some("CREATE INDEX claim_batches_deadline ON awa.claim_batches USING btree (deadline_at)".into()),
        };
        let declared = Difference {
            kind: ObjectKind::Column,
            name: "awa.queue_ring_state.current_slot".into(),
            upgraded: Some("integer not null".into()),
            fresh: None,
        };
        let obs = Observations {
            schema_checks: vec![SchemaCheck {
                step: 12,
                at_ms: 9_250,
                fresh_by: "current 0.7.0".into(),
                judged: Judged {
                    undeclared: vec![missing],
                    intended: vec![(declared, "kept until 0.8".into())],
                    stale: vec![],
                },
                ..Default::default()
            }],
            ..Default::default()
        };
        let found = findings(&obs, &[]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, FindingRule::SchemaDrift);
        assert_eq!(found[0].at_ms, Some(9_250), "when the comparison ran");
        assert!(
            found[0].message.starts_with(
                "step 12: index awa.claim_batches_deadline is missing from the upgraded database"
            ),
            "{}",
            found[0].message
        );
    }
}
