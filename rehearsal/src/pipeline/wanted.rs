//! The artifacts a run's cells name, and those this process builds or
//! verifies before anything starts (with an engine, image artifacts are
//! left to the docker stage).

use std::collections::BTreeMap;
use std::io::Write;

use super::RunArgs;
use crate::Error;
use crate::artifacts::{self, Resolution};
use crate::matrix::{Artifact, ArtifactSource};
use crate::plan::Plan;

/// Every artifact the selected cells name.
pub(super) fn wanted(plan: &Plan) -> BTreeMap<String, Artifact> {
    let mut wanted = BTreeMap::new();
    for cell in &plan.cells {
        for (name, artifact) in &cell.artifacts {
            wanted.insert(name.clone(), artifact.clone());
        }
    }
    wanted
}

/// The artifacts this stage builds: with an engine, image artifacts are
/// left to the docker stage.
pub(super) fn wanted_here(plan: &Plan, docker: bool) -> BTreeMap<String, Artifact> {
    wanted(plan)
        .into_iter()
        .filter(|(_, a)| !docker || !matches!(a.source, ArtifactSource::Image(_)))
        .collect()
}

/// Artifacts: every source checked, then each binary built once; with an
/// engine, image artifacts are left to the docker stage.
pub(super) fn resolve(
    args: &RunArgs,
    docker: bool,
    err: &mut dyn Write,
) -> Result<Resolution, Error> {
    let wanted = wanted_here(&args.plan, docker);
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    Ok(artifacts::resolve_with(
        &args.repo,
        &wanted,
        args.workspace_binary.as_deref(),
        &mut progress,
    )?)
}
