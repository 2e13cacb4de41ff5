//! Located problems in matrix.toml, reported all at once.
//!
//! Validation never stops at the first problem: every check pushes into a
//! [`Problems`], and the caller gets the whole list, sorted by position, each
//! line in the form `FILE:LINE:COL: CONTEXT: MESSAGE`, e.g.
//! `matrix.toml:57:5: cell "migrate-first", step 4 (roll): ...`.
//! Byte spans from the TOML parser become 1-based line and column here.

use std::fmt;
use std::ops::Range;

/// A 1-based position in the matrix file; the column counts characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    /// Line number, starting at 1.
    pub line: usize,
    /// Column number in characters, starting at 1.
    pub column: usize,
}

/// One problem: where it is, which part of the matrix, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Position in the file, when the problem has one.
    pub location: Option<Location>,
    /// The key path, such as `cell "fence", step 3 (flip)`; empty for the file itself.
    pub context: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

/// Every problem found in one matrix file; displays one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics {
    file: String,
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// The file name the diagnostics refer to, as the user gave or we found it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The problems, sorted by position (unlocated ones last).
    pub fn items(&self) -> &[Diagnostic] {
        &self.items
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is wrong (never the case for a returned error).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Each problem rendered as a `FILE:LINE:COL: CONTEXT: MESSAGE` line.
    pub fn lines(&self) -> Vec<String> {
        self.items.iter().map(|d| self.render(d)).collect()
    }

    fn render(&self, d: &Diagnostic) -> String {
        let mut line = self.file.clone();
        if let Some(at) = d.location {
            line.push_str(&format!(":{}:{}", at.line, at.column));
        }
        line.push_str(": ");
        if !d.context.is_empty() {
            line.push_str(&d.context);
            line.push_str(": ");
        }
        line.push_str(&d.message);
        line
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, line) in self.lines().into_iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(&line)?;
        }
        Ok(())
    }
}

/// Collects problems while validation walks the file.
pub(crate) struct Problems<'a> {
    file: &'a str,
    line_starts: Vec<usize>,
    text: &'a str,
    items: Vec<Diagnostic>,
}

impl<'a> Problems<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Problems {
            file,
            line_starts,
            text,
            items: Vec::new(),
        }
    }

    /// The 1-based line and column of a byte offset into the file.
    pub(crate) fn locate(&self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let line_index = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let line_start = self.line_starts[line_index];
        let column = self
            .text
            .get(line_start..offset)
            .map_or(offset - line_start, |s| s.chars().count());
        Location {
            line: line_index + 1,
            column: column + 1,
        }
    }

    /// Records a problem at `span` (its start), under `context`.
    pub(crate) fn error(
        &mut self,
        span: Option<Range<usize>>,
        context: &str,
        message: impl Into<String>,
    ) {
        let location = span.map(|s| self.locate(s.start));
        self.items.push(Diagnostic {
            location,
            context: context.to_owned(),
            message: message.into(),
        });
    }

    /// Records a problem the TOML parser or serde reported.
    pub(crate) fn toml(&mut self, err: &toml::de::Error, context: &str) {
        self.error(err.span(), context, err.message().trim_end().to_owned());
    }

    /// Records a TOML syntax error, naming the key of a duplicate.
    pub(crate) fn syntax(&mut self, err: &toml::de::Error) {
        let message = err.message().trim_end();
        let key = err
            .span()
            .and_then(|s| self.text.get(s))
            .map(|k| k.trim().trim_matches('"'))
            .filter(|k| !k.is_empty() && !k.contains('\n'));
        let message = match key {
            Some(key) if message == "duplicate key" => {
                format!(
                    "duplicate key `{key}`: it is already set above in the same table; keep one"
                )
            }
            _ => message.to_owned(),
        };
        self.error(err.span(), "", message);
    }

    /// True when at least one problem was recorded.
    pub(crate) fn has_errors(&self) -> bool {
        !self.items.is_empty()
    }

    /// The collected problems, sorted by position; stable for equal positions.
    pub(crate) fn finish(mut self) -> Diagnostics {
        self.items.sort_by_key(|d| {
            d.location
                .map_or((usize::MAX, usize::MAX), |l| (l.line, l.column))
        });
        Diagnostics {
            file: self.file.to_owned(),
            items: self.items,
        }
    }
}

/// The byte offset of the first `{` left open at the end of its line,
/// outside strings and comments (matrix.toml keeps each inline table on
/// one line).
pub(crate) fn unclosed_brace(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let mut open = Vec::new();
        let mut quote = None;
        for (i, c) in line.char_indices() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '{') => open.push(offset + i),
                (None, '}') => {
                    open.pop();
                }
                _ => {}
            }
        }
        if let Some(&at) = open.first() {
            return Some(at);
        }
        offset += line.len();
    }
    None
}

/// The candidate closest to `word`, when it is close enough to be a likely typo.
pub(crate) fn suggest<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&word.to_lowercase().replace('-', "_"), c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// " (did you mean "X"?)" when a candidate is close, else nothing.
pub(crate) fn did_you_mean<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> String {
    suggest(word, candidates).map_or_else(String::new, |c| format!(" (did you mean \"{c}\"?)"))
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_counts_lines_and_characters_from_one() {
        let text = "a = 1\n[x]\nké = \"v\"\n";
        let sink = Problems::new("m.toml", text);
        assert_eq!(sink.locate(0), Location { line: 1, column: 1 });
        assert_eq!(sink.locate(4), Location { line: 1, column: 5 });
        assert_eq!(sink.locate(6), Location { line: 2, column: 1 });
        // "ké" has a two-byte character: the '=' is byte 14 but column 4.
        let eq = text.find("= \"v").unwrap();
        assert_eq!(sink.locate(eq), Location { line: 3, column: 4 });
        assert_eq!(sink.locate(text.len()), Location { line: 4, column: 1 });
    }

    #[test]
    fn diagnostics_render_sorted_with_file_line_column_and_context() {
        let text = "one\ntwo\nthree\n";
        let mut sink = Problems::new("matrix.toml", text);
        sink.error(Some(8..9), "cell \"c\", step 2 (hold)", "second");
        sink.error(None, "", "unlocated");
        sink.error(Some(4..5), "workload", "first");
        let diags = sink.finish();
        assert_eq!(
            diags.to_string(),
            "matrix.toml:2:1: workload: first\n\
             matrix.toml:3:1: cell \"c\", step 2 (hold): second\n\
             matrix.toml: unlocated"
        );
        assert_eq!(diags.len(), 3);
    }

    #[test]
    fn suggestions_only_for_close_words() {
        let steps = ["fleet", "load", "roll", "rollback", "pg_crash"];
        assert_eq!(suggest("rol", steps), Some("roll"));
        assert_eq!(suggest("rollbak", steps), Some("rollback"));
        assert_eq!(suggest("pg-crash", steps), Some("pg_crash"));
        assert_eq!(suggest("Fleet", steps), Some("fleet"));
        assert_eq!(suggest("xyzzy", steps), None);
        assert_eq!(did_you_mean("lod", steps), " (did you mean \"load\"?)");
        assert_eq!(did_you_mean("zzz", steps), "");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
