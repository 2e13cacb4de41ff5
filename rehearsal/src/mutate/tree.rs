//! A source tree of awa-runtime, read from the workspace or from a
//! release's `.crate` archive: what the mutants are made from and what
//! `--in-diff` compares with.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// A source tree of awa-runtime: its `src/` and `migrations/` files by
/// path relative to the crate's root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    /// Path (`src/store/claim.rs`) to text.
    pub files: BTreeMap<String, String>,
}

/// Why a tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A file or directory could not be read.
    #[error("could not read {path}: {source}")]
    Io {
        /// What was being read.
        path: String,
        /// Why not.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Whether a path of the crate holds mutable sources at all.
fn wanted(path: &str) -> bool {
    (path.starts_with("src/") && path.ends_with(".rs"))
        || (path.starts_with("migrations/") && path.ends_with(".sql"))
}

impl Tree {
    /// Reads the crate at `root` (the workspace's `awa-runtime/`).
    pub fn read_dir(root: &Path) -> Result<Tree, TreeError> {
        let mut tree = Tree::default();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
                let path = entry.map_err(io(&dir))?.path();
                if path.is_dir() {
                    if path.file_name().is_some_and(|n| n != "target") {
                        stack.push(path);
                    }
                    continue;
                }
                let Ok(rel) = path.strip_prefix(root) else {
                    continue;
                };
                let rel = rel.to_string_lossy().replace('\\', "/");
                if wanted(&rel) {
                    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
                    tree.files.insert(rel, text);
                }
            }
        }
        Ok(tree)
    }

    /// Reads a `.crate` archive (a gzipped tar whose entries sit under
    /// `NAME-VERSION/`).
    pub fn read_crate(archive: &Path) -> Result<Tree, TreeError> {
        let file = std::fs::File::open(archive).map_err(io(archive))?;
        let mut tar =
            tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
        let mut tree = Tree::default();
        for entry in tar.entries().map_err(io(archive))? {
            let mut entry = entry.map_err(io(archive))?;
            let path = entry
                .path()
                .map_err(io(archive))?
                .to_string_lossy()
                .replace('\\', "/");
            let Some((_, rel)) = path.split_once('/') else {
                continue;
            };
            if wanted(rel) {
                let rel = rel.to_owned();
                let mut text = String::new();
                entry.read_to_string(&mut text).map_err(io(archive))?;
                tree.files.insert(rel, text);
            }
        }
        Ok(tree)
    }
}
