//! The `[matrix]` checks: named selections of cells, with `*` for every cell
//! and a did-you-mean for a name that is not a cell.

use std::collections::{BTreeMap, BTreeSet};

use toml::Spanned;

use super::is_identifier;
use crate::matrix::diagnostic::{Problems, did_you_mean};
use crate::matrix::model::NamedMatrix;
use crate::matrix::raw::RawNamedMatrix;

pub(super) fn validate_matrices(
    raw: &[RawNamedMatrix],
    cells: &[String],
    sink: &mut Problems<'_>,
) -> BTreeMap<String, NamedMatrix> {
    let mut matrices = BTreeMap::new();
    for (name, list) in raw {
        if let Some(matrix) = named_matrix(name, list, cells, sink) {
            matrices.insert(name.get_ref().clone(), matrix);
        }
    }
    matrices
}

/// One named matrix: its name, and the cells its entries select, each
/// once, in the order listed; `None` when it lists nothing.
pub(super) fn named_matrix(
    name: &Spanned<String>,
    list: &Spanned<Vec<Spanned<String>>>,
    cells: &[String],
    sink: &mut Problems<'_>,
) -> Option<NamedMatrix> {
    let context = format!("matrix \"{}\"", name.get_ref());
    if !is_identifier(name.get_ref(), '-') {
        sink.error(
            Some(name.span()),
            &context,
            "a matrix name uses lowercase letters, digits and dashes, like smoke",
        );
    }
    if list.get_ref().is_empty() {
        sink.error(
            Some(list.span()),
            &context,
            "the matrix lists no cells; list cell names, or \"*\" for every cell",
        );
        return None;
    }
    let mut selected: Vec<String> = Vec::new();
    let mut entries = Vec::new();
    // With "*" present its own message covers the rest; no "listed twice" echoes.
    let listed = Listed {
        alone: list.get_ref().len() == 1,
        has_star: list.get_ref().iter().any(|e| e.get_ref() == "*"),
        context: &context,
    };
    for entry in list.get_ref() {
        entries.push(entry.get_ref().clone());
        select_entry(entry, &listed, cells, &mut selected, sink);
    }
    let mut seen = BTreeSet::new();
    selected.retain(|c| seen.insert(c.clone()));
    Some(NamedMatrix {
        entries,
        cells: selected,
    })
}

/// What an entry of a named matrix is judged beside.
pub(super) struct Listed<'a> {
    /// It is the matrix's only entry.
    alone: bool,
    /// The matrix lists `"*"`.
    has_star: bool,
    context: &'a str,
}

/// One entry of a named matrix: `"*"` (every cell), `prefix*` (the cells
/// it starts), or a cell's name; adds what it selects to `selected`.
pub(super) fn select_entry(
    entry: &Spanned<String>,
    listed: &Listed<'_>,
    cells: &[String],
    selected: &mut Vec<String>,
    sink: &mut Problems<'_>,
) {
    let (cell, context) = (entry.get_ref(), listed.context);
    if cell == "*" {
        if !listed.alone {
            sink.error(
                Some(entry.span()),
                context,
                "\"*\" already means every cell; list it alone",
            );
        }
        selected.extend(cells.iter().cloned());
    } else if let Some(prefix) = cell.strip_suffix('*') {
        // `defect-*`: every cell whose name starts with the prefix.
        let matching: Vec<&String> = cells.iter().filter(|c| c.starts_with(prefix)).collect();
        if matching.is_empty() {
            sink.error(
                Some(entry.span()),
                context,
                format!("\"{cell}\" matches no cell; no cell name starts with \"{prefix}\""),
            );
        }
        selected.extend(matching.into_iter().cloned());
    } else if !cells.contains(cell) {
        sink.error(
            Some(entry.span()),
            context,
            format!(
                "unknown cell \"{cell}\"{}; expected \"*\" or one of {}",
                did_you_mean(cell, cells.iter().map(String::as_str)),
                cells.join(", ")
            ),
        );
    } else if selected.contains(cell) {
        if !listed.has_star {
            sink.error(
                Some(entry.span()),
                context,
                format!("cell \"{cell}\" is listed twice"),
            );
        }
    } else {
        selected.push(cell.clone());
    }
}
