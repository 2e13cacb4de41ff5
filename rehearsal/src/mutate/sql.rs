//! SQL mutants: small, plausible bugs in one statement's text.
//!
//! A statement is lexed into tokens that keep their byte ranges (words,
//! numbers, bind parameters, operators, punctuation; quoted strings,
//! quoted identifiers and comments are opaque), then each operator looks
//! for its pattern and proposes an [`Edit`] of the statement's text:
//!
//! - comparisons: `<` <-> `<=`, `>` <-> `>=`, and in a condition `=` -> `<>`,
//!   `<>`/`!=` -> `=` (a `=` of `SET` or of a function argument is an
//!   assignment, not a comparison, and is left alone);
//! - `AND` <-> `OR` in a condition (not the `AND` of `BETWEEN`);
//! - `+` <-> `-` between two operands (`attempt + 1`, `now() - $2`);
//! - a dropped conjunct of a `WHERE` of two or more;
//! - a swapped bind parameter (`$k` <-> `$k+1` throughout the text) and a
//!   swapped column (`q.c` -> `q.d`, another column the statement reads of `q`);
//! - a dropped `ON CONFLICT ...`, a dropped locking clause
//!   (`FOR UPDATE ... SKIP LOCKED`), a dropped `SKIP LOCKED`/`NOWAIT`;
//! - `IS NULL` <-> `IS NOT NULL`;
//! - the clock: `now()` -> `(now() + interval '1 minute')` (a time that is
//!   not the database's own, as when it comes from a parameter), and a
//!   parameter cast to a time (`$k::timestamptz`) -> `now()`.
//!
//! The text may be the content of a Rust string literal (`rust_escapes`):
//! then a backslash escape (`\n`, a line continuation) reads as blank.
//! Dollar-quoted bodies (`$$ ... $$`) are lexed like the rest, so the
//! PL/pgSQL of triggers and functions is mutated too.

use std::collections::BTreeSet;
use std::ops::Range;

use super::Operator;

/// One proposed change of a statement's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// Bytes of the text replaced.
    pub range: Range<usize>,
    /// What replaces them.
    pub replacement: String,
    /// Which operator proposed it.
    pub operator: Operator,
}

/// A lexical class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A keyword or identifier (compared case-insensitively).
    Word,
    /// A numeric literal.
    Number,
    /// `$1`.
    Param,
    /// `'...'` (also `E'...'`).
    Str,
    /// `"..."`.
    Quoted,
    /// An operator (`<=`, `::`, `||`, `=`).
    Op,
    /// `(`.
    Open,
    /// `)`.
    Close,
    /// `,`, `;`, `.`, `[`, `]` and anything else single.
    Punct,
    /// `$$` or `$tag$`.
    Dollar,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    range: Range<usize>,
}

/// The characters SQL builds operators from.
const OP_CHARS: &str = "+-*/<>=~!@#%^&|`?:";

/// Lexes `text`; comments and blanks are dropped.
fn lex(text: &str, rust_escapes: bool) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            b'\\' if rust_escapes => {
                i += 2;
                continue;
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' && !(rust_escapes && b[i] == b'\\') {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i = (i + 2).min(b.len());
                continue;
            }
            b'\'' => {
                i = skip_quoted(b, i, b'\'');
                Kind::Str
            }
            b'"' => {
                i = skip_quoted(b, i, b'"');
                Kind::Quoted
            }
            b'$' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                Kind::Param
            }
            b'$' => {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                if b.get(j) == Some(&b'$') {
                    i = j + 1;
                    Kind::Dollar
                } else {
                    i += 1;
                    Kind::Punct
                }
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                    i += 1;
                }
                Kind::Number
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                if (c == b'E' || c == b'e') && b.get(i + 1) == Some(&b'\'') {
                    i = skip_quoted(b, i + 1, b'\'');
                    Kind::Str
                } else {
                    while i < b.len()
                        && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80)
                    {
                        i += 1;
                    }
                    Kind::Word
                }
            }
            b'(' => {
                i += 1;
                Kind::Open
            }
            b')' => {
                i += 1;
                Kind::Close
            }
            c if OP_CHARS.as_bytes().contains(&c) => {
                while i < b.len() && OP_CHARS.as_bytes().contains(&b[i]) {
                    // `a=-1`, `x<-$1`: a trailing sign belongs to the operand.
                    if i > start && (b[i] == b'-' || b[i] == b'+') && b[i - 1] != b[i] {
                        let next = b.get(i + 1).copied().unwrap_or(b' ');
                        if next.is_ascii_digit() || next == b'$' {
                            break;
                        }
                    }
                    // `--` starts a comment even right after an operator.
                    if b[i] == b'-' && b.get(i + 1) == Some(&b'-') && i > start {
                        break;
                    }
                    i += 1;
                }
                Kind::Op
            }
            _ => {
                i += 1;
                Kind::Punct
            }
        };
        out.push(Token {
            kind,
            range: start..i.min(b.len()),
        });
    }
    out
}

