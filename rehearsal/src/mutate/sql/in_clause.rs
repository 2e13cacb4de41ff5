//! The operators of one token, read in the context of the clause it is
//! in: a comparison swapped, `AND` <-> `OR`, `+` <-> `-`. A `=` is a
//! comparison only in a condition (`WHERE`, `ON`, `WHEN`, `HAVING`,
//! PL/pgSQL `IF`); in a select list, `SET`, `VALUES` or an argument list
//! it assigns, so the walk keeps each parenthesis depth's context.

use std::ops::Range;

use super::lex::{Kind, Token};
use crate::mutate::Operator;

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
/// Words that are not operands (a `-` after them is a sign).
const NOT_OPERANDS: &[&str] = &[
    "SELECT", "WHERE", "AND", "OR", "NOT", "SET", "THEN", "ELSE", "WHEN", "CASE", "VALUES", "ON",
    "RETURN", "BY", "IN", "IS", "LIKE", "BETWEEN", "LIMIT", "OFFSET", "INTERVAL",
];

/// The context of each open parenthesis depth as the walk goes.
struct Depths {
    /// Per depth: (the clause's own context, the current one).
    stack: Vec<(Ctx, Ctx)>,
    /// Per depth: whether a `BETWEEN` waits for its `AND`.
    between: Vec<bool>,
}

impl Depths {
    fn new() -> Depths {
        Depths {
            stack: vec![(Ctx::Other, Ctx::Other)],
            between: vec![false],
        }
    }

    /// The innermost depth's (own, current) context.
    fn top(&self) -> Option<(Ctx, Ctx)> {
        self.stack.last().copied()
    }

    /// Follows a parenthesis, `,` or `;`; false for any other token.
    fn structure(&mut self, kind: Kind, s: &str) -> bool {
        match kind {
            Kind::Open => {
                let cur = self.top().map_or(Ctx::Other, |(_, cur)| cur);
                self.stack.push((cur, cur));
                self.between.push(false);
            }
            Kind::Close => {
                if self.stack.len() > 1 {
                    self.stack.pop();
                    self.between.pop();
                }
            }
            Kind::Punct if s == "," || s == ";" => {
                if let Some(top) = self.stack.last_mut() {
                    top.1 = if s == ";" { Ctx::Other } else { top.0 };
                    if s == ";" {
                        top.0 = Ctx::Other;
                    }
                }
            }
            _ => return false,
        }
        true
    }

    /// Follows a keyword that opens or closes a clause.
    fn keyword(&mut self, w: &str, after_distinct: bool) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
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

    /// Whether `w` joins two conditions (an `AND` or `OR`, not the `AND`
    /// of a `BETWEEN`), following `BETWEEN ... AND`.
    fn conjunction(&mut self, w: &str) -> bool {
        let top_between = self.between.last().copied().unwrap_or(false);
        match w {
            "BETWEEN" => {
                if let Some(b) = self.between.last_mut() {
                    *b = true;
                }
                false
            }
            "AND" if top_between => {
                if let Some(b) = self.between.last_mut() {
                    *b = false;
                }
                false
            }
            "AND" | "OR" => true,
            _ => false,
        }
    }
}

/// The one-token edits of the statement, in text order.
pub(super) fn operators(
    text: &str,
    toks: &[Token],
    words: &[Option<String>],
    push: &mut impl FnMut(Range<usize>, &str, Operator),
) {
    let mut depths = Depths::new();
    for (i, t) in toks.iter().enumerate() {
        let s = &text[t.range.clone()];
        let Some((base, cur)) = depths.top() else {
            break;
        };
        if depths.structure(t.kind, s) {
            continue;
        }
        if let Some(w) = &words[i] {
            let w = w.as_str();
            let after_distinct = i > 0 && words[i - 1].as_deref() == Some("DISTINCT");
            depths.keyword(w, after_distinct);
            if depths.conjunction(w) && (cur == Ctx::Condition || base == Ctx::Condition) {
                let to = if w == "AND" { "OR" } else { "AND" };
                push(t.range.clone(), to, Operator::SqlAndOr);
            }
            continue;
        }
        if t.kind != Kind::Op {
            continue;
        }
        let in_condition = depths.top().is_some_and(|(_, c)| c == Ctx::Condition);
        let after_operand = i > 0 && is_operand(&toks[i - 1], words[i - 1].as_deref());
        if let Some((to, operator)) = swapped(s, in_condition, after_operand) {
            push(t.range.clone(), to, operator);
        }
    }
}

/// What an operator token `s` becomes, if anything: comparisons always
/// (`=` and `<>` in a condition only), `+`/`-` when binary.
fn swapped(s: &str, in_condition: bool, after_operand: bool) -> Option<(&'static str, Operator)> {
    match s {
        "<" => Some(("<=", Operator::SqlCompare)),
        "<=" => Some(("<", Operator::SqlCompare)),
        ">" => Some((">=", Operator::SqlCompare)),
        ">=" => Some((">", Operator::SqlCompare)),
        "=" if in_condition => Some(("<>", Operator::SqlCompare)),
        "<>" | "!=" if in_condition => Some(("=", Operator::SqlCompare)),
        "+" if after_operand => Some(("-", Operator::SqlArith)),
        "-" if after_operand => Some(("+", Operator::SqlArith)),
        _ => None,
    }
}

/// A token an arithmetic operator can follow (so the operator is binary).
fn is_operand(t: &Token, word: Option<&str>) -> bool {
    match t.kind {
        Kind::Number | Kind::Param | Kind::Close | Kind::Str | Kind::Quoted => true,
        Kind::Word => word.is_some_and(|w| !NOT_OPERANDS.contains(&w)),
        _ => false,
    }
}
