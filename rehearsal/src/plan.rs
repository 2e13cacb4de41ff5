//! Plan: a validated matrix, a selection and a seed become concrete cell plans.
//!
//! The second pipeline stage, and the last one that runs nothing. Every
//! random choice a cell makes (which worker a kill hits, how long after
//! its trigger it fires) is drawn here, from a splitmix64 stream seeded
//! with the (mixed) run seed and an FNV-1a hash of the cell's name: the same seed
//! gives the same plan on every machine and in every Rust release, and
//! adding a cell does not change another cell's choices. The plan is
//! what `rehearse plan` prints, what the driver executes, and what
//! report.json records, so a failing run can be replayed exactly.
//!
//! A command asks once, with a [`Request`] (selection, seed, majors,
//! share, matrix file), and gets the finished plan: cells copied per
//! PostgreSQL major ([`majors`]), cut to a `--partition` share
//! ([`share`]), with the matrix file's checksum and the replay line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::matrix::{
    Artifact, CURRENT, Cell, Check, Duration, Expectation, IntendedDifference, KillTarget, Matrix,
    PREVIOUS, Roster, Signal, Step, SuspendAt, Timings, UpgradePath, When, Workload,
};

pub mod majors;
mod request;
pub mod share;

pub use majors::{Choice, cell_id};
pub use request::{Durations, PlanError, ReplayAs, Request};
pub use share::Partition;

/// Largest random delay, in milliseconds, added to a kill that does not wait for started jobs.
pub const MAX_JITTER_MS: u64 = 500;

/// Which cells to plan: a named matrix, explicit cells, or both (cells within the matrix).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// A name from `[matrix]`, such as `smoke`.
    pub matrix: Option<String>,
    /// `--cell` names; restrict the selection to these.
    pub cells: Vec<String>,
}

/// A selection that names something the matrix does not have.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// `--matrix NAME` names no `[matrix]` entry.
    #[error("unknown matrix \"{name}\"{hint}; named matrices: {known}")]
    UnknownMatrix {
        /// The name given.
        name: String,
        /// A " (did you mean ...)" hint or nothing.
        hint: String,
        /// Valid names, comma separated.
        known: String,
    },
    /// `--cell NAME` names no cell.
    #[error("unknown cell \"{name}\"{hint}; cells: {known}")]
    UnknownCell {
        /// The name given.
        name: String,
        /// A " (did you mean ...)" hint or nothing.
        hint: String,
        /// Valid names, comma separated.
        known: String,
    },
    /// `--cell NAME` names a cell outside the chosen matrix.
    #[error("cell \"{name}\" is not in matrix \"{matrix}\", which has: {known}")]
    NotInMatrix {
        /// The cell.
        name: String,
        /// The matrix.
        matrix: String,
        /// The matrix's cells, comma separated.
        known: String,
    },
    /// Neither `--matrix` nor `--cell` was given.
    #[error("nothing selected: pass --matrix NAME (one of: {matrices}) or --cell NAME")]
    Nothing {
        /// Named matrices, comma separated.
        matrices: String,
    },
}

/// The cells a selection picks, in matrix order (or file order for `--cell` alone).
pub fn select<'m>(matrix: &'m Matrix, selection: &Selection) -> Result<Vec<&'m Cell>, SelectError> {
    let all = matrix.cell_names();
    for name in &selection.cells {
        if matrix.cell(name).is_none() {
            return Err(SelectError::UnknownCell {
                name: name.clone(),
                hint: hint(name, all.iter().copied()),
                known: all.join(", "),
            });
        }
    }
    let names: Vec<&str> = match &selection.matrix {
        Some(name) => {
            let Some(named) = matrix.matrices.get(name) else {
                return Err(SelectError::UnknownMatrix {
                    name: name.clone(),
                    hint: hint(name, matrix.matrices.keys().map(String::as_str)),
                    known: known_matrices(matrix),
                });
            };
            if let Some(outside) = selection.cells.iter().find(|c| !named.cells.contains(c)) {
                return Err(SelectError::NotInMatrix {
                    name: outside.clone(),
                    matrix: name.clone(),
                    known: named.cells.join(", "),
                });
            }
            named
                .cells
                .iter()
                .filter(|c| selection.cells.is_empty() || selection.cells.contains(c))
                .map(String::as_str)
                .collect()
        }
        None if selection.cells.is_empty() => {
            return Err(SelectError::Nothing {
                matrices: known_matrices(matrix),
            });
        }
        None => all
            .into_iter()
            .filter(|c| selection.cells.iter().any(|s| s == c))
            .collect(),
    };
    Ok(names.into_iter().filter_map(|n| matrix.cell(n)).collect())
}

