//! The mutate report: `mutate.json` (versioned, what `merge` and the next
//! run's cell order read) and `mutate.md` (survivors first, with their
//! diffs), written whole and renamed into place like the run reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Counts;
use super::results::{CleanCell, MutantResult, Status};

/// `mutate.json`'s name.
pub const MUTATE_JSON: &str = "mutate.json";
/// `mutate.md`'s name.
pub const MUTATE_MD: &str = "mutate.md";

/// Format of `mutate.json`:
/// - 1.0, the first;
/// - 1.1: `interrupted` (false when absent): the run was stopped by
///   SIGINT or SIGTERM and lists the mutants that finished before.
pub const FORMAT_VERSION: &str = "1.1";

/// One mutate run (or the merge of a partitioned one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MutateReport {
    /// `major.minor`.
    pub format_version: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// The seed of the sample and of every cell.
    pub seed: u64,
    /// `in-diff against 0.6.2` or `all`.
    pub scope: String,
    /// `--sample N`, if any.
    pub sample: Option<usize>,
    /// `--partition`, if any (`hash:1/4`).
    pub partition: Option<String>,
    /// Mutants in scope before sampling.
    pub in_scope: Counts,
    /// The cells and their clean run, in the order they judged mutants.
    pub clean: Vec<CleanCell>,
    /// `[mutate] min_score` of the matrix, if set.
    pub min_score: Option<f64>,
    /// `[[mutate.equivalent]]` of the matrix: mutant id to the reason no
    /// matrix can kill it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub equivalent: BTreeMap<String, String>,
    /// Each mutant's result.
    pub mutants: Vec<MutantResult>,
    /// Stopped by SIGINT or SIGTERM: the mutants not listed did not run
    /// (the one under way when it came among them).
    #[serde(default)]
    pub interrupted: bool,
}

/// The tally of a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Killed by a cell.
    pub killed: usize,
    /// Passed by every cell.
    pub survived: usize,
    /// Did not build.
    pub unviable: usize,
    /// Ran past a budget.
    pub timeout: usize,
    /// Of the survivors, those the matrix file explains as equivalent.
    #[serde(default)]
    pub equivalent: usize,
}

impl Tally {
    /// killed / (killed + survived), survivors explained as equivalent
    /// left out; `None` with nothing judged.
    pub fn score(&self) -> Option<f64> {
        let judged = (self.killed + self.survived).saturating_sub(self.equivalent);
        (judged > 0).then(|| self.killed as f64 / judged as f64)
    }

    /// Viable: built (killed, survived or timeout).
    pub fn viable(&self) -> usize {
        self.killed + self.survived + self.timeout
    }
}

impl MutateReport {
    /// Counts by status.
    pub fn tally(&self) -> Tally {
        let mut t = Tally::default();
        for m in &self.mutants {
            match m.status {
                Status::Killed { .. } => t.killed += 1,
                Status::Survived => {
                    t.survived += 1;
                    if self.equivalent.contains_key(&m.mutant.id) {
                        t.equivalent += 1;
                    }
                }
                Status::Unviable { .. } => t.unviable += 1,
                Status::Timeout { .. } => t.timeout += 1,
            }
        }
        t
    }

    /// Mutants the matrix file calls equivalent that a cell killed all
    /// the same: their explanation is wrong.
    pub fn killed_equivalents(&self) -> Vec<&MutantResult> {
        self.mutants
            .iter()
            .filter(|m| {
                matches!(m.status, Status::Killed { .. })
                    && self.equivalent.contains_key(&m.mutant.id)
            })
            .collect()
    }

    /// Whether the score meets `min_score` (met when none is set; not
    /// met when nothing was judged and one is).
    pub fn met(&self) -> bool {
        match (self.min_score, self.tally().score()) {
            (None, _) => true,
            (Some(min), Some(score)) => score + 1e-9 >= min,
            (Some(_), None) => false,
        }
    }

