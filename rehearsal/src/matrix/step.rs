//! Steps: one inline table, one step key, that step's options.
//!
//! serde cannot express "the key is the tag" for an internally tagged
//! enum, so each step arrives as a spanned key/value list and is converted
//! here by hand. That is also where the good messages come from: an
//! unknown step is told from a misspelt option, two step keys in one table
//! are named, and every option is checked for type and range at its own
//! line and column.
//!
//! This file holds the entry point ([`convert`]), the step key and what
//! each step takes; `option_reader` reads an option as a type at its own
//! place, and `options_by_kind` reads each step kind's options.

use std::collections::BTreeSet;

use toml::{Spanned, Value};

use super::diagnostic::{Problems, did_you_mean};
use super::model::{STEP_NAMES, Step};
use super::raw::RawStep;

mod option_reader;
mod options_by_kind;

use option_reader::Reader;
use options_by_kind::read_step;

/// Most workers one step may start: a typo must not fork-bomb the machine.
pub const MAX_WORKERS: u64 = 32;

/// Most producers one step may start.
pub const MAX_PRODUCERS: u64 = 8;

/// Most jobs of each kind one cancel step may cancel (one command a job).
pub const MAX_CANCELS: u64 = 20;

/// Largest `after_started` threshold.
pub const MAX_AFTER_STARTED: u64 = 1_000_000;

/// The options each step takes, besides its own key.
const OPTIONS: [(&str, &[&str]); 16] = [
    ("fleet", &["workers", "producers", "leader", "when", "idle"]),
    ("load", &[]),
    ("migrate", &["allow_live_runtimes", "expect"]),
    ("roll", &["one_at_a_time", "pause", "producers"]),
    ("rollback", &["workers"]),
    ("kill", &["of", "when", "after_started", "signal"]),
    ("suspend", &["of", "for", "at"]),
    ("resume", &["of", "signal"]),
    ("pg_crash", &[]),
    ("flip", &["expect", "timeout", "by"]),
    ("fence", &[]),
    ("hold", &["reads", "until", "lock_ring", "deadlock"]),
    ("drain", &[]),
    ("assert", &[]),
    ("cancel", &["running", "available"]),
    ("revoke", &["workers", "producers"]),
];

fn options_of(step: &str) -> &'static [&'static str] {
    OPTIONS
        .iter()
        .find(|(name, _)| *name == step)
        .map_or(&[], |(_, options)| options)
}

/// The context prefix of a step's messages: `cell "fence", step 3 (flip)`.
///
/// `cell` is the cell's label (`cell "fence"`, or `cell #4` when it has no name).
pub(crate) fn step_context(cell: &str, index: usize, step: Option<&str>) -> String {
    match step {
        Some(name) => format!("{cell}, step {index} ({name})"),
        None => format!("{cell}, step {index}"),
    }
}

/// Converts one raw step (1-based `index`) of the cell labelled `cell`, recording every problem; `None` if any.
pub(crate) fn convert(
    raw: &Spanned<RawStep>,
    cell: &str,
    index: usize,
    artifacts: &BTreeSet<String>,
    sink: &mut Problems<'_>,
) -> Option<Step> {
    let entries = match raw.get_ref() {
        RawStep::Table(entries) => entries,
        RawStep::Broken => return None,
        RawStep::NotATable(found) => {
            sink.error(
                Some(raw.span()),
                &step_context(cell, index, None),
                format!("expected an inline table like {{ hold = \"5s\" }}, found {found}"),
            );
            return None;
        }
    };
    let step = step_name(raw, entries, cell, index, sink)?;
    let mut r = Reader {
        sink,
        context: step_context(cell, index, Some(step)),
        step,
        table: raw.span(),
        entries,
        artifacts,
        ok: true,
    };
    r.reject_unknown_options();
    let step = read_step(step, &mut r);
    if r.ok { step } else { None }
}

/// The table's one step key; `None` with the error said when it has none
/// or several.
fn step_name(
    raw: &Spanned<RawStep>,
    entries: &[(Spanned<String>, Spanned<Value>)],
    cell: &str,
    index: usize,
    sink: &mut Problems<'_>,
) -> Option<&'static str> {
    let step_keys: Vec<&(Spanned<String>, Spanned<Value>)> = entries
        .iter()
        .filter(|(k, _)| STEP_NAMES.contains(&k.get_ref().as_str()))
        .collect();
    match step_keys.as_slice() {
        [(key, _)] => STEP_NAMES.into_iter().find(|s| s == key.get_ref()),
        [] => {
            report_missing_step(raw, entries, cell, index, sink);
            None
        }
        [_, second, ..] => {
            let names: Vec<&str> = step_keys
                .iter()
                .map(|(k, _)| k.get_ref().as_str())
                .collect();
            sink.error(
                Some(second.0.span()),
                &step_context(cell, index, None),
                format!(
                    "one step per table, found {} step keys ({}); split them into separate steps",
                    names.len(),
                    names.join(", ")
                ),
            );
            None
        }
    }
}

/// A table without a step key: either a misspelt step, or options alone.
fn report_missing_step(
    raw: &Spanned<RawStep>,
    entries: &[(Spanned<String>, Spanned<Value>)],
    cell: &str,
    index: usize,
    sink: &mut Problems<'_>,
) {
    let context = step_context(cell, index, None);
    let is_option = |key: &str| OPTIONS.iter().any(|(_, options)| options.contains(&key));
    let expected = STEP_NAMES.join(", ");
    if let Some((key, _)) = entries.iter().find(|(k, _)| !is_option(k.get_ref())) {
        let name = key.get_ref();
        sink.error(
            Some(key.span()),
            &context,
            format!(
                "unknown step \"{name}\"{}; expected one of {expected}",
                did_you_mean(name, STEP_NAMES)
            ),
        );
    } else if entries.is_empty() {
        sink.error(
            Some(raw.span()),
            &context,
            format!("empty step; expected one of {expected}"),
        );
    } else {
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.get_ref().as_str()).collect();
        sink.error(
            Some(raw.span()),
            &context,
            format!(
                "step has options ({}) but no step key; expected one of {expected}",
                keys.join(", ")
            ),
        );
    }
}

/// A TOML value named for an error message: `string "two"`, `integer 3`.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("string \"{s}\""),
        Value::Integer(n) => format!("integer {n}"),
        Value::Float(x) => format!("float {x}"),
        Value::Boolean(b) => format!("boolean {b}"),
        Value::Datetime(d) => format!("datetime {d}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Table(_) => "a table".to_owned(),
    }
}
