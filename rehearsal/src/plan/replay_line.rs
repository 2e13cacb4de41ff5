//! The command line that replays a plan, and the one quoting of the
//! workspace (replay lines, the command line a report records).

use std::path::Path;

use super::Selection;

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
