//! A scratch tree under the temp folder, removed on drop.

use std::path::{Path, PathBuf};

/// `$TMPDIR/rehearse-<kind>-<tag>-<pid>/` with an empty `reports/`
/// (and `matrix.toml` when given one); removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh tree (an earlier one of the same name is removed first).
    pub fn new(kind: &str, tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("rehearse-{kind}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("reports")).unwrap();
        Scratch(dir)
    }

    /// A fresh tree holding `matrix` as `matrix.toml`.
    pub fn with_matrix(kind: &str, tag: &str, matrix: &str) -> Scratch {
        let scratch = Scratch::new(kind, tag);
        std::fs::write(scratch.matrix(), matrix).unwrap();
        scratch
    }

    /// The tree's root.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Its `matrix.toml`.
    pub fn matrix(&self) -> PathBuf {
        self.0.join("matrix.toml")
    }

    /// Where its runs write their report folders (`REHEARSE_REPORTS_DIR`).
    pub fn reports(&self) -> PathBuf {
        self.0.join("reports")
    }

    /// The report folders written so far, oldest first.
    pub fn report_dirs(&self) -> Vec<PathBuf> {
        report_dirs(&self.reports())
    }

    /// The one report folder written so far (panics if there are more).
    pub fn report_dir(&self) -> PathBuf {
        only_report_dir(&self.reports())
    }
}

/// The report folders in `reports`, oldest first; none if it is missing.
pub fn report_dirs(reports: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(reports)
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// The one report folder in `reports`.
pub fn only_report_dir(reports: &Path) -> PathBuf {
    let dirs = report_dirs(reports);
    assert_eq!(
        dirs.len(),
        1,
        "one report folder in {}: {dirs:?}",
        reports.display()
    );
    dirs[0].clone()
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
