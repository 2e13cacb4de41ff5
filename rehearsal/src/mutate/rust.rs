//! Rust mutants, with cargo-mutants' operators over `syn`'s spans.
//!
//! Each function is a unit; its mutants are:
//!
//! - its body replaced by a value of its return type (`()`: an empty
//!   body; `bool`: `true`, `false`; integers `0`, `1`; `String`:
//!   `String::new()`, `"xyzzy".into()`; `&str`: `""`; `Result`:
//!   `Ok(())` or `Ok(Default::default())`; `Option`: `None`,
//!   `Some(Default::default())`; `Vec`: `vec![]`; otherwise
//!   `Default::default()`; `impl Trait` gets none);
//! - a binary operator swapped: `<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`,
//!   `&&` <-> `||`, `+` <-> `-` (and `+=` <-> `-=`);
//! - a `!` deleted.
//!
//! The SQL of the file is found here too (its units are statements, see
//! [`super::sql`]): the string literals of `const` items and of
//! `macro_rules!` bodies that read as SQL.
//!
//! Failpoints are never mutated: in a function, the condition of an `if`
//! that reads a failpoint (`failpoint::armed(..)`, or a local set from
//! it), the branch taken when it is armed, `fail_point!` invocations, and
//! the body of a function that contains any of them. Items under
//! `#[cfg(test)]`, `#[test]` functions and items documented as a "seeded
//! defect" are skipped whole.

use std::ops::Range;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::visit::Visit;

use super::unit::Unit;
use super::{Mutant, Operator, sql};

/// The units of one Rust file of awa-runtime (its path relative to the
/// crate) with their mutants.
pub fn units(path: &str, text: &str) -> Result<Vec<Unit>, syn::Error> {
    let file = syn::parse_file(text)?;
    let mut c = Collector {
        path,
        text,
        module: module_of(path),
        units: Vec::new(),
    };
    c.items(&file.items, "");
    Ok(c.units)
}

/// `src/store/claim.rs` -> `store::claim`; `src/lib.rs` -> ``.
fn module_of(path: &str) -> String {
    let p = path.trim_start_matches("src/").trim_end_matches(".rs");
    let p = p.trim_end_matches("/mod");
    if p == "lib" || p == "main" {
        return String::new();
    }
    p.replace('/', "::")
}

struct Collector<'a> {
    path: &'a str,
    text: &'a str,
    module: String,
    units: Vec<Unit>,
}

/// Whether attributes put an item out of reach: test-only code, or a
/// seeded defect (whose code only runs with its failpoint armed).
fn skipped(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let p = a.path();
        let text = a.to_token_stream().to_string();
        p.is_ident("test")
            || (p.is_ident("cfg") && text.contains("test"))
            || (p.is_ident("doc") && text.contains("seeded defect"))
    })
}

