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
//! folder, in a folder named after the partial run. Its plan.json holds
//! the plan of every cell of the shares (whose plans must agree on the
//! seed and the artifacts' digests), so `rehearse replay MERGED/plan.json
//! --cell NAME` reruns any cell of the whole run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::partition::PartitionInfo;
use crate::plan::Plan;
use crate::planfile::{PLAN_FORMAT, PLAN_JSON, PinnedArtifact, PlanFile};
use crate::report::{self, CellReport, RunInfo, RunReport};

/// Why the partials do not make one run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MergeError(pub String);

/// A partial run as read: its folder, report and plan.
#[derive(Clone, Debug)]
pub struct Partial {
    /// The run folder.
    pub dir: PathBuf,
    /// Its report.json.
    pub report: RunReport,
    /// Its plan.json, when it has one (a merge refuses a share without).
    pub plan: Option<PlanFile>,
}

/// The merged run: what its report.json and plan.json hold.
#[derive(Clone, Debug)]
pub struct Merged {
    /// The report over the whole selection.
    pub report: RunReport,
    /// The plan of every cell of the shares, in selection order.
    pub plan: PlanFile,
}

/// Reads each folder's report.json, and its plan.json if it has one.
pub fn read(dirs: &[PathBuf]) -> Result<Vec<Partial>, MergeError> {
    dirs.iter()
        .map(|dir| {
            let report = report::read_json(&dir.join(report::REPORT_JSON)).map_err(|e| {
                MergeError(format!(
                    "{}; each DIR must be the report folder of a run with --partition",
                    awa_runtime::error::chain(&e)
                ))
            })?;
            let file = dir.join(PLAN_JSON);
            let plan = match file.is_file() {
                true => Some(
                    PlanFile::read(&file).map_err(|e| MergeError(awa_runtime::error::chain(&e)))?,
                ),
                false => None,
            };
            Ok(Partial {
                dir: dir.clone(),
                report,
                plan,
            })
        })
        .collect()
}

/// One merged run from `partials`, or why they are not one run.
/// `run_id` names the merged run (its folder's name).
pub fn merge(partials: &[Partial], run_id: &str) -> Result<Merged, MergeError> {
    let Some(first) = partials.first() else {
        return Err(MergeError(
            "nothing to merge: name the partial run folders".into(),
        ));
    };
    let infos = partitions(partials)?;
    let base = infos[0];
    for (p, info) in partials.iter().zip(&infos).skip(1) {
        same_run(first, p, base, info)?;
    }
    let shares = each_share_once(partials, &infos)?;
    each_cell_once(partials, base, &shares)?;
    let plans = plans(partials)?;
    let report = joined(partials, &base.cells, run_id);
    let plan = joined_plan(&plans, &report);
    Ok(Merged { report, plan })
}

/// Each partial's partition, or the first that is not a share.
fn partitions(partials: &[Partial]) -> Result<Vec<&PartitionInfo>, MergeError> {
    partials
        .iter()
        .map(|p| {
            p.report.run.header.partition.as_ref().ok_or_else(|| {
                MergeError(format!(
                    "{} is not a share of a partitioned run (its report.json has no partition); merge the folders of runs made with --partition STRATEGY:I/N",
                    name(p)
                ))
            })
        })
        .collect()
}

/// The folder a partial was read from, for messages.
fn name(p: &Partial) -> String {
    p.dir.display().to_string()
}

/// `first` and `p` are not shares of one run: they differ in `field`.
fn differs(first: &Partial, p: &Partial, field: &str, a: &str, b: &str) -> MergeError {
    MergeError(format!(
        "{} and {} ran different {field} ({a} and {b}): they are not shares of one run; rerun the shares from one commit, matrix and seed",
        name(first),
        name(p)
    ))
}

