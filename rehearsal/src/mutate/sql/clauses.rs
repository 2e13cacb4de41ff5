//! The operators that drop or rewrite a whole clause or phrase: a
//! conjunct of a `WHERE`, `ON CONFLICT ...`, a locking clause, `SKIP
//! LOCKED`/`NOWAIT`, `IS [NOT] NULL`, and the statement's clock.

use std::collections::BTreeSet;
use std::ops::Range;

use super::lex::{Kind, Token};
use crate::mutate::Operator;

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

/// The words a locking clause is made of.
const LOCKING_WORDS: &[&str] = &[
    "NO", "KEY", "UPDATE", "SHARE", "SKIP", "LOCKED", "NOWAIT", "OF",
];

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
pub(super) fn drop_conjuncts(
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
        let parts = conjuncts(toks, words, w + 1, end);
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

/// The conjuncts of the condition in tokens `from..end`, as token index
/// ranges, split at its own depth's `AND`s (not a `BETWEEN`'s).
fn conjuncts(
    toks: &[Token],
    words: &[Option<String>],
    from: usize,
    end: usize,
) -> Vec<(usize, usize)> {
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut start = from;
    let mut depth = 0usize;
    let mut between = false;
    for j in from..end {
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
    parts
}

/// The token indices inside a `WHERE` or `ON` clause.
pub(super) fn condition_tokens(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
) -> BTreeSet<usize> {
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
pub(super) fn clauses(
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
            let j = locking_end(text, toks, &is, i + 1);
            push(from(i)..toks[j - 1].range.end, "", Operator::SqlDropLocking);
        }
        if is(i, "SKIP") && is(i + 1, "LOCKED") {
            push(from(i)..toks[i + 1].range.end, "", Operator::SqlDropLocking);
        }
        if is(i, "NOWAIT") {
            push(from(i)..toks[i].range.end, "", Operator::SqlDropLocking);
        }
        null_check(toks, &is, i, push);
        clock(text, toks, &is, i, push);
    }
}

/// Past the locking clause whose words start at token `j` (after its
/// `FOR`): its words, and the tables an `OF` names.
fn locking_end(
    text: &str,
    toks: &[Token],
    is: &impl Fn(usize, &str) -> bool,
    mut j: usize,
) -> usize {
    while j < toks.len()
        && (LOCKING_WORDS.iter().any(|w| is(j, w))
            || (is(j - 1, "OF") && toks[j].kind == Kind::Word)
            || (toks[j].kind == Kind::Punct
                && &text[toks[j].range.clone()] == ","
                && is(j - 1, "OF")))
    {
        j += 1;
    }
    j
}

/// `IS NULL` <-> `IS NOT NULL` at token `i`.
fn null_check(
    toks: &[Token],
    is: &impl Fn(usize, &str) -> bool,
    i: usize,
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
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
}

/// The clock at token `i`: `now()` shifted by a minute, a parameter cast
/// to a time read as `now()`.
fn clock(
    text: &str,
    toks: &[Token],
    is: &impl Fn(usize, &str) -> bool,
    i: usize,
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
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