fn known_matrices(matrix: &Matrix) -> String {
    if matrix.matrices.is_empty() {
        "none (add a [matrix] table)".to_owned()
    } else {
        matrix
            .matrices
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn hint<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> String {
    crate::matrix::did_you_mean(word, candidates)
}

/// A whole run's plan: the seed, what was selected, and every cell's concrete steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The run seed every random choice derives from.
    pub seed: u64,
    /// What was selected.
    pub selection: Selection,
    /// The command line that replays exactly this plan.
    pub replay: String,
    /// One plan per selected cell, in run order.
    pub cells: Vec<CellPlan>,
    /// sha256 (hex) of the matrix file's bytes the plan was expanded from
    /// (empty when planned from text). Added in report format 1.10.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub matrix_checksum: String,
    /// `--partition`: which share of the selection this plan is. Added in 1.10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<crate::vocab::partition::PartitionInfo>,
    /// matrix.toml's `[schedule]`: what `--jobs auto` packs by when no
    /// report covers these cells, kept with the plan so a replay packs
    /// as its run did (plan.json 1.1; the default before).
    #[serde(default)]
    pub schedule: crate::matrix::ScheduleEstimate,
    /// matrix.toml's `[[checklist]]` (ADR-041 §9 and the cells covering
    /// each item), whole: the report says which items this run's cells
    /// covered (plan.json 1.2; none before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checklist: Vec<crate::matrix::ChecklistItem>,
}

/// One cell, ready for the driver: nothing left to choose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellPlan {
    /// The cell's name.
    pub name: String,
    /// Its one-line description.
    pub about: String,
    /// The verdict it must reach.
    pub expect: Expectation,
    /// How its database starts.
    pub database: DatabaseSetup,
    /// Every artifact the cell uses, by name.
    pub artifacts: BTreeMap<String, Artifact>,
    /// The job load.
    pub workload: Workload,
    /// Runtime timings.
    pub timings: Timings,
    /// Steps with every random choice resolved.
    pub steps: Vec<PlannedStep>,
    /// The releases the cell walks, when it declares a path. Added in 1.6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<UpgradePath>,
    /// The schema differences `schema_matches_fresh` accepts (the
    /// matrix's `[schema]`), for a cell that asserts it. Added in 1.6.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_intended: Vec<IntendedDifference>,
    /// The PostgreSQL major it runs on (`--postgres`, `[postgres]
    /// servers`); `None`: the run's one server, whichever was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<crate::vocab::major::Major>,
    /// The interleavings the cell must reach (matrix.toml's `reach`).
    /// Added in report format 1.14.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<crate::matrix::Reach>,
}

/// How a cell's database is prepared before step 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseSetup {
    /// An empty database on the current schema (ledger authority from the start).
    pub fresh_install: bool,
    /// The artifact whose `awa migrate` prepares it.
    pub migrated_by: String,
}

/// A step of a cell plan: as in the matrix, except that kills and
/// suspensions are resolved.
pub type PlannedStep = Step<PlannedKill, PlannedSuspend>;

/// The artifacts `step` names (its own, `of`, `by`): each must be one
/// the cell declares, which `plan.json`'s checks hold a replay to.
pub fn artifacts_named(step: &PlannedStep) -> Vec<&str> {
    match step {
        Step::Fleet(s) => vec![s.artifact.as_str()],
        Step::Migrate(s) => vec![s.artifact.as_str()],
        Step::Roll(s) => vec![s.artifact.as_str()],
        Step::Rollback(s) => vec![s.artifact.as_str()],
        Step::Fence(s) => vec![s.artifact.as_str()],
        Step::Cancel(s) => vec![s.artifact.as_str()],
        Step::Flip(s) => vec![s.by.as_str()],
        Step::Kill(s) => s.of.as_deref().into_iter().collect(),
        Step::Suspend(s) => s.of.as_deref().into_iter().collect(),
        Step::Resume(s) => s.of.as_deref().into_iter().collect(),
        Step::Load(_) | Step::PgCrash(_) | Step::Hold(_) | Step::Drain(_) | Step::Assert(_) => {
            Vec::new()
        }
    }
}

/// A suspension with its random choice made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSuspend {
    /// Which kind of process.
    pub target: KillTarget,
    /// Only processes of this artifact are candidates.
    pub of: Option<String>,
    /// How long it stays stopped; `None`: until a `resume` step.
    pub duration: Option<Duration>,
    /// Where in its work it is caught.
    pub at: SuspendAt,
    /// Which worker or producer; `None` for the leader (whoever holds it then).
    pub pick: Option<Pick>,
}

/// A kill with its random choices made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedKill {
    /// Which kind of process.
    pub target: KillTarget,
    /// Only processes of this artifact are candidates.
    pub of: Option<String>,
    /// When it fires.
    pub when: When,
    /// Signal sent.
    pub signal: Signal,
    /// Fire once the victim has started this many jobs (0: do not wait), as written.
    pub after_started: u64,
    /// Delay after the trigger, drawn from 0-500 ms when `after_started` is 0.
    pub jitter: Option<Duration>,
    /// Which worker or producer; `None` for the leader (whoever holds it then).
    pub pick: Option<Pick>,
}

/// The `nth` (1-based) of `among` candidate processes, in start order.
///
/// If the driver finds a different number of candidates alive, it takes
/// `nth` modulo that number, so a replay never fails to find a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pick {
    /// 1-based position in start order.
    pub nth: u32,
    /// How many candidates the plan expects.
    pub among: u32,
}

