//! Which code is mutated: the trees compared, the units compared, and
//! what is never touched.
//!
//! A unit is a function (Rust) or a statement (a SQL constant, a
//! `macro_rules!` of SQL, a statement of a `.sql` file). `--in-diff`
//! keeps the units of the current tree that the previous release's
//! archive has not with the same fingerprint (tokens, without layout or
//! comments): a changed unit, or a new one. A unit moved between files
//! unchanged is not in the diff.
//!
//! Never mutated: the failpoints (`src/failpoint.rs`, and at their call
//! sites the condition and the branch an armed failpoint takes), the
//! audit API the rehearsal reads to judge (`src/store/audit.rs` and the
//! files of its folder, `src/store/audit/`), the
//! throwaway-PostgreSQL and release-building helpers where a release
//! archive still carries them (`src/pgtemp*`, `src/release.rs`; since
//! 0.7 they live in awa-harness, outside what is mutated), tests,
//! benches and `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};

use super::tree::Tree;
use super::unit::sql_file_units;

/// Which units are mutated.
#[derive(Clone, Debug)]
pub enum Scope {
    /// Every unit of the current tree (`--all`).
    All,
    /// Units changed or added since the previous release.
    InDiff(Previous),
}

/// The previous release's units: fingerprints by unit name (any file: a
/// unit moved unchanged is not new).
#[derive(Clone, Debug, Default)]
pub struct Previous(BTreeMap<String, BTreeSet<String>>);

impl Scope {
    /// `--in-diff` against `previous` (the release's tree).
    pub fn in_diff(previous: &Tree) -> Scope {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (path, text) in &previous.files {
            let units = if path.ends_with(".rs") {
                super::rust::units(path, text).unwrap_or_default()
            } else {
                sql_file_units(path, text)
            };
            for u in units {
                map.entry(u.name).or_default().insert(u.fingerprint);
            }
        }
        Scope::InDiff(Previous(map))
    }

    /// Whether a unit of the current tree (`name`, `fingerprint`) is in scope.
    pub fn includes(&self, name: &str, fingerprint: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::InDiff(Previous(previous)) => !previous
                .get(name)
                .is_some_and(|prints| prints.contains(fingerprint)),
        }
    }
}

/// Files never mutated.
pub fn excluded_file(path: &str) -> bool {
    const FILES: &[&str] = &[
        "src/failpoint.rs",
        "src/store/audit.rs",
        "src/pgtemp.rs",
        "src/release.rs",
        "src/events/tests.rs",
    ];
    FILES.contains(&path)
        || path.starts_with("src/pgtemp/")
        || path.starts_with("src/store/audit/")
        || path.starts_with("tests/")
        || path.starts_with("benches/")
        || path.ends_with("/tests.rs")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_frozen_release_archive_reads_as_a_tree() {
        let archive =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../artifacts/awa-runtime-0.6.2.crate");
        let tree = Tree::read_crate(&archive).expect("the archive reads");
        assert!(tree.files.contains_key("src/store/claim.rs"));
        assert!(tree.files.contains_key("migrations/v001_core.sql"));
        assert!(!tree.files.keys().any(|p| p.starts_with("tests/")));
    }

    #[test]
    fn excluded_files_are_the_ones_the_rehearsal_relies_on() {
        for p in [
            "src/failpoint.rs",
            "src/store/audit.rs",
            "src/store/audit/jobs.rs",
            "src/store/audit/placement.rs",
            "src/pgtemp/discover.rs",
            "src/release.rs",
            "tests/rings.rs",
        ] {
            assert!(excluded_file(p), "{p}");
        }
        for p in [
            "src/store/claim.rs",
            "src/store/auditing.rs",
            "migrations/v003_expand_ring_ledgers.sql",
            "src/worker.rs",
        ] {
            assert!(!excluded_file(p), "{p}");
        }
    }

    #[test]
    fn sql_file_statements_are_units_of_their_own() {
        let old = "CREATE TABLE a (x int);\nCREATE INDEX i ON a (x) WHERE x > 0 AND x < 9;\n";
        let new = "CREATE TABLE a (x int);\nCREATE INDEX i ON a (x) WHERE x > 1 AND x < 9;\n";
        let previous = Tree {
            files: [("migrations/v1.sql".to_owned(), old.to_owned())].into(),
        };
        let scope = Scope::in_diff(&previous);
        let units = sql_file_units("migrations/v1.sql", new);
        assert_eq!(units.len(), 2);
        let kept: Vec<&str> = units
            .iter()
            .filter(|u| scope.includes(&u.name, &u.fingerprint))
            .map(|u| u.name.as_str())
            .collect();
        assert_eq!(kept, vec!["v1.sql: CREATE INDEX i ON"]);
    }
}