/// Past the closing `quote` of a literal that opens at `i` (a doubled
/// quote is an escaped one).
fn skip_quoted(b: &[u8], mut i: usize, quote: u8) -> usize {
    i += 1;
    while i < b.len() {
        if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// Whether a token is a comparison or an operand's edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    /// A condition: `WHERE`, `ON`, `WHEN`, `HAVING`, PL/pgSQL `IF`.
    Condition,
    /// A select list, `SET`, `VALUES`, arguments: `=` there assigns.
    Other,
}

/// Keywords that open a condition for the rest of their clause.
const CONDITION_CLAUSES: &[&str] = &["WHERE", "ON", "HAVING"];
/// Keywords that open a condition until `THEN`/`LOOP`.
const CONDITION_HEADS: &[&str] = &["WHEN", "IF", "ELSIF", "WHILE", "UNTIL"];
/// Keywords that open a clause where `=` is not a comparison.
const OTHER_CLAUSES: &[&str] = &[
    "SELECT",
    "SET",
    "VALUES",
    "RETURNING",
    "FROM",
    "GROUP",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "INSERT",
    "UPDATE",
    "DELETE",
    "DO",
    "RETURN",
    "INTO",
    "USING",
    "FOR",
    "WINDOW",
    "DECLARE",
    "BEGIN",
    "PERFORM",
    "RAISE",
];
/// Keywords that end a `WHERE`, at its own depth.
const WHERE_ENDS: &[&str] = &[
    "RETURNING",
    "GROUP",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "FOR",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "ON",
    "THEN",
    "LOOP",
    "HAVING",
];
/// Words that are not operands (a `-` after them is a sign).
const NOT_OPERANDS: &[&str] = &[
    "SELECT", "WHERE", "AND", "OR", "NOT", "SET", "THEN", "ELSE", "WHEN", "CASE", "VALUES", "ON",
    "RETURN", "BY", "IN", "IS", "LIKE", "BETWEEN", "LIMIT", "OFFSET", "INTERVAL",
];

/// The proposed edits of one statement's `text`, in text order.
pub fn mutate(text: &str, rust_escapes: bool) -> Vec<Edit> {
    let toks = lex(text, rust_escapes);
    let word = |t: &Token| -> Option<String> {
        (t.kind == Kind::Word).then(|| text[t.range.clone()].to_ascii_uppercase())
    };
    let words: Vec<Option<String>> = toks.iter().map(word).collect();
    let is = |i: usize, w: &str| words.get(i).and_then(|x| x.as_deref()) == Some(w);
    let mut edits = Vec::new();
    let mut push = |range: Range<usize>, replacement: &str, operator: Operator| {
        edits.push(Edit {
            range,
            replacement: replacement.to_owned(),
            operator,
        });
    };

    // Context per parenthesis depth: (the clause's own, the current one).
    let mut stack: Vec<(Ctx, Ctx)> = vec![(Ctx::Other, Ctx::Other)];
    let mut between = vec![false];
    for (i, t) in toks.iter().enumerate() {
        let s = &text[t.range.clone()];
        let Some(&(base, cur)) = stack.last() else {
            break;
        };
        match t.kind {
            Kind::Open => {
                stack.push((cur, cur));
                between.push(false);
                continue;
            }
            Kind::Close => {
                if stack.len() > 1 {
                    stack.pop();
                    between.pop();
                }
                continue;
            }
            Kind::Punct if s == "," || s == ";" => {
                if let Some(top) = stack.last_mut() {
                    top.1 = if s == ";" { Ctx::Other } else { top.0 };
                    if s == ";" {
                        top.0 = Ctx::Other;
                    }
                }
                continue;
            }
            _ => {}
        }
        if let Some(w) = &words[i] {
            let w = w.as_str();
            let after_distinct = i > 0 && is(i - 1, "DISTINCT");
            if let Some(top) = stack.last_mut() {
                if CONDITION_CLAUSES.contains(&w) {
                    *top = (Ctx::Condition, Ctx::Condition);
                } else if CONDITION_HEADS.contains(&w) {
                    top.1 = Ctx::Condition;
                } else if w == "THEN" || w == "LOOP" {
                    top.1 = top.0;
                } else if OTHER_CLAUSES.contains(&w) && !(w == "FROM" && after_distinct) {
                    *top = (Ctx::Other, Ctx::Other);
                }
            }
            let top_between = between.last().copied().unwrap_or(false);
            match w {
                "BETWEEN" => {
                    if let Some(b) = between.last_mut() {
                        *b = true;
                    }
                }
                "AND" if top_between => {
                    if let Some(b) = between.last_mut() {
                        *b = false;
                    }
                }
                "AND" | "OR" if cur == Ctx::Condition || base == Ctx::Condition => {
                    let to = if w == "AND" { "OR" } else { "AND" };
                    push(t.range.clone(), to, Operator::SqlAndOr);
                }
                _ => {}
            }
            continue;
        }
        if t.kind != Kind::Op {
            continue;
        }
        let in_condition = stack.last().is_some_and(|&(_, c)| c == Ctx::Condition);
        match s {
            "<" => push(t.range.clone(), "<=", Operator::SqlCompare),
            "<=" => push(t.range.clone(), "<", Operator::SqlCompare),
            ">" => push(t.range.clone(), ">=", Operator::SqlCompare),
            ">=" => push(t.range.clone(), ">", Operator::SqlCompare),
            "=" if in_condition => push(t.range.clone(), "<>", Operator::SqlCompare),
            "<>" | "!=" if in_condition => push(t.range.clone(), "=", Operator::SqlCompare),
            "+" | "-" if i > 0 && is_operand(&toks[i - 1], words[i - 1].as_deref()) => {
                let to = if s == "+" { "-" } else { "+" };
                push(t.range.clone(), to, Operator::SqlArith);
            }
            _ => {}
        }
    }

    drop_conjuncts(text, &toks, &words, &mut push);
    swap_params(text, &toks, &mut push);
    swap_columns(text, &toks, &words, &mut push);
    clauses(text, &toks, &words, &mut push);
    edits.sort_by(|a, b| {
        (a.range.start, a.range.end, a.operator).cmp(&(b.range.start, b.range.end, b.operator))
    });
    edits.dedup();
    edits
}

/// A token an arithmetic operator can follow (so the operator is binary).
fn is_operand(t: &Token, word: Option<&str>) -> bool {
    match t.kind {
        Kind::Number | Kind::Param | Kind::Close | Kind::Str | Kind::Quoted => true,
        Kind::Word => word.is_some_and(|w| !NOT_OPERANDS.contains(&w)),
        _ => false,
    }
}

/// The index of the token that closes the clause opened at `from`, at its
/// depth: a `)` that closes an outer parenthesis, a `;`, one of `ends`,
/// or the end of the text.
fn clause_end(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
    from: usize,
    ends: &[&str],
) -> usize {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(from) {
        match t.kind {
            Kind::Open => depth += 1,
            Kind::Close if depth == 0 => return j,
            Kind::Close => depth -= 1,
            Kind::Punct if depth == 0 && &text[t.range.clone()] == ";" => return j,
            Kind::Dollar if depth == 0 => return j,
            Kind::Word if depth == 0 && words[j].as_deref().is_some_and(|w| ends.contains(&w)) => {
                return j;
            }
            _ => {}
        }
    }
    toks.len()
}

/// A dropped conjunct of each `WHERE` of two or more.
fn drop_conjuncts(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
    for (w, _) in words
        .iter()
        .enumerate()
        .filter(|(_, x)| x.as_deref() == Some("WHERE"))
    {
        let end = clause_end(text, toks, words, w + 1, WHERE_ENDS);
        // Conjuncts as token index ranges, split at this depth's ANDs.
        let mut parts: Vec<(usize, usize)> = Vec::new();
        let mut start = w + 1;
        let mut depth = 0usize;
        let mut between = false;
        for j in w + 1..end {
            match toks[j].kind {
                Kind::Open => depth += 1,
                Kind::Close => depth = depth.saturating_sub(1),
                _ => {}
            }
            match words[j].as_deref() {
                Some("BETWEEN") if depth == 0 => between = true,
                Some("AND") if depth == 0 && between => between = false,
                Some("AND") if depth == 0 => {
                    parts.push((start, j));
                    start = j + 1;
                }
                _ => {}
            }
        }
        parts.push((start, end));
        if parts.len() < 2 || parts.iter().any(|&(a, b)| a >= b) {
            continue;
        }
        for (k, &(a, b)) in parts.iter().enumerate() {
            let range = if k == 0 {
                toks[a].range.start..toks[parts[1].0].range.start
            } else {
                toks[parts[k - 1].1 - 1].range.end..toks[b - 1].range.end
            };
            push(range, "", Operator::SqlDropConjunct);
        }
    }
}

/// `$k` <-> `$k+1` throughout the text, for each such pair it uses.
fn swap_params(text: &str, toks: &[Token], push: &mut impl FnMut(Range<usize>, &str, Operator)) {
    let params: Vec<(usize, u32)> = toks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.kind == Kind::Param)
        .filter_map(|(i, t)| {
            text[t.range.start + 1..t.range.end]
                .parse()
                .ok()
                .map(|n| (i, n))
        })
        .collect();
    let used: BTreeSet<u32> = params.iter().map(|&(_, n)| n).collect();
    for &k in &used {
        if !used.contains(&(k + 1)) {
            continue;
        }
        let hits: Vec<&(usize, u32)> = params
            .iter()
            .filter(|&&(_, n)| n == k || n == k + 1)
            .collect();
        let (Some(first), Some(last)) = (hits.first(), hits.last()) else {
            continue;
        };
        let span = toks[first.0].range.start..toks[last.0].range.end;
        let mut out = String::new();
        let mut at = span.start;
        for &&(i, n) in &hits {
            out.push_str(&text[at..toks[i].range.start]);
            out.push_str(&format!("${}", if n == k { k + 1 } else { k }));
            at = toks[i].range.end;
        }
        push(span, &out, Operator::SqlSwapParam);
    }
}

