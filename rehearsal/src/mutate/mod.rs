//! `rehearse mutate`: how many small bugs in awa-runtime the matrix catches.
//!
//! Mutation testing for an upgrade rehearsal: each mutant is one small
//! change of the runtime's Rust or SQL (a flipped comparison, a dropped
//! `WHERE` conjunct, a function that returns a default), built as the
//! `current` artifact and run through the matrix's clean cells. A mutant
//! that some cell fails on is killed; one that every cell passes shows a
//! bug of that shape the matrix would let through.
//!
//! This module generates the mutants (pure logic, no I/O but reading the
//! trees): [`rust`] for Rust (cargo-mutants' operators, over `syn` spans),
//! [`sql`] for the SQL in named constants and `.sql` files, [`scope`] for
//! which units count (`--in-diff`: what changed since the previous
//! release) and what is never mutated, over [`tree`] (the sources read)
//! and [`unit`] (a unit and its mutants); `mutant.rs` is one mutant and its
//! diff, `generate.rs` the mutants a run asks for (in scope, sampled,
//! shared out), `session.rs` a run of them through the clean cells, with
//! [`runner`] (the work copy kept in step by `work_copy.rs`, its error in
//! `run_error.rs`) and `child.rs` under it; [`results`] holds what the
//! runner found and [`report`] writes.
//!
//! cargo-mutants' CLI is not used: it cannot mutate SQL (most of what a
//! release of a job queue changes), and its test step is `cargo test`,
//! where ours is a rehearsal whose verdicts carry the cell and rule that
//! failed; its operators are simple enough to implement over `syn`.

mod child;
mod generate;
mod mutant;
pub mod report;
pub mod results;
mod run_error;
pub mod runner;
pub mod rust;
pub mod scope;
mod session;
pub mod sql;
pub mod stop;
pub mod tree;
pub mod unit;
mod work_copy;

pub use generate::{Generated, MutateError, generate, generate_for, sample, share};
pub use mutant::{Counts, Mutant, Operator, by_file, render_list};
pub use scope::Scope;
pub use session::{SessionArgs, SessionError, TIMEOUT_FACTOR, TIMEOUT_FLOOR, session};
pub use tree::Tree;

/// What `rehearse mutate` was asked for, beside the selection and run flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `--list`: print the mutants, run nothing.
    pub list: bool,
    /// `--all` (else `--in-diff`).
    pub all: bool,
    /// `--sample N`.
    pub sample: Option<usize>,
    /// `--mutant ID`, repeatable: only these.
    pub mutants: Vec<String>,
    /// `--partition STRATEGY:I/N`.
    pub partition: Option<crate::partition::Partition>,
    /// `--timeout SECS`: a mutant's budget per cell.
    pub timeout: Option<std::time::Duration>,
    /// `--work-dir DIR`: the work copy and its builds.
    pub work_dir: Option<std::path::PathBuf>,
    /// `--list --json`.
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree {
            files: files
                .iter()
                .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
                .collect(),
        }
    }

    const CURRENT: &str = r#"
/// Claims.
const CLAIM: &str = "SELECT id FROM t WHERE run_at <= now() AND queue = $1 FOR UPDATE SKIP LOCKED";

/// Unchanged since the release.
pub fn old(a: u32, b: u32) -> bool {
    a < b
}

/// New in this release.
pub fn new(a: u32) -> u32 {
    if !ready(a) { a + 1 } else { a }
}

#[cfg(test)]
mod tests {
    fn helper() -> bool { 1 < 2 }
}
"#;

    const PREVIOUS: &str = r#"
const CLAIM: &str = "SELECT id FROM t WHERE run_at <= now() FOR UPDATE SKIP LOCKED";

