//! `rehearse list`: the matrix's cells and named matrices, as text or JSON.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use super::{Environment, load, selection};
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::matrix::{self, Expectation, Matrix, NamedMatrix};
use crate::plan;

/// `rehearse list --json`
#[derive(Serialize)]
struct Listing<'a> {
    file: String,
    cells: Vec<ListedCell<'a>>,
    matrices: &'a std::collections::BTreeMap<String, NamedMatrix>,
}

#[derive(Serialize)]
struct ListedCell<'a> {
    name: &'a str,
    about: &'a str,
    expect: Expectation,
    fresh_install: bool,
    steps: usize,
}

pub(super) fn list(cli: &Cli, env: &Environment, out: &mut dyn Write) -> Result<RunOutcome, Error> {
    let (path, matrix) = load(cli, env)?;
    let selection = selection(cli);
    let cells = if selection.matrix.is_none() && selection.cells.is_empty() {
        matrix.cells.iter().collect()
    } else {
        plan::select(&matrix, &selection)?
    };
    if cli.global.json {
        let listing = Listing {
            file: path.display().to_string(),
            cells: cells
                .iter()
                .map(|c| ListedCell {
                    name: &c.name,
                    about: &c.about,
                    expect: c.expect,
                    fresh_install: c.fresh_install,
                    steps: c.steps.len(),
                })
                .collect(),
            matrices: &matrix.matrices,
        };
        let json = serde_json::to_string_pretty(&listing).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
        return Ok(RunOutcome::AllMet);
    }
    out.write_all(render_list(&path, &matrix, &cells).as_bytes())?;
    Ok(RunOutcome::AllMet)
}

fn render_list(path: &Path, matrix: &Matrix, cells: &[&matrix::Cell]) -> String {
    let mut text = format!("cells ({}) in {}:\n", cells.len(), path.display());
    let width = cells.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for cell in cells {
        let expect = match cell.expect {
            Expectation::Pass => String::new(),
            Expectation::Detect(rule) => format!(" [must detect {}]", rule.name()),
        };
        text.push_str(&format!("  {:width$}  {}{expect}\n", cell.name, cell.about));
    }
    text.push_str("named matrices:\n");
    let width = matrix.matrices.keys().map(String::len).max().unwrap_or(0);
    for (name, named) in &matrix.matrices {
        let what = if named.entries == ["*"] {
            format!("every cell ({})", named.cells.len())
        } else {
            named.cells.join(", ")
        };
        text.push_str(&format!("  {name:width$}  {what}\n"));
    }
    if matrix.matrices.is_empty() {
        text.push_str("  none\n");
    }
    text
}
