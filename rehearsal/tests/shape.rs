//! The shape of `rehearsal/src`: imports only look down the pipeline.
//!
//! Each top-level module has a rank, lowest first, in the order data
//! flows: the vocabulary every stage shares, `matrix`, `plan`, the
//! contract the driver writes (`observe`, `stream`), the driver and its
//! tools, `reconcile`, `report`, the subcommands, `cli` and `commands`.
//! A module may name (`crate::...` or `super::` up to the root) a module
//! of its own rank or a lower one. An arrow that runs upward fails this
//! test unless [`ALLOWED`] lists it with the reason it is still there;
//! that list only shrinks, and an entry whose arrow is gone fails too.
//!
//! Test code (`#[cfg(test)]` items and the files they declare) is left
//! out: a test may wire upper stages to check a lower one.
//!
//! The files are tokenized (`awa_harness::shape`, over proc-macro2), so
//! comments, doc links and strings never count, and paths inside macro
//! calls do.
//!
//! Inside a module the sub-modules have no ranks, but no two of them may
//! need each other: an import cycle among the sub-modules of any module
//! (`driver`, `driver::steps`, `mutate`, ...) fails
//! [`no_cycle_among_the_sub_modules_of_any_module`], naming the cycle
//! and the file and line of each arrow in it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use awa_harness::shape::cycles::{cycles, sibling_arrows, sibling_arrows_of};
use awa_harness::shape::{self, Arrow, first_arrows, show};

/// Every top-level module of `rehearsal/src`, lowest rank first, with the
/// reason for its place. Modules on one line share a rank.
const RANKS: &[(&[&str], &str)] = &[
    (
        &["vocab", "stamp", "pg"],
        "leaves: the words every stage shares, UTC stamps, a PostgreSQL connection",
    ),
    (&["matrix"], "the first stage: matrix.toml as types"),
    (
        &["schema"],
        "the schema comparison, judged by matrix's [schema]: steps and reconcile run it, observations carry its verdict",
    ),
    (
        &["plan"],
        "the matrix expanded into cells by the seed, per PostgreSQL major, cut to a share",
    ),
    (
        &["servers"],
        "the PostgreSQL servers a plan's cells are planned on, as the driver and report name them",
    ),
    (
        &["observe"],
        "what a cell observed: the contract the driver writes and reconcile reads",
    ),
    (
        &["stream"],
        "the typed events from the driver to every reader; they carry plans and observations",
    ),
    (
        &["artifacts"],
        "the driver's first tool: each matrix artifact obtained once",
    ),
    (
        &["planfile"],
        "plan.json: a plan with the digests of the artifacts it ran",
    ),
    (
        &["image"],
        "container images of awa, resolved from the artifacts (the docker backend's input)",
    ),
    (
        &["fleet"],
        "the backend seam: runs artifacts as processes or images as containers",
    ),
    (
        &["stress"],
        "the busy processes beside a run, started as fleet processes are",
    ),
    (
        &["monitor"],
        "a running cell's invariants sampled onto the stream",
    ),
    (
        &["schedule"],
        "the order and admission of the cells the driver follows",
    ),
    (&["driver"], "runs cells with the tools below, sends events"),
    (&["reconcile"], "judges a cell's database and observations"),
    (
        &["selftest"],
        "scores reconcile's detections against the seeded defects; the report carries the score",
    ),
    (
        &["report"],
        "the stream collected into a RunReport and rendered",
    ),
    (
        &[
            "evidence",
            "repeat",
            "merge",
            "verify",
            "doctor",
            "partition",
        ],
        "over whole runs and reports: run folders checked, joined, repeated, shared out; the machine inspected",
    ),
    (
        &["mutate"],
        "rehearse mutate: runs whole rehearsals as child processes",
    ),
    (
        &["error"],
        "the library's one error: wraps every stage's error, so above them all",
    ),
    (
        &["exit"],
        "exit codes: the one exhaustive match over the library's error",
    ),
    (&["pipeline"], "rehearse run wired: every stage in order"),
    (&["cli"], "flags (clap), parsed into the stages' types"),
    (
        &["commands"],
        "the subcommands dispatched from the parsed flags",
    ),
];

/// Items of the crate root that paths name instead of their module.
const ROOT_ITEMS: &[(&str, Option<&str>)] = &[
    ("Error", Some("error")),
    ("Environment", Some("commands")),
    ("execute", Some("commands")),
    ("VERSION", None),
];

/// Upward arrows still there: (file under src, module it names, why).
/// Remove an entry when its arrow goes; never add one.
const ALLOWED: &[(&str, &str, &str)] = &[];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// What under `src` is no module.
const NOT_MODULES: &[&str] = &["lib", "main"];

fn rank_of(module: &str) -> Option<usize> {
    RANKS
        .iter()
        .position(|(modules, _)| modules.contains(&module))
}

fn scan(file: &str, text: &str) -> (Vec<Arrow>, Vec<String>) {
    shape::scan(file, text, ROOT_ITEMS)
}

/// Every arrow between top-level modules in `src`, test code left out.
fn arrows() -> Vec<Arrow> {
    shape::arrows(&src(), NOT_MODULES, ROOT_ITEMS)
}