    /// How the run turned out, for the exit code: an interrupted run is
    /// inconclusive whatever its score (mutants are missing), as `rehearse
    /// run`'s is.
    pub fn outcome(&self) -> crate::vocab::RunOutcome {
        use crate::vocab::RunOutcome;
        if self.interrupted {
            RunOutcome::Inconclusive
        } else if self.met() {
            RunOutcome::AllMet
        } else {
            RunOutcome::CellFailed
        }
    }

    /// Mean time per mutant, ms.
    pub fn mean_ms(&self) -> u64 {
        let n = self.mutants.len() as u64;
        self.mutants
            .iter()
            .map(|m| m.elapsed_ms)
            .sum::<u64>()
            .checked_div(n)
            .unwrap_or(0)
    }

    /// Kills per cell, the order the next run tries cells in.
    pub fn kills_by_cell(&self) -> BTreeMap<String, usize> {
        let mut map = BTreeMap::new();
        for m in &self.mutants {
            if let Status::Killed { cell, .. } = &m.status {
                *map.entry(cell.clone()).or_insert(0) += 1;
            }
        }
        map
    }

    /// The one-line verdict.
    pub fn headline(&self) -> String {
        let t = self.tally();
        let score = t.score().map_or_else(
            || "no score (nothing judged)".to_owned(),
            |s| format!("score {:.1}%", s * 100.0),
        );
        let min = self.min_score.map_or_else(String::new, |m| {
            format!(
                " (min_score {:.1}%: {})",
                m * 100.0,
                if self.met() { "met" } else { "NOT met" }
            )
        });
        let explained = if t.equivalent > 0 {
            format!(" ({} explained as equivalent)", t.equivalent)
        } else {
            String::new()
        };
        let interrupted = if self.interrupted {
            " (interrupted: mutants not listed did not run)"
        } else {
            ""
        };
        format!(
            "{score}{min}: {} mutants{interrupted}, {} killed, {} survived{explained}, {} unviable, {} timeout; mean {:.1} s a mutant",
            self.mutants.len(),
            t.killed,
            t.survived,
            t.unviable,
            t.timeout,
            self.mean_ms() as f64 / 1000.0
        )
    }
}

/// The Markdown report: headline, survivors with their diffs, then every
/// mutant, then the cells' clean run.
pub fn render_markdown(r: &MutateReport) -> String {
    let mut out = String::new();
    out.push_str("# rehearse mutate\n\n");
    out.push_str(&format!("**{}**\n\n", r.headline()));
    let c = r
        .mutants
        .iter()
        .filter(|m| m.mutant.operator.is_sql())
        .count();
    out.push_str(&format!(
        "Scope: {}; {} mutants in scope ({} SQL, {} Rust){}; run: {} ({} SQL, {} Rust); seed {}{}.\n\n",
        r.scope,
        r.in_scope.sql + r.in_scope.rust,
        r.in_scope.sql,
        r.in_scope.rust,
        r.sample.map_or_else(String::new, |n| format!(", sample of {n}")),
        r.mutants.len(),
        c,
        r.mutants.len() - c,
        r.seed,
        r.partition.as_ref().map_or_else(String::new, |p| format!(", partition {p}")),
    ));
    out.push_str(&survivor_sections(r));
    out.push_str("## Every mutant\n\n| mutant | where | operator | status | killed by | time |\n|---|---|---|---|---|---|\n");
    let mut order: Vec<&MutantResult> = r.mutants.iter().collect();
    order.sort_by_key(|m| {
        (
            m.status != Status::Survived,
            m.mutant.file.clone(),
            m.mutant.range.start,
        )
    });
    for m in order {
        let by = match &m.status {
            Status::Killed { cell, rule } => format!("{cell}: {}", one_line(rule)),
            Status::Survived => "survived".into(),
            Status::Unviable { error } => format!("does not build: {}", one_line(error)),
            Status::Timeout { cell, budget_s } => format!("{cell} past its {budget_s} s budget"),
        };
        out.push_str(&format!(
            "| {} | {}:{} | {} | {} | {} | {:.1} s |\n",
            m.mutant.id,
            m.mutant.file,
            m.mutant.line,
            m.mutant.operator,
            m.status.word(),
            by.replace('|', "\\|"),
            m.elapsed_ms as f64 / 1000.0
        ));
    }
    out.push_str("\n## Cells (clean run, in the order they judge mutants)\n\n| cell | clean verdict | time | judges |\n|---|---|---|---|\n");
    for c in &r.clean {
        out.push_str(&format!(
            "| {} | {} | {:.1} s | {} |\n",
            c.outcome.cell,
            c.outcome.verdict,
            c.outcome.elapsed_ms as f64 / 1000.0,
            if c.usable {
                "yes"
            } else {
                "no: not clean on the unmutated build"
            }
        ));
    }
    out
}

