//! A unit of mutation (a function, a SQL constant or macro, a statement
//! of a `.sql` file), its fingerprint and its mutants; the statements of a
//! `.sql` file as units. `rust.rs` makes the Rust units, `scope.rs` says
//! which count.

use std::collections::BTreeMap;

use super::{Mutant, sql};

/// A unit, its fingerprint and its mutants.
#[derive(Clone, Debug)]
pub struct Unit {
    /// `claim::claim`, `const CLAIM`, `macro close_claim`, `v003_expand_ring_ledgers.sql#4`.
    pub name: String,
    /// Its tokens, without layout or comments.
    pub fingerprint: String,
    /// Its mutants.
    pub mutants: Vec<Mutant>,
}

/// The statements of a `.sql` file, each a unit named by the file and the
/// statement's first words (`migrations/v003.sql: CREATE FUNCTION awa.fence`),
/// numbered when two read alike.
pub fn sql_file_units(path: &str, text: &str) -> Vec<Unit> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let file = path.rsplit('/').next().unwrap_or(path);
    sql::statements(text)
        .into_iter()
        .map(|range| {
            let stmt = &text[range.clone()];
            let head: Vec<&str> = stmt
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .flat_map(str::split_whitespace)
                .take(4)
                .collect();
            let mut name = format!("{file}: {}", head.join(" "));
            let n = seen.entry(name.clone()).or_insert(0);
            *n += 1;
            if *n > 1 {
                name = format!("{name} #{n}");
            }
            let mutants = sql::mutate(stmt, false)
                .into_iter()
                .map(|e| {
                    let r = range.start + e.range.start..range.start + e.range.end;
                    Mutant::new(path, text, &name, e.operator, r, e.replacement)
                })
                .collect();
            Unit {
                fingerprint: sql::fingerprint(stmt, false),
                name,
                mutants,
            }
        })
        .collect()
}
