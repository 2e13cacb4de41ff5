//! Per-version series from a cell's census samples (cumulative event
//! counts, sampled by the monitor).

use std::collections::BTreeSet;

use crate::observe::CensusSample;

/// Throughput of one version: (ms since the cell started, jobs finished per second).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The version, as the census counts it.
    pub version: String,
    /// One point per census interval, at the interval's end.
    pub points: Vec<(u64, f64)>,
}

/// Rates from cumulative `finished` counts: the difference between
/// consecutive samples over the time between them. A version absent from
/// a sample counts 0 there; a count that goes down (a restarted counter)
/// gives rate 0 rather than a negative one.
pub fn throughput(census: &[CensusSample]) -> Vec<Series> {
    let versions: BTreeSet<&str> = census
        .iter()
        .flat_map(|s| s.by_version.iter())
        .filter(|(_, kinds)| kinds.contains_key("finished"))
        .map(|(v, _)| v.as_str())
        .collect();
    let finished = |s: &CensusSample, v: &str| {
        s.by_version
            .get(v)
            .and_then(|k| k.get("finished"))
            .copied()
            .unwrap_or(0)
    };
    versions
        .into_iter()
        .map(|v| Series {
            version: v.to_owned(),
            points: census
                .windows(2)
                .filter(|w| w[1].at_ms > w[0].at_ms)
                .map(|w| {
                    let done = finished(&w[1], v).saturating_sub(finished(&w[0], v));
                    let secs = (w[1].at_ms - w[0].at_ms) as f64 / 1_000.0;
                    (w[1].at_ms, done as f64 / secs)
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn throughput_differentiates_cumulative_counts() {
        let sample = |at_ms: u64, counts: &[(&str, u64)]| CensusSample {
            at_ms,
            by_version: counts
                .iter()
                .map(|&(v, n)| (v.to_owned(), BTreeMap::from([("finished".to_owned(), n)])))
                .collect(),
            fresh_runtimes: BTreeMap::new(),
            delta_rows: 0,
            lock_waits: 0,
        };
        let census = [
            sample(0, &[("0.6.2", 0)]),
            sample(500, &[("0.6.2", 50)]),
            sample(500, &[("0.6.2", 50)]), // same instant: skipped, no division by zero
            sample(1_500, &[("0.6.2", 150), ("0.7.0", 20)]),
            sample(2_500, &[("0.6.2", 140), ("0.7.0", 220)]), // a counter that went down
        ];
        let series = throughput(&census);
        assert_eq!(
            series,
            [
                Series {
                    version: "0.6.2".into(),
                    points: vec![(500, 100.0), (1_500, 100.0), (2_500, 0.0)]
                },
                Series {
                    version: "0.7.0".into(),
                    points: vec![(500, 0.0), (1_500, 20.0), (2_500, 200.0)]
                },
            ]
        );
        assert!(throughput(&[]).is_empty());
    }
}