/// `q.c` -> `q.d` at the first place each qualified column is read in a
/// condition, `d` the next other column of `q` the text names.
fn swap_columns(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
    // Every qualified reference `q.c`: (index of c, q, c).
    let mut refs: Vec<(usize, String, String)> = Vec::new();
    for i in 2..toks.len() {
        if toks[i].kind == Kind::Word
            && toks[i - 1].kind == Kind::Punct
            && &text[toks[i - 1].range.clone()] == "."
            && toks[i - 2].kind == Kind::Word
            && toks.get(i + 1).is_none_or(|t| {
                t.kind != Kind::Open && !(t.kind == Kind::Punct && &text[t.range.clone()] == ".")
            })
            && (i < 3 || &text[toks[i - 3].range.clone()] != ".")
        {
            let q = text[toks[i - 2].range.clone()].to_ascii_lowercase();
            let c = text[toks[i].range.clone()].to_owned();
            if words[i - 2].as_deref() == Some("AWA") || c == "*" {
                continue;
            }
            refs.push((i, q, c));
        }
    }
    let in_condition = condition_tokens(text, toks, words);
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for (i, q, c) in &refs {
        if !in_condition.contains(i) || !seen.insert((q.clone(), c.to_ascii_lowercase())) {
            continue;
        }
        let mut columns: Vec<&str> = Vec::new();
        for (_, q2, c2) in &refs {
            if q2 == q && !columns.iter().any(|x| x.eq_ignore_ascii_case(c2)) {
                columns.push(c2);
            }
        }
        let Some(pos) = columns.iter().position(|x| x.eq_ignore_ascii_case(c)) else {
            continue;
        };
        if columns.len() < 2 {
            continue;
        }
        let other = columns[(pos + 1) % columns.len()];
        push(toks[*i].range.clone(), other, Operator::SqlSwapColumn);
    }
}

