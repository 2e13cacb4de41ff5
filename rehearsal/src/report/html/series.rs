//! What the timeline draws, binned from what the report keeps: jobs per
//! second by kind and version from the monitor's census samples
//! (cumulative counts every 250 ms), and ring generations by
//! representation from its ring samples (recorded when a ring changes).

use std::collections::BTreeSet;

use crate::observe::{CensusSample, RingSample};

/// Width of one bin of a job series.
pub const BIN_MS: u64 = 1_000;

/// What a job series counts: one of the events the fleet reports per job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A producer's `accepted` (after commit).
    Accepted,
    /// A worker's `started` (an attempt began).
    Started,
    /// A worker's `finished` (an attempt ended).
    Finished,
}

impl Kind {
    /// Every kind, in the order the timeline stacks them.
    pub const ALL: [Kind; 3] = [Kind::Accepted, Kind::Started, Kind::Finished];

    /// The event's name, as the census counts it.
    pub fn event(self) -> &'static str {
        match self {
            Kind::Accepted => "accepted",
            Kind::Started => "started",
            Kind::Finished => "finished",
        }
    }
}

/// Jobs of one kind and one version, per second of the cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// What it counts.
    pub kind: Kind,
    /// The version of the process that reported it.
    pub version: String,
    /// Bin `k` holds the events of `[k s, (k+1) s)`; the last bin ends at
    /// the last sample and may be shorter.
    pub per_second: Vec<u64>,
}

/// Every (kind, version) the census counted, binned by second. A version
/// absent from a sample counts what it had before; a count that goes down
/// (a restarted counter) gives 0 for that second, never a negative.
pub fn per_second(census: &[CensusSample]) -> Vec<Series> {
    let Some(last) = census.last() else {
        return Vec::new();
    };
    let bins = last.at_ms.div_ceil(BIN_MS).max(1);
    let keys: BTreeSet<(Kind, &str)> = census
        .iter()
        .flat_map(|s| s.by_version.iter())
        .flat_map(|(version, kinds)| {
            Kind::ALL
                .into_iter()
                .filter(|k| kinds.contains_key(k.event()))
                .map(move |k| (k, version.as_str()))
        })
        .collect();
    keys.into_iter()
        .map(|(kind, version)| {
            let mut before = 0;
            let per_second = (1..=bins)
                .map(|k| {
                    let now = count_at(census, k * BIN_MS, kind, version);
                    let n = now.saturating_sub(before);
                    before = now;
                    n
                })
                .collect();
            Series {
                kind,
                version: version.to_owned(),
                per_second,
            }
        })
        .collect()
}

/// The cumulative count of the last sample at or before `at_ms` that has one (0 before).
fn count_at(census: &[CensusSample], at_ms: u64, kind: Kind, version: &str) -> u64 {
    let upto = census.partition_point(|s| s.at_ms <= at_ms);
    census[..upto]
        .iter()
        .rev()
        .find_map(|s| s.by_version.get(version)?.get(kind.event()))
        .copied()
        .unwrap_or(0)
}

/// Where a ring's cursor is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Representation {
    /// The 0.6 singleton columns (poisoned by the flip).
    Columns,
    /// The 0.7 append-only ledger (from the expand migration on).
    Ledger,
}

impl Representation {
    /// Its name in the legend.
    pub fn word(self) -> &'static str {
        match self {
            Representation::Columns => "columns",
            Representation::Ledger => "ledger",
        }
    }
}

/// One ring's generation in one representation over time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingSeries {
    /// `queue`, `claim` or `lease`.
    pub ring: String,
    /// Columns or ledger.
    pub representation: Representation,
    /// (ms since the cell started, generation), one per sample that had one.
    pub points: Vec<(u64, i64)>,
}

