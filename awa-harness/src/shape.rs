//! The shape of a crate's `src`: which top-level module each file names.
//!
//! Both crates' `tests/shape.rs` give their top-level modules ranks and
//! fail on an import that runs upward; this is what they share. A file
//! names a module with `crate::MODULE` or `super::` up to the root; the
//! arrow goes from the file's top-level module to the one named.
//!
//! Test code (`#[cfg(test)]` items and the files they declare) is left
//! out: a test may wire upper modules to check a lower one.
//!
//! Inside a module, [`cycles`] finds the arrows between its sub-modules
//! and the cycles they make; both tests fail on any.
//!
//! The files are tokenized (proc-macro2), so comments, doc links and
//! strings never count, and paths inside macro calls do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

pub mod cycles;

/// Items of the crate root that paths name instead of their module: the
/// module (`None`: the item is the root's own, not an arrow).
pub type RootItems = [(&'static str, Option<&'static str>)];

/// The top-level modules of `src`: its `.rs` files and folders, but
/// `not_modules`.
pub fn modules(src: &Path, not_modules: &[&str]) -> BTreeSet<String> {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display())) {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if (path.is_dir() || path.extension().is_some_and(|e| e == "rs"))
            && !not_modules.contains(&name.as_str())
        {
            modules.insert(name);
        }
    }
    modules
}

/// One `crate::MODULE` (or `super::` up to the root) reference.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrow {
    /// The file, relative to `src`, with `/` separators.
    pub file: String,
    /// The top-level module the file belongs to.
    pub from: String,
    /// The top-level module it names.
    pub to: String,
    /// The first line that names it.
    pub line: usize,
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

/// Arrows of one file (`file` relative to `src`), and the files its
/// `#[cfg(test)] mod NAME;` declare. `root_items` maps items of the crate
/// root that paths name instead of their module to that module (`None`:
/// not an arrow).
pub fn scan(file: &str, text: &str, root_items: &RootItems) -> (Vec<Arrow>, Vec<String>) {
    let tokens: TokenStream = text
        .parse()
        .unwrap_or_else(|e| panic!("{file} does not tokenize: {e:?}"));
    let path = module_path(file);
    let mut scanner = Scanner {
        file,
        root_items,
        from: path[0].clone(),
        arrows: Vec::new(),
    };
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut test_files = Vec::new();
    walk(&tokens, &path, true, &mut scanner, &mut test_files);
    (scanner.arrows, test_files)
}

struct Scanner<'f> {
    file: &'f str,
    root_items: &'f RootItems,
    from: String,
    arrows: Vec<Arrow>,
}

impl Visit for Scanner<'_> {
    /// `crate::` and `super::` up to the root name a top-level module.
    fn token(
        &mut self,
        tokens: &[TokenTree],
        i: usize,
        here: &[String],
        _items: bool,
    ) -> Option<usize> {
        match &tokens[i] {
            TokenTree::Ident(id) if *id == "crate" && !after_dollar(tokens, i) => {
                self.path_from_root(tokens, i + 1);
                Some(i + 1)
            }
            TokenTree::Ident(id) if *id == "super" && !after_colons(tokens, i) => {
                // `super::super::x`: the root is reached after as many
                // of them as the module is deep.
                let mut at = i;
                let mut ups = 0;
                while matches!(&tokens.get(at), Some(TokenTree::Ident(s)) if *s == "super")
                    && is_colons(tokens, at + 1)
                {
                    ups += 1;
                    at += 3;
                }
                if ups > 0 && ups >= here.len() {
                    // `at - 2`: the `::` after the last `super`.
                    self.path_from_root(tokens, at - 2);
                }
                Some(at.max(i + 1))
            }
            _ => None,
        }
    }
}

impl Scanner<'_> {
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
        let to = match self.root_items.iter().find(|(item, _)| *item == to) {
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
}

