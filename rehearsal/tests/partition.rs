//! `--partition`: every cell of the shipped full matrix lands in exactly
//! one share, for every strategy and N = 1..8, through the library API
//! (no PostgreSQL).

use std::collections::BTreeMap;

use rehearsal::partition::{self, Partition, Strategy};
use rehearsal::plan::{self, Plan, Selection};
use rehearsal::servers::{self, Major};

const MATRIX: &str = include_str!("../../matrix.toml");

fn full(majors: &[Major]) -> Plan {
    let matrix = rehearsal::matrix::parse("matrix.toml", MATRIX).expect("the shipped matrix");
    let (choice, names) = servers::Choice::new(majors, &[], &matrix.servers).unwrap();
    let selection = Selection {
        matrix: Some("full".into()),
        cells: names,
    };
    servers::multiply(plan::expand(&matrix, &selection, 7).unwrap(), &choice)
}

/// Durations for two cells in three, the rest unknown (placed by hash).
fn some_durations(plan: &Plan) -> BTreeMap<String, u64> {
    plan.cells
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 2)
        .map(|(i, c)| (c.name.clone(), 1_000 + 3_700 * (i as u64 % 11)))
        .collect()
}

#[test]
fn every_cell_of_the_full_matrix_lands_in_exactly_one_share() {
    for majors in [vec![], vec![Major(15), Major(18)]] {
        let whole = full(&majors);
        let ids: Vec<String> = whole.cells.iter().map(|c| c.name.clone()).collect();
        assert!(ids.len() >= 10, "the full matrix has {} cells", ids.len());
        if !majors.is_empty() {
            assert!(ids.iter().all(|id| id.contains("@pg")), "{ids:?}");
        }
        let durations = some_durations(&whole);
        for strategy in [Strategy::Hash, Strategy::Slice, Strategy::Duration] {
            for count in 1..=8 {
                let mut seen: BTreeMap<String, u32> = BTreeMap::new();
                for index in 1..=count {
                    let p = Partition {
                        strategy,
                        index,
                        count,
                    };
                    let share = partition::apply(whole.clone(), p, &durations, None);
                    let info = share.partition.as_ref().unwrap();
                    assert_eq!(info.cells, ids, "{p}: the whole selection is recorded");
                    assert_eq!((info.index, info.count), (index, count));
                    for cell in &share.cells {
                        // Each share's cells keep the plan they had in the whole run.
                        let planned = whole.cells.iter().find(|c| c.name == cell.name).unwrap();
                        assert_eq!(cell, planned, "{p}");
                        *seen.entry(cell.name.clone()).or_default() += 1;
                    }
                }
                let once: Vec<&String> = seen
                    .iter()
                    .filter(|(_, n)| **n == 1)
                    .map(|(c, _)| c)
                    .collect();
                assert_eq!(once.len(), ids.len(), "{strategy:?} N={count}: {seen:?}");
            }
        }
    }
}

#[test]
fn shares_are_the_same_for_the_same_inputs_and_duration_balances() {
    let whole = full(&[]);
    let ids: Vec<String> = whole.cells.iter().map(|c| c.name.clone()).collect();
    let durations: BTreeMap<String, u64> = ids
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), 1_000 * (i as u64 * 7 % 13 + 1)))
        .collect();
    for strategy in [Strategy::Hash, Strategy::Slice, Strategy::Duration] {
        assert_eq!(
            partition::shares(&ids, strategy, 4, &durations),
            partition::shares(&ids, strategy, 4, &durations.clone())
        );
    }
    // Longest-first packing: no share is heavier than the lightest by more than the longest cell.
    let loads: Vec<u64> = partition::shares(&ids, Strategy::Duration, 4, &durations)
        .iter()
        .map(|s| s.iter().map(|&i| durations[&ids[i]]).sum())
        .collect();
    let longest = durations.values().max().unwrap();
    let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
    assert!(max - min <= *longest, "{loads:?}");
    // Slices keep matrix order.
    let slices = partition::shares(&ids, Strategy::Slice, 3, &BTreeMap::new());
    assert_eq!(slices.concat(), (0..ids.len()).collect::<Vec<_>>());
}
