//! Which cells a run plans: a named matrix, explicit cells, or both,
//! refused with the valid names (and a did-you-mean) when a name is wrong.

use serde::{Deserialize, Serialize};

use crate::matrix::{Cell, Matrix};

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