/// `p` (share `info`) ran what `first` (share `base`) ran: the same
/// commit, matrix file, seed, partition, selection and artifact builds.
fn same_run(
    first: &Partial,
    p: &Partial,
    base: &PartitionInfo,
    info: &PartitionInfo,
) -> Result<(), MergeError> {
    let (run, first_run) = (&p.report.run, &first.report.run);
    let differs = |field: &str, a: &str, b: &str| differs(first, p, field, a, b);
    if run.header.git_commit != first_run.header.git_commit
        || run.header.git_dirty != first_run.header.git_dirty
    {
        let show = |r: &RunInfo| {
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
    Ok(())
}

/// The partials by share index, or the first share named twice.
fn each_share_once<'p>(
    partials: &'p [Partial],
    infos: &[&PartitionInfo],
) -> Result<BTreeMap<u32, &'p Partial>, MergeError> {
    let mut shares: BTreeMap<u32, &Partial> = BTreeMap::new();
    for (p, info) in partials.iter().zip(infos) {
        if let Some(other) = shares.insert(info.index, p) {
            return Err(MergeError(format!(
                "{} and {} are both share {}: name each share's folder once",
                name(other),
                name(p),
                info.spec()
            )));
        }
    }
    Ok(shares)
}

/// Each cell of the selection `base` records is in exactly one partial,
/// and no partial holds anything else.
fn each_cell_once(
    partials: &[Partial],
    base: &PartitionInfo,
    shares: &BTreeMap<u32, &Partial>,
) -> Result<(), MergeError> {
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
    if missing.is_empty() {
        return Ok(());
    }
    let absent: Vec<String> = (1..=base.count)
        .filter(|i| !shares.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    Err(MergeError(format!(
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
    )))
}

/// Each partial's plan.json: there, holding the cells and the artifact
/// digests its report holds, and agreeing with the others on the seed and
/// the artifacts' digests.
fn plans(partials: &[Partial]) -> Result<Vec<&PlanFile>, MergeError> {
    let mut plans = Vec::new();
    for p in partials {
        let Some(plan) = &p.plan else {
            return Err(MergeError(format!(
                "{} has no {PLAN_JSON}: every run writes one, and the merged folder needs each share's to be replayable; merge the folders the shares wrote",
                name(p)
            )));
        };
        let problems = crate::evidence::against_plan(&p.report, plan);
        if !problems.is_empty() {
            return Err(MergeError(format!(
                "{}: report.json and {PLAN_JSON} are not of one run ({}); merge the folders as the shares wrote them",
                name(p),
                problems.join("; ")
            )));
        }
        plans.push(plan);
    }
    // Each artifact's digest as the first plan naming it pinned it (a
    // share with no cells may pin none).
    let mut pinned: BTreeMap<&str, (&str, &Partial)> = BTreeMap::new();
    for (p, plan) in partials.iter().zip(&plans) {
        if plan.plan.seed != plans[0].plan.seed {
            return Err(differs(
                &partials[0],
                p,
                &format!("seeds in their {PLAN_JSON}"),
                &plans[0].plan.seed.to_string(),
                &plan.plan.seed.to_string(),
            ));
        }
        for a in &plan.artifacts {
            match pinned.get(a.name.as_str()) {
                Some(&(digest, other)) if digest != a.digest => {
                    return Err(differs(
                        other,
                        p,
                        &format!("builds of artifact {} in their {PLAN_JSON}", a.name),
                        &format!("sha256 {digest}"),
                        &format!("sha256 {}", a.digest),
                    ));
                }
                Some(_) => {}
                None => {
                    pinned.insert(&a.name, (&a.digest, p));
                }
            }
        }
    }
    Ok(plans)
}

/// The merged plan: every share's cells in the merged report's order, the
/// artifacts of them all, replayed by the merged run's replay line.
fn joined_plan(plans: &[&PlanFile], report: &RunReport) -> PlanFile {
    let first = &plans[0].plan;
    let cells = report
        .cells
        .iter()
        .filter_map(|c| {
            plans
                .iter()
                .flat_map(|p| &p.plan.cells)
                .find(|planned| planned.name == c.name)
                .cloned()
        })
        .collect();
    let mut artifacts: Vec<PinnedArtifact> = Vec::new();
    for a in plans.iter().flat_map(|p| &p.artifacts) {
        if !artifacts.iter().any(|b| b.name == a.name) {
            artifacts.push(a.clone());
        }
    }
    PlanFile {
        plan_format: PLAN_FORMAT.to_owned(),
        plan: Plan {
            seed: first.seed,
            selection: first.selection.clone(),
            replay: report.run.header.replay.clone(),
            cells,
            matrix_checksum: first.matrix_checksum.clone(),
            partition: None,
            schedule: first.schedule,
            checklist: first.checklist.clone(),
        },
        artifacts,
    }
}

/// The merged report: cells in selection order, the run's record joined.
fn joined(partials: &[Partial], order: &[String], run_id: &str) -> RunReport {
    let cells: Vec<CellReport> = order
        .iter()
        .filter_map(|id| {
            partials
                .iter()
                .flat_map(|p| &p.report.cells)
                .find(|c| &c.name == id)
                .cloned()
        })
        .collect();
    let first = &partials[0].report;
    let mut artifacts = first.artifacts.clone();
    for a in partials[1..].iter().flat_map(|p| &p.report.artifacts) {
        if !artifacts.iter().any(|b| b.name == a.name) {
            artifacts.push(a.clone());
        }
    }
    RunReport {
        format_version: report::FORMAT_VERSION.to_owned(),
        run: joined_run(partials, run_id, &cells),
        artifacts,
        cells,
        selftest: None,
    }
}

/// The first share's run record, as the whole run's: named `run_id`, its
/// times and CPU the shares' together, on every share's servers, replayed
/// without `--partition`, merged from every share.
fn joined_run(partials: &[Partial], run_id: &str, cells: &[CellReport]) -> RunInfo {
    let first = &partials[0].report.run;
    let mut run = first.clone();
    run.header.run_id = run_id.to_owned();
    add_times(&mut run, partials);
    run.start_to_ready = report::model::ReadyTimes::of(cells);
    // No one machine's cores: the floor of a single run does not apply.
    run.header.cores = 0;
    run.header.jobs = 0;
    run.header.schedule = format!(
        "merged from {} of {}",
        report::text::plural(partials.len(), "share"),
        first.header.partition.as_ref().map_or(0, |p| p.count)
    );
    for s in partials[1..]
        .iter()
        .flat_map(|p| &p.report.run.header.servers)
    {
        if !run.header.servers.iter().any(|t| t.major == s.major) {
            run.header.servers.push(s.clone());
        }
    }
    run.header.replay = match run.header.replay.find(" --partition ") {
        Some(at) => run.header.replay[..at].to_owned(),
        None => run.header.replay,
    };
    run.header.command_line = crate::plan::command_line();
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
    run
}

/// The shares' start, end, wall time and CPU as one run's.
fn add_times(run: &mut RunInfo, partials: &[Partial]) {
    let runs = || partials.iter().map(|p| &p.report.run);
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
    // The longest share's cells' window is the merged run's.
    let window = runs().map(|r| r.end.window_ms()).max().unwrap_or(0);
    run.end.prepare_ms = run.end.wall_ms - window.min(run.end.wall_ms);
    run.end.harness_cpu_ms = runs().map(|r| r.end.harness_cpu_ms).sum();
    run.end.children_cpu_ms = runs().map(|r| r.end.children_cpu_ms).sum();
    run.end.container_cpu_ms = runs()
        .filter_map(|r| r.end.container_cpu_ms)
        .reduce(|a, b| a + b);
    run.end.engine_cpu_ms = runs()
        .filter_map(|r| r.end.engine_cpu_ms)
        .reduce(|a, b| a + b);
    run.end.interrupted = runs().any(|r| r.end.interrupted);
}

/// Copies each partial's `logs/` to `out/logs/<partial run id>/`, its
/// `events.jsonl` to `out/events/<partial run id>.jsonl`, and its cells'
/// terminal histories to `out/history/` (each cell is in one share only,
/// so they sit side by side as in one run, for `rehearse verify`).
pub fn copy_files(partials: &[Partial], out: &Path) -> std::io::Result<()> {
    for p in partials {
        let histories = p.dir.join(crate::reconcile::history::HISTORY_DIR);
        if histories.is_dir() {
            copy_tree(
                &histories,
                &out.join(crate::reconcile::history::HISTORY_DIR),
            )?;
        }
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
