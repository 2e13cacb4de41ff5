//! Import cycles among the sub-modules of any module.
//!
//! The ranks of both crates' `tests/shape.rs` order the top-level modules;
//! inside one (`driver`, `mutate`, `store`) the files may name each other
//! in any order, so long as no two of them need each other. This finds the
//! arrows between siblings: a file under `driver/steps/` naming
//! `super::super::cell::X` is an arrow `driver::steps -> driver::cell`,
//! one under `driver/steps/kill.rs` naming `super::setup::Y` an arrow
//! `driver::steps::kill -> driver::steps::setup`. A name a module re-exports
//! (`pub use ledger::Cancel` in `driver/mod.rs`) counts as the sibling that
//! defines it; a name a module defines itself (`super::CellContext`) is the
//! parent's and no arrow between siblings.
//!
//! Paths are read as rustc reads them: from `crate`, from `super` and
//! `self`, and from a bare name that is a sub-module of the file's module
//! (`steps::run` in `driver/mod.rs`), in `use` trees and in code alike.
//! Test code is left out, as in [`super::arrows`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use proc_macro2::{Delimiter, TokenStream, TokenTree};

use super::{Visit, after_colons, after_dollar, is_colons, module_path, rust_files, walk};

/// A module path from the crate root: `["driver", "steps"]`.
pub type ModPath = Vec<String>;

/// One file naming a sibling of its own module (or of an ancestor).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SiblingArrow {
    /// The module the two siblings are in (empty: the crate root).
    pub parent: ModPath,
    /// The sibling the file is in.
    pub from: String,
    /// The sibling it names.
    pub to: String,
    /// The file, relative to `src`, with `/` separators.
    pub file: String,
    /// The line that names it (the first, per file and sibling).
    pub line: usize,
}

impl SiblingArrow {
    fn at(&self, name: &str) -> String {
        let mut p = self.parent.clone();
        p.push(name.to_owned());
        p.join("::")
    }
}

