//! Findings from how the runtimes ended and what the schema kept for them.
//!
//! - A flip-aware runtime (this workspace's release line) rejected by the
//!   fence trigger tried an old-style cursor write after the flip: it
//!   advanced a ring under the columns discipline while the ledger was
//!   authoritative, the MixedFleet breach the trigger exists to stop
//!   (`mixed_discipline`). An N-1 binary meeting the fence is the fence
//!   working and is judged by the fence rules instead.
//! - An N-1 runtime that died because a column, table or function it
//!   uses does not exist, or compat cursor columns missing from the
//!   expanded schema, mean the expand migration was not additive: N-1
//!   cannot run on it (`n1_incompatible`).
//! - A runtime started inside a migration whose `runtime_instances` row
//!   became visible before the migration committed got past the
//!   preflight: nothing held the table, so a runtime below the floor can
//!   join a migration that would have refused it (`floor_bypassed`).

use super::release_line::flip_aware;
use super::rules::{RECONCILE, phase_at};
use super::storage::Storage;
use crate::matrix::FindingRule;
use crate::observe::{Finding, MidMigrationStart, Observations, ProcessRecord};

/// The fence trigger's message (v003 `awa.ring_cursor_fence()`).
const FENCE_REJECTED: &str = "old-style cursor write";
/// SQLSTATEs of a statement naming a schema object that does not exist:
/// undefined_column, undefined_table, undefined_function.
const UNDEFINED_OBJECT: [&str; 3] = ["42703", "42P01", "42883"];

/// Every finding of this module.
pub(super) fn findings(storage: &Storage, obs: &Observations) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(fenced_flip_aware(obs));
    out.extend(n1_broken(obs));
    out.extend(columns_dropped(storage, obs));
    out.extend(
        obs.mid_migration
            .iter()
            .filter_map(|m| floor_bypassed(m, obs)),
    );
    out
}

fn floor_bypassed(m: &MidMigrationStart, obs: &Observations) -> Option<Finding> {
    if m.registered_in_flight.is_empty() {
        return None;
    }
    Some(Finding {
        rule: FindingRule::FloorBypassed,
        phase: phase_at(obs, m.at_ms).unwrap_or(RECONCILE).into(),
        message: format!(
            "{} ({} {}) registered in runtime_instances while the migration was in flight, \
             after its preflight: nothing held the table, so a runtime below the migration's floor \
             could join it unrefused",
            m.registered_in_flight.join(", "),
            m.artifact,
            m.version
        ),
        ids: vec![],
        count: m.registered_in_flight.len() as u64,
        at_ms: Some(m.at_ms),
    })
}

fn died(p: &ProcessRecord) -> Option<&str> {
    if p.killed {
        return None;
    }
    p.error.as_deref()
}

fn fenced_flip_aware(obs: &Observations) -> Vec<Finding> {
    let hit: Vec<(&ProcessRecord, &str)> = obs
        .processes
        .iter()
        .filter(|p| flip_aware(&p.version))
        .filter_map(|p| died(p).map(|e| (p, e)))
        .filter(|(_, e)| e.contains(FENCE_REJECTED))
        .collect();
    let Some((first, error)) = hit.first() else {
        return vec![];
    };
    vec![Finding {
        rule: FindingRule::MixedDiscipline,
        phase: RECONCILE.into(),
        message: format!(
            "{} ({}) made an old-style cursor write under ledger authority, which the fence rejected \
             ({} in all): {error}",
            first.name,
            first.version,
            crate::observe::count(hit.len() as u64, "flip-aware process")
        ),
        ids: vec![],
        count: hit.len() as u64,
        at_ms: None,
    }]
}

fn n1_broken(obs: &Observations) -> Vec<Finding> {
    let broken: Vec<(&ProcessRecord, &str)> = obs
        .processes
        .iter()
        .filter(|p| !flip_aware(&p.version))
        .filter_map(|p| died(p).map(|e| (p, e)))
        .filter(|(_, e)| {
            UNDEFINED_OBJECT
                .iter()
                .any(|code| e.contains(&format!("SQLSTATE {code}")))
        })
        .collect();
    let Some((first, error)) = broken.first() else {
        return vec![];
    };
    vec![Finding {
        rule: FindingRule::N1Incompatible,
        phase: RECONCILE.into(),
        message: format!(
            "{} ({}) died on the expanded schema naming something that does not exist \
             ({} in all): {error}",
            first.name,
            first.version,
            crate::observe::count(broken.len() as u64, "N-1 process")
        ),
        ids: vec![],
        count: broken.len() as u64,
        at_ms: None,
    }]
}