impl Collector<'_> {
    fn name(&self, scope: &str, item: &str) -> String {
        [self.module.as_str(), scope, item]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("::")
    }

    fn items(&mut self, items: &[syn::Item], scope: &str) {
        for item in items {
            match item {
                syn::Item::Fn(f) if !skipped(&f.attrs) => {
                    let name = self.name(scope, &f.sig.ident.to_string());
                    self.function(&name, &f.sig, &f.block);
                }
                syn::Item::Impl(i) if !skipped(&i.attrs) => {
                    let ty = i.self_ty.to_token_stream().to_string().replace(' ', "");
                    let inner = if scope.is_empty() {
                        ty
                    } else {
                        format!("{scope}::{ty}")
                    };
                    for ii in &i.items {
                        match ii {
                            syn::ImplItem::Fn(f) if !skipped(&f.attrs) => {
                                let name = self.name(&inner, &f.sig.ident.to_string());
                                self.function(&name, &f.sig, &f.block);
                            }
                            syn::ImplItem::Const(c) if !skipped(&c.attrs) => {
                                let name = self.name(&inner, &c.ident.to_string());
                                self.sql_unit(name, c.expr.to_token_stream());
                            }
                            _ => {}
                        }
                    }
                }
                syn::Item::Trait(t) if !skipped(&t.attrs) => {
                    for ti in &t.items {
                        if let syn::TraitItem::Fn(f) = ti
                            && let Some(block) = &f.default
                            && !skipped(&f.attrs)
                        {
                            let inner =
                                format!("{}{}", if scope.is_empty() { "" } else { "::" }, t.ident);
                            let name =
                                self.name(&format!("{scope}{inner}"), &f.sig.ident.to_string());
                            self.function(&name, &f.sig, block);
                        }
                    }
                }
                syn::Item::Mod(m) if !skipped(&m.attrs) => {
                    if let Some((_, inner)) = &m.content {
                        let s = if scope.is_empty() {
                            m.ident.to_string()
                        } else {
                            format!("{scope}::{}", m.ident)
                        };
                        self.items(inner, &s);
                    }
                }
                syn::Item::Const(c) if !skipped(&c.attrs) => {
                    let name = self.name(scope, &c.ident.to_string());
                    self.sql_unit(name, c.expr.to_token_stream());
                }
                syn::Item::Macro(m) if !skipped(&m.attrs) && m.mac.path.is_ident("macro_rules") => {
                    if let Some(ident) = &m.ident {
                        let name = format!("{}!", self.name(scope, &ident.to_string()));
                        self.sql_unit(name, m.mac.tokens.clone());
                    }
                }
                _ => {}
            }
        }
    }

    /// A function: its fingerprint and mutants.
    fn function(&mut self, name: &str, sig: &syn::Signature, block: &syn::Block) {
        let fingerprint = format!("{} {}", sig.to_token_stream(), block.to_token_stream());
        let mut v = BodyVisitor {
            text: self.text,
            edits: Vec::new(),
            excluded: Vec::new(),
            failpoint_vars: Vec::new(),
        };
        v.visit_block(block);
        let body = block.span().byte_range();
        let mut edits = v.edits;
        if v.excluded.is_empty() && !self.text[body.clone()].contains("failpoint") {
            for value in values(&sig.output) {
                let replacement = if value.is_empty() {
                    "{}".to_owned()
                } else {
                    format!("{{ {value} }}")
                };
                edits.push((body.clone(), replacement, Operator::FnBody));
            }
        }
        let excluded = v.excluded;
        let mutants = edits
            .into_iter()
            .filter(|(r, _, _)| !excluded.iter().any(|x| r.start < x.end && x.start < r.end))
            .filter(|(r, _, _)| r.start < r.end)
            .map(|(r, rep, op)| Mutant::new(self.path, self.text, name, op, r, rep))
            .collect();
        self.units.push(Unit {
            name: name.to_owned(),
            fingerprint,
            mutants,
        });
    }

    /// A `const` or `macro_rules!` whose string literals read as SQL: one
    /// statement unit (nothing when none does).
    fn sql_unit(&mut self, name: String, tokens: TokenStream) {
        let name = if name.ends_with('!') {
            format!("macro {name}")
        } else {
            format!("const {name}")
        };
        let mut literals = Vec::new();
        string_literals(tokens, &mut literals);
        let mut fingerprint = String::new();
        let mut mutants = Vec::new();
        for (content, raw) in literals {
            let body = &self.text[content.clone()];
            if !sql::looks_like_sql(body) {
                continue;
            }
            fingerprint.push_str(&sql::fingerprint(body, !raw));
            fingerprint.push('|');
            for e in sql::mutate(body, !raw) {
                let r = content.start + e.range.start..content.start + e.range.end;
                mutants.push(Mutant::new(
                    self.path,
                    self.text,
                    &name,
                    e.operator,
                    r,
                    e.replacement,
                ));
            }
        }
        if !fingerprint.is_empty() {
            self.units.push(Unit {
                name,
                fingerprint,
                mutants,
            });
        }
    }
}