/// One cycle: siblings of one module that reach each other.
#[derive(Clone, Debug)]
pub struct Cycle {
    /// The module they are in (empty: the crate root).
    pub parent: ModPath,
    /// The siblings in the cycle, sorted.
    pub members: Vec<String>,
    /// One way round, from the first member back to it: each arrow with
    /// its file and line.
    pub round: Vec<SiblingArrow>,
    /// Every arrow between two members.
    pub arrows: Vec<SiblingArrow>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parent = if self.parent.is_empty() {
            "crate".to_owned()
        } else {
            self.parent.join("::")
        };
        write!(f, "{parent}: {{{}}}: ", self.members.join(", "))?;
        let mut names: Vec<&str> = self.round.iter().map(|a| a.from.as_str()).collect();
        if let Some(first) = names.first().copied() {
            names.push(first);
        }
        write!(f, "{}", names.join(" -> "))?;
        for a in &self.round {
            write!(
                f,
                "\n    src/{}:{}: {} -> {}",
                a.file,
                a.line,
                a.at(&a.from),
                a.at(&a.to)
            )?;
        }
        let rest = self.arrows.len() - self.round.len();
        if rest > 0 {
            write!(f, "\n    (and {rest} more arrows among them:")?;
            for a in self.arrows.iter().filter(|a| !self.round.contains(a)) {
                write!(
                    f,
                    "\n     src/{}:{}: {} -> {}",
                    a.file, a.line, a.from, a.to
                )?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// A name a module brings in with `use`: the path as written, from the
/// module that wrote it.
#[derive(Clone, Debug)]
struct Import {
    path: Vec<String>,
}

/// The crate's modules and the names each brings in with `use`.
struct Tree {
    modules: BTreeSet<ModPath>,
    imports: BTreeMap<ModPath, BTreeMap<String, Import>>,
}

/// A path as written, at its file's line, in module `here`.
struct Written {
    here: ModPath,
    path: Vec<String>,
    line: usize,
}

/// Every arrow between siblings in `src`, test code left out, one per
/// (file, sibling named), at its first line. `not_modules` names what
/// under `src` is no module (`main`, a `bin` folder); `lib.rs` is the
/// crate root.
pub fn sibling_arrows(src: &Path, not_modules: &[&str]) -> Vec<SiblingArrow> {
    let mut files = Vec::new();
    rust_files(src, src, &mut files);
    let texts: Vec<(String, String)> = files
        .into_iter()
        .filter(|file| {
            let top = file
                .split('/')
                .next()
                .unwrap_or(file)
                .trim_end_matches(".rs");
            top == "lib" || !not_modules.contains(&top)
        })
        .map(|file| {
            let text = std::fs::read_to_string(src.join(&file)).expect("readable source");
            (file, text)
        })
        .collect();
    sibling_arrows_of(&texts)
}

/// [`sibling_arrows`] over files given as (path under `src`, text).
pub fn sibling_arrows_of(files: &[(String, String)]) -> Vec<SiblingArrow> {
    let mut parsed = Vec::new();
    let mut tree = Tree {
        modules: BTreeSet::new(),
        imports: BTreeMap::new(),
    };
    let mut test_files = BTreeSet::new();
    for (file, text) in files {
        let here = if file == "lib.rs" {
            Vec::new()
        } else {
            module_path(file)
        };
        let tokens: TokenStream = text
            .parse()
            .unwrap_or_else(|e| panic!("{file} does not tokenize: {e:?}"));
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut reader = Reader {
            tree: &mut tree,
            written: Vec::new(),
        };
        let mut tests = Vec::new();
        reader.module(&here);
        walk(&tokens, &here, true, &mut reader, &mut tests);
        test_files.extend(tests);
        let written = reader.written;
        tree.modules.insert(here);
        parsed.push((file.clone(), written));
    }
    let is_test = |file: &str| {
        let stem = file.trim_end_matches(".rs").trim_end_matches("/mod");
        test_files
            .iter()
            .any(|t: &String| stem == t || stem.starts_with(&format!("{t}/")))
    };
    let mut first: BTreeMap<(String, ModPath, String), SiblingArrow> = BTreeMap::new();
    for (file, written) in parsed.into_iter().filter(|(f, _)| !is_test(f)) {
        for w in written {
            let Some(to) = tree.resolve(&w.here, &w.path, 0) else {
                continue;
            };
            let common = w.here.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common >= w.here.len() || common >= to.len() {
                continue; // within the file's own module, or an ancestor's own item
            }
            let arrow = SiblingArrow {
                parent: to[..common].to_vec(),
                from: w.here[common].clone(),
                to: to[common].clone(),
                file: file.clone(),
                line: w.line,
            };
            let key = (file.clone(), arrow.parent.clone(), arrow.to.clone());
            match first.get(&key) {
                Some(seen) if seen.line <= arrow.line => {}
                _ => {
                    first.insert(key, arrow);
                }
            }
        }
    }
    first.into_values().collect()
}

impl Tree {
    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains(path)
    }

    /// The module a path written in `here` lands in: the deepest module it
    /// walks through, a re-exported name followed to where it comes from.
    /// `None`: outside the crate.
    fn resolve(&self, here: &[String], path: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let (mut at, rest): (ModPath, &[String]) = match path[0].as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (here.to_vec(), &path[1..]),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                if ups > here.len() {
                    return None;
                }
                (here[..here.len() - ups].to_vec(), &path[ups..])
            }
            first => {
                let mut child = here.to_vec();
                child.push(first.to_owned());
                if self.is_module(&child) {
                    (here.to_vec(), path)
                } else if let Some(import) = self.imports.get(here).and_then(|m| m.get(first)) {
                    let base = self.resolve(here, &import.path, depth + 1)?;
                    return self.walk(base, &path[1..], depth);
                } else {
                    return None;
                }
            }
        };
        if rest.is_empty() {
            return Some(at);
        }
        at = self.walk(at, rest, depth)?;
        Some(at)
    }

    /// From module `at` down the names of `rest`.
    fn walk(&self, mut at: ModPath, rest: &[String], depth: usize) -> Option<ModPath> {
        for seg in rest {
            let mut child = at.clone();
            child.push(seg.clone());
            if self.is_module(&child) {
                at = child;
                continue;
            }
            if let Some(import) = self.imports.get(&at).and_then(|m| m.get(seg)) {
                return self.resolve(&at, &import.path, depth + 1).or(Some(at));
            }
            return Some(at);
        }
        Some(at)
    }
}

/// Reads one file: its modules (inline ones too), its imports, and every
/// path it writes.
struct Reader<'t> {
    tree: &'t mut Tree,
    written: Vec<Written>,
}

