//! `rehearse merge DIR... [--out DIR]`: the report folders of the shares
//! of one partitioned run (`--partition STRATEGY:I/N`) joined into one run
//! folder whose verdict covers the whole selection.
//!
//! The partials must be shares of the same run: the same commit, the same
//! artifact digests, the same matrix file (checksum), the same seed and
//! the same partition strategy and count; together they must hold every
//! cell of the selection exactly once. Anything else is refused before a
//! file is written, naming the folders and the cell or field. The merged
//! report.json lists the partial runs in `run.merged_from`; report.md,
//! junit.xml and report.html are rendered from it by the usual reporters,
//! and each partial's logs (and events.jsonl) are copied under the merged
//! folder, in a folder named after the partial run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::report::{self, RunReport};

/// Why the partials do not make one run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MergeError(pub String);

/// A partial run as read: its folder and report.
#[derive(Clone, Debug)]
pub struct Partial {
    /// The run folder.
    pub dir: PathBuf,
    /// Its report.json.
    pub report: RunReport,
}

/// Reads each folder's report.json.
pub fn read(dirs: &[PathBuf]) -> Result<Vec<Partial>, MergeError> {
    dirs.iter()
        .map(|dir| {
            let report = report::read_json(&dir.join(report::REPORT_JSON)).map_err(|e| {
                MergeError(format!(
                    "{}; each DIR must be the report folder of a run with --partition",
                    awa_runtime::error::chain(&e)
                ))
            })?;
            Ok(Partial {
                dir: dir.clone(),
                report,
            })
        })
        .collect()
}

/// One merged report from `partials`, or why they are not one run.
/// `run_id` names the merged run (its folder's name).
pub fn merge(partials: &[Partial], run_id: &str) -> Result<RunReport, MergeError> {
    let Some(first) = partials.first() else {
        return Err(MergeError(
            "nothing to merge: name the partial run folders".into(),
        ));
    };
    let name = |p: &Partial| p.dir.display().to_string();
    let mut infos = Vec::new();
    for p in partials {
        let Some(info) = &p.report.run.header.partition else {
            return Err(MergeError(format!(
                "{} is not a share of a partitioned run (its report.json has no partition); merge the folders of runs made with --partition STRATEGY:I/N",
                name(p)
            )));
        };
        infos.push(info);
    }
    let base = infos[0];
    for (p, info) in partials.iter().zip(&infos).skip(1) {
        let run = &p.report.run;
        let first_run = &first.report.run;
        let differs = |field: &str, a: &str, b: &str| {
            MergeError(format!(
                "{} and {} ran different {field} ({a} and {b}): they are not shares of one run; rerun the shares from one commit, matrix and seed",
                name(first),
                name(p)
            ))
        };
        if run.header.git_commit != first_run.header.git_commit
            || run.header.git_dirty != first_run.header.git_dirty
        {
            let show = |r: &report::RunInfo| {
                format!(
                    "{}{}",
                    r.header.git_commit,
                    if r.header.git_dirty { " dirty" } else { "" }
                )
            };
            return Err(differs("git commits", &show(first_run), &show(run)));
        }
        if run.header.matrix_checksum != first_run.header.matrix_checksum {
            return Err(differs(
                "matrix files (matrix_checksum)",
                &first_run.header.matrix_checksum,
                &run.header.matrix_checksum,
            ));
        }
        if run.header.seed != first_run.header.seed {
            return Err(differs(
                "seeds",
                &first_run.header.seed.to_string(),
                &run.header.seed.to_string(),
            ));
        }
        if info.strategy != base.strategy || info.count != base.count {
            return Err(differs("partitions", &base.spec(), &info.spec()));
        }
        if info.cells != base.cells {
            return Err(differs(
                "selections (partition.cells)",
                &base.cells.join(", "),
                &info.cells.join(", "),
            ));
        }
        for a in &p.report.artifacts {
            if let Some(b) = first.report.artifacts.iter().find(|b| b.name == a.name)
                && a.digest != b.digest
            {
                return Err(differs(
                    &format!("builds of artifact {}", a.name),
                    &format!("sha256 {}", b.digest),
                    &format!("sha256 {}", a.digest),
                ));
            }
        }
    }
    // Each share once.
    let mut shares: BTreeMap<u32, &Partial> = BTreeMap::new();
    for (p, info) in partials.iter().zip(&infos) {
        if let Some(other) = shares.insert(info.index, p) {
            return Err(MergeError(format!(
                "{} and {} are both share {}: name each share's folder once",
                name(other),
                name(p),
                info.spec()
            )));
        }
    }
    // Each cell of the selection exactly once, and nothing else.
    let mut found: BTreeMap<&str, &Partial> = BTreeMap::new();
    for p in partials {
        for cell in &p.report.cells {
            if !base.cells.contains(&cell.name) {
                return Err(MergeError(format!(
                    "{} holds cell {}, which is not in the selection its partition records ({})",
                    name(p),
                    cell.name,
                    base.cells.join(", ")
                )));
            }
            if let Some(other) = found.insert(&cell.name, p) {
                return Err(MergeError(format!(
                    "cell {} is present twice, in {} and in {}: merge each share once",
                    cell.name,
                    name(other),
                    name(p)
                )));
            }
        }
    }
    let missing: Vec<&str> = base
        .cells
        .iter()
        .map(String::as_str)
        .filter(|c| !found.contains_key(c))
        .collect();
    if !missing.is_empty() {
        let absent: Vec<String> = (1..=base.count)
            .filter(|i| !shares.contains_key(i))
            .map(|i| i.to_string())
            .collect();
        return Err(MergeError(format!(
            "missing {} of the selection: {} (merged: {}{}); add the folders of every share",
            report::text::plural(missing.len(), "cell"),
            missing.join(", "),
            partials.iter().map(name).collect::<Vec<_>>().join(", "),
            if absent.is_empty() {
                String::new()
            } else {
                format!(
                    "; no folder of share {} of {}",
                    absent.join(", "),
                    base.count
                )
            }
        )));
    }
    Ok(joined(partials, base.cells.as_slice(), run_id))
}

