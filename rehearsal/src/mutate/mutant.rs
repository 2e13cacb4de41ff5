//! One mutant: what kind of change it is ([`Operator`]), where and what
//! it replaces ([`Mutant`], named by a stable id), how it reads as a
//! one-line or unified diff, and the counts and listing `--list` prints.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::tree::Tree;

/// A mutation operator: what kind of change a mutant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operator {
    /// A function's body replaced by a value of its return type.
    FnBody,
    /// A binary operator swapped (`<` for `<=`, `&&` for `||`, `+` for `-`).
    BinOp,
    /// A `!` deleted.
    DeleteNot,
    /// A SQL comparison changed.
    SqlCompare,
    /// `AND` <-> `OR`.
    SqlAndOr,
    /// `+` <-> `-` in SQL.
    SqlArith,
    /// A conjunct of a `WHERE` dropped.
    SqlDropConjunct,
    /// Two bind parameters swapped.
    SqlSwapParam,
    /// A column read for another of the same table.
    SqlSwapColumn,
    /// `ON CONFLICT ...` dropped.
    SqlDropOnConflict,
    /// A locking clause (`FOR UPDATE`, `SKIP LOCKED`, `NOWAIT`) dropped.
    SqlDropLocking,
    /// `IS NULL` <-> `IS NOT NULL`.
    SqlNullCheck,
    /// The statement's clock: `now()` shifted, a time parameter for `now()`.
    SqlNow,
}