/// Arrows to a module of a higher rank than the file's own.
fn upward(arrows: Vec<Arrow>) -> Vec<Arrow> {
    first_arrows(arrows)
        .into_values()
        .filter(|a| match (rank_of(&a.from), rank_of(&a.to)) {
            (Some(from), Some(to)) => to > from,
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
fn every_name_is_a_module_or_a_root_item() {
    let unknown: Vec<Arrow> = arrows()
        .into_iter()
        .filter(|a| rank_of(&a.to).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "crate::NAME that is neither a ranked module nor in ROOT_ITEMS:{}",
        show(&unknown.iter().collect::<Vec<_>>())
    );
}

#[test]
fn imports_only_look_down() {
    let up = upward(arrows());
    let new: Vec<&Arrow> = up
        .iter()
        .filter(|a| {
            !ALLOWED
                .iter()
                .any(|(file, to, _)| *file == a.file && *to == a.to)
        })
        .collect();
    eprintln!(
        "{} upward arrows, {} of them allowed",
        up.len(),
        up.len() - new.len()
    );
    assert!(
        new.is_empty(),
        "imports that run up the pipeline (move the shared type down, into vocab or the lower stage, \
         or pass the value down):{}",
        show(&new)
    );
}

#[test]
fn the_allow_list_only_holds_arrows_still_there() {
    let up = upward(arrows());
    let stale: Vec<_> = ALLOWED
        .iter()
        .filter(|(file, to, _)| !up.iter().any(|a| a.file == *file && a.to == *to))
        .map(|(file, to, _)| format!("{file} -> {to}"))
        .collect();
    assert!(
        stale.is_empty(),
        "these arrows are gone: remove them from ALLOWED in tests/shape.rs: {stale:?}"
    );
}

#[test]
fn an_upward_import_is_seen_wherever_it_is_written() {
    let text = r#"
        //! A doc link to [`crate::cli`] is no import.
        use crate::matrix::Cell;
        use crate::{plan::Plan, report::{self, RunReport}};
        fn f() -> String {
            let s = "crate::commands";
            format!("{}", crate::pipeline::NAME)
        }
        #[cfg(test)]
        mod tests {
            use crate::exit::ALL_MET;
        }
    "#;
    let (arrows, _) = scan("fleet/choice.rs", text);
    let named: Vec<(&str, usize)> = arrows.iter().map(|a| (a.to.as_str(), a.line)).collect();
    assert_eq!(
        named,
        [("matrix", 3), ("plan", 4), ("report", 4), ("pipeline", 7)]
    );
    let up: Vec<String> = upward(arrows).into_iter().map(|a| a.to).collect();
    assert_eq!(up, ["pipeline", "report"]);
}

#[test]
fn super_up_to_the_root_is_an_arrow_and_within_a_module_is_not() {
    let text = "use super::super::cli::Backend;\nuse super::cell::Cell;\n";
    let names = |file| -> Vec<String> { scan(file, text).0.into_iter().map(|a| a.to).collect() };
    assert!(names("driver/steps/kill.rs").is_empty());
    assert_eq!(names("driver/run.rs"), ["cli"]);
    let (arrows, _) = scan("plan.rs", "use super::matrix::Cell;");
    assert_eq!(arrows[0].to, "matrix");
}

#[test]
fn test_files_declared_under_cfg_test_are_left_out() {
    let text = "#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod fixture;\npub mod model;\n";
    let (_, tests) = scan("matrix/mod.rs", text);
    assert_eq!(tests, ["matrix/tests", "matrix/fixture"]);
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
fn a_cycle_among_sub_modules_is_seen_with_each_arrow() {
    // The driver's old cycle: the cell runs the steps, and a step named
    // the cell through the re-export in driver/mod.rs.
    let files = [
        ("lib.rs", "pub mod driver;\n"),
        (
            "driver/mod.rs",
            "mod cell;\nmod probe;\nmod steps;\npub use cell::Cell;\n",
        ),
        (
            "driver/cell.rs",
            "use super::probe::Probe;\nuse super::steps;\n",
        ),
        ("driver/probe.rs", "pub struct Probe;\n"),
        ("driver/steps/mod.rs", "mod kill;\n"),
        (
            "driver/steps/kill.rs",
            "// crate::driver::probe in a comment is no arrow\n\
             fn f(c: &crate::driver::Cell) {}\n\
             #[cfg(test)]\nmod tests { use super::super::super::probe::Probe; }\n",
        ),
    ];
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
        .collect();
    let arrows = sibling_arrows_of(&files);
    let named: Vec<(&str, &str, &str, usize)> = arrows
        .iter()
        .map(|a| (a.file.as_str(), a.from.as_str(), a.to.as_str(), a.line))
        .collect();
    assert_eq!(
        named,
        [
            ("driver/cell.rs", "cell", "probe", 1),
            ("driver/cell.rs", "cell", "steps", 2),
            ("driver/steps/kill.rs", "steps", "cell", 2),
        ]
    );
    let found = cycles(&arrows);
    assert_eq!(found.len(), 1);
    let shown = found[0].to_string();
    assert!(
        shown.starts_with("driver: {cell, steps}: cell -> steps -> cell")
            && shown.contains("src/driver/cell.rs:2: driver::cell -> driver::steps")
            && shown.contains("src/driver/steps/kill.rs:2: driver::steps -> driver::cell"),
        "{shown}"
    );
}