/// The string literals of a token stream (recursively): the byte range
/// of each one's content in the file, and whether it is raw (`r"..."`,
/// where a backslash is a backslash).
fn string_literals(tokens: TokenStream, out: &mut Vec<(Range<usize>, bool)>) {
    for tt in tokens {
        match tt {
            TokenTree::Group(g) => string_literals(g.stream(), out),
            TokenTree::Literal(l) => {
                let s = l.to_string();
                let r = l.span().byte_range();
                if r.len() != s.len() {
                    continue;
                }
                if s.starts_with('"') && s.len() >= 2 {
                    out.push((r.start + 1..r.end - 1, false));
                } else if let Some(rest) = s.strip_prefix('r') {
                    let hashes = rest.len() - rest.trim_start_matches('#').len();
                    if rest[hashes..].starts_with('"') && s.len() >= 3 + 2 * hashes {
                        out.push((r.start + 2 + hashes..r.end - 1 - hashes, true));
                    }
                }
            }
            _ => {}
        }
    }
}

/// The values a function's body is replaced by, from its return type
/// (an empty string: the empty body of a function returning `()`).
fn values(output: &syn::ReturnType) -> Vec<String> {
    let syn::ReturnType::Type(_, ty) = output else {
        return vec![String::new()];
    };
    type_values(ty)
}

fn type_values(ty: &syn::Type) -> Vec<String> {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect();
    match ty {
        syn::Type::Tuple(t) if t.elems.is_empty() => vec![String::new()],
        syn::Type::Paren(p) => type_values(&p.elem),
        syn::Type::Reference(r) => match &*r.elem {
            syn::Type::Path(p) if p.path.is_ident("str") => s(&["\"\""]),
            _ => Vec::new(),
        },
        syn::Type::Path(p) => {
            let Some(last) = p.path.segments.last() else {
                return Vec::new();
            };
            let first_arg = match &last.arguments {
                syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
                    syn::GenericArgument::Type(t) => Some(t),
                    _ => None,
                }),
                _ => None,
            };
            match last.ident.to_string().as_str() {
                "bool" => s(&["true", "false"]),
                "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64"
                | "i128" | "isize" => s(&["0", "1"]),
                "f32" | "f64" => s(&["0.0", "1.0"]),
                "String" => s(&["String::new()", "\"xyzzy\".into()"]),
                "Result" => match first_arg {
                    Some(syn::Type::Tuple(t)) if t.elems.is_empty() => s(&["Ok(())"]),
                    _ => s(&["Ok(Default::default())"]),
                },
                "Option" => s(&["None", "Some(Default::default())"]),
                "Vec" => s(&["vec![]"]),
                _ => s(&["Default::default()"]),
            }
        }
        _ => Vec::new(),
    }
}

/// Walks a function body for operator mutants and failpoint regions.
struct BodyVisitor<'a> {
    text: &'a str,
    edits: Vec<(Range<usize>, String, Operator)>,
    excluded: Vec<Range<usize>>,
    /// Locals set from a failpoint (`let stale = failpoint::armed(..)`).
    failpoint_vars: Vec<String>,
}

impl BodyVisitor<'_> {
    /// Whether an expression's source reads a failpoint.
    fn reads_failpoint(&self, range: Range<usize>) -> bool {
        let src = &self.text[range];
        src.contains("failpoint")
            || src.contains("fail_point")
            || src
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| self.failpoint_vars.iter().any(|v| v == w))
    }
}

