//! `--partition STRATEGY:I/N`: a deterministic share of the selected cells,
//! so CI spreads one matrix over N machines and `rehearse merge` joins
//! the N partial reports into one verdict.
//!
//! The share is taken from the cells as they will run: after `--matrix`
//! and `--cell` chose them and `--postgres` multiplied them (cell ids
//! `NAME@pgN`). Three strategies, each the same on every machine for the
//! same inputs:
//!
//! - `hash`: a cell belongs to share `fnv1a64(id) mod N + 1`: stable when
//!   cells are added or removed (only the changed cells move).
//! - `slice`: contiguous runs of the cells in matrix order, the first
//!   `len mod N` shares one cell longer.
//! - `duration`: greedy longest-first packing by the cells' recorded wall
//!   times (`--durations FILE`, a previous report.json, merged or not):
//!   each cell, longest first, goes to the share with the least time so
//!   far. Cells the file does not know are placed by `hash`.
//!
//! The `partition` module, above the report, reads the `--durations`
//! report; the cutting is planning, done here by the plan it cuts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::{CellPlan, fnv1a64};
pub use crate::vocab::partition::{PartitionInfo, Strategy};

/// The most shares a selection may be cut into.
pub const MAX_COUNT: u32 = 64;

/// `--partition STRATEGY:I/N`: share `index` (1-based) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// How cells are assigned.
    pub strategy: Strategy,
    /// Which share, 1..=count.
    pub index: u32,
    /// How many shares.
    pub count: u32,
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}/{}", self.strategy.name(), self.index, self.count)
    }
}

impl FromStr for Partition {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let expected = "expected STRATEGY:I/N with STRATEGY one of hash, slice, duration and 1 <= I <= N, e.g. hash:1/4";
        let text = text.trim();
        let Some((strategy, share)) = text.split_once(':') else {
            return Err(format!("\"{text}\" has no strategy; {expected}"));
        };
        let strategy = match strategy {
            "hash" => Strategy::Hash,
            "slice" => Strategy::Slice,
            "duration" => Strategy::Duration,
            other => return Err(format!("unknown strategy \"{other}\"; {expected}")),
        };
        let Some((index, count)) = share.split_once('/') else {
            return Err(format!("\"{text}\" has no I/N; {expected}"));
        };
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        let (Some(index), Some(count)) = (number(index), number(count)) else {
            return Err(format!(
                "\"{text}\": I and N must be whole numbers; {expected}"
            ));
        };
        if count == 0 || count > MAX_COUNT {
            return Err(format!(
                "\"{text}\": N must be from 1 to {MAX_COUNT}; {expected}"
            ));
        }
        if index == 0 || index > count {
            return Err(format!(
                "\"{text}\": I must be from 1 to N ({count}); {expected}"
            ));
        }
        Ok(Partition {
            strategy,
            index,
            count,
        })
    }
}

/// The shares of `cells` (indices into it, ascending), `count` of them.
/// `durations` (ms by cell id) is read by `duration` only.
pub fn shares(
    cells: &[String],
    strategy: Strategy,
    count: u32,
    durations: &BTreeMap<String, u64>,
) -> Vec<Vec<usize>> {
    let n = count.max(1) as usize;
    let mut out = vec![Vec::new(); n];
    let by_hash = |id: &str| (fnv1a64(id.as_bytes()) % n as u64) as usize;
    match strategy {
        Strategy::Hash => {
            for (i, id) in cells.iter().enumerate() {
                out[by_hash(id)].push(i);
            }
        }
        Strategy::Slice => {
            let (base, extra) = (cells.len() / n, cells.len() % n);
            let mut next = 0;
            for (share, slot) in out.iter_mut().enumerate() {
                let len = base + usize::from(share < extra);
                slot.extend(next..next + len);
                next += len;
            }
        }
        Strategy::Duration => {
            let mut known: Vec<(usize, u64)> = Vec::new();
            for (i, id) in cells.iter().enumerate() {
                match durations.get(id) {
                    Some(&ms) => known.push((i, ms)),
                    None => out[by_hash(id)].push(i),
                }
            }
            // Longest first; equal times in matrix order, so the result
            // never depends on the order the file listed them in.
            known.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut load = vec![0u64; n];
            for (i, ms) in known {
                let lightest = (0..n)
                    .min_by_key(|&s| (load[s], s))
                    .expect("at least one share");
                load[lightest] += ms;
                out[lightest].push(i);
            }
            for share in &mut out {
                share.sort_unstable();
            }
        }
    }
    out
}

