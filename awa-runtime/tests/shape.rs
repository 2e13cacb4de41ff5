//! The shape of `awa-runtime/src`: imports only look down, so no two
//! modules import each other.
//!
//! Each top-level module has a rank, lowest first: the leaf words every
//! layer shares, the error type, connections, the store, the events that
//! carry the store's words, migrations, and the processes that drive them
//! (maintenance, worker, producer) up to `cli`. A module may name
//! (`crate::...` or `super::` up to the root) only modules of a lower
//! rank; modules that share a rank name none of each other. There is no
//! allow-list: an arrow that runs upward or sideways fails this test, and
//! the fix is to move the shared type down (as `locks` and `outcome`
//! were) or to pass the value down.
//!
//! Inside a module (`store`, `events`) the sub-modules have no ranks, but
//! no two of them may need each other: an import cycle among them fails
//! [`no_cycle_among_the_sub_modules_of_any_module`], naming the cycle and
//! the file and line of each arrow in it (`store`'s rings and authority
//! shared the rotation ledger that way, until it moved into a leaf).
//!
//! Test code (`#[cfg(test)]` items and the files they declare) is left
//! out, and the files are tokenized, as in rehearsal's `tests/shape.rs`
//! (both use `awa_harness::shape`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use awa_harness::shape::cycles::{cycles, sibling_arrows, sibling_arrows_of};
use awa_harness::shape::{self, Arrow, first_arrows, show};

/// Every top-level module of `awa-runtime/src`, lowest rank first, with
/// the reason for its place. Modules on one line share a rank.
const RANKS: &[(&[&str], &str)] = &[
    (
        &["failpoint"],
        "seeded defects: imports nothing, read by every module that carries one (redact too)",
    ),
    (
        &["duration", "redact", "version", "locks", "outcome"],
        "leaves: durations, secrets hidden, version facts, lock words, how an attempt ends",
    ),
    (
        &["error"],
        "the runtime's error: carries locks::Blocked, redacts what it says",
    ),
    (&["db"], "connections that come back, and their identity"),
    (
        &["timings", "gate"],
        "over a connection: the timings (db's defaults), the start gate",
    ),
    (
        &["workload"],
        "the rehearsal job kind: its modes, backoff and handler",
    ),
    (
        &["store"],
        "the storage: rings, claims, closes, rescue, the authority, the read and audit APIs",
    ),
    (
        &["events"],
        "JSON-lines events, which carry the store's words",
    ),
    (
        &["schema"],
        "migrations, which promote the store's authority",
    ),
    (
        &["maintenance"],
        "leadership and its duties over the store, reported as events",
    ),
    (
        &["worker"],
        "claims, runs and closes attempts; starts maintenance",
    ),
    (
        &["producer"],
        "awa produce: enqueues at a rate, beside a worker",
    ),
    (&["cli"], "flags and subcommands over every module"),
];

/// Items of the crate root that paths name instead of their module.
const ROOT_ITEMS: &[(&str, Option<&str>)] = &[];

/// What under `src` is no module: the crate root and the `awa` binary.
const NOT_MODULES: &[&str] = &["lib", "bin"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rank_of(module: &str) -> Option<usize> {
    RANKS
        .iter()
        .position(|(modules, _)| modules.contains(&module))
}

/// Arrows to a module of the file's own rank or a higher one.
fn not_down(arrows: Vec<Arrow>) -> Vec<Arrow> {
    first_arrows(arrows)
        .into_values()
        .filter(|a| match (rank_of(&a.from), rank_of(&a.to)) {
            (Some(from), Some(to)) => to >= from,
            _ => false,
        })
        .collect()
}

#[test]
fn every_module_has_a_rank() {
    let modules = shape::modules(&src(), NOT_MODULES);
    let ranked: BTreeSet<String> = RANKS
        .iter()
        .flat_map(|(m, _)| m.iter().map(|s| (*s).to_owned()))
        .collect();
    let unranked: Vec<_> = modules.difference(&ranked).collect();
    let gone: Vec<_> = ranked.difference(&modules).collect();
    assert!(
        unranked.is_empty() && gone.is_empty(),
        "give every module of src a rank in RANKS (tests/shape.rs): unranked {unranked:?}, ranked but gone {gone:?}"
    );
}

#[test]
fn every_name_is_a_module() {
    let unknown: Vec<Arrow> = shape::arrows(&src(), NOT_MODULES, ROOT_ITEMS)
        .into_iter()
        .filter(|a| rank_of(&a.to).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "crate::NAME that is no ranked module:{}",
        show(&unknown.iter().collect::<Vec<_>>())
    );
}

#[test]
fn imports_only_look_down() {
    let bad = not_down(shape::arrows(&src(), NOT_MODULES, ROOT_ITEMS));
    assert!(
        bad.is_empty(),
        "imports that do not look down, the start of an import cycle (move the shared type down, \
         into a leaf or the lower module, or pass the value down):{}",
        show(&bad.iter().collect::<Vec<_>>())
    );
}

#[test]
fn an_old_cycle_would_be_seen_again() {
    // The arrows the store and the error type once had upward.
    let text = "use crate::error::{Error, Result};\n\
                pub fn f() -> crate::events::AttemptOutcome { todo!() }\n\
                const K: i64 = crate::maintenance::LEADER_LOCK_KEY;\n";
    let (arrows, _) = shape::scan("store/finish.rs", text, ROOT_ITEMS);
    let bad: Vec<String> = not_down(arrows).into_iter().map(|a| a.to).collect();
    assert_eq!(bad, ["events", "maintenance"]);
    let (arrows, _) = shape::scan(
        "error.rs",
        "Blocked(Box<crate::store::lock_wait::Blocked>),",
        ROOT_ITEMS,
    );
    assert_eq!(not_down(arrows)[0].to, "store");
    // Modules sharing a rank name none of each other.
    let (arrows, _) = shape::scan("locks.rs", "use crate::outcome::Outcome;", ROOT_ITEMS);
    assert_eq!(not_down(arrows)[0].to, "outcome");
}

#[test]
fn no_cycle_among_the_sub_modules_of_any_module() {
    let found = cycles(&sibling_arrows(&src(), NOT_MODULES));
    let shown: String = found.iter().map(|c| format!("\n  {c}")).collect();
    assert!(
        found.is_empty(),
        "import cycles among sub-modules (move the piece both sides need down, into a leaf \
         sub-module, or turn one arrow around):{shown}"
    );
}

#[test]
fn the_old_store_cycle_would_be_seen_again() {
    // The flip (authority) backfilled through rings, which reads the authority.
    let files = [
        ("lib.rs", "pub mod store;\n"),
        ("store/mod.rs", "pub mod authority;\npub mod rings;\n"),
        (
            "store/authority.rs",
            "async fn flip_ring() { super::rings::backfill().await; }\n",
        ),
        (
            "store/rings.rs",
            "use super::authority::{self, Authority};\npub async fn backfill() {}\n",
        ),
    ];
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
        .collect();
    let found = cycles(&sibling_arrows_of(&files));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].members, ["authority", "rings"]);
    let shown = found[0].to_string();
    assert!(
        shown.contains("src/store/authority.rs:1: store::authority -> store::rings")
            && shown.contains("src/store/rings.rs:1: store::rings -> store::authority"),
        "{shown}"
    );
}