/// Expands the selected cells of `matrix` with `seed`: the selection
/// alone, on no major in particular, whole, with no checksum and a replay
/// line of the selection. A command's plan comes from a [`Request`].
pub fn expand(matrix: &Matrix, selection: &Selection, seed: u64) -> Result<Plan, SelectError> {
    Ok(Plan {
        seed,
        selection: selection.clone(),
        replay: replay_command(selection, seed, None),
        cells: plan_cells(matrix, selection, seed)?,
        matrix_checksum: String::new(),
        partition: None,
        schedule: matrix.schedule,
        checklist: matrix.checklist.clone(),
    })
}

/// The plan of each selected cell, drawn with `seed`, in run order.
fn plan_cells(
    matrix: &Matrix,
    selection: &Selection,
    seed: u64,
) -> Result<Vec<CellPlan>, SelectError> {
    Ok(select(matrix, selection)?
        .into_iter()
        .map(|cell| plan_cell(matrix, cell, seed))
        .collect())
}

/// The plan of another try of `previous` (a cell of `matrix`, or of one
/// of its `NAME@pgN` copies) drawn with `seed`: every random choice
/// drawn again, its name and server kept. `None` when the matrix has no
/// such cell.
pub fn replan(matrix: &Matrix, previous: &CellPlan, seed: u64) -> Option<CellPlan> {
    let cell = matrix.cells.iter().find(|c| {
        c.name == previous.name
            || previous
                .name
                .strip_prefix(c.name.as_str())
                .is_some_and(|rest| rest.starts_with('@'))
    })?;
    let mut plan = plan_cell(matrix, cell, seed);
    plan.name.clone_from(&previous.name);
    plan.server = previous.server;
    Some(plan)
}

/// The seed of try `attempt` (2 on) of a run seeded `seed`: far from the
/// run's seed and from every other try's, and the same for the same two.
pub fn retry_seed(seed: u64, attempt: u32) -> u64 {
    let mut rng = SplitMix64::new(seed ^ u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    rng.next_u64()
}

fn plan_cell(matrix: &Matrix, cell: &Cell, seed: u64) -> CellPlan {
    let mut rng = SplitMix64::for_cell(seed, &cell.name);
    let model = Roster::walk(cell.fresh_install, &cell.steps);
    let steps = cell
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let among = model
                .kills
                .iter()
                .chain(&model.suspends)
                .find(|k| k.step == i + 1)
                .and_then(|k| k.among);
            resolve(step, among, &mut rng)
        })
        .collect();
    let migrated_by = match &cell.path {
        Some(path) => path.start(),
        None if cell.fresh_install => CURRENT,
        None => PREVIOUS,
    }
    .to_owned();
    let compares_schema = cell
        .steps
        .iter()
        .any(|s| matches!(s, Step::Assert(a) if a.check == Check::SchemaMatchesFresh));
    let mut used: Vec<&str> = vec![migrated_by.as_str()];
    if compares_schema {
        used.push(CURRENT);
    }
    for step in &cell.steps {
        used.extend(artifacts_of(step));
    }
    let artifacts = used
        .into_iter()
        .filter_map(|name| {
            matrix
                .artifacts
                .get(name)
                .map(|a| (name.to_owned(), a.clone()))
        })
        .collect();
    CellPlan {
        name: cell.name.clone(),
        about: cell.about.clone(),
        expect: cell.expect,
        database: DatabaseSetup {
            fresh_install: cell.fresh_install,
            migrated_by,
        },
        artifacts,
        workload: matrix.workload.with(&cell.workload),
        timings: Timings {
            budget: cell.budget.unwrap_or(matrix.timings.budget),
            ..matrix.timings
        },
        steps,
        path: cell.path.clone(),
        schema_intended: if compares_schema {
            matrix.schema.intended.clone()
        } else {
            Vec::new()
        },
        server: None,
        reach: cell.reach.clone(),
    }
}

/// Artifacts a step names.
fn artifacts_of(step: &Step) -> Vec<&str> {
    match step {
        Step::Fleet(s) => vec![&s.artifact],
        Step::Migrate(s) => vec![&s.artifact],
        Step::Roll(s) => vec![&s.artifact],
        Step::Rollback(s) => vec![&s.artifact],
        Step::Kill(k) => k.of.iter().map(String::as_str).collect(),
        Step::Suspend(k) => k.of.iter().map(String::as_str).collect(),
        Step::Resume(k) => k.of.iter().map(String::as_str).collect(),
        Step::Flip(s) => vec![&s.by],
        Step::Fence(s) => vec![&s.artifact],
        Step::Cancel(s) => vec![&s.artifact],
        Step::Assert(s) => match &s.check {
            Check::LeaderIs(a) => vec![a],
            _ => vec![],
        },
        Step::Load(_) | Step::PgCrash(_) | Step::Hold(_) | Step::Drain(_) => vec![],
    }
}

/// The plan's pick among `among` candidates of a worker or producer target.
fn pick_for(target: KillTarget, among: Option<u32>, rng: &mut SplitMix64) -> Option<Pick> {
    match target {
        KillTarget::Leader => None,
        KillTarget::Worker | KillTarget::Producer => {
            let among = among.unwrap_or(1).max(1);
            let nth = rng.below(u64::from(among)) as u32 + 1;
            Some(Pick { nth, among })
        }
    }
}