/// What a walk over one file's tokens hands to the reader it walks for.
trait Visit {
    /// An inline `mod NAME { ... }` is entered, as module `here`.
    fn module(&mut self, _here: &[String]) {}

    /// Token `i` of a sequence in module `here` (`items`: at item level,
    /// where a `use` imports into the module): the index to go on from
    /// when the reader took a path there, else `None`.
    fn token(
        &mut self,
        tokens: &[TokenTree],
        i: usize,
        here: &[String],
        items: bool,
    ) -> Option<usize>;
}

/// Walks a token sequence in module `here` for `visit`: test items are
/// skipped (the files their `mod NAME;` declare go to `test_files`),
/// inline modules and every group are walked into.
fn walk(
    tokens: &[TokenTree],
    here: &[String],
    items: bool,
    visit: &mut impl Visit,
    test_files: &mut Vec<String>,
) {
    let mut i = 0;
    while i < tokens.len() {
        if is_cfg_test(tokens, i) {
            i = skip_test_item(tokens, i + 2, here, test_files);
            continue;
        }
        if let (Some(TokenTree::Ident(m)), Some(TokenTree::Ident(name)), Some(TokenTree::Group(g))) =
            (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
            && *m == "mod"
            && g.delimiter() == Delimiter::Brace
        {
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            let mut nested = here.to_vec();
            nested.push(name.to_string());
            visit.module(&nested);
            walk(&inner, &nested, true, visit, test_files);
            i += 3;
            continue;
        }
        if let Some(next) = visit.token(tokens, i, here, items) {
            i = next;
            continue;
        }
        if let TokenTree::Group(g) = &tokens[i] {
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            walk(&inner, here, false, visit, test_files);
        }
        i += 1;
    }
}

/// Skips the item after `#[cfg(test)]` (and its other attributes) in
/// module `here`; returns the index after it. A `mod NAME;` declares a
/// test file, pushed to `test_files` (its path under `src`, no `.rs`).
fn skip_test_item(
    tokens: &[TokenTree],
    mut i: usize,
    here: &[String],
    test_files: &mut Vec<String>,
) -> usize {
    while matches!(&tokens.get(i), Some(TokenTree::Punct(p)) if p.as_char() == '#') {
        i += 2;
    }
    let start = i;
    while let Some(t) = tokens.get(i) {
        i += 1;
        match t {
            TokenTree::Punct(p) if p.as_char() == ';' => {
                let words: Vec<String> = tokens[start..i]
                    .iter()
                    .filter_map(|t| match t {
                        TokenTree::Ident(id) if id != "pub" => Some(id.to_string()),
                        _ => None,
                    })
                    .collect();
                if let [m, name] = &words[..]
                    && m == "mod"
                {
                    let mut file = here.join("/");
                    if !file.is_empty() {
                        file.push('/');
                    }
                    file.push_str(name);
                    test_files.push(file);
                }
                return i;
            }
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => return i,
            _ => {}
        }
    }
    i
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
/// `not_modules` names what under `src` is no module (`lib`, `main`, a
/// `bin` folder).
pub fn arrows(src: &Path, not_modules: &[&str], root_items: &RootItems) -> Vec<Arrow> {
    let root = src;
    let mut files = Vec::new();
    rust_files(root, root, &mut files);
    let mut scanned = Vec::new();
    let mut test_files = BTreeSet::new();
    for file in files {
        let top = file.split('/').next().unwrap_or(&file);
        if not_modules.contains(&top.trim_end_matches(".rs")) {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&file)).expect("readable source");
        let (arrows, tests) = scan(&file, &text, root_items);
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
pub fn first_arrows(arrows: Vec<Arrow>) -> BTreeMap<(String, String), Arrow> {
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

/// The arrows, one a line, as `src/FILE:LINE: FROM -> TO`.
pub fn show(arrows: &[&Arrow]) -> String {
    arrows
        .iter()
        .map(|a| format!("\n  src/{}:{}: {} -> {}", a.file, a.line, a.from, a.to))
        .collect()
}
