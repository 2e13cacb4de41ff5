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
//! The files are tokenized (proc-macro2), so comments, doc links and
//! strings never count, and paths inside macro calls do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

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
    (&["plan"], "the matrix expanded into cells by the seed"),
    (&["servers"], "PostgreSQL majors multiply a plan's cells"),
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
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "driver/run.rs",
        "error",
        "returns the library's Error, not one of its own",
    ),
    (
        "image/command.rs",
        "error",
        "`rehearse image`, a subcommand kept beside its stage",
    ),
    (
        "image/command.rs",
        "fleet",
        "`rehearse image`, a subcommand kept beside its stage",
    ),
    (
        "mutate/mod.rs",
        "error",
        "returns the library's Error, not one of its own",
    ),
    (
        "schedule.rs",
        "report",
        "--jobs auto reads a past report.json's durations",
    ),
    (
        "servers.rs",
        "error",
        "returns the library's Error, not one of its own",
    ),
    (
        "stream.rs",
        "stress",
        "RunStarted carries stress::StressInfo",
    ),
];

/// One `crate::MODULE` (or `super::` up to the root) reference.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Arrow {
    /// The file, relative to `src`, with `/` separators.
    file: String,
    /// The top-level module the file belongs to.
    from: String,
    /// The top-level module it names.
    to: String,
    /// The first line that names it.
    line: usize,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rank_of(module: &str) -> Option<usize> {
    RANKS
        .iter()
        .position(|(modules, _)| modules.contains(&module))
}

/// Every `.rs` file under `dir`, relative to `root`, sorted.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The module path of a file: `driver/steps/kill.rs` is
/// `[driver, steps, kill]`, `driver/mod.rs` is `[driver]`.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Arrows of one file, and the files its `#[cfg(test)] mod NAME;` declare.
fn scan(file: &str, text: &str) -> (Vec<Arrow>, Vec<String>) {
    let tokens: TokenStream = text
        .parse()
        .unwrap_or_else(|e| panic!("{file} does not tokenize: {e:?}"));
    let path = module_path(file);
    let mut scanner = Scanner {
        file,
        from: path[0].clone(),
        arrows: Vec::new(),
        test_files: Vec::new(),
    };
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    scanner.walk(&tokens, path.len(), &path);
    (scanner.arrows, scanner.test_files)
}

struct Scanner<'f> {
    file: &'f str,
    from: String,
    arrows: Vec<Arrow>,
    test_files: Vec<String>,
}