impl Visit for Reader<'_> {
    fn module(&mut self, here: &[String]) {
        self.tree.modules.insert(here.to_vec());
    }

    /// A `use` (imported into the module at item level) and a path
    /// written in code.
    fn token(
        &mut self,
        tokens: &[TokenTree],
        i: usize,
        here: &[String],
        items: bool,
    ) -> Option<usize> {
        match &tokens[i] {
            TokenTree::Ident(id) if *id == "use" && !after_colons(tokens, i) => {
                let end = (i + 1..tokens.len())
                    .find(|&j| matches!(&tokens[j], TokenTree::Punct(p) if p.as_char() == ';'))
                    .unwrap_or(tokens.len());
                let line = id.span().start().line;
                let mut leaves = Vec::new();
                use_tree(&tokens[i + 1..end], Vec::new(), &mut leaves);
                for (path, alias) in leaves {
                    self.written.push(Written {
                        here: here.to_vec(),
                        path: path.clone(),
                        line,
                    });
                    if items && let Some(name) = alias.or_else(|| path.last().cloned()) {
                        self.tree
                            .imports
                            .entry(here.to_vec())
                            .or_default()
                            .insert(name, Import { path });
                    }
                }
                Some(end + 1)
            }
            TokenTree::Ident(id)
                if !after_colons(tokens, i)
                    && !after_dollar(tokens, i)
                    && is_colons(tokens, i + 1) =>
            {
                let mut path = vec![id.to_string()];
                let mut at = i + 1;
                while is_colons(tokens, at)
                    && let Some(TokenTree::Ident(next)) = tokens.get(at + 2)
                {
                    path.push(next.to_string());
                    at += 3;
                }
                self.written.push(Written {
                    here: here.to_vec(),
                    path,
                    line: id.span().start().line,
                });
                Some(at)
            }
            _ => None,
        }
    }
}

/// The leaves of a `use` tree (the tokens after `use`, before `;`): each
/// path from the tree's start, and the name it is brought in as (`None`
/// for a glob, or where the path ends in `self`, its module's name).
fn use_tree(
    tokens: &[TokenTree],
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(id) if *id == "as" => {
                if let Some(TokenTree::Ident(alias)) = tokens.get(i + 1) {
                    let alias = alias.to_string();
                    if path.last().is_some_and(|s| s == "self") {
                        path.pop();
                    }
                    out.push((path, (alias != "_").then_some(alias)));
                    return;
                }
            }
            TokenTree::Ident(id) if *id == "pub" => {}
            TokenTree::Ident(id) => path.push(id.to_string()),
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                for part in inner.split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
                {
                    if !part.is_empty() {
                        use_tree(part, path.clone(), out);
                    }
                }
                return;
            }
            TokenTree::Punct(p) if p.as_char() == '*' => {
                out.push((path, None));
                return;
            }
            _ => {} // `::`, `pub(crate)`'s group
        }
        i += 1;
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    let name = path.last().cloned();
    if !path.is_empty() {
        out.push((path, name));
    }
}

/// The cycles among the sub-modules of each module: the arrows' strongly
/// connected parts of two or more siblings, each with one way round.
pub fn cycles(arrows: &[SiblingArrow]) -> Vec<Cycle> {
    let mut by_parent: BTreeMap<&ModPath, Vec<&SiblingArrow>> = BTreeMap::new();
    for a in arrows {
        by_parent.entry(&a.parent).or_default().push(a);
    }
    let mut out = Vec::new();
    for (parent, arrows) in by_parent {
        let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for a in &arrows {
            next.entry(&a.from).or_default().insert(&a.to);
            next.entry(&a.to).or_default();
        }
        for members in strongly_connected(&next) {
            if members.len() < 2 {
                continue;
            }
            let inside = |a: &&&SiblingArrow| {
                members.contains(&a.from.as_str()) && members.contains(&a.to.as_str())
            };
            let among: Vec<SiblingArrow> =
                arrows.iter().filter(inside).map(|a| (*a).clone()).collect();
            let round = way_round(&members, &among);
            out.push(Cycle {
                parent: parent.clone(),
                members: members.iter().map(|s| (*s).to_owned()).collect(),
                round,
                arrows: among,
            });
        }
    }
    out
}

/// Tarjan's strongly connected components, each sorted.
fn strongly_connected<'a>(next: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, next: &BTreeMap<&'a str, BTreeSet<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in next.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, next, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut part = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                part.push(w);
                if w == v {
                    break;
                }
            }
            part.sort_unstable();
            s.out.push(part);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in next.keys() {
        if !s.index.contains_key(v) {
            visit(v, next, &mut s);
        }
    }
    s.out
}

/// The shortest way from the first member back to it, through members.
fn way_round(members: &[&str], among: &[SiblingArrow]) -> Vec<SiblingArrow> {
    let start = members[0];
    let mut came: BTreeMap<&str, &SiblingArrow> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for a in among.iter().filter(|a| a.from == v) {
            if a.to == start {
                let mut round = vec![a.clone()];
                let mut at = v;
                while at != start {
                    let back = came[at];
                    round.push(back.clone());
                    at = &back.from;
                }
                round.reverse();
                return round;
            }
            if !came.contains_key(a.to.as_str()) {
                came.insert(&a.to, a);
                queue.push_back(&a.to);
            }
        }
    }
    Vec::new()
}