/// The survivors left unexplained (with their diffs), the mutants listed
/// as equivalent that a cell killed, then the survivors explained as
/// equivalent (with the reason).
fn survivor_sections(r: &MutateReport) -> String {
    let mut out = String::new();
    let (explained, survivors): (Vec<&MutantResult>, Vec<&MutantResult>) = r
        .mutants
        .iter()
        .filter(|m| m.status == Status::Survived)
        .partition(|m| r.equivalent.contains_key(&m.mutant.id));
    out.push_str(&format!("## Survivors ({})\n\n", survivors.len()));
    if survivors.is_empty() {
        out.push_str("None.\n\n");
    }
    for m in &survivors {
        out.push_str(&mutant_heading(m, ""));
    }
    let wrong = r.killed_equivalents();
    if !wrong.is_empty() {
        out.push_str(&format!(
            "## Listed as equivalent, but killed ({}): the explanation in the matrix file is wrong\n\n",
            wrong.len()
        ));
        for m in wrong {
            out.push_str(&mutant_heading(m, ""));
        }
    }
    if !explained.is_empty() {
        out.push_str(&format!(
            "## Survivors explained as equivalent ({}; left out of the score)\n\n",
            explained.len()
        ));
        for m in explained {
            let why = r.equivalent.get(&m.mutant.id).map_or("", String::as_str);
            out.push_str(&mutant_heading(m, &format!("Why: {why}\n\n")));
        }
    }
    out
}

/// A mutant's heading, `note` and its diff.
fn mutant_heading(m: &MutantResult, note: &str) -> String {
    format!(
        "### {} {}:{} ({}, in {})\n\n{note}```diff\n{}```\n\n",
        m.mutant.id, m.mutant.file, m.mutant.line, m.mutant.operator, m.mutant.unit, m.diff
    )
}

/// The first line of `text`, at most 160 characters.
fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > 160 {
        format!("{}…", line.chars().take(160).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Writes `mutate.json` and `mutate.md` into `dir`.
pub fn write_all(dir: &Path, r: &MutateReport) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    write_whole(&dir.join(MUTATE_JSON), &json)?;
    write_whole(&dir.join(MUTATE_MD), &render_markdown(r))
}

/// Written to a temporary name and renamed: never half a file.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Reads a `mutate.json`.
// A String: rehearse merge words it as a refused DIR, whatever went wrong.
pub fn read(path: &Path) -> Result<MutateReport, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let r: MutateReport =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if r.format_version.split('.').next() != FORMAT_VERSION.split('.').next() {
        return Err(format!(
            "{}: format {} is not one this rehearse reads ({FORMAT_VERSION})",
            path.display(),
            r.format_version
        ));
    }
    Ok(r)
}

/// The newest mutate report under `root` (by folder name, which starts
/// with the UTC time), if any.
pub fn newest(root: &Path) -> Option<(PathBuf, MutateReport)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join(MUTATE_JSON).is_file())
        .collect();
    dirs.sort();
    while let Some(d) = dirs.pop() {
        if let Ok(r) = read(&d.join(MUTATE_JSON)) {
            return Some((d, r));
        }
    }
    None
}