/// Makes a step's random choices; only kills and suspensions have any.
fn resolve(step: &Step, among: Option<u32>, rng: &mut SplitMix64) -> PlannedStep {
    match step {
        Step::Suspend(s) => Step::Suspend(PlannedSuspend {
            target: s.target,
            of: s.of.clone(),
            duration: s.duration,
            at: s.at,
            pick: pick_for(s.target, among, rng),
        }),
        Step::Resume(s) => Step::Resume(s.clone()),
        Step::Kill(k) => {
            let pick = pick_for(k.target, among, rng);
            let jitter =
                (k.after_started == 0).then(|| Duration::from_millis(rng.below(MAX_JITTER_MS + 1)));
            Step::Kill(PlannedKill {
                target: k.target,
                of: k.of.clone(),
                when: k.when,
                signal: k.signal,
                after_started: k.after_started,
                jitter,
                pick,
            })
        }
        Step::Fleet(s) => Step::Fleet(s.clone()),
        Step::Load(s) => Step::Load(*s),
        Step::Migrate(s) => Step::Migrate(s.clone()),
        Step::Roll(s) => Step::Roll(s.clone()),
        Step::Rollback(s) => Step::Rollback(s.clone()),
        Step::PgCrash(s) => Step::PgCrash(*s),
        Step::Flip(s) => Step::Flip(s.clone()),
        Step::Fence(s) => Step::Fence(s.clone()),
        Step::Hold(s) => Step::Hold(*s),
        Step::Drain(s) => Step::Drain(*s),
        Step::Assert(s) => Step::Assert(s.clone()),
        Step::Cancel(s) => Step::Cancel(s.clone()),
    }
}

impl fmt::Display for PlannedSuspend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.target {
            KillTarget::Producer => "producer",
            _ => "worker",
        };
        let whose = self.of.as_ref().map_or(String::new(), |a| format!("{a} "));
        match (self.target, self.pick) {
            (KillTarget::Leader, _) => {
                f.write_str("suspend the leader")?;
                if let Some(of) = &self.of {
                    write!(f, " (a {of} worker)")?;
                }
            }
            (_, Some(Pick { among: 1, .. })) => write!(f, "suspend the only {whose}{role}")?,
            (_, Some(Pick { nth, among })) => {
                write!(f, "suspend {role} #{nth} of the {among} {whose}{role}s")?
            }
            (_, None) => write!(f, "suspend a {whose}{role}")?,
        }
        if self.at != SuspendAt::Any {
            write!(f, ", caught {}", self.at.name())?;
        }
        match self.duration {
            Some(d) => write!(f, " for {d}"),
            None => f.write_str(" until resumed"),
        }
    }
}

impl fmt::Display for PlannedKill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.target {
            KillTarget::Producer => "producer",
            _ => "worker",
        };
        let whose = self.of.as_ref().map_or(String::new(), |a| format!("{a} "));
        match (self.target, self.pick) {
            (KillTarget::Leader, _) => {
                f.write_str("kill the leader")?;
                if let Some(of) = &self.of {
                    write!(f, " (a {of} worker)")?;
                }
            }
            (_, Some(Pick { among: 1, .. })) => write!(f, "kill the only {whose}{role}")?,
            (_, Some(Pick { nth, among })) => {
                write!(f, "kill {role} #{nth} of the {among} {whose}{role}s")?
            }
            (_, None) => write!(f, "kill a {whose}{role}")?,
        }
        let when = match self.when {
            When::Now => "now",
            When::DuringMigrate => "during the next migrate",
            When::DuringFlip => "during the next flip",
        };
        write!(f, ": {when}")?;
        if self.after_started > 0 {
            write!(f, ", once it has started {} jobs", self.after_started)?;
        }
        if let Some(jitter) = self.jitter {
            write!(f, ", after {jitter} jitter")?;
        }
        Ok(())
    }
}

/// The command that replays a plan; `matrix_file` is added when it was given explicitly.
pub fn replay_command(selection: &Selection, seed: u64, matrix_file: Option<&Path>) -> String {
    let mut words = vec!["rehearse".to_owned()];
    if let Some(path) = matrix_file {
        words.push("--matrix-file".to_owned());
        words.push(shell_quote(&path.display().to_string()));
    }
    if let Some(m) = &selection.matrix {
        words.push("--matrix".to_owned());
        words.push(shell_quote(m));
    }
    for c in &selection.cells {
        words.push("--cell".to_owned());
        words.push(shell_quote(c));
    }
    words.push("--seed".to_owned());
    words.push(seed.to_string());
    words.join(" ")
}

