//! What an earlier run tells the scheduler, read from its report.json:
//! `History::of` and `History::best_for` live here, beside the reports
//! they read, so `schedule` (below the report) holds only the history's
//! shape and how well one fits a run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::plan::CellPlan;
use crate::report::RunReport;
use crate::schedule::{BEST_RANK, History, LOOKBACK, Load};

impl History {
    /// What `report` says about its cells and its load. A run beside a
    /// `--stress` load says nothing of its load: its cells waited for CPU
    /// the load held, so their CPU per second understates what they ask,
    /// and the next unstressed run would start too many at once.
    pub fn of(report: &RunReport, source: PathBuf) -> History {
        let durations: BTreeMap<String, u64> = report
            .cells
            .iter()
            .map(|c| (c.name.clone(), c.elapsed_ms))
            .collect();
        let cell_ms: u64 = durations.values().sum();
        let measured = !report.run.end.interrupted && report.run.header.stress.is_none();
        let load = (cell_ms > 0 && measured).then(|| Load {
            // The containers' CPU is already part of children_cpu_ms.
            cpu_ms: report.run.end.harness_cpu_ms + report.run.end.children_cpu_ms,
            cell_ms,
            wall_ms: report.run.end.window_ms(),
            cores: report.run.header.cores,
            jobs: report.run.header.jobs,
        });
        History {
            source: Some(source),
            backend: report.run.header.backend.clone(),
            durations,
            load,
        }
    }

    /// The report under `reports_root` that tells most about a run of
    /// `cells` on `backend`: the newest of that backend with CPU figures
    /// for at least half of the cells, else the newest of another backend
    /// with them, else the newest of that backend, else the newest at
    /// all (folders are named by UTC time, so the last name is the
    /// newest); none when there is no readable report. Only the newest
    /// [`LOOKBACK`] reports are read.
    pub fn best_for(reports_root: &Path, cells: &[CellPlan], backend: &str) -> History {
        let Ok(entries) = std::fs::read_dir(reports_root) else {
            return History::default();
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        let mut best: Option<(u8, History)> = None;
        for history in dirs
            .iter()
            .rev()
            .filter_map(|d| History::of_file(&d.join("report.json")))
            .take(LOOKBACK)
        {
            let rank = history.rank(cells, backend);
            if best.as_ref().is_none_or(|(r, _)| rank > *r) {
                best = Some((rank, history));
            }
            if best.as_ref().is_some_and(|(r, _)| *r == BEST_RANK) {
                break;
            }
        }
        best.map(|(_, h)| h).unwrap_or_default()
    }

    fn of_file(file: &Path) -> Option<History> {
        let report = super::read_json(file).ok()?;
        Some(History::of(&report, file.to_owned()))
    }
}