/// The rings' generations: the columns while they are the authority or
/// shadow it (the flip poisons them to -1, which is left out), the ledger
/// once it exists. Rings in name order, columns before ledger.
pub fn ring_generations(rings: &[RingSample]) -> Vec<RingSeries> {
    let names: BTreeSet<&str> = rings.iter().map(|r| r.ring.as_str()).collect();
    let mut out = Vec::new();
    for ring in names {
        let of_ring = || rings.iter().filter(move |r| r.ring == ring);
        let columns = of_ring()
            .filter(|r| r.authority != "ledger")
            .filter_map(|r| {
                r.column_generation
                    .filter(|g| *g >= 0)
                    .map(|g| (r.at_ms, g))
            });
        let ledger = of_ring().filter_map(|r| r.ledger_generation.map(|g| (r.at_ms, g)));
        for (representation, points) in [
            (Representation::Columns, columns.collect::<Vec<_>>()),
            (Representation::Ledger, ledger.collect()),
        ] {
            if !points.is_empty() {
                out.push(RingSeries {
                    ring: ring.to_owned(),
                    representation,
                    points,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn sample(at_ms: u64, counts: &[(&str, &str, u64)]) -> CensusSample {
        let mut by_version: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for &(version, kind, n) in counts {
            by_version
                .entry(version.to_owned())
                .or_default()
                .insert(kind.to_owned(), n);
        }
        CensusSample {
            at_ms,
            by_version,
            fresh_runtimes: BTreeMap::new(),
            delta_rows: 0,
            lock_waits: 0,
            xacts: None,
            scans: Default::default(),
        }
    }

    #[test]
    fn census_counts_are_binned_into_whole_seconds_by_kind_and_version() {
        let census = [
            sample(0, &[]),
            sample(250, &[("0.6.2", "accepted", 10)]),
            sample(
                1_000,
                &[("0.6.2", "accepted", 40), ("0.6.2", "finished", 5)],
            ),
            sample(
                1_250,
                &[("0.6.2", "accepted", 45), ("0.6.2", "finished", 5)],
            ),
            // 0.6.2 is absent here: it keeps what it had, not 0.
            sample(2_000, &[("0.7.0", "started", 7)]),
            sample(
                2_750,
                &[
                    ("0.6.2", "accepted", 90),
                    ("0.6.2", "finished", 3), // went down: 0 that second
                    ("0.7.0", "started", 27),
                ],
            ),
        ];
        let series = per_second(&census);
        let got: Vec<(Kind, &str, &[u64])> = series
            .iter()
            .map(|s| (s.kind, s.version.as_str(), s.per_second.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                (Kind::Accepted, "0.6.2", &[40, 5, 45][..]),
                (Kind::Started, "0.7.0", &[0, 7, 20][..]),
                (Kind::Finished, "0.6.2", &[5, 0, 0][..]),
            ]
        );
        assert!(per_second(&[]).is_empty());
        // One sample at 0 ms: one (empty) bin, so a series is never without points.
        let once = per_second(&[sample(0, &[("0.7.0", "accepted", 3)])]);
        assert_eq!(once[0].per_second, [3]);
    }

    #[test]
    fn a_bin_sums_to_the_events_of_its_second() {
        // 100 accepted per second, sampled every 250 ms: every full second holds 100.
        let census: Vec<CensusSample> = (0..=40u64)
            .map(|i| sample(i * 250, &[("0.7.0", "accepted", i * 25)]))
            .collect();
        let s = &per_second(&census)[0];
        assert_eq!(s.per_second, [100; 10]);
        assert_eq!(s.per_second.iter().sum::<u64>(), 1_000);
    }

    fn ring(
        at_ms: u64,
        ring: &str,
        authority: &str,
        column: i64,
        ledger: Option<i64>,
    ) -> RingSample {
        RingSample {
            at_ms,
            ring: ring.into(),
            authority: authority.into(),
            column_slot: Some(0),
            column_generation: Some(column),
            ledger_generation: ledger,
            ledger_slot: ledger.map(|_| 0),
            ledger_rows: 0,
            ledger_gaps: 0,
        }
    }

    #[test]
    fn ring_generations_follow_each_representation_and_drop_the_poisoned_columns() {
        let rings = [
            ring(0, "queue", "none", 3, None),
            ring(0, "claim", "none", 1, None),
            ring(1_000, "queue", "columns", 4, Some(4)),
            ring(2_000, "queue", "ledger", -1, Some(5)),
        ];
        let got: Vec<_> = ring_generations(&rings)
            .into_iter()
            .map(|s| (s.ring, s.representation, s.points))
            .collect();
        assert_eq!(
            got,
            [
                ("claim".to_owned(), Representation::Columns, vec![(0, 1)]),
                (
                    "queue".to_owned(),
                    Representation::Columns,
                    vec![(0, 3), (1_000, 4)]
                ),
                (
                    "queue".to_owned(),
                    Representation::Ledger,
                    vec![(1_000, 4), (2_000, 5)]
                ),
            ]
        );
        assert!(ring_generations(&[]).is_empty());
    }
}