/// This process's command line as typed, each word quoted for a shell
/// (a word that is not UTF-8 shown with U+FFFD, never a panic), secrets
/// redacted: what a report records of how it was made.
pub(crate) fn command_line() -> String {
    std::env::args_os()
        .map(|a| shell_quote(&awa_runtime::redact::redact(&a.to_string_lossy())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quotes a word for a POSIX shell when it needs it: the one quoting of
/// the workspace (replay commands, the command line in report.json).
pub(crate) fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '=' | ',' | '@')
        });
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The plan for humans: seed and replay first, then each cell with numbered steps.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    let cells = plan.cells.len();
    out.push_str(&format!(
        "plan: {} {}, seed {}\n",
        cells,
        if cells == 1 { "cell" } else { "cells" },
        plan.seed
    ));
    out.push_str(&format!("replay: {}\n", plan.replay));
    if let Some(p) = &plan.partition {
        out.push_str(&format!(
            "partition {}: {} of the {} selected\n",
            p.spec(),
            cells,
            p.cells.len()
        ));
    }
    if let Some(first) = plan.cells.first()
        && plan
            .cells
            .iter()
            .all(|c| c.workload == first.workload && c.timings == first.timings)
    {
        out.push_str(&format!(
            "workload: {}\n",
            describe_workload(&first.workload)
        ));
        out.push_str(&format!("timings: {}\n", describe_timings(&first.timings)));
    }
    for cell in &plan.cells {
        out.push('\n');
        out.push_str(&format!("cell {}: {}\n", cell.name, cell.about));
        out.push_str(&format!("  expect: {}\n", cell.expect));
        let db = &cell.database;
        if let Some(path) = &cell.path {
            out.push_str(&format!("  path: {path}\n"));
            out.push_str(&format!(
                "  database: created by {}, the path's first release\n",
                db.migrated_by
            ));
        } else if db.fresh_install {
            out.push_str(&format!(
                "  database: fresh install, migrated by {}\n",
                db.migrated_by
            ));
        } else {
            out.push_str(&format!(
                "  database: N-1 schema, migrated by {}\n",
                db.migrated_by
            ));
        }
        let artifacts: Vec<String> = cell
            .artifacts
            .iter()
            .map(|(n, a)| format!("{n} = {a}"))
            .collect();
        out.push_str(&format!("  artifacts: {}\n", artifacts.join("; ")));
        let first = plan.cells.first();
        if first.is_some_and(|f| f.workload != cell.workload || f.timings != cell.timings) {
            out.push_str(&format!(
                "  workload: {}\n",
                describe_workload(&cell.workload)
            ));
            out.push_str(&format!("  timings: {}\n", describe_timings(&cell.timings)));
        }
        let width = cell.steps.len().to_string().len();
        for (i, step) in cell.steps.iter().enumerate() {
            out.push_str(&format!("  {:>width$}. {step}\n", i + 1));
        }
    }
    out
}

fn describe_workload(w: &Workload) -> String {
    let mix: Vec<String> = w
        .mix
        .iter()
        .map(|(mode, weight)| format!("{} {weight}", mode.name()))
        .collect();
    let mut text = format!(
        "{} jobs/s live, backlog {}, mix {}",
        w.rate_per_s,
        w.backlog,
        mix.join(", ")
    );
    if let Some(cron) = &w.cron {
        text.push_str(&format!(", cron every {}", cron.every));
    }
    if w.sleep != crate::matrix::DEFAULT_SLEEP {
        text.push_str(&format!(", sleep jobs {}", w.sleep));
    }
    text
}

fn describe_timings(t: &Timings) -> String {
    format!(
        "heartbeat {}, stale_after {}, rescue_every {}, rotate_every {}, deadline {}, drain_timeout {}, budget {}",
        t.heartbeat,
        t.stale_after,
        t.rescue_every,
        t.rotate_every,
        t.deadline,
        t.drain_timeout,
        t.budget
    )
}

/// A seed for runs that did not pass `--seed`: the clock mixed with the process id.
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    SplitMix64::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64()
}

/// FNV-1a, 64-bit: a fixed hash, identical on every machine (unlike std's `RandomState`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(PRIME))
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The stream of one cell: the run seed, mixed once so that small
    /// seeds (1, 2, 3) start far apart, combined with the cell name's hash.
    pub fn for_cell(seed: u64, cell: &str) -> Self {
        SplitMix64::new(SplitMix64::new(seed).next_u64() ^ fnv1a64(cell.as_bytes()))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), by multiply-high: no modulo bias worth the name.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::parse;

    const SHIPPED: &str = include_str!("../../matrix.toml");

    /// Artifacts, workload and timings for purpose-built test matrices.
    const BASE: &str = r#"
