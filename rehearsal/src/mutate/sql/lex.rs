//! A statement's text as tokens that keep their byte ranges: what every
//! SQL operator reads. Quoted strings, quoted identifiers and dollar
//! quotes are single tokens; blanks and comments are dropped (and, in the
//! content of a Rust string literal, backslash escapes too).

use std::ops::Range;

/// A lexical class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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

/// One token: its class and the bytes of the text it covers.
#[derive(Clone, Debug)]
pub(super) struct Token {
    pub(super) kind: Kind,
    pub(super) range: Range<usize>,
}

/// The characters SQL builds operators from.
const OP_CHARS: &str = "+-*/<>=~!@#%^&|`?:";

/// Lexes `text`; comments and blanks are dropped.
pub(super) fn lex(text: &str, rust_escapes: bool) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(past) = skip_blank(b, i, rust_escapes) {
            i = past;
            continue;
        }
        let (kind, end) = token(b, i);
        out.push(Token {
            kind,
            range: i..end.min(b.len()),
        });
        i = end;
    }
    out
}

/// Past the blank, comment or (with `rust_escapes`) backslash escape
/// that starts at `i`, if one does.
fn skip_blank(b: &[u8], mut i: usize, rust_escapes: bool) -> Option<usize> {
    match b[i] {
        b'\\' if rust_escapes => Some(i + 2),
        c if c.is_ascii_whitespace() => Some(i + 1),
        b'-' if b.get(i + 1) == Some(&b'-') => {
            while i < b.len() && b[i] != b'\n' && !(rust_escapes && b[i] == b'\\') {
                i += 1;
            }
            Some(i)
        }
        b'/' if b.get(i + 1) == Some(&b'*') => {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            Some((i + 2).min(b.len()))
        }
        _ => None,
    }
}

/// The class of the token that starts at `i` (no blank, no comment), and
/// where it ends.
fn token(b: &[u8], i: usize) -> (Kind, usize) {
    match b[i] {
        b'\'' => (Kind::Str, skip_quoted(b, i, b'\'')),
        b'"' => (Kind::Quoted, skip_quoted(b, i, b'"')),
        b'$' => dollar(b, i),
        c if c.is_ascii_digit() => {
            let mut i = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            (Kind::Number, i)
        }
        c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => word(b, i),
        b'(' => (Kind::Open, i + 1),
        b')' => (Kind::Close, i + 1),
        c if OP_CHARS.as_bytes().contains(&c) => (Kind::Op, operator_end(b, i)),
        _ => (Kind::Punct, i + 1),
    }
}

/// At a `$`: a bind parameter (`$1`), a dollar quote (`$$`, `$tag$`), or
/// a lone `$`.
fn dollar(b: &[u8], i: usize) -> (Kind, usize) {
    if b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        let mut j = i + 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        return (Kind::Param, j);
    }
    let mut j = i + 1;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    if b.get(j) == Some(&b'$') {
        (Kind::Dollar, j + 1)
    } else {
        (Kind::Punct, i + 1)
    }
}

/// A keyword or identifier, or an `E'...'` string.
fn word(b: &[u8], mut i: usize) -> (Kind, usize) {
    if (b[i] == b'E' || b[i] == b'e') && b.get(i + 1) == Some(&b'\'') {
        return (Kind::Str, skip_quoted(b, i + 1, b'\''));
    }
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
        i += 1;
    }
    (Kind::Word, i)
}

/// Past the operator that starts at `start`: its run of operator
/// characters, short of a sign that belongs to the operand after it and
/// of a `--` comment.
fn operator_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
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
    i
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