impl Operator {
    /// The name the report and `--list` print.
    pub fn name(self) -> &'static str {
        match self {
            Operator::FnBody => "fn-body",
            Operator::BinOp => "binop",
            Operator::DeleteNot => "delete-not",
            Operator::SqlCompare => "sql-compare",
            Operator::SqlAndOr => "sql-and-or",
            Operator::SqlArith => "sql-arith",
            Operator::SqlDropConjunct => "sql-drop-conjunct",
            Operator::SqlSwapParam => "sql-swap-param",
            Operator::SqlSwapColumn => "sql-swap-column",
            Operator::SqlDropOnConflict => "sql-drop-on-conflict",
            Operator::SqlDropLocking => "sql-drop-locking",
            Operator::SqlNullCheck => "sql-null-check",
            Operator::SqlNow => "sql-now",
        }
    }

    /// Whether it changes SQL.
    pub fn is_sql(self) -> bool {
        !matches!(
            self,
            Operator::FnBody | Operator::BinOp | Operator::DeleteNot
        )
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One mutant: one byte range of one file of awa-runtime, replaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutant {
    /// Stable name (`m3f2a9c1d`): a hash of what identifies the mutation,
    /// never of where it sits (see `Mutant::name`), so an edit elsewhere
    /// in its file leaves it its id.
    pub id: String,
    /// The file, relative to awa-runtime's root (`src/store/claim.rs`).
    pub file: String,
    /// The 1-based line where the change starts.
    pub line: usize,
    /// The function or statement it is in (`claim::claim`, `const CLAIM`).
    pub unit: String,
    /// The kind of change.
    pub operator: Operator,
    /// Bytes of the file replaced.
    pub range: Range<usize>,
    /// The replaced text.
    pub original: String,
    /// What replaces it.
    pub replacement: String,
}

impl Mutant {
    /// Builds a mutant, named as the first of its kind in its unit
    /// (`identify` numbers the others once the file's are all known).
    pub fn new(
        file: &str,
        text: &str,
        unit: &str,
        operator: Operator,
        range: Range<usize>,
        replacement: String,
    ) -> Mutant {
        let line = text[..range.start].matches('\n').count() + 1;
        let mut m = Mutant {
            id: String::new(),
            file: file.to_owned(),
            line,
            unit: unit.to_owned(),
            operator,
            original: text[range.clone()].to_owned(),
            range,
            replacement,
        };
        m.id = m.name(0);
        m
    }

    /// Its id when it is the `occurrence`-th (from 0, in file order) of
    /// the mutations of its unit with its operator and original text: a
    /// hash of the file, the unit, the operator, the original text, the
    /// replacement and that number. Its byte range and line stay out, so
    /// a line added above it (before its function, inside another) does
    /// not rename it, and a `[[mutate.equivalent]]` entry keeps naming it;
    /// an edit of the text it changes does.
    fn name(&self, occurrence: usize) -> String {
        // The number first: ids of neighbours that differ in it alone
        // do not look alike.
        let key = format!(
            "{occurrence}\0{}\0{}\0{}\0{}\0{}",
            self.file, self.unit, self.operator, self.original, self.replacement
        );
        format!("m{:08x}", crate::plan::fnv1a64(key.as_bytes()) as u32)
    }

    /// The file's text with this mutant applied.
    pub fn apply(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + self.replacement.len());
        out.push_str(&text[..self.range.start]);
        out.push_str(&self.replacement);
        out.push_str(&text[self.range.end..]);
        out
    }

    /// The one-line diff: the changed line before and after, trimmed
    /// (a function body: its first line, and what replaces it).
    pub fn one_line(&self, text: &str) -> String {
        let (before, after) = self.changed_lines(text);
        let first = |lines: &[String]| -> String {
            let joined = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            shorten(&joined, 100)
        };
        format!("-{} +{}", first(&before), first(&after))
    }

    /// The unified diff of the lines it changes (at most `MAX_DIFF_LINES` a side).
    pub fn diff(&self, text: &str) -> String {
        let (before, after) = self.changed_lines(text);
        let mut out = format!(
            "--- {}:{}\n+++ {}:{} ({})\n",
            self.file, self.line, self.file, self.line, self.operator
        );
        for (sign, lines) in [('-', &before), ('+', &after)] {
            for (n, l) in lines.iter().enumerate() {
                if n == MAX_DIFF_LINES {
                    out.push_str(&format!("{sign} ... ({} more lines)\n", lines.len() - n));
                    break;
                }
                out.push(sign);
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The whole lines the change touches, before and after.
    fn changed_lines(&self, text: &str) -> (Vec<String>, Vec<String>) {
        let start = text[..self.range.start].rfind('\n').map_or(0, |i| i + 1);
        let end = text[self.range.end..]
            .find('\n')
            .map_or(text.len(), |i| self.range.end + i);
        let before = &text[start..end];
        let after = format!(
            "{}{}{}",
            &text[start..self.range.start],
            self.replacement,
            &text[self.range.end..end]
        );
        (
            before.lines().map(str::to_owned).collect(),
            after.lines().map(str::to_owned).collect(),
        )
    }
}

/// The most lines a side of a mutant's diff shows.
const MAX_DIFF_LINES: usize = 12;

/// `text` cut to `max` characters, with an ellipsis.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max).collect();
    s.push('…');
    s
}

/// Names the mutants of one file (all of them, in scope or not, so a
/// mutant's id is the same under `--all` and `--in-diff`): two that make
/// the same change of the same text in the same unit are told apart by
/// their order in the file, counted among those alone. Several
/// replacements of one place share its number.
pub(super) fn identify<'a>(mutants: impl IntoIterator<Item = &'a mut Mutant>) {
    let mut all: Vec<&mut Mutant> = mutants.into_iter().collect();
    all.sort_by_key(|m| (m.range.start, m.range.end));
    let mut places: BTreeMap<(String, Operator, String), Vec<Range<usize>>> = BTreeMap::new();
    for m in all {
        let key = (m.unit.clone(), m.operator, m.original.clone());
        let seen = places.entry(key).or_default();
        if seen.last() != Some(&m.range) {
            seen.push(m.range.clone());
        }
        m.id = m.name(seen.len() - 1);
    }
}

/// Counts of a list, for `--list` and the report's header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Mutants of SQL.
    pub sql: usize,
    /// Mutants of Rust.
    pub rust: usize,
}

impl Counts {
    /// Counts `mutants`.
    pub fn of(mutants: &[Mutant]) -> Counts {
        let sql = mutants.iter().filter(|m| m.operator.is_sql()).count();
        Counts {
            sql,
            rust: mutants.len() - sql,
        }
    }
}

/// `rehearse mutate --list`: one line a mutant (id, file:line, operator,
/// the one-line diff) and the counts.
pub fn render_list(mutants: &[Mutant], tree: &Tree) -> String {
    let mut out = String::new();
    for m in mutants {
        let text = tree.files.get(&m.file).map_or("", String::as_str);
        out.push_str(&format!(
            "{}  {}:{}  {}  {}  {}\n",
            m.id,
            m.file,
            m.line,
            m.operator,
            m.unit,
            m.one_line(text)
        ));
    }
    let c = Counts::of(mutants);
    out.push_str(&format!(
        "{} mutants ({} SQL, {} Rust)\n",
        mutants.len(),
        c.sql,
        c.rust
    ));
    out
}

/// Mutants by file, for the runner (each file read once).
pub fn by_file(mutants: &[Mutant]) -> BTreeMap<&str, Vec<&Mutant>> {
    let mut map: BTreeMap<&str, Vec<&Mutant>> = BTreeMap::new();
    for m in mutants {
        map.entry(m.file.as_str()).or_default().push(m);
    }
    map
}
