//! `rescued_by_current` and `late_result_during_rerun`: what the rescue
//! of abandoned attempts reached.

use crate::observe::Observations;

/// Runtimes of `current` rescued attempts (the last census's counts).
pub(super) fn rescued_by_current(obs: &Observations) -> (bool, String) {
    let mut current: Vec<&str> = obs
        .processes
        .iter()
        .filter(|p| p.artifact == crate::matrix::CURRENT)
        .map(|p| p.version.as_str())
        .collect();
    current.sort_unstable();
    current.dedup();
    let counts = obs.census.last().map(|c| &c.by_version);
    let rescued: u64 = current
        .iter()
        .filter_map(|v| counts?.get(*v)?.get("rescued"))
        .sum();
    if rescued > 0 {
        (
            true,
            format!(
                "runtimes of current ({}) rescued {rescued} attempts",
                current.join(", ")
            ),
        )
    } else {
        (
            false,
            format!(
                "no runtime of current ({}) rescued an attempt",
                if current.is_empty() {
                    "none ran".to_owned()
                } else {
                    current.join(", ")
                }
            ),
        )
    }
}

/// A rescued attempt's result came back while its job ran again elsewhere.
pub(super) fn late_result_during_rerun(obs: &Observations) -> (bool, String) {
    let late = &obs.late_results;
    match (&late.first, late.during_rerun) {
        (Some(first), n) if n > 0 => (
            true,
            format!(
                "{n} results of rescued attempts came back while the job ran again elsewhere (first: {first})"
            ),
        ),
        _ => (
            false,
            format!(
                "no result of a rescued attempt came back while the job ran again ({} came back after the rerun had ended)",
                late.after_rerun
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{one, process};
    use super::super::unreached;
    use crate::matrix::Reach;
    use crate::observe::{CensusSample, Observations};

    #[test]
    fn a_late_result_counts_only_while_the_job_ran_again() {
        let mut obs = Observations::default();
        obs.late_results.after_rerun = 27;
        let r = one(Reach::LateResultDuringRerun, &obs, &[]);
        assert!(!r.reached);
        assert_eq!(
            r.evidence,
            "no result of a rescued attempt came back while the job ran again (27 came back after the rerun had ended)"
        );
        obs.late_results.during_rerun = 3;
        obs.late_results.first = Some("job 101 by defective_finish-worker-1".into());
        assert!(one(Reach::LateResultDuringRerun, &obs, &[]).reached);
    }

    #[test]
    fn rescued_by_current_reads_the_rescues_of_currents_versions() {
        let mut obs = Observations {
            processes: vec![
                process("previous-worker-1", "previous", "0.6.2", None),
                process("current-worker-1", "current", "0.7.0", None),
            ],
            census: vec![CensusSample {
                at_ms: 10_000,
                by_version: [("0.6.2".to_owned(), [("rescued".to_owned(), 5)].into())].into(),
                fresh_runtimes: Default::default(),
                delta_rows: 0,
                lock_waits: 0,
                xacts: None,
                scans: Default::default(),
            }],
            ..Observations::default()
        };
        assert!(!one(Reach::RescuedByCurrent, &obs, &[]).reached);
        obs.census[0]
            .by_version
            .insert("0.7.0".into(), [("rescued".to_owned(), 2)].into());
        let r = one(Reach::RescuedByCurrent, &obs, &[]);
        assert!(r.reached);
        assert_eq!(r.evidence, "runtimes of current (0.7.0) rescued 2 attempts");
        assert_eq!(unreached(&[Reach::RescuedByCurrent], &obs, &[]), None);
    }
}
