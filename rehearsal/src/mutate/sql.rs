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
//!
//! One file a job: the tokens ([`lex`]), the one-token operators read in
//! their clause's context ([`in_clause`]), the dropped and rewritten
//! clauses ([`clauses`]), the swapped parameters and columns ([`swaps`]);
//! this file runs them over a statement and splits a `.sql` file.

mod clauses;
mod in_clause;
mod lex;
mod swaps;

use std::ops::Range;

use super::Operator;
use lex::{Kind, Token, lex};

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

/// The proposed edits of one statement's `text`, in text order.
pub fn mutate(text: &str, rust_escapes: bool) -> Vec<Edit> {
    let toks = lex(text, rust_escapes);
    let word = |t: &Token| -> Option<String> {
        (t.kind == Kind::Word).then(|| text[t.range.clone()].to_ascii_uppercase())
    };
    let words: Vec<Option<String>> = toks.iter().map(word).collect();
    let mut edits = Vec::new();
    let mut push = |range: Range<usize>, replacement: &str, operator: Operator| {
        edits.push(Edit {
            range,
            replacement: replacement.to_owned(),
            operator,
        });
    };
    in_clause::operators(text, &toks, &words, &mut push);
    clauses::drop_conjuncts(text, &toks, &words, &mut push);
    swaps::swap_params(text, &toks, &mut push);
    swaps::swap_columns(text, &toks, &words, &mut push);
    clauses::clauses(text, &toks, &words, &mut push);
    edits.sort_by(|a, b| {
        (a.range.start, a.range.end, a.operator).cmp(&(b.range.start, b.range.end, b.operator))
    });
    edits.dedup();
    edits
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