/// The token indices inside a `WHERE` or `ON` clause.
fn condition_tokens(text: &str, toks: &[Token], words: &[Option<String>]) -> BTreeSet<usize> {
    let mut inside = BTreeSet::new();
    for (w, x) in words.iter().enumerate() {
        if matches!(x.as_deref(), Some("WHERE" | "ON"))
            && !matches!(
                words.get(w + 1).and_then(|x| x.as_deref()),
                Some("CONFLICT")
            )
        {
            let end = clause_end(text, toks, words, w + 1, WHERE_ENDS);
            inside.extend(w + 1..end);
        }
    }
    inside
}

/// Dropped `ON CONFLICT`, locking clauses, `SKIP LOCKED`/`NOWAIT`; `IS
/// [NOT] NULL`; the clock.
fn clauses(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
    let is = |i: usize, w: &str| words.get(i).and_then(|x| x.as_deref()) == Some(w);
    // Where a dropped clause starts: the end of the token before it, so
    // the blank before the clause goes with it.
    let from = |i: usize| {
        if i == 0 {
            toks[0].range.start
        } else {
            toks[i - 1].range.end
        }
    };
    for i in 0..toks.len() {
        if is(i, "ON") && is(i + 1, "CONFLICT") {
            let end = clause_end(text, toks, words, i + 2, &["RETURNING"]);
            push(
                from(i)..toks[end - 1].range.end,
                "",
                Operator::SqlDropOnConflict,
            );
        }
        if is(i, "FOR")
            && ["UPDATE", "SHARE", "NO", "KEY"]
                .iter()
                .any(|w| is(i + 1, w))
        {
            let mut j = i + 1;
            while j < toks.len()
                && ([
                    "NO", "KEY", "UPDATE", "SHARE", "SKIP", "LOCKED", "NOWAIT", "OF",
                ]
                .iter()
                .any(|w| is(j, w))
                    || (is(j - 1, "OF") && toks[j].kind == Kind::Word)
                    || (toks[j].kind == Kind::Punct
                        && &text[toks[j].range.clone()] == ","
                        && is(j - 1, "OF")))
            {
                j += 1;
            }
            push(from(i)..toks[j - 1].range.end, "", Operator::SqlDropLocking);
        }
        if is(i, "SKIP") && is(i + 1, "LOCKED") {
            push(from(i)..toks[i + 1].range.end, "", Operator::SqlDropLocking);
        }
        if is(i, "NOWAIT") {
            push(from(i)..toks[i].range.end, "", Operator::SqlDropLocking);
        }
        if is(i, "IS") && is(i + 1, "NULL") {
            push(toks[i].range.clone(), "IS NOT", Operator::SqlNullCheck);
        }
        if is(i, "IS") && is(i + 1, "NOT") && is(i + 2, "NULL") {
            push(
                toks[i].range.start..toks[i + 1].range.end,
                "IS",
                Operator::SqlNullCheck,
            );
        }
        if is(i, "NOW")
            && toks.get(i + 1).is_some_and(|t| t.kind == Kind::Open)
            && toks.get(i + 2).is_some_and(|t| t.kind == Kind::Close)
        {
            push(
                toks[i].range.start..toks[i + 2].range.end,
                "(now() + interval '1 minute')",
                Operator::SqlNow,
            );
        }
        if toks[i].kind == Kind::Param
            && toks
                .get(i + 1)
                .is_some_and(|t| &text[t.range.clone()] == "::")
            && ["TIMESTAMPTZ", "TIMESTAMP"].iter().any(|w| is(i + 2, w))
        {
            push(
                toks[i].range.start..toks[i + 2].range.end,
                "now()",
                Operator::SqlNow,
            );
        }
    }
}

