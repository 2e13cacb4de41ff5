//! The operators that read one value for another: two bind parameters
//! swapped throughout the statement, and a qualified column read for
//! another column of the same table.

use std::collections::BTreeSet;
use std::ops::Range;

use super::clauses::condition_tokens;
use super::lex::{Kind, Token};
use crate::mutate::Operator;

/// `$k` <-> `$k+1` throughout the text, for each such pair it uses.
pub(super) fn swap_params(
    text: &str,
    toks: &[Token],
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
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
pub(super) fn swap_columns(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
    let refs = qualified_columns(text, toks, words);
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

/// Every qualified reference `q.c` of the text, as (index of c, q
/// lower-cased, c): not a function call, not a three-part name, not a
/// schema-qualified `awa.` name.
fn qualified_columns(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
) -> Vec<(usize, String, String)> {
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
    refs
}