/// The shares of a `--partition` run joined: the same seed, scope and
/// sample (so the same mutants were split), each mutant once; the clean
/// runs of every share kept (each share ran its own).
// A String: rehearse merge words it as a refused DIR, whatever went wrong.
pub fn merge(partials: Vec<MutateReport>) -> Result<MutateReport, String> {
    let mut iter = partials.into_iter();
    let Some(mut merged) = iter.next() else {
        return Err("nothing to merge".into());
    };
    let mut seen: std::collections::BTreeSet<String> =
        merged.mutants.iter().map(|m| m.mutant.id.clone()).collect();
    for p in iter {
        if (p.seed, &p.scope, p.sample, p.min_score)
            != (merged.seed, &merged.scope, merged.sample, merged.min_score)
        {
            return Err(format!(
                "the shares were not split from one run: seed {} / {} / sample {:?} against seed {} / {} / sample {:?}; merge shares of one `rehearse mutate --partition` run",
                p.seed, p.scope, p.sample, merged.seed, merged.scope, merged.sample
            ));
        }
        for m in p.mutants {
            if !seen.insert(m.mutant.id.clone()) {
                return Err(format!("mutant {} is in two shares", m.mutant.id));
            }
            merged.mutants.push(m);
        }
        merged.clean.extend(p.clean);
        merged.interrupted |= p.interrupted;
        if p.started_at < merged.started_at {
            merged.started_at = p.started_at;
        }
    }
    merged.partition = None;
    merged.mutants.sort_by(|a, b| {
        (&a.mutant.file, a.mutant.range.start).cmp(&(&b.mutant.file, b.mutant.range.start))
    });
    Ok(merged)
}