/// Splits a `.sql` file into statements at the `;` outside dollar-quoted
/// bodies; each is the byte range of its text (without the `;`).
pub fn statements(text: &str) -> Vec<Range<usize>> {
    let toks = lex(text, false);
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut dollar: Option<&str> = None;
    for t in &toks {
        let s = &text[t.range.clone()];
        start.get_or_insert(t.range.start);
        match (t.kind, dollar) {
            (Kind::Dollar, None) => dollar = Some(s),
            (Kind::Dollar, Some(open)) if open == s => dollar = None,
            (Kind::Punct, None) if s == ";" => {
                if let Some(a) = start.take() {
                    out.push(a..t.range.start);
                }
            }
            _ => {}
        }
    }
    if let (Some(a), Some(last)) = (start, toks.last()) {
        out.push(a..last.range.end);
    }
    out.retain(|r| !text[r.clone()].trim().is_empty());
    out
}

/// Whether a Rust string's content reads as SQL (a statement keyword as a
/// whole upper-case word).
pub fn looks_like_sql(text: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "CREATE", "ALTER", "DROP", "WHERE", "SET",
        "LOCK", "TRUNCATE", "CALL",
    ];
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| KEYWORDS.contains(&w))
}

/// Whitespace and comments removed, case kept: two statements that differ
/// only there are the same statement.
pub fn fingerprint(text: &str, rust_escapes: bool) -> String {
    let toks = lex(text, rust_escapes);
    let mut out = String::new();
    for t in toks {
        out.push_str(&text[t.range]);
        out.push(' ');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mutant of `sql` as (operator, mutated text).
    fn apply_all(sql: &str) -> Vec<(Operator, String)> {
        mutate(sql, false)
            .into_iter()
            .map(|e| {
                let mut s = sql.to_owned();
                s.replace_range(e.range, &e.replacement);
                (e.operator, s)
            })
            .collect()
    }

    fn of(sql: &str, op: Operator) -> Vec<String> {
        apply_all(sql)
            .into_iter()
            .filter(|(o, _)| *o == op)
            .map(|(_, s)| s)
            .collect()
    }

    #[test]
    fn the_operators_on_sample_statements() {
        use Operator::*;
        let table: &[(&str, Operator, &[&str])] = &[
            (
                "SELECT a FROM t WHERE run_at <= now()",
                SqlCompare,
                &["SELECT a FROM t WHERE run_at < now()"],
            ),
            (
                "SELECT a FROM t WHERE x < $1 AND y >= 2",
                SqlCompare,
                &[
                    "SELECT a FROM t WHERE x <= $1 AND y >= 2",
                    "SELECT a FROM t WHERE x < $1 AND y > 2",
                ],
            ),
            // `=` of SET assigns; only the WHERE's is a comparison.
            (
                "UPDATE t SET a = 1, b = 2 WHERE id = $1",
                SqlCompare,
                &["UPDATE t SET a = 1, b = 2 WHERE id <> $1"],
            ),
            (
                "SELECT 1 FROM t WHERE a <> b",
                SqlCompare,
                &["SELECT 1 FROM t WHERE a = b"],
            ),
            (
                "SELECT 1 FROM t WHERE a = 1 OR b = 2",
                SqlAndOr,
                &["SELECT 1 FROM t WHERE a = 1 AND b = 2"],
            ),
            // The AND of BETWEEN is not a conjunction.
            (
                "SELECT 1 FROM t WHERE a BETWEEN 1 AND 2 AND b",
                SqlAndOr,
                &["SELECT 1 FROM t WHERE a BETWEEN 1 AND 2 OR b"],
            ),
            (
                "UPDATE t SET attempt = attempt + 1 WHERE x = -1",
                SqlArith,
                &["UPDATE t SET attempt = attempt - 1 WHERE x = -1"],
            ),
            (
                "DELETE FROM t WHERE a = $1 AND b = $2 AND c IS NULL RETURNING a",
                SqlDropConjunct,
                &[
                    "DELETE FROM t WHERE b = $2 AND c IS NULL RETURNING a",
                    "DELETE FROM t WHERE a = $1 AND c IS NULL RETURNING a",
                    "DELETE FROM t WHERE a = $1 AND b = $2 RETURNING a",
                ],
            ),
            // One conjunct: nothing to drop.
            ("DELETE FROM t WHERE a = $1", SqlDropConjunct, &[]),
            (
                "SELECT f($1, $2) WHERE x = $1",
                SqlSwapParam,
                &["SELECT f($2, $1) WHERE x = $2"],
            ),
            (
                "DELETE FROM l x USING j WHERE x.job_id = j.job_id AND x.run_lease = j.run_lease",
                SqlSwapColumn,
                &[
                    "DELETE FROM l x USING j WHERE x.run_lease = j.job_id AND x.run_lease = j.run_lease",
                    "DELETE FROM l x USING j WHERE x.job_id = j.run_lease AND x.run_lease = j.run_lease",
                    "DELETE FROM l x USING j WHERE x.job_id = j.job_id AND x.job_id = j.run_lease",
                    "DELETE FROM l x USING j WHERE x.job_id = j.job_id AND x.run_lease = j.job_id",
                ],
            ),
            (
                "INSERT INTO t (a) VALUES ($1) ON CONFLICT (a) DO NOTHING RETURNING a",
                SqlDropOnConflict,
                &["INSERT INTO t (a) VALUES ($1) RETURNING a"],
            ),
            (
                "SELECT a FROM t ORDER BY a LIMIT 5 FOR UPDATE SKIP LOCKED",
                SqlDropLocking,
                &[
                    "SELECT a FROM t ORDER BY a LIMIT 5",
                    "SELECT a FROM t ORDER BY a LIMIT 5 FOR UPDATE",
                ],
            ),
            (
                "SELECT a FROM t WHERE b IS NOT NULL",
                SqlNullCheck,
                &["SELECT a FROM t WHERE b IS NULL"],
            ),
            (
                "UPDATE t SET at = now() WHERE due < $1::timestamptz",
                SqlNow,
                &[
                    "UPDATE t SET at = (now() + interval '1 minute') WHERE due < $1::timestamptz",
                    "UPDATE t SET at = now() WHERE due < now()",
                ],
            ),
        ];
        for (sql, op, want) in table {
            assert_eq!(of(sql, *op), *want, "{op:?} of {sql}");
        }
    }

    #[test]
    fn strings_comments_and_quoted_names_are_not_mutated() {
        let sql = "SELECT 'a < b AND c' FROM \"x<y\" -- WHERE a = b AND c = d\nWHERE k = 1";
        let ops: Vec<Operator> = mutate(sql, false).iter().map(|e| e.operator).collect();
        assert_eq!(ops, vec![Operator::SqlCompare]);
    }

    #[test]
    fn rust_escapes_read_as_blanks() {
        let sql = r"SELECT a FROM t \
    WHERE a < 1\n";
        assert_eq!(
            of(sql, Operator::SqlCompare),
            vec![
                r"SELECT a FROM t \
    WHERE a <= 1\n"
            ]
        );
    }

    #[test]
    fn plpgsql_conditions_are_mutated_and_assignments_kept() {
        let sql = "BEGIN IF NEW.slot <> OLD.slot THEN x := 1; RAISE EXCEPTION 'no'; END IF; END";
        assert_eq!(
            of(sql, Operator::SqlCompare),
            vec!["BEGIN IF NEW.slot = OLD.slot THEN x := 1; RAISE EXCEPTION 'no'; END IF; END"]
        );
    }

    #[test]
    fn statements_split_outside_dollar_bodies() {
        let text = "CREATE TABLE a (x int);\nCREATE FUNCTION f() RETURNS trigger AS $$ BEGIN RETURN NEW; END $$ LANGUAGE plpgsql;\n-- end\n";
        let parts: Vec<&str> = statements(text)
            .into_iter()
            .map(|r| text[r].trim())
            .collect();
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert!(parts[1].ends_with("LANGUAGE plpgsql"));
    }

    #[test]
    fn fingerprints_ignore_layout_and_comments() {
        assert_eq!(
            fingerprint("SELECT a\n  FROM t -- note\n", false),
            fingerprint("SELECT a FROM t", false)
        );
        assert_ne!(
            fingerprint("SELECT a FROM t", false),
            fingerprint("SELECT b FROM t", false)
        );
        assert!(looks_like_sql("\nSELECT 1"));
        assert!(!looks_like_sql("55P03"));
    }
}