/// The singleton cursor columns are the N-1 fleet's cursor until a flip
/// retires them, so the schema must keep them (ADR-040: an expand
/// migration is additive) unless the ledger became the authority by a flip
/// the cell saw, or the database was a fresh install (no N-1 ever ran on
/// it). Then only a contract can have dropped them, and their absence is a
/// fact of the schema under test. A migration that drops them and moves
/// the authority itself, with no flip, is a finding as much as one that
/// leaves `columns` authority without its columns.
fn columns_dropped(storage: &Storage, obs: &Observations) -> Vec<Finding> {
    let retired = match storage.authority.as_deref() {
        None => return vec![],
        Some("ledger") => !obs.flips.is_empty() || fresh_install(obs),
        Some(_) => false,
    };
    if retired {
        return vec![];
    }
    let gone: Vec<String> = storage
        .columns
        .iter()
        .flat_map(|c| {
            let mut cols = Vec::new();
            if c.current_slot.is_none() {
                cols.push(format!("awa.{}_ring_state.current_slot", c.ring));
            }
            if c.generation.is_none() {
                cols.push(format!("awa.{}_ring_state.generation", c.ring));
            }
            cols
        })
        .collect();
    if gone.is_empty() {
        return vec![];
    }
    // The migration that installed the expanded schema, if the cell ran one.
    let phase = obs
        .phases
        .iter()
        .find(|p| p.name == "migrate" && p.outcome == crate::observe::StepOutcome::Ok)
        .map_or(RECONCILE, |p| p.name.as_str());
    vec![Finding {
        rule: FindingRule::N1Incompatible,
        phase: phase.into(),
        message: format!(
            "the expanded schema dropped {} N-1 still uses: {}",
            crate::observe::count(gone.len() as u64, "compat column"),
            gone.join(", ")
        ),
        ids: vec![],
        count: gone.len() as u64,
        at_ms: None,
    }]
}

