//! The checks every command that starts something makes of its flags
//! first: a reports folder it can write, `--pg-bindir` folders that
//! exist, a `--database-url` that parses. A typo costs no build.

use std::path::{Path, PathBuf};

use crate::Error;

/// The folder run folders go into must be a folder we can write: made
/// (when missing) and written to here, so a typo, a read-only folder or a
/// name too long costs no build.
pub(super) fn check_reports_root(root: &Path) -> Result<(), Error> {
    let Some(existing) = root.ancestors().find(|a| a.exists()) else {
        return writable(root);
    };
    if existing.is_dir() {
        return writable(root);
    }
    Err(Error::BadFlag {
        flag: "--reports-dir",
        message: format!(
            "{} is a file, so run folders cannot go {}; name a folder (REHEARSE_REPORTS_DIR or --reports-dir; it is created when missing)",
            existing.display(),
            if existing == root {
                "in it"
            } else {
                "under it"
            }
        ),
    })
}

/// Every folder `--pg-bindir` (or its variables) lists must be a folder:
/// a typo in one of several is not silently skipped.
pub(super) fn check_bindirs(dirs: &[(&'static str, PathBuf)]) -> Result<(), Error> {
    match dirs.iter().find(|(_, dir)| !dir.is_dir()) {
        None => Ok(()),
        Some((var, dir)) => Err(Error::BadFlag {
            flag: "--pg-bindir",
            message: format!(
                "{} (listed in --pg-bindir or ${var}) is not a folder{}; fix or drop it from the ':'-separated list",
                dir.display(),
                if dir.exists() {
                    ""
                } else {
                    " (it does not exist)"
                }
            ),
        }),
    }
}

/// `root` made when missing, and a file written in it; both undone, so a
/// run refused later leaves no folder behind (the run makes it again).
fn writable(root: &Path) -> Result<(), Error> {
    let made: Vec<&Path> = root.ancestors().take_while(|a| !a.exists()).collect();
    let result = try_write(root);
    for dir in made {
        let _ = std::fs::remove_dir(dir);
    }
    result
}

/// [`writable`]'s check, leaving what it made.
fn try_write(root: &Path) -> Result<(), Error> {
    let refused = |what: &str, e: std::io::Error| Error::BadFlag {
        flag: "--reports-dir",
        message: format!(
            "{} cannot {what} ({e}); name a folder this user can write (REHEARSE_REPORTS_DIR or --reports-dir)",
            root.display()
        ),
    };
    std::fs::create_dir_all(root).map_err(|e| refused("be made", e))?;
    let probe = root.join(format!(".rehearse-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| refused("be written to", e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

pub(super) fn check_database_url(url: &str) -> Result<(), Error> {
    crate::driver::database::check_url(url).map_err(|message| Error::BadFlag {
        flag: "--database-url",
        message,
    })
}
