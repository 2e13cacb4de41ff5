//! One cell's plan drawn from the run seed: every step's choices made
//! from the cell's own stream, the artifacts it uses, its database,
//! workload and timings.

use crate::matrix::{
    CURRENT, Cell, Check, Duration, KillTarget, Matrix, PREVIOUS, Roster, Step, Timings,
};

use super::splitmix::SplitMix64;
use super::{
    CellPlan, DatabaseSetup, MAX_JITTER_MS, Pick, PlannedKill, PlannedStep, PlannedSuspend,
};

/// The plan of `cell`, its choices drawn with `seed`.
pub(super) fn plan_cell(matrix: &Matrix, cell: &Cell, seed: u64) -> CellPlan {
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
        Step::Revoke(s) => vec![&s.artifact],
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
        Step::Revoke(s) => Step::Revoke(s.clone()),
    }
}
