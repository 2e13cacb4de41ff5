//! `rehearse selftest`: the seeded-defect and clean matrices planned as
//! one run and started through the pipeline.

use std::io::Write;
use std::sync::Arc;

use super::launch::request;
use super::{Environment, load};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::plan::{self, Selection};

/// `rehearse selftest`: the `defects` matrix beside the clean `smoke`
/// matrix, in one run, scored against the runtime's seeded defects.
pub(super) fn selftest(
    cli: &Cli,
    env: &Environment,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    if cli.global.matrix.is_some() || !cli.global.cells.is_empty() || cli.global.repeat.is_some() {
        return Err(Error::BadFlag {
            flag: "selftest",
            message: format!(
                "selftest runs the {} and {} matrices as they are; it takes no --matrix, --cell or --repeat",
                crate::selftest::DEFECTS_MATRIX,
                crate::selftest::CLEAN_MATRIX
            ),
        });
    }
    let (path, matrix) = load(cli, env)?;
    let mut cells = Vec::new();
    for name in [
        crate::selftest::DEFECTS_MATRIX,
        crate::selftest::CLEAN_MATRIX,
    ] {
        let Some(named) = matrix.matrices.get(name) else {
            return Err(Error::BadFlag {
                flag: "selftest",
                message: format!(
                    "{} has no [matrix] {name}; selftest needs `{}` (the seeded-defect cells) and `{}` (clean cells)",
                    path.display(),
                    crate::selftest::DEFECTS_MATRIX,
                    crate::selftest::CLEAN_MATRIX
                ),
            });
        };
        cells.extend(
            named
                .cells
                .iter()
                .filter(|c| !cells.contains(*c))
                .cloned()
                .collect::<Vec<_>>(),
        );
    }
    let plan = plan::Request {
        selection: Selection {
            matrix: None,
            cells,
        },
        seed: cli.global.seed.unwrap_or_else(plan::random_seed),
        postgres: cli.global.postgres.clone(),
        matrix_path: Some(path.clone()),
        matrix_file: cli.global.matrix_file.clone(),
        replay_as: plan::ReplayAs::Selftest,
        // Selftest's replay line has never named --from-registry.
        from_registry: Vec::new(),
        stress: cli.global.stress,
        ..plan::Request::default()
    }
    .expand(&matrix)?;
    let mut request = request(cli, env, &path, plan, None, true, err)?;
    request.matrix = Some(Arc::new(matrix));
    crate::pipeline::run(request, out, err)
}
