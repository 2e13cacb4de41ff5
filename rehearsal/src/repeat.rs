//! `--repeat N`: the same selection run N times with fresh seeds, and per
//! cell how many runs met its expectation (its flake rate).
//!
//! Run 1 uses the base seed; run k+1 the k-th value of SplitMix64 seeded
//! with it, so `--seed BASE --repeat N` repeats exactly. Each run writes
//! its own report folder (plan, logs, report.json); a run that did not
//! meet a cell's expectation is listed with the command that replays that
//! cell with that run's seed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::observe::Verdict;
use crate::plan::SplitMix64;
use crate::report::RunReport;
use crate::vocab::RunOutcome;

/// The most runs `--repeat` accepts.
pub const MAX_REPEAT: u32 = 100;

/// The seeds of `n` runs from `base`.
pub fn seeds(base: u64, n: u32) -> Vec<u64> {
    let mut rng = SplitMix64::new(base);
    std::iter::once(base)
        .chain(std::iter::repeat_with(move || rng.next_u64()))
        .take(n as usize)
        .collect()
}

/// One run of one cell that did not meet its expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miss {
    /// 1-based run number.
    pub run: usize,
    /// The seed the run was planned with.
    pub seed: u64,
    /// Fail or inconclusive.
    pub verdict: Verdict,
    /// The verdict reason.
    pub reason: String,
    /// The run's report folder (its plan and logs).
    pub dir: PathBuf,
}

/// One cell over every run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellRate {
    /// Runs the cell was in.
    pub runs: usize,
    /// Of which it met its expectation.
    pub met: usize,
    /// The others.
    pub misses: Vec<Miss>,
}

/// Every cell over every run, by name in first-run order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    order: Vec<String>,
    cells: BTreeMap<String, CellRate>,
    runs: usize,
    /// `--matrix-file PATH` words for replay commands, if one was given.
    matrix_file: Option<String>,
    /// How `--cell` selects a cell that ran on a named PostgreSQL major
    /// (`fence@pg18`), by the cell's id in the report.
    selectors: BTreeMap<String, String>,
}

impl Rates {
    /// An empty tally; replay commands name `matrix_file` when given.
    pub fn new(matrix_file: Option<String>) -> Rates {
        Rates {
            matrix_file,
            ..Rates::default()
        }
    }

    /// Adds one run's report (written to `dir`, planned with `seed`).
    pub fn add(&mut self, seed: u64, report: &RunReport, dir: PathBuf) {
        self.runs += 1;
        for cell in &report.cells {
            if !self.cells.contains_key(&cell.name) {
                self.order.push(cell.name.clone());
            }
            if let Some(major) = cell.plan.server.filter(|_| !cell.name.contains('@')) {
                self.selectors.insert(
                    cell.name.clone(),
                    crate::servers::cell_id(&cell.name, major),
                );
            }
            let rate = self.cells.entry(cell.name.clone()).or_default();
            rate.runs += 1;
            if cell.verdict == Verdict::Pass {
                rate.met += 1;
            } else {
                rate.misses.push(Miss {
                    run: self.runs,
                    seed,
                    verdict: cell.verdict,
                    reason: cell.verdict_reason.clone(),
                    dir: dir.clone(),
                });
            }
        }
    }

    /// The command that replays `cell` as it ran with `seed`.
    pub fn replay(&self, cell: &str, seed: u64) -> String {
        let file = self
            .matrix_file
            .as_ref()
            .map(|f| format!("--matrix-file {} ", crate::plan::shell_quote(f)))
            .unwrap_or_default();
        let cell = self.selectors.get(cell).map_or(cell, String::as_str);
        format!(
            "rehearse {file}--cell {} --seed {seed}",
            crate::plan::shell_quote(cell)
        )
    }

    /// Any miss fails; else an interrupted or unjudged run leaves it inconclusive.
    pub fn outcome(&self) -> RunOutcome {
        let misses = self.cells.values().flat_map(|r| &r.misses);
        let mut outcome = RunOutcome::AllMet;
        for miss in misses {
            match miss.verdict {
                Verdict::Fail => return RunOutcome::CellFailed,
                _ => outcome = RunOutcome::Inconclusive,
            }
        }
        outcome
    }