/// The merged report: cells in selection order, the run's record joined.
fn joined(partials: &[Partial], order: &[String], run_id: &str) -> RunReport {
    let first = &partials[0].report;
    let mut cells = Vec::new();
    for id in order {
        if let Some(cell) = partials
            .iter()
            .flat_map(|p| &p.report.cells)
            .find(|c| &c.name == id)
        {
            cells.push(cell.clone());
        }
    }
    let mut artifacts = first.artifacts.clone();
    let mut servers = first.run.header.servers.clone();
    for p in &partials[1..] {
        for a in &p.report.artifacts {
            if !artifacts.iter().any(|b| b.name == a.name) {
                artifacts.push(a.clone());
            }
        }
        for s in &p.report.run.header.servers {
            if !servers.iter().any(|t| t.major == s.major) {
                servers.push(s.clone());
            }
        }
    }
    let runs = || partials.iter().map(|p| &p.report.run);
    let mut run = first.run.clone();
    run.header.run_id = run_id.to_owned();
    run.header.started_at = runs()
        .map(|r| r.header.started_at.clone())
        .min()
        .unwrap_or_default();
    run.end.finished_at = runs()
        .map(|r| r.end.finished_at.clone())
        .max()
        .unwrap_or_default();
    // The shares ran side by side on their own machines: the longest one is the wall time.
    run.end.wall_ms = runs().map(|r| r.end.wall_ms).max().unwrap_or(0);
    run.end.harness_cpu_ms = runs().map(|r| r.end.harness_cpu_ms).sum();
    run.end.children_cpu_ms = runs().map(|r| r.end.children_cpu_ms).sum();
    run.end.container_cpu_ms = runs()
        .filter_map(|r| r.end.container_cpu_ms)
        .reduce(|a, b| a + b);
    run.end.interrupted = runs().any(|r| r.end.interrupted);
    run.start_to_ready = report::model::ReadyTimes::of(&cells);
    // No one machine's cores: the floor of a single run does not apply.
    run.header.cores = 0;
    run.header.jobs = 0;
    run.header.schedule = format!(
        "merged from {} of {}",
        report::text::plural(partials.len(), "share"),
        first.run.header.partition.as_ref().map_or(0, |p| p.count)
    );
    run.header.servers = servers;
    run.header.replay = match run.header.replay.find(" --partition ") {
        Some(at) => run.header.replay[..at].to_owned(),
        None => run.header.replay,
    };
    run.header.command_line = std::env::args()
        .map(|a| crate::plan::shell_quote(&awa_runtime::redact::redact(&a)))
        .collect::<Vec<_>>()
        .join(" ");
    run.header.partition = None;
    let mut from: Vec<(u32, String)> = partials
        .iter()
        .map(|p| {
            (
                p.report
                    .run
                    .header
                    .partition
                    .as_ref()
                    .map_or(0, |i| i.index),
                p.report.run.header.run_id.clone(),
            )
        })
        .collect();
    from.sort();
    run.merged_from = from.into_iter().map(|(_, id)| id).collect();
    RunReport {
        format_version: report::FORMAT_VERSION.to_owned(),
        run,
        artifacts,
        cells,
        selftest: None,
    }
}

/// Copies each partial's `logs/` to `out/logs/<partial run id>/` and its
/// `events.jsonl` to `out/events/<partial run id>.jsonl`.
pub fn copy_files(partials: &[Partial], out: &Path) -> std::io::Result<()> {
    for p in partials {
        let id = &p.report.run.header.run_id;
        let logs = p.dir.join("logs");
        if logs.is_dir() {
            copy_tree(&logs, &out.join("logs").join(id))?;
        }
        let events = p.dir.join(report::EVENTS_JSONL);
        if events.is_file() {
            std::fs::create_dir_all(out.join("events"))?;
            std::fs::copy(&events, out.join("events").join(format!("{id}.jsonl")))?;
        }
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