/// Unchanged since the release (its doc may change).
pub fn old(a: u32, b: u32) -> bool {
    a  <  b
}
"#;

    #[test]
    fn in_diff_keeps_changed_and_new_units_only() {
        let current = tree(&[("src/store/claim.rs", CURRENT)]);
        let previous = tree(&[("src/store/claim.rs", PREVIOUS)]);
        let all = generate(&current, &Scope::All);
        let diff = generate(&current, &Scope::in_diff(&previous));
        let units = |ms: &[Mutant]| {
            let mut u: Vec<String> = ms.iter().map(|m| m.unit.clone()).collect();
            u.dedup();
            u
        };
        assert_eq!(
            units(&all),
            vec![
                "const store::claim::CLAIM",
                "store::claim::old",
                "store::claim::new"
            ]
        );
        assert_eq!(
            units(&diff),
            vec!["const store::claim::CLAIM", "store::claim::new"]
        );
        // Nothing from the test module.
        assert!(all.iter().all(|m| !m.unit.contains("helper")));
    }

    #[test]
    fn generation_and_sampling_are_deterministic() {
        let current = tree(&[("src/store/claim.rs", CURRENT)]);
        let a = generate(&current, &Scope::All);
        let b = generate(&current, &Scope::All);
        assert_eq!(a, b);
        let c = Counts::of(&a);
        assert!(c.sql > 0 && c.rust > 0, "{c:?}");
        let s1 = sample(a.clone(), 4, 7);
        assert_eq!(s1, sample(b, 4, 7));
        assert_eq!(s1.len(), 4);
        assert!(
            s1.windows(2)
                .all(|w| w[0].range.start < w[1].range.start || w[0].file < w[1].file)
        );
        let other: Vec<_> = (0..20).map(|seed| sample(a.clone(), 4, seed)).collect();
        assert!(
            other.iter().any(|s| *s != s1),
            "seeds must draw different samples"
        );
        // Ids are unique and stable.
        let mut ids: Vec<&str> = a.iter().map(|m| m.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), a.len());
    }

    /// Each mutant of `text` (as `src/store/claim.rs`, every unit in
    /// scope) by what it changes: unit, operator, original, replacement,
    /// and its rank among those alike, to its id.
    fn ids(text: &str) -> BTreeMap<(String, Operator, String, String, usize), String> {
        let all = generate(&tree(&[("src/store/claim.rs", text)]), &Scope::All);
        let mut rank: BTreeMap<(String, Operator, String, String), usize> = BTreeMap::new();
        all.into_iter()
            .map(|m| {
                let n = rank
                    .entry((
                        m.unit.clone(),
                        m.operator,
                        m.original.clone(),
                        m.replacement.clone(),
                    ))
                    .or_insert(0);
                *n += 1;
                ((m.unit, m.operator, m.original, m.replacement, *n), m.id)
            })
            .collect()
    }

    #[test]
    fn ids_stay_put_when_lines_are_added_above_them() {
        let before = ids(CURRENT);
        assert!(before.len() > 5, "{before:?}");
        // A line before the function, and one inside another function.
        let above = CURRENT.replace(
            "/// Unchanged since the release.",
            "/// Added above.\nconst LIMIT: u32 = 3;\n\n/// Unchanged since the release.",
        );
        assert_ne!(above, CURRENT);
        assert_eq!(ids(&above), before, "{above}");
        // A line inside `old`, above `new` and above `old`'s own `<`:
        // only the mutants that replace `old`'s whole body (whose text
        // changed) are renamed.
        let inside = ids(&CURRENT.replace("    a < b\n", "    let _ = 3;\n    a < b\n"));
        let whole_body = |(unit, op, ..): &(String, Operator, String, String, usize)| {
            unit == "store::claim::old" && *op == Operator::FnBody
        };
        let kept = |m: &BTreeMap<_, String>| -> BTreeMap<_, String> {
            m.iter()
                .filter(|(k, _)| !whole_body(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        assert_eq!(kept(&inside), kept(&before));
        assert!(
            kept(&before)
                .keys()
                .any(|(unit, ..)| unit == "store::claim::new")
        );
        assert!(
            kept(&before)
                .keys()
                .any(|(unit, ..)| unit == "store::claim::old")
        );
    }

    #[test]
    fn an_edit_of_the_mutated_text_renames_its_mutants() {
        let before = ids(CURRENT);
        // The statement's conjunct about the queue reworded: the mutants
        // whose original text holds it are other mutations, the rest of
        // the statement's keep their ids.
        let after = ids(&CURRENT.replace("queue = $1", "queue = $2"));
        let old: BTreeSet<&String> = before.values().collect();
        let new: BTreeSet<&String> = after.values().collect();
        let gone: Vec<&str> = before
            .iter()
            .filter(|(_, id)| !new.contains(id))
            .map(|((_, _, original, _, _), _)| original.as_str())
            .collect();
        let came: Vec<&str> = after
            .iter()
            .filter(|(_, id)| !old.contains(id))
            .map(|((_, _, original, _, _), _)| original.as_str())
            .collect();
        assert!(!gone.is_empty());
        assert!(gone.iter().all(|o| o.contains("$1")), "{gone:?}");
        assert!(came.iter().all(|o| o.contains("$2")), "{came:?}");
        assert_eq!(gone.len(), came.len());
        assert!(before.len() > gone.len());
    }

    #[test]
    fn two_identical_mutations_in_one_unit_have_their_own_ids() {
        let text = "pub fn twice(a: u32, b: u32) -> bool {\n    a < b && b < a\n}\n";
        let all = generate(&tree(&[("src/x.rs", text)]), &Scope::All);
        let same: Vec<&Mutant> = all
            .iter()
            .filter(|m| m.operator == Operator::BinOp && m.original == "<" && m.replacement == "<=")
            .collect();
        assert_eq!(same.len(), 2, "{all:?}");
        assert_ne!(same[0].id, same[1].id);
        // And each keeps its own when a line is added above both.
        let moved = generate(
            &tree(&[("src/x.rs", &format!("// moved\n{text}"))]),
            &Scope::All,
        );
        let ids = |ms: &[Mutant]| ms.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&moved), ids(&all));
    }

    #[test]
    fn a_mutant_applies_and_shows_its_line() {
        let current = tree(&[("src/x.rs", CURRENT)]);
        let all = generate(&current, &Scope::All);
        let m = all
            .iter()
            .find(|m| m.operator == Operator::DeleteNot)
            .expect("a ! to delete");
        let text = &current.files["src/x.rs"];
        assert!(m.apply(text).contains("if ready(a) { a + 1 }"));
        assert_eq!(
            m.one_line(text),
            "-if !ready(a) { a + 1 } else { a } +if ready(a) { a + 1 } else { a }"
        );
        assert!(m.diff(text).contains("+    if ready(a)"));
        let listing = render_list(&all, &current);
        assert!(listing.contains(&format!(
            "{}  src/x.rs:{}  delete-not  x::new",
            m.id, m.line
        )));
    }
}