    /// The table and the replay lines, for the terminal.
    pub fn render(&self, base: u64) -> String {
        let mut out = format!(
            "flake rates over {} from base seed {base} (met / runs):\n",
            super::report::text::plural(self.runs, "run")
        );
        let width = self.order.iter().map(String::len).max().unwrap_or(4).max(4);
        for name in &self.order {
            let rate = &self.cells[name];
            let inconclusive = rate
                .misses
                .iter()
                .filter(|m| m.verdict == Verdict::Inconclusive)
                .count();
            let mut line = format!("  {name:<width$}  {}/{}", rate.met, rate.runs);
            if inconclusive > 0 {
                line.push_str(&format!(" ({inconclusive} inconclusive)"));
            }
            out.push_str(&line);
            out.push('\n');
        }
        for name in &self.order {
            for miss in &self.cells[name].misses {
                // An inconclusive cell's reason already opens with its verdict.
                let verdict = crate::report::verdict_name(miss.verdict);
                let reason = miss
                    .reason
                    .strip_prefix(verdict)
                    .and_then(|r| r.strip_prefix(": "))
                    .unwrap_or(&miss.reason);
                out.push_str(&format!(
                    "{name}: run {} (seed {}) {verdict}: {reason}\n  replay: {}\n  plan and logs: {}\n",
                    miss.run,
                    miss.seed,
                    self.replay(name, miss.seed),
                    miss.dir.display()
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn the_first_run_uses_the_base_seed_and_the_rest_derive_from_it() {
        let s = seeds(42, 4);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0], 42);
        assert_eq!(s, seeds(42, 4), "the same base repeats exactly");
        let mut distinct = s.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 4);
        assert_eq!(seeds(42, 0), Vec::<u64>::new());
    }

    #[test]
    fn per_cell_rates_and_a_replay_for_each_miss() {
        // The fixture: migrate-first passes, fence fails, defect-fence is inconclusive.
        let report = fixture::report();
        let mut clean = report.clone();
        for c in &mut clean.cells {
            c.verdict = Verdict::Pass;
        }
        let mut rates = Rates::new(None);
        rates.add(7, &clean, PathBuf::from("reports/a"));
        rates.add(9, &report, PathBuf::from("reports/b"));
        let text = rates.render(7);
        assert!(
            text.starts_with("flake rates over 2 runs from base seed 7 (met / runs):\n"),
            "{text}"
        );
        assert!(text.contains("  migrate-first  2/2\n"), "{text}");
        assert!(text.contains("  fence          1/2\n"), "{text}");
        assert!(
            text.contains("  defect-fence   1/2 (1 inconclusive)\n"),
            "{text}"
        );
        assert!(
            text.contains("fence: run 2 (seed 9) fail: expected pass, got lost, fence_breached and 1 step failure\n  replay: rehearse --cell fence --seed 9\n  plan and logs: reports/b\n"),
            "{text}"
        );
        assert_eq!(rates.outcome(), RunOutcome::CellFailed);
        let mut only_clean = Rates::new(Some("m.toml".into()));
        only_clean.add(7, &clean, PathBuf::from("reports/a"));
        assert_eq!(only_clean.outcome(), RunOutcome::AllMet);
        assert_eq!(
            only_clean.replay("fence", 3),
            "rehearse --matrix-file m.toml --cell fence --seed 3"
        );
    }

    #[test]
    fn an_inconclusive_miss_names_its_verdict_once() {
        let mut report = fixture::report();
        let cell = report
            .cells
            .iter_mut()
            .find(|c| c.verdict == Verdict::Inconclusive)
            .expect("the fixture's inconclusive cell");
        cell.verdict_reason = "inconclusive: interrupted (Ctrl-C or SIGTERM)".into();
        let mut rates = Rates::new(None);
        rates.add(9, &report, PathBuf::from("reports/b"));
        let text = rates.render(9);
        assert!(
            text.contains(
                "defect-fence: run 1 (seed 9) inconclusive: interrupted (Ctrl-C or SIGTERM)\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_cell_that_ran_on_a_named_major_is_replayed_on_it() {
        let mut one = fixture::report();
        for c in &mut one.cells {
            c.plan.server = Some(crate::servers::Major(18));
        }
        let mut rates = Rates::new(None);
        rates.add(5, &one, PathBuf::from("reports/a"));
        assert_eq!(
            rates.replay("fence", 5),
            "rehearse --cell fence@pg18 --seed 5"
        );
        let mut two = Rates::new(None);
        two.add(5, &fixture::on_two_servers(), PathBuf::from("reports/b"));
        assert_eq!(
            two.replay("fence@pg15", 5),
            "rehearse --cell fence@pg15 --seed 5"
        );
    }
}
