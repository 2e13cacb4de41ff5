//! The work copy kept in step with the workspace: every file but
//! `target/` copied, a changed file rewritten (so an unchanged one keeps
//! its mtime and the incremental build its work), a removed one removed.

use std::path::Path;

use super::run_error::{RunError, copy_err};

/// `to` made a copy of the file `from`, written only when it differs.
pub(super) fn sync_file(from: &Path, to: &Path) -> Result<(), RunError> {
    let want = std::fs::read(from).map_err(copy_err(from))?;
    if std::fs::read(to).ok().as_deref() == Some(want.as_slice()) {
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(copy_err(parent))?;
    }
    std::fs::write(to, want).map_err(copy_err(to))
}

/// `to` made a copy of `from` (but `target/`): changed files rewritten,
/// files gone from `from` removed.
pub(super) fn sync_dir(from: &Path, to: &Path) -> Result<(), RunError> {
    std::fs::create_dir_all(to).map_err(copy_err(to))?;
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(from).map_err(copy_err(from))? {
        let entry = entry.map_err(copy_err(from))?;
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        seen.insert(name.clone());
        let (src, dst) = (entry.path(), to.join(&name));
        if src.is_dir() {
            sync_dir(&src, &dst)?;
        } else {
            sync_file(&src, &dst)?;
        }
    }
    for entry in std::fs::read_dir(to).map_err(copy_err(to))? {
        let entry = entry.map_err(copy_err(to))?;
        if !seen.contains(&entry.file_name()) {
            let p = entry.path();
            let gone = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            gone.map_err(copy_err(&p))?;
        }
    }
    Ok(())
}