[artifacts.previous]
release = "0.6.2"
[artifacts.current]
build = "workspace"
[workload]
rate_per_s = 10
mix = { complete = 1 }
[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "60s"
"#;

    /// Cells built so that kills have many candidates: the seed must matter.
    const KILLS: &str = r#"
[[cell]]
name = "many-kills"
about = "eight workers, five kills"
steps = [
  { fleet = "previous", workers = 8, producers = 2 },
  { kill = "worker" },
  { kill = "worker", of = "previous" },
  { kill = "worker", after_started = 7 },
  { kill = "producer" },
  { kill = "leader" },
  { drain = "10s" },
]

[[cell]]
name = "same-steps-other-name"
about = "the same steps under another name"
steps = [
  { fleet = "previous", workers = 8, producers = 2 },
  { kill = "worker" },
  { kill = "worker", of = "previous" },
  { kill = "worker", after_started = 7 },
  { kill = "producer" },
  { kill = "leader" },
  { drain = "10s" },
]

[[cell]]
name = "quiet"
about = "no random choices"
steps = [{ fleet = "current", workers = 1 }, { hold = "1s" }]

[matrix]
smoke = ["quiet", "many-kills"]
full = ["*"]
"#;

    fn kills_matrix() -> Matrix {
        parse("test.toml", &format!("{KILLS}{BASE}")).unwrap_or_else(|d| panic!("{d}"))
    }

    fn shipped() -> Matrix {
        parse("matrix.toml", SHIPPED).unwrap_or_else(|d| panic!("{d}"))
    }

    fn by_matrix(name: &str) -> Selection {
        Selection {
            matrix: Some(name.to_owned()),
            cells: vec![],
        }
    }

    fn by_cells(cells: &[&str]) -> Selection {
        Selection {
            matrix: None,
            cells: cells.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    fn kills(cell: &CellPlan) -> Vec<&PlannedKill> {
        cell.steps
            .iter()
            .filter_map(|s| if let Step::Kill(k) = s { Some(k) } else { None })
            .collect()
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.cells.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [false; 5];
        for _ in 0..1_000 {
            let v = rng.below(5);
            assert!(v < 5);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(SplitMix64::new(1).below(1), 0);
    }

    #[test]
    fn a_retry_draws_its_choices_again_and_keeps_the_cells_name_and_server() {
        let matrix = kills_matrix();
        let first = &expand(&matrix, &by_cells(&["many-kills"]), 1)
            .unwrap()
            .cells[0];
        let mut copy = first.clone();
        copy.name = "many-kills@pg18".into();
        copy.server = Some(crate::servers::Major::parse("18").expect("a major"));
        let seeds: Vec<u64> = (2..6).map(|attempt| retry_seed(1, attempt)).collect();
        assert_eq!(seeds, (2..6).map(|a| retry_seed(1, a)).collect::<Vec<_>>());
        assert!(seeds.iter().all(|&s| s != 1) && seeds.windows(2).all(|w| w[0] != w[1]));
        let again: Vec<CellPlan> = seeds
            .iter()
            .map(|&seed| replan(&matrix, &copy, seed).expect("the cell is in the matrix"))
            .collect();
        assert!(
            again
                .iter()
                .all(|p| p.name == "many-kills@pg18" && p.server == copy.server)
        );
        // Some try picks another victim than the first.
        assert!(again.iter().any(|p| p.steps != first.steps), "{again:#?}");
        let mut stranger = first.clone();
        stranger.name = "not-in-the-matrix".into();
        assert_eq!(replan(&matrix, &stranger, 7), None);
    }

    #[test]
    fn same_seed_gives_an_identical_plan() {
        let matrix = shipped();
        let a = expand(&matrix, &by_matrix("full"), 1234).unwrap();
        let b = expand(&matrix, &by_matrix("full"), 1234).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let c = expand(&kills_matrix(), &by_matrix("full"), 99).unwrap();
        let d = expand(&kills_matrix(), &by_matrix("full"), 99).unwrap();
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            serde_json::to_string(&d).unwrap()
        );
    }

    #[test]
    fn different_seeds_choose_different_kills() {
        let matrix = kills_matrix();
        let one = expand(&matrix, &by_cells(&["many-kills"]), 1).unwrap();
        let two = expand(&matrix, &by_cells(&["many-kills"]), 2).unwrap();
        let picks = |p: &Plan| {
            kills(&p.cells[0])
                .iter()
                .map(|k| (k.pick, k.jitter))
                .collect::<Vec<_>>()
        };
        assert_ne!(picks(&one), picks(&two));
        // Over a handful of seeds the first kill hits more than one worker.
        let victims: std::collections::BTreeSet<u32> = (0..16)
            .map(|seed| {
                kills(
                    &expand(&matrix, &by_cells(&["many-kills"]), seed)
                        .unwrap()
                        .cells[0],
                )[0]
                .pick
                .unwrap()
                .nth
            })
            .collect();
        assert!(victims.len() > 1, "{victims:?}");
    }

    #[test]
    fn the_plan_for_a_seed_is_pinned() {
        // A replay of an old report must choose the same victims: if this
        // changes, the PRNG or the draw order changed, and old replays break.
        let plan = expand(&kills_matrix(), &by_cells(&["many-kills"]), 42).unwrap();
        let summary: Vec<String> = kills(&plan.cells[0])
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(summary, PINNED_42);
    }

    /// Cross-checked against an independent Python implementation of splitmix64 and FNV-1a.
    const PINNED_42: [&str; 5] = [
        "kill worker #7 of the 8 workers: now, after 28ms jitter",
        "kill worker #7 of the 7 previous workers: now, after 351ms jitter",
        "kill worker #1 of the 6 workers: now, once it has started 7 jobs",
        "kill producer #2 of the 2 producers: now, after 108ms jitter",
        "kill the leader: now, after 493ms jitter",
    ];

    #[test]
    fn the_cell_name_seeds_its_own_stream() {
        let matrix = kills_matrix();
        let plan = expand(&matrix, &by_matrix("full"), 42).unwrap();
        let a: Vec<_> = kills(&plan.cells[0])
            .iter()
            .map(|k| (k.pick, k.jitter))
            .collect();
        let b: Vec<_> = kills(&plan.cells[1])
            .iter()
            .map(|k| (k.pick, k.jitter))
            .collect();
        assert_ne!(a, b, "two cells with the same steps drew the same choices");
        // Planning a cell alone or among others gives it the same choices.
        let alone = expand(&matrix, &by_cells(&["many-kills"]), 42).unwrap();
        assert_eq!(alone.cells[0], plan.cells[0]);
    }

    #[test]
    fn kills_resolve_candidates_and_jitter() {
        let plan = expand(&kills_matrix(), &by_cells(&["many-kills"]), 5).unwrap();
        let k = kills(&plan.cells[0]);
        let amongs: Vec<Option<u32>> = k.iter().map(|k| k.pick.map(|p| p.among)).collect();
        // 8 workers; then 7 of previous; then 6; producers 2; the leader has no pick.
        assert_eq!(amongs, [Some(8), Some(7), Some(6), Some(2), None]);
        for kill in &k {
            if let Some(p) = kill.pick {
                assert!((1..=p.among).contains(&p.nth), "{p:?}");
            }
            // Jitter exactly when the kill does not wait for started jobs.
            assert_eq!(kill.jitter.is_some(), kill.after_started == 0);
            assert!(kill.jitter.is_none_or(|j| j.as_millis() <= MAX_JITTER_MS));
        }
        assert_eq!(k[2].after_started, 7);
    }

    #[test]
    fn shipped_kills_count_candidates_through_the_fleet() {
        let plan = expand(&shipped(), &by_cells(&["hard-kill-rescue"]), 3).unwrap();
        let amongs: Vec<Option<u32>> = kills(&plan.cells[0])
            .iter()
            .map(|k| k.pick.map(|p| p.among))
            .collect();
        assert_eq!(amongs, [Some(4), Some(2), Some(4), Some(1), Some(5)]);
    }

    #[test]
    fn selection_by_matrix_name_keeps_its_order() {
        let matrix = shipped();
        let plan = expand(&matrix, &by_matrix("smoke"), 1).unwrap();
        assert_eq!(names(&plan), ["migrate-first", "binary-first", "fence"]);
        assert_eq!(plan.replay, "rehearse --matrix smoke --seed 1");
        let full = expand(&matrix, &by_matrix("full"), 1).unwrap();
        assert_eq!(full.cells.len(), matrix.cells.len());
        let defects = expand(&matrix, &by_matrix("defects"), 1).unwrap();
        assert!(names(&defects).iter().all(|n| n.starts_with("defect-")));
        assert!(defects.cells.len() >= 7, "{:?}", names(&defects));
        let test = expand(&kills_matrix(), &by_matrix("smoke"), 1).unwrap();
        assert_eq!(names(&test), ["quiet", "many-kills"]);
    }

    #[test]
    fn selection_by_cell_uses_file_order() {
        let plan = expand(&shipped(), &by_cells(&["fence", "migrate-first"]), 1).unwrap();
        assert_eq!(names(&plan), ["migrate-first", "fence"]);
        assert_eq!(
            plan.replay,
            "rehearse --cell fence --cell migrate-first --seed 1"
        );
    }

    #[test]
    fn cells_restrict_a_named_matrix() {
        let selection = Selection {
            matrix: Some("smoke".into()),
            cells: vec!["fence".into()],
        };
        let plan = expand(&shipped(), &selection, 1).unwrap();
        assert_eq!(names(&plan), ["fence"]);
        assert_eq!(plan.replay, "rehearse --matrix smoke --cell fence --seed 1");
    }

    #[test]
    fn unknown_names_are_refused_with_the_valid_ones() {
        let matrix = kills_matrix();
        assert_eq!(
            expand(&matrix, &by_matrix("smok"), 1)
                .unwrap_err()
                .to_string(),
            "unknown matrix \"smok\" (did you mean \"smoke\"?); named matrices: full, smoke"
        );
        assert_eq!(
            expand(&matrix, &by_cells(&["quiet", "loud"]), 1)
                .unwrap_err()
                .to_string(),
            "unknown cell \"loud\"; cells: many-kills, same-steps-other-name, quiet"
        );
        let outside = Selection {
            matrix: Some("smoke".into()),
            cells: vec!["same-steps-other-name".into()],
        };
        assert_eq!(
            expand(&matrix, &outside, 1).unwrap_err().to_string(),
            "cell \"same-steps-other-name\" is not in matrix \"smoke\", which has: quiet, many-kills"
        );
        assert_eq!(
            expand(&matrix, &Selection::default(), 1).unwrap_err(),
            SelectError::Nothing {
                matrices: "full, smoke".into()
            }
        );
    }

    #[test]
    fn cell_plans_carry_what_the_driver_needs() {
        let matrix = shipped();
        let plan = expand(
            &matrix,
            &by_cells(&["fresh-install", "defect-flip-skip-reconcile"]),
            8,
        )
        .unwrap();
        let fresh = plan
            .cells
            .iter()
            .find(|c| c.name == "fresh-install")
            .unwrap();
        assert_eq!(
            fresh.database,
            DatabaseSetup {
                fresh_install: true,
                migrated_by: "current".into()
            }
        );
        assert_eq!(
            fresh.artifacts.keys().collect::<Vec<_>>(),
            ["current", "previous"]
        );
        assert_eq!(fresh.workload, matrix.workload);
        assert_eq!(fresh.timings, matrix.timings);
        let defect = plan
            .cells
            .iter()
            .find(|c| c.name == "defect-flip-skip-reconcile")
            .unwrap();
        assert_eq!(defect.database.migrated_by, "previous");
        assert_eq!(
            defect.expect,
            Expectation::Detect(crate::matrix::FindingRule::FlipUnverified)
        );
        assert_eq!(
            defect.artifacts["defective_flip"].failpoint.as_deref(),
            Some("flip_skip_reconcile")
        );
        assert_eq!(
            defect.artifacts.keys().collect::<Vec<_>>(),
            ["defective_flip", "previous"]
        );
    }

    #[test]
    fn a_path_cell_starts_on_its_first_release_and_the_plan_prints_the_path() {
        let matrix = shipped();
        let plan = expand(&matrix, &by_cells(&["path-through-stepping-stone"]), 4).unwrap();
        let cell = &plan.cells[0];
        assert_eq!(cell.database.migrated_by, "pre_guard");
        assert_eq!(
            cell.artifacts.keys().collect::<Vec<_>>(),
            ["current", "pre_guard", "previous"]
        );
        let path = cell.path.as_ref().unwrap();
        let text = render(&plan);
        assert!(
            text.contains(&format!(
                "  path: {path}\n  database: created by pre_guard, the path's first release\n"
            )),
            "{text}"
        );
        assert!(
            path.to_string()
                .starts_with("pre_guard 0.6.1 -> previous 0.6.2 -> current "),
            "{path}"
        );
        // A cell without a path has none in its plan (nor in report.json).
        let plain = expand(&matrix, &by_cells(&["fence"]), 4).unwrap();
        assert_eq!(plain.cells[0].path, None);
        let json = serde_json::to_value(&plain.cells[0]).unwrap();
        assert!(json.get("path").is_none());
    }

    #[test]
    fn cells_that_compare_schemas_carry_the_declared_differences_and_use_current() {
        let text = format!(
            "{BASE}[schema]\nintended = [{{ object = \"index awa.x\", reason = \"kept\" }}]\n\
             [[cell]]\nname = \"s\"\nabout = \"compare\"\nsteps = [{{ fleet = \"previous\", workers = 1 }}, {{ migrate = \"previous\" }}, {{ assert = \"schema_matches_fresh\" }}]\n\
             [[cell]]\nname = \"t\"\nabout = \"no compare\"\nsteps = [{{ fleet = \"previous\", workers = 1 }}]\n"
        );
        let matrix = parse("test.toml", &text).unwrap_or_else(|d| panic!("{d}"));
        let plan = expand(&matrix, &by_cells(&["s", "t"]), 1).unwrap();
        assert_eq!(plan.cells[0].schema_intended, matrix.schema.intended);
        assert_eq!(
            plan.cells[0].artifacts.keys().collect::<Vec<_>>(),
            ["current", "previous"]
        );
        assert!(plan.cells[1].schema_intended.is_empty());
        assert_eq!(
            plan.cells[1].artifacts.keys().collect::<Vec<_>>(),
            ["previous"]
        );
    }

    #[test]
    fn plans_round_trip_through_json() {
        let plan = expand(&shipped(), &by_matrix("full"), 77).unwrap();
        let json = serde_json::to_string(&plan).unwrap();
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let kill = &value["cells"][7]["steps"][3];
        assert_eq!(value["cells"][7]["name"], "hard-kill-rescue");
        assert_eq!(kill["step"], "kill");
        assert_eq!(kill["target"], "worker");
        assert_eq!(kill["after_started"], 20);
        assert_eq!(kill["pick"]["among"], 4);
    }

    #[test]
    fn render_shows_seed_replay_and_numbered_steps() {
        let plan = expand(&kills_matrix(), &by_cells(&["quiet"]), 3).unwrap();
        assert_eq!(
            render(&plan),
            "plan: 1 cell, seed 3\n\
             replay: rehearse --cell quiet --seed 3\n\
             workload: 10 jobs/s live, backlog 0, mix complete 1\n\
             timings: heartbeat 200ms, stale_after 1500ms, rescue_every 250ms, rotate_every 1s, deadline 2s, drain_timeout 1m, budget 5m\n\
             \n\
             cell quiet: no random choices\n  \
               expect: pass\n  \
               database: N-1 schema, migrated by previous\n  \
               artifacts: current = workspace build; previous = release 0.6.2\n  \
               1. fleet current: 1 worker\n  \
               2. hold 1s\n"
        );
    }

    #[test]
    fn replay_quotes_what_a_shell_would_split() {
        let selection = by_cells(&["fence"]);
        assert_eq!(
            replay_command(&selection, 9, Some(Path::new("/tmp/my matrix.toml"))),
            "rehearse --matrix-file '/tmp/my matrix.toml' --cell fence --seed 9"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(
            shell_quote("postgres://u@h:5/db,x=y"),
            "postgres://u@h:5/db,x=y"
        );
        assert_eq!(
            shell_quote("postgres://u:***@h/db"),
            "'postgres://u:***@h/db'"
        );
        assert_eq!(shell_quote("a b;c$d"), "'a b;c$d'");
    }
}