/// `cells` cut down to `partition`'s share, and what the plan records
/// of it: the whole selection, and the file the times came from.
pub(super) fn cut(
    cells: Vec<CellPlan>,
    partition: Partition,
    durations: &BTreeMap<String, u64>,
    durations_file: Option<&Path>,
) -> (Vec<CellPlan>, PartitionInfo) {
    let all: Vec<String> = cells.iter().map(|c| c.name.clone()).collect();
    let share = shares(&all, partition.strategy, partition.count, durations)
        .swap_remove(partition.index as usize - 1);
    let cells = cells
        .into_iter()
        .enumerate()
        .filter(|(i, _)| share.binary_search(i).is_ok())
        .map(|(_, c)| c)
        .collect();
    let info = PartitionInfo {
        strategy: partition.strategy,
        index: partition.index,
        count: partition.count,
        cells: all,
        durations: (partition.strategy == Strategy::Duration)
            .then(|| durations_file.map(|f| f.display().to_string()))
            .flatten(),
    };
    (cells, info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cell-{i}")).collect()
    }

    #[test]
    fn partition_specs_parse_and_bad_ones_say_what_is_expected() {
        for (text, strategy, index, count) in [
            ("hash:1/1", Strategy::Hash, 1, 1),
            ("slice:3/4", Strategy::Slice, 3, 4),
            ("duration:64/64", Strategy::Duration, 64, 64),
            (" hash:2/8 ", Strategy::Hash, 2, 8),
        ] {
            let p: Partition = text.parse().unwrap();
            assert_eq!((p.strategy, p.index, p.count), (strategy, index, count));
            assert_eq!(p.to_string(), text.trim());
        }
        for (text, says) in [
            ("", "has no strategy"),
            ("hash", "has no strategy"),
            ("1/4", "has no strategy"),
            ("random:1/4", "unknown strategy \"random\""),
            ("Hash:1/4", "unknown strategy \"Hash\""),
            ("hash:1", "has no I/N"),
            ("hash:0/4", "I must be from 1 to N (4)"),
            ("hash:5/4", "I must be from 1 to N (4)"),
            ("hash:1/0", "N must be from 1 to 64"),
            ("hash:1/65", "N must be from 1 to 64"),
            ("hash:-1/4", "whole numbers"),
            ("hash:1/four", "whole numbers"),
            ("hash:1/4/2", "whole numbers"),
            ("hash:+1/4", "whole numbers"),
            ("hash:1/99999999999", "whole numbers"),
        ] {
            let error = text.parse::<Partition>().unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(error.contains("e.g. hash:1/4"), "{text:?}: {error}");
        }
    }

    #[test]
    fn every_strategy_puts_every_cell_in_exactly_one_share() {
        let durations: BTreeMap<String, u64> = ids(30)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(i, id)| (id, 1_000 * (i as u64 % 7 + 1)))
            .collect();
        for len in [0, 1, 2, 7, 30] {
            let cells = ids(len);
            for strategy in [Strategy::Hash, Strategy::Slice, Strategy::Duration] {
                for count in 1..=8 {
                    let all = shares(&cells, strategy, count, &durations);
                    assert_eq!(all.len(), count as usize);
                    let mut seen: Vec<usize> = all.concat();
                    seen.sort_unstable();
                    assert_eq!(seen, (0..len).collect::<Vec<_>>(), "{strategy:?} {count}");
                    assert!(all.iter().all(|s| s.windows(2).all(|w| w[0] < w[1])));
                }
            }
        }
    }

    #[test]
    fn slices_are_contiguous_and_differ_by_at_most_one() {
        let all = shares(&ids(10), Strategy::Slice, 4, &BTreeMap::new());
        assert_eq!(all, [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7], vec![8, 9]]);
        let all = shares(&ids(2), Strategy::Slice, 3, &BTreeMap::new());
        assert_eq!(all, [vec![0], vec![1], vec![]]);
    }

    #[test]
    fn hash_shares_are_pinned_so_every_machine_agrees() {
        // fnv1a64 is fully specified: these never change between builds or machines.
        let cells: Vec<String> = ["migrate-first", "binary-first", "fence", "fence@pg18"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let expect: Vec<usize> = cells
            .iter()
            .map(|c| (fnv1a64(c.as_bytes()) % 2) as usize)
            .collect();
        let all = shares(&cells, Strategy::Hash, 2, &BTreeMap::new());
        for (i, share) in expect.iter().enumerate() {
            assert!(all[*share].contains(&i));
        }
        // Adding a cell moves no other cell.
        let mut more = cells.clone();
        more.push("new-cell".into());
        let after = shares(&more, Strategy::Hash, 2, &BTreeMap::new());
        for (share, members) in all.iter().enumerate() {
            assert!(members.iter().all(|i| after[share].contains(i)));
        }
    }

    #[test]
    fn duration_packs_longest_first_into_the_lightest_share() {
        let cells = ids(5);
        let durations: BTreeMap<String, u64> = [(0, 10), (1, 7), (2, 5), (3, 4), (4, 3)]
            .iter()
            .map(|&(i, s)| (format!("cell-{i}"), s * 1_000))
            .collect();
        // 10 -> A; 7 -> B; 5 -> B (12); 4 -> A (14); 3 -> B (15).
        let all = shares(&cells, Strategy::Duration, 2, &durations);
        assert_eq!(all, [vec![0, 3], vec![1, 2, 4]]);
        // Equal times go in matrix order, whatever order the file had.
        let equal: BTreeMap<String, u64> = cells.iter().map(|c| (c.clone(), 1)).collect();
        assert_eq!(
            shares(&cells, Strategy::Duration, 2, &equal),
            [vec![0, 2, 4], vec![1, 3]]
        );
    }

    #[test]
    fn duration_places_unknown_cells_by_hash() {
        let cells = ids(9);
        let none = BTreeMap::new();
        assert_eq!(
            shares(&cells, Strategy::Duration, 3, &none),
            shares(&cells, Strategy::Hash, 3, &none)
        );
    }
}