impl<'ast> Visit<'ast> for BodyVisitor<'_> {
    fn visit_expr_binary(&mut self, e: &'ast syn::ExprBinary) {
        use syn::BinOp::*;
        let to = match e.op {
            Lt(_) => Some("<="),
            Le(_) => Some("<"),
            Gt(_) => Some(">="),
            Ge(_) => Some(">"),
            Eq(_) => Some("!="),
            Ne(_) => Some("=="),
            And(_) => Some("||"),
            Or(_) => Some("&&"),
            Add(_) => Some("-"),
            Sub(_) => Some("+"),
            AddAssign(_) => Some("-="),
            SubAssign(_) => Some("+="),
            _ => None,
        };
        if let Some(to) = to {
            let r = e.op.span().byte_range();
            self.edits.push((r, to.to_owned(), Operator::BinOp));
        }
        syn::visit::visit_expr_binary(self, e);
    }

    fn visit_expr_unary(&mut self, e: &'ast syn::ExprUnary) {
        if let syn::UnOp::Not(t) = &e.op {
            self.edits
                .push((t.span().byte_range(), String::new(), Operator::DeleteNot));
        }
        syn::visit::visit_expr_unary(self, e);
    }

    fn visit_expr_if(&mut self, e: &'ast syn::ExprIf) {
        let cond = e.cond.span().byte_range();
        if self.reads_failpoint(cond.clone()) {
            self.excluded.push(cond.clone());
            let negated = self.text[cond].trim_start().starts_with('!');
            if !negated {
                self.excluded.push(e.then_branch.span().byte_range());
            } else if let Some((_, els)) = &e.else_branch {
                self.excluded.push(els.span().byte_range());
            }
        }
        syn::visit::visit_expr_if(self, e);
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            let r = init.expr.span().byte_range();
            if self.reads_failpoint(r.clone()) {
                self.excluded.push(r);
                if let syn::Pat::Ident(p) = &l.pat {
                    self.failpoint_vars.push(p.ident.to_string());
                }
            }
        }
        syn::visit::visit_local(self, l);
    }

    fn visit_expr_call(&mut self, e: &'ast syn::ExprCall) {
        let f = e.func.span().byte_range();
        if self.text[f].contains("failpoint") {
            self.excluded.push(e.span().byte_range());
        }
        syn::visit::visit_expr_call(self, e);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path.to_token_stream().to_string().contains("fail_point") {
            self.excluded.push(m.span().byte_range());
        }
        syn::visit::visit_macro(self, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (unit, operator, mutated line) of every mutant of `src`.
    fn mutants(src: &str) -> Vec<(String, Operator, String)> {
        units("src/store/x.rs", src)
            .expect("parses")
            .into_iter()
            .flat_map(|u| u.mutants)
            .map(|m| {
                let applied = m.apply(src);
                let line = applied
                    .lines()
                    .nth(m.line - 1)
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                (m.unit, m.operator, line)
            })
            .collect()
    }

    #[test]
    fn cargo_mutants_operators() {
        let src = "pub fn f(a: u32, b: u32) -> bool {\n    a <= b && !g(a + 1)\n}\n";
        let got = mutants(src);
        let want = [
            (Operator::BinOp, "a < b && !g(a + 1)"),
            (Operator::BinOp, "a <= b || !g(a + 1)"),
            (Operator::DeleteNot, "a <= b && g(a + 1)"),
            (Operator::BinOp, "a <= b && !g(a - 1)"),
            (
                Operator::FnBody,
                "pub fn f(a: u32, b: u32) -> bool { true }",
            ),
            (
                Operator::FnBody,
                "pub fn f(a: u32, b: u32) -> bool { false }",
            ),
        ];
        for (op, line) in want {
            assert!(
                got.iter()
                    .any(|(u, o, l)| u == "store::x::f" && *o == op && l == line),
                "{op:?} {line} not in {got:#?}"
            );
        }
        assert_eq!(got.len(), want.len(), "{got:#?}");
    }

    #[test]
    fn bodies_by_return_type() {
        let src = "
impl Store {
    pub async fn claim(&self) -> Result<Vec<i64>> { todo() }
    fn done(&self) -> Result<()> { todo() }
    fn name(&self) -> &'static str { todo() }
    fn maybe(&self) -> Option<u8> { todo() }
    fn nothing(&self) { todo() }
    fn opaque(&self) -> impl Iterator<Item = u8> { todo() }
}
";
        let bodies: Vec<(String, String)> = mutants(src)
            .into_iter()
            .filter(|(_, o, _)| *o == Operator::FnBody)
            .map(|(u, _, l)| {
                (
                    u,
                    l.split_once("(&self) ")
                        .map_or(l.clone(), |(_, b)| b.to_owned()),
                )
            })
            .collect();
        let want: Vec<(String, String)> = [
            (
                "store::x::Store::claim",
                "-> Result<Vec<i64>> { Ok(Default::default()) }",
            ),
            ("store::x::Store::done", "-> Result<()> { Ok(()) }"),
            ("store::x::Store::name", "-> &'static str { \"\" }"),
            ("store::x::Store::maybe", "-> Option<u8> { None }"),
            (
                "store::x::Store::maybe",
                "-> Option<u8> { Some(Default::default()) }",
            ),
            ("store::x::Store::nothing", "{}"),
        ]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
        assert_eq!(bodies, want);
    }

    #[test]
    fn failpoints_tests_and_seeded_defects_are_never_mutated() {
        let src = r#"
pub fn pick() -> &'static str {
    if failpoint::armed(failpoint::X) { DEFECT } else { NORMAL }
}
pub fn guard(a: u32) -> u32 {
    let stale = failpoint::armed(failpoint::Y);
    if stale { a + 1 } else { a - 1 }
}
pub fn lock(a: bool) {
    if !crate::failpoint::armed(crate::failpoint::Z) { take(a && a) }
}
/// The seeded defect: forgets the lease.
const DEFECT: &str = "SELECT 1 FROM t WHERE a < 1";
#[cfg(test)]
mod tests { fn t() -> bool { 1 < 2 } }
#[test]
fn t2() { assert!(1 < 2) }
"#;
        let got = mutants(src);
        // pick: no body (a failpoint call site), nothing in the condition or the armed branch.
        assert!(
            got.iter().all(|(u, _, _)| u != "store::x::pick"),
            "{got:#?}"
        );
        // guard: the unarmed branch only.
        let guard: Vec<&str> = got
            .iter()
            .filter(|(u, _, _)| u == "store::x::guard")
            .map(|(_, _, l)| l.as_str())
            .collect();
        assert_eq!(guard, vec!["if stale { a + 1 } else { a + 1 }"]);
        // lock: `!failpoint` arms nothing in the then-branch: its `&&` is mutated, not the `!`.
        let lock: Vec<(Operator, &str)> = got
            .iter()
            .filter(|(u, _, _)| u == "store::x::lock")
            .map(|(_, o, l)| (*o, l.as_str()))
            .collect();
        assert_eq!(
            lock,
            vec![(
                Operator::BinOp,
                "if !crate::failpoint::armed(crate::failpoint::Z) { take(a || a) }"
            )]
        );
        assert!(
            got.iter()
                .all(|(u, _, _)| !u.contains("DEFECT") && !u.contains('t')
                    || u.starts_with("store::x::")),
            "{got:#?}"
        );
        assert!(
            got.iter().all(|(u, _, _)| !u.ends_with("::t")
                && !u.ends_with("::t2")
                && !u.contains("DEFECT"))
        );
    }

    #[test]
    fn sql_constants_and_macros_are_statement_units() {
        let src = r##"
const CLAIM: &str = concat!("SELECT id FROM t WHERE a < $1", tail!("x"));
const RAW: &str = r#"DELETE FROM t WHERE "q" = 'a\b' AND b = $1"#;
const CODE: &str = "55P03";
macro_rules! tail {
    ($x:literal) => { concat!(" AND k = ", $x) };
}
macro_rules! sql_tail {
    () => { "UPDATE t SET a = 1 WHERE b <= 2" };
}
"##;
        let units = units("src/store/x.rs", src).expect("parses");
        let names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "const store::x::CLAIM",
                "const store::x::RAW",
                "macro store::x::sql_tail!"
            ]
        );
        let claim = &units[0].mutants;
        assert_eq!(claim.len(), 1);
        assert_eq!(
            claim[0].apply(src).lines().nth(1),
            Some(r#"const CLAIM: &str = concat!("SELECT id FROM t WHERE a <= $1", tail!("x"));"#)
        );
        let raw: Vec<String> = units[1]
            .mutants
            .iter()
            .map(|m| m.apply(src).lines().nth(2).unwrap_or("").to_owned())
            .collect();
        assert!(
            raw.contains(
                &r##"const RAW: &str = r#"DELETE FROM t WHERE "q" = 'a\b'"#;"##.to_owned()
            ),
            "{raw:#?}"
        );
    }
}
