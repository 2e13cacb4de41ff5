//! The backend a run starts its processes with: `--backend` resolved
//! (docker when an engine answers), and on docker the registries checked,
//! leftovers of earlier runs removed and every artifact made an image
//! before a fleet of containers is handed to the driver.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::{RunArgs, one_shot_runtime, wanted::wanted};
use crate::Error;
use crate::artifacts::Resolution;
use crate::fleet::backend_choice::Chosen;
use crate::fleet::{DockerFleet, Fleet, ProcessFleet};
use crate::report;
use crate::vocab::Backend;

/// `--backend`, resolved: docker needs an engine that answers; auto takes
/// docker when one does. Says which and why.
pub(super) fn choose_backend(
    backend: Backend,
    quiet: bool,
    err: &mut dyn Write,
) -> Result<Chosen, Error> {
    let chosen = one_shot_runtime()?.block_on(crate::fleet::backend_choice::choose(backend))?;
    if !quiet || backend == Backend::Auto {
        writeln!(err, "{}", chosen.reason)?;
    }
    Ok(chosen)
}

/// Before any build, on the docker backend: the registries the run pulls from answer.
pub(super) fn check_registries(args: &RunArgs, err: &mut dyn Write) -> Result<(), Error> {
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    one_shot_runtime()?.block_on(crate::image::resolve::check_registries(
        &wanted(&args.plan),
        &mut progress,
    ))?;
    Ok(())
}

/// The backend that starts the processes. On docker, the artifacts are
/// made images first (and checked against `rehearse replay`'s pins); on
/// failure nothing is left behind: no containers, no empty report folder.
pub(super) fn make_fleet(
    args: &RunArgs,
    chosen: &Chosen,
    run_id: &str,
    dir: &Path,
    resolution: &mut Resolution,
    err: &mut dyn Write,
) -> Result<Arc<dyn Fleet>, Error> {
    let Some(engine) = &chosen.engine else {
        return Ok(Arc::new(ProcessFleet));
    };
    let docker = DockerFleet::new(engine.clone(), run_id, args.keep);
    if let Err(e) = docker_stage(args, &docker, resolution, err) {
        // Nothing ran: no containers and no empty report folder left behind.
        let _ = std::fs::remove_dir_all(dir);
        return Err(e);
    }
    if let Some((file, pinned)) = &args.pinned
        && let Err(e) = pinned.check(file, resolution)
    {
        let _ = one_shot_runtime()?.block_on(docker.shutdown());
        let _ = std::fs::remove_dir_all(dir);
        return Err(e.into());
    }
    Ok(Arc::new(docker))
}

/// On docker: leftovers of crashed earlier runs removed (and counted),
/// then every artifact made an image (built, reused or pulled) and probed.
/// On failure, the probes' containers are removed too.
fn docker_stage(
    args: &RunArgs,
    docker: &DockerFleet,
    resolution: &mut Resolution,
    err: &mut dyn Write,
) -> Result<(), Error> {
    let runtime = one_shot_runtime()?;
    let prepared = runtime.block_on(docker.prepare())?;
    writeln!(
        err,
        "docker: removed {} of earlier runs{}",
        report::text::plural(prepared.removed.len(), "leftover container"),
        if prepared.removed.is_empty() {
            String::new()
        } else {
            format!(": {}", prepared.removed.join(", "))
        }
    )?;
    let wanted = wanted(&args.plan);
    let manifest = awa_harness::release::load_manifest(&args.repo.artifacts()).ok();
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    let made = runtime.block_on(crate::image::resolve::images_for_run(
        docker.engine(),
        &wanted,
        &mut resolution.artifacts,
        manifest.as_ref(),
        &resolution.git,
        docker.run_labels("", "probe"),
        &mut progress,
    ));
    if made.is_err() {
        let _ = runtime.block_on(docker.shutdown());
    }
    Ok(made?)
}