/// The cell's database was made by a fresh install: its setup migrated
/// an empty database.
fn fresh_install(obs: &Observations) -> bool {
    obs.schema_history
        .iter()
        .any(|r| r.step == 0 && r.reported.is_some_and(|m| m.from == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(name: &str, version: &str, error: Option<&str>) -> ProcessRecord {
        ProcessRecord {
            name: name.into(),
            artifact: "x".into(),
            version: version.into(),
            role: "worker".into(),
            exit_code: Some(1),
            signal: None,
            container: None,
            start_to_ready_ms: None,
            killed: false,
            log: String::new(),
            error: error.map(str::to_owned),
            contract: Default::default(),
            leader_at_ms: None,
            secret_lines: 0,
            first_secret_line: None,
            target_hidden_lines: 0,
            first_target_hidden_line: None,
        }
    }

    const FENCED: &str = "rotating: advancing the queue ring cursor: ring cursor authority is ledger: \
        old-style cursor write to awa.queue_ring_state rejected (SQLSTATE 55000)";
    const NO_COLUMN: &str =
        "rotating the ring: column \"current_slot\" does not exist (SQLSTATE 42703)";

    #[test]
    fn only_this_release_line_is_flip_aware() {
        let own = awa_runtime::version::VERSION;
        assert!(flip_aware(own));
        assert!(!flip_aware("0.6.2"));
        assert!(!flip_aware("0.6.1"));
        assert!(!flip_aware("unknown"));
    }

    #[test]
    fn a_flip_aware_runtime_meeting_the_fence_is_mixed_discipline() {
        let own = awa_runtime::version::VERSION;
        let obs = Observations {
            processes: vec![
                process("previous-worker-1", "0.6.2", Some(FENCED)),
                process("defective_authority-worker-1", own, Some(FENCED)),
                process("current-worker-2", own, None),
            ],
            ..Default::default()
        };
        let found = fenced_flip_aware(&obs);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, FindingRule::MixedDiscipline);
        assert!(
            found[0]
                .message
                .starts_with("defective_authority-worker-1 ("),
            "{}",
            found[0].message
        );
        assert_eq!(found[0].count, 1);
        // The N-1 binary meeting the fence is the fence working; a killed
        // process's last words are not judged.
        let mut killed = process("current-worker-1", own, Some(FENCED));
        killed.killed = true;
        let obs = Observations {
            processes: vec![process("previous-worker-1", "0.6.2", Some(FENCED)), killed],
            ..Default::default()
        };
        assert_eq!(fenced_flip_aware(&obs), vec![]);
    }

    #[test]
    fn an_n1_runtime_dying_on_a_missing_column_is_n1_incompatible() {
        let own = awa_runtime::version::VERSION;
        let obs = Observations {
            processes: vec![
                process("previous-worker-1", "0.6.2", Some(NO_COLUMN)),
                process(
                    "previous-worker-2",
                    "0.6.2",
                    Some("refused: ring cursor authority is ledger"),
                ),
                process("current-worker-1", own, Some(NO_COLUMN)),
            ],
            ..Default::default()
        };
        let found = n1_broken(&obs);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, FindingRule::N1Incompatible);
        assert_eq!(found[0].count, 1);
        assert!(found[0].message.contains(NO_COLUMN), "{}", found[0].message);
        let obs = Observations {
            processes: vec![process(
                "previous-worker-2",
                "0.6.2",
                Some("connection refused"),
            )],
            ..Default::default()
        };
        assert_eq!(n1_broken(&obs), vec![]);
    }

    #[test]
    fn compat_columns_missing_under_columns_authority_are_n1_incompatible() {
        use awa_runtime::store::audit::RingColumns;
        let ring = |ring: &str, kept: bool| RingColumns {
            ring: ring.into(),
            current_slot: kept.then_some(3),
            generation: kept.then_some(11),
            unpoisoned_slots: vec![],
        };
        let storage = Storage {
            authority: Some("columns".into()),
            columns: vec![ring("queue", false), ring("claim", true)],
            ..Default::default()
        };
        let found = columns_dropped(&storage, &Observations::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, FindingRule::N1Incompatible);
        assert_eq!(
            found[0].message,
            "the expanded schema dropped 2 compat columns N-1 still uses: \
             awa.queue_ring_state.current_slot, awa.queue_ring_state.generation"
        );
        let kept = Storage {
            authority: Some("columns".into()),
            columns: vec![ring("queue", true)],
            ..Default::default()
        };
        assert_eq!(columns_dropped(&kept, &Observations::default()), vec![]);
        // Ledger authority that no flip brought (the expand migration moved
        // it itself, as the seeded defect does) does not excuse them.
        let contracted = || Storage {
            authority: Some("ledger".into()),
            columns: vec![ring("queue", false), ring("claim", false)],
            ..Default::default()
        };
        let found = columns_dropped(&contracted(), &Observations::default());
        assert_eq!(found.len(), 1, "{found:?}");
        // After a flip the cell saw, or on a fresh install, a contract may
        // have dropped them: a fact.
        let flipped = Observations {
            flips: vec![crate::observe::FlipRecord {
                holder_ages: Vec::new(),
                ids_drawn_before: None,
                mode: crate::matrix::FlipMode::Manual,
                expected: crate::matrix::Outcome::Ok,
                exit_code: Some(0),
                at_ms: 12_000,
                output: vec![],
            }],
            ..Default::default()
        };
        assert_eq!(columns_dropped(&contracted(), &flipped), vec![]);
        let fresh = Observations {
            schema_history: vec![crate::observe::SchemaRecord {
                step: 0,
                by: "current".into(),
                at_ms: 10,
                rows: vec![],
                reported: Some(crate::observe::MigratedRange { from: 0, to: 3 }),
            }],
            ..Default::default()
        };
        assert_eq!(columns_dropped(&contracted(), &fresh), vec![]);
        // Before the expand migration there is nothing to judge.
        let before = Storage {
            columns: vec![ring("queue", false)],
            ..Default::default()
        };
        assert_eq!(columns_dropped(&before, &Observations::default()), vec![]);
    }

    #[test]
    fn a_runtime_registered_inside_the_migration_bypassed_the_floor() {
        let start = |registered: &[&str]| MidMigrationStart {
            artifact: "pre_guard".into(),
            version: "0.6.1".into(),
            processes: vec!["pre_guard-worker-1".into()],
            at_ms: 4_000,
            inside: true,
            registered_in_flight: registered.iter().map(|n| (*n).to_owned()).collect(),
        };
        let obs = Observations {
            mid_migration: vec![start(&["pre_guard-worker-1"])],
            ..Default::default()
        };
        let found = findings(&Storage::default(), &obs);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, FindingRule::FloorBypassed);
        assert_eq!(
            found[0].at_ms,
            Some(4_000),
            "when it started inside the migration"
        );
        assert!(
            found[0]
                .message
                .starts_with("pre_guard-worker-1 (pre_guard 0.6.1) registered"),
            "{}",
            found[0].message
        );
        // Held back until the commit: nothing to find.
        let obs = Observations {
            mid_migration: vec![start(&[])],
            ..Default::default()
        };
        assert_eq!(findings(&Storage::default(), &obs), vec![]);
    }
}