/// The cells in the order most likely to kill: most kills in `last`
/// first, then as given.
pub fn kill_order(cells: &[String], last: Option<&MutateReport>) -> Vec<String> {
    let kills = last.map(MutateReport::kills_by_cell).unwrap_or_default();
    let mut order: Vec<(usize, usize, String)> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                usize::MAX - kills.get(c).copied().unwrap_or(0),
                i,
                c.clone(),
            )
        })
        .collect();
    order.sort();
    order.into_iter().map(|(_, _, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::runner::CellOutcome;
    use crate::mutate::{Mutant, Operator};

    fn result(id: &str, status: Status) -> MutantResult {
        MutantResult {
            mutant: Mutant::new(
                "src/a.rs",
                "fn a() { 1 < 2 }",
                id,
                Operator::BinOp,
                11..12,
                format!("<= /* {id} */"),
            ),
            diff: "-x\n+y\n".into(),
            status,
            cells: Vec::<CellOutcome>::new(),
            build_ms: 1000,
            elapsed_ms: 4000,
        }
    }

    fn report(mutants: Vec<MutantResult>, min_score: Option<f64>) -> MutateReport {
        MutateReport {
            format_version: FORMAT_VERSION.into(),
            started_at: "2026-12-05T08:00:00Z".into(),
            seed: 1,
            scope: "all".into(),
            sample: None,
            partition: None,
            in_scope: Counts::default(),
            clean: Vec::new(),
            min_score,
            equivalent: BTreeMap::new(),
            mutants,
            interrupted: false,
        }
    }

    #[test]
    fn an_interrupted_run_says_so_and_is_inconclusive_whatever_its_score() {
        use crate::vocab::RunOutcome;
        let mut r = report(vec![result("a", Status::Survived)], None);
        assert_eq!(r.outcome(), RunOutcome::AllMet);
        r.interrupted = true;
        assert_eq!(r.outcome(), RunOutcome::Inconclusive);
        assert!(
            r.headline()
                .contains("1 mutants (interrupted: mutants not listed did not run)")
        );
        assert!(render_markdown(&r).contains("interrupted"));
        // Written and read back; a 1.0 report (no such key) reads as not interrupted.
        let json = serde_json::to_string(&r).unwrap();
        let back: MutateReport = serde_json::from_str(&json).unwrap();
        assert!(back.interrupted);
        let old = json.replace(",\"interrupted\":true", "");
        assert_ne!(old, json);
        let back: MutateReport = serde_json::from_str(&old).unwrap();
        assert!(!back.interrupted);
        // A merge of shares is interrupted when one is.
        let mut other = report(vec![result("b", Status::Survived)], None);
        other.started_at = r.started_at.clone();
        let merged = merge(vec![other, r]).unwrap();
        assert!(merged.interrupted);
    }

    #[test]
    fn survivors_explained_as_equivalent_leave_the_score_and_a_killed_one_is_called_wrong() {
        let killed = Status::Killed {
            cell: "fence".into(),
            rule: "lost: 1 job".into(),
        };
        let mut r = report(
            vec![
                result("a", killed.clone()),
                result("b", Status::Survived),
                result("c", Status::Survived),
                result("d", killed),
            ],
            Some(0.9),
        );
        assert_eq!(r.tally().score(), Some(0.5));
        let id = |i: usize| r.mutants[i].mutant.id.clone();
        r.equivalent = [(id(1), "folds more often, same rollups"), (id(3), "wrong")]
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect();
        let t = r.tally();
        assert_eq!((t.killed, t.survived, t.equivalent), (2, 2, 1));
        assert_eq!(t.score(), Some(2.0 / 3.0), "b is left out, c is not");
        assert!(
            r.headline()
                .contains("2 survived (1 explained as equivalent)")
        );
        let wrong: Vec<&str> = r
            .killed_equivalents()
            .iter()
            .map(|m| m.mutant.id.as_str())
            .collect();
        assert_eq!(wrong, [r.mutants[3].mutant.id.as_str()]);
        let md = render_markdown(&r);
        let survivors = md.find("## Survivors (1)").expect(&md);
        let explained = md
            .find("## Survivors explained as equivalent (1; left out of the score)")
            .expect(&md);
        assert!(md.contains("Why: folds more often, same rollups"));
        assert!(md.contains("## Listed as equivalent, but killed (1)"));
        assert!(survivors < explained, "unexplained survivors come first");
    }

    #[test]
    fn the_score_counts_killed_and_survived_only() {
        let killed = |c: &str| Status::Killed {
            cell: c.into(),
            rule: "lost: 1 job".into(),
        };
        let r = report(
            vec![
                result("a", killed("fence")),
                result("b", Status::Survived),
                result(
                    "c",
                    Status::Unviable {
                        error: "E0308".into(),
                    },
                ),
                result(
                    "d",
                    Status::Timeout {
                        cell: "fence".into(),
                        budget_s: 60,
                    },
                ),
                result("e", killed("roll")),
                result("f", killed("fence")),
            ],
            Some(0.8),
        );
        let t = r.tally();
        assert_eq!((t.killed, t.survived, t.unviable, t.timeout), (3, 1, 1, 1));
        assert_eq!(t.score(), Some(0.75));
        assert!(!r.met());
        assert!(report(r.mutants.clone(), Some(0.75)).met());
        assert!(report(r.mutants.clone(), None).met());
        assert!(
            !report(
                vec![result("u", Status::Unviable { error: "x".into() })],
                Some(0.1)
            )
            .met()
        );
        assert_eq!(
            kill_order(&["roll".into(), "smoke".into(), "fence".into()], Some(&r)),
            vec!["fence", "roll", "smoke"]
        );
        assert_eq!(
            kill_order(&["roll".into(), "fence".into()], None),
            vec!["roll", "fence"]
        );
        // Shares merge into one score; the same mutant twice, or shares of
        // another run, are refused.
        let (a, b) = (r.mutants[..3].to_vec(), r.mutants[3..].to_vec());
        let merged = merge(vec![
            report(b.clone(), Some(0.8)),
            report(a.clone(), Some(0.8)),
        ])
        .expect("merges");
        assert_eq!(merged.tally(), t);
        assert!(
            merge(vec![
                report(a.clone(), Some(0.8)),
                report(a.clone(), Some(0.8))
            ])
            .is_err()
        );
        let mut other = report(b, Some(0.8));
        other.seed = 2;
        assert!(merge(vec![report(a, Some(0.8)), other]).is_err());
        let md = render_markdown(&r);
        let survivors = md.find("## Survivors (1)").expect("survivors section");
        assert!(md.find("## Every mutant").expect("table") > survivors);
        assert!(
            md.contains("score 75.0% (min_score 80.0%: NOT met)"),
            "{md}"
        );
        assert!(md.contains("| unviable | does not build: E0308 |"), "{md}");
    }
}