impl Scanner<'_> {
    /// Walks a token sequence at module `depth` below the root (`here`
    /// names the module, for files declared by `#[cfg(test)] mod NAME;`).
    fn walk(&mut self, tokens: &[TokenTree], depth: usize, here: &[String]) {
        let mut i = 0;
        while i < tokens.len() {
            if is_cfg_test(tokens, i) {
                i = self.skip_test_item(tokens, i + 2, here);
                continue;
            }
            match &tokens[i] {
                TokenTree::Ident(id) if *id == "mod" => {
                    if let (Some(TokenTree::Ident(_)), Some(TokenTree::Group(g))) =
                        (tokens.get(i + 1), tokens.get(i + 2))
                        && g.delimiter() == Delimiter::Brace
                    {
                        let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                        let mut nested = here.to_vec();
                        nested.push(tokens[i + 1].to_string());
                        self.walk(&inner, depth + 1, &nested);
                        i += 3;
                        continue;
                    }
                }
                TokenTree::Ident(id) if *id == "crate" && !after_dollar(tokens, i) => {
                    self.path_from_root(tokens, i + 1);
                }
                TokenTree::Ident(id) if *id == "super" && !after_colons(tokens, i) => {
                    // `super::super::x`: the root is reached after `depth` of them.
                    let mut at = i;
                    let mut ups = 0;
                    while matches!(&tokens.get(at), Some(TokenTree::Ident(s)) if *s == "super")
                        && is_colons(tokens, at + 1)
                    {
                        ups += 1;
                        at += 3;
                    }
                    if ups > 0 && ups >= depth {
                        // `at - 2`: the `::` after the last `super`.
                        self.path_from_root(tokens, at - 2);
                    }
                    i = at.max(i + 1);
                    continue;
                }
                TokenTree::Group(g) => {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    self.walk(&inner, depth, here);
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// After `crate` (at `at`, `::` follows): the module or modules named.
    fn path_from_root(&mut self, tokens: &[TokenTree], at: usize) {
        if !is_colons(tokens, at) {
            return; // `pub(crate)`, `$crate` alone
        }
        match tokens.get(at + 2) {
            Some(TokenTree::Ident(name)) => self.arrow(name),
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                // `crate::{a::X, b}`: the first name of each entry.
                let mut first = true;
                for t in g.stream() {
                    match &t {
                        TokenTree::Ident(name) if first => {
                            first = false;
                            if name != "self" {
                                self.arrow(name);
                            }
                        }
                        TokenTree::Punct(p) if p.as_char() == ',' => first = true,
                        _ => first = false,
                    }
                }
            }
            _ => {}
        }
    }

    fn arrow(&mut self, name: &proc_macro2::Ident) {
        let to = name.to_string();
        let to = match ROOT_ITEMS.iter().find(|(item, _)| *item == to) {
            Some((_, Some(module))) => (*module).to_owned(),
            Some((_, None)) => return,
            None => to,
        };
        if to == self.from {
            return;
        }
        self.arrows.push(Arrow {
            file: self.file.to_owned(),
            from: self.from.clone(),
            to,
            line: name.span().start().line,
        });
    }

    /// Skips the item after `#[cfg(test)]` (and its other attributes);
    /// returns the index after it.
    fn skip_test_item(&mut self, tokens: &[TokenTree], mut i: usize, here: &[String]) -> usize {
        while matches!(&tokens.get(i), Some(TokenTree::Punct(p)) if p.as_char() == '#') {
            i += 2;
        }
        let start = i;
        while let Some(t) = tokens.get(i) {
            i += 1;
            match t {
                TokenTree::Punct(p) if p.as_char() == ';' => {
                    // `mod NAME;`: the file it declares is test code too.
                    if let [TokenTree::Ident(m), TokenTree::Ident(name), ..] = &tokens[start..]
                        .iter()
                        .filter(|t| !matches!(t, TokenTree::Ident(v) if v == "pub"))
                        .filter(|t| !matches!(t, TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis))
                        .cloned()
                        .collect::<Vec<_>>()[..]
                        && m == "mod"
                    {
                        let mut file = here.join("/");
                        file.push('/');
                        file.push_str(&name.to_string());
                        self.test_files.push(file);
                    }
                    return i;
                }
                TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => return i,
                _ => {}
            }
        }
        i
    }
}

/// `#[cfg(test)]` starts at `i`.
fn is_cfg_test(tokens: &[TokenTree], i: usize) -> bool {
    let (Some(TokenTree::Punct(hash)), Some(TokenTree::Group(g))) =
        (tokens.get(i), tokens.get(i + 1))
    else {
        return false;
    };
    hash.as_char() == '#'
        && g.delimiter() == Delimiter::Bracket
        && g.stream().to_string().replace(' ', "") == "cfg(test)"
}

/// `::` starts at `i`.
fn is_colons(tokens: &[TokenTree], i: usize) -> bool {
    matches!(
        (tokens.get(i), tokens.get(i + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}

/// The token before `i` is `::` (so `super` continues a path).
fn after_colons(tokens: &[TokenTree], i: usize) -> bool {
    i >= 2 && is_colons(tokens, i - 2)
}

/// `$crate` in a macro body.
fn after_dollar(tokens: &[TokenTree], i: usize) -> bool {
    i >= 1 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$')
}

/// Every arrow between top-level modules in `src`, test code left out.
fn arrows() -> Vec<Arrow> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &root, &mut files);
    let mut scanned = Vec::new();
    let mut test_files = BTreeSet::new();
    for file in files {
        if file == "lib.rs" || file == "main.rs" {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&file)).expect("readable source");
        let (arrows, tests) = scan(&file, &text);
        test_files.extend(tests);
        scanned.push((file, arrows));
    }
    let is_test = |file: &str| {
        let stem = file.trim_end_matches(".rs").trim_end_matches("/mod");
        test_files
            .iter()
            .any(|t| stem == t || stem.starts_with(&format!("{t}/")))
    };
    scanned
        .into_iter()
        .filter(|(file, _)| !is_test(file))
        .flat_map(|(_, arrows)| arrows)
        .collect()
}

/// One arrow per (file, module named), at its first line.
fn first_arrows(arrows: Vec<Arrow>) -> BTreeMap<(String, String), Arrow> {
    let mut out: BTreeMap<(String, String), Arrow> = BTreeMap::new();
    for a in arrows {
        let key = (a.file.clone(), a.to.clone());
        match out.get(&key) {
            Some(seen) if seen.line <= a.line => {}
            _ => {
                out.insert(key, a);
            }
        }
    }
    out
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

fn show(arrows: &[&Arrow]) -> String {
    arrows
        .iter()
        .map(|a| format!("\n  src/{}:{}: {} -> {}", a.file, a.line, a.from, a.to))
        .collect()
}

#[test]
fn every_module_has_a_rank() {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src()).expect("src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
            modules.insert(name);
        }
    }
    modules.remove("lib");
    modules.remove("main");
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
