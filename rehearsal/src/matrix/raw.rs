//! matrix.toml as written: serde structs that keep byte spans.
//!
//! The file is parsed once into a spanned TOML tree; then each section,
//! each artifact and each cell is deserialized on its own, so one bad
//! key costs one error and the rest of the file is still checked. Every
//! struct denies unknown fields. Values whose checks need our own words
//! (durations, counts) stay raw here, wrapped in `Spanned`, and are
//! checked in `validate.rs`; steps are taken from the tree by hand, with
//! a span for every key and value, and converted in `step.rs`.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::diagnostic::{Problems, did_you_mean};

/// `[artifacts.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawArtifact {
    pub release: Option<Spanned<String>>,
    pub build: Option<Spanned<String>>,
    pub image: Option<Spanned<String>>,
    pub line: Option<Spanned<String>>,
    pub floor: Option<Spanned<String>>,
    pub prerelease: Option<Spanned<bool>>,
    pub failpoint: Option<Spanned<String>>,
}

/// `mix = { complete = 60, ... }`: job mode names and weights, with spans.
pub(crate) type RawMix = Spanned<BTreeMap<Spanned<String>, Spanned<i64>>>;

/// `smoke = ["migrate-first", ...]`: the name and the list, with spans.
pub(crate) type RawNamedMatrix = (Spanned<String>, Spanned<Vec<Spanned<String>>>);

/// `[workload]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkload {
    pub rate_per_s: Option<Spanned<i64>>,
    pub backlog: Option<Spanned<i64>>,
    pub mix: Option<RawMix>,
    pub cron: Option<Spanned<RawCron>>,
    pub sleep: Option<Spanned<String>>,
}

/// `cron = { every = "2s" }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCron {
    pub every: Option<Spanned<String>>,
}

/// `[timings]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTimings {
    pub heartbeat: Option<Spanned<String>>,
    pub stale_after: Option<Spanned<String>>,
    pub rescue_every: Option<Spanned<String>>,
    pub rotate_every: Option<Spanned<String>>,
    pub deadline: Option<Spanned<String>>,
    pub drain_timeout: Option<Spanned<String>>,
    pub budget: Option<Spanned<String>>,
}

/// `[postgres]`: the server majors every cell runs on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPostgres {
    pub servers: Option<Spanned<Vec<Spanned<i64>>>>,
}

/// `[schedule]`: what `--jobs auto` packs by without a report of the cells.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchedule {
    /// A number, integer or float: checked in `validate.rs`.
    pub cores_per_cell: Option<Spanned<toml::Value>>,
    /// The same, for the docker backend.
    pub docker_cores_per_cell: Option<Spanned<toml::Value>>,
}

/// `[[checklist]]`: an item of ADR-041 §9 and the cells that cover it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawChecklistItem {
    pub item: Option<Spanned<String>>,
    pub cells: Option<Spanned<Vec<Spanned<String>>>>,
    pub all: Option<Spanned<bool>>,
}

/// `[mutate]`: what `rehearse mutate` must score.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMutate {
    /// A number, integer or float: checked in `validate.rs`.
    pub min_score: Option<Spanned<toml::Value>>,
    /// `[[mutate.equivalent]]`.
    pub equivalent: Option<Vec<Spanned<RawEquivalent>>>,
}

/// `[[mutate.equivalent]] mutant = "m0f836af7", why = "..."`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEquivalent {
    pub mutant: Option<Spanned<String>>,
    pub why: Option<Spanned<String>>,
}

/// `[[cell]]`; `steps` is read by hand from the spanned tree (see [`RawSteps`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCell {
    pub name: Option<Spanned<String>>,
    pub about: Option<Spanned<String>>,
    /// Only here so serde's "unknown field" messages list `steps`; the
    /// key is taken out of the table before serde runs.
    #[serde(rename = "steps")]
    pub _steps_key: Option<serde::de::IgnoredAny>,
    #[serde(skip)]
    pub steps: RawSteps,
    pub expect: Option<Spanned<toml::Value>>,
    pub fresh_install: Option<Spanned<bool>>,
    pub workload: Option<Spanned<RawWorkload>>,
    pub path: Option<Spanned<Vec<Spanned<String>>>>,
    pub downgrade: Option<Spanned<bool>>,
    pub budget: Option<Spanned<String>>,
    pub reach: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[schema]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchema {
    pub intended: Option<Spanned<Vec<Spanned<RawIntended>>>>,
}

/// One `intended = [{ object = "...", reason = "..." }]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIntended {
    pub object: Option<Spanned<String>>,
    pub reason: Option<Spanned<String>>,
}

/// A cell's `steps` key.
#[derive(Debug, Default)]
pub(crate) enum RawSteps {
    /// No `steps` key.
    #[default]
    Missing,
    /// Present but not an array; already reported.
    Invalid,
    /// The array, each element with its span.
    List(Spanned<Vec<Spanned<RawStep>>>),
}

/// One element of `steps`: its keys and values with spans, in source order.
#[derive(Debug)]
pub(crate) enum RawStep {
    /// An inline table, entries sorted by position in the file.
    Table(Vec<(Spanned<String>, Spanned<toml::Value>)>),
    /// Anything else; names the TOML type found ("a string").
    NotATable(&'static str),
    /// A value serde could not represent; already reported.
    Broken,
}

/// "a string", "an integer": a TOML type for a message.
fn a_type(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Reads `steps` straight from the spanned tree, so every key keeps its span.
///
/// (Through serde a key's span survives for tables but not for the
/// datetimes TOML also allows in a step's position.)
fn read_steps(
    value: Option<Spanned<DeValue<'_>>>,
    sink: &mut Problems<'_>,
    context: &str,
) -> RawSteps {
    let Some(value) = value else {
        return RawSteps::Missing;
    };
    let span = value.span();
    let DeValue::Array(items) = value.into_inner() else {
        sink.error(
            Some(span),
            context,
            "steps must be an array of step tables, like [{ hold = \"5s\" }]",
        );
        return RawSteps::Invalid;
    };
    let steps = items
        .into_iter()
        .map(|item| read_step(item, sink, context))
        .collect();
    RawSteps::List(Spanned::new(span, steps))
}

fn read_step(
    item: Spanned<DeValue<'_>>,
    sink: &mut Problems<'_>,
    context: &str,
) -> Spanned<RawStep> {
    let span = item.span();
    let table = match item.into_inner() {
        DeValue::Table(table) => table,
        other => return Spanned::new(span, RawStep::NotATable(a_type(&other))),
    };
    let mut entries = Vec::new();
    for (key, value) in table {
        let key = Spanned::new(key.span(), key.get_ref().to_string());
        let value_span = value.span();
        match toml::Value::deserialize(ValueDeserializer::from(value)) {
            Ok(v) => entries.push((key, Spanned::new(value_span, v))),
            Err(e) => {
                sink.toml(&e, context);
                return Spanned::new(span, RawStep::Broken);
            }
        }
    }
    entries.sort_by_key(|(key, _)| key.span().start);
    Spanned::new(span, RawStep::Table(entries))
}

/// matrix.toml split into its sections, each read independently.
#[derive(Default)]
pub(crate) struct RawMatrix {
    /// `[artifacts.NAME]` in file order, with the span of the name.
    pub artifacts: Vec<(Spanned<String>, RawArtifact)>,
    pub workload: Option<Spanned<RawWorkload>>,
    pub timings: Option<Spanned<RawTimings>>,
    pub schema: Option<Spanned<RawSchema>>,
    pub postgres: Option<Spanned<RawPostgres>>,
    pub schedule: Option<Spanned<RawSchedule>>,
    pub checklist: Option<Spanned<Vec<Spanned<RawChecklistItem>>>>,
    pub mutate: Option<Spanned<RawMutate>>,
    pub cells: Vec<Spanned<RawCell>>,
    /// `[matrix]` entries in file order.
    pub matrices: Vec<RawNamedMatrix>,
    /// Whether a section was present but unreadable (so "missing" is not reported too).
    pub broken: Vec<&'static str>,
}

/// Top-level sections, in the order the error message lists them.
pub(crate) const SECTIONS: [&str; 10] = [
    "artifacts",
    "workload",
    "timings",
    "schema",
    "postgres",
    "schedule",
    "checklist",
    "mutate",
    "cell",
    "matrix",
];

/// Splits the parsed document into sections, recording every problem in `sink`.
pub(crate) fn read(root: Spanned<DeTable<'_>>, sink: &mut Problems<'_>) -> RawMatrix {
    let mut raw = RawMatrix::default();
    let mut entries: Vec<_> = root.into_inner().into_iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    for (key, value) in entries {
        let name: &str = key.get_ref();
        match name {
            "artifacts" => read_artifacts(value, sink, &mut raw),
            "workload" => match deserialize::<Spanned<RawWorkload>>(value, sink, "workload") {
                Some(w) => raw.workload = Some(w),
                None => raw.broken.push("workload"),
            },
            "timings" => match deserialize::<Spanned<RawTimings>>(value, sink, "timings") {
                Some(t) => raw.timings = Some(t),
                None => raw.broken.push("timings"),
            },
            "schema" => match deserialize::<Spanned<RawSchema>>(value, sink, "schema") {
                Some(t) => raw.schema = Some(t),
                None => raw.broken.push("schema"),
            },
            "postgres" => match deserialize::<Spanned<RawPostgres>>(value, sink, "postgres") {
                Some(p) => raw.postgres = Some(p),
                None => raw.broken.push("postgres"),
            },
            "schedule" => match deserialize::<Spanned<RawSchedule>>(value, sink, "schedule") {
                Some(s) => raw.schedule = Some(s),
                None => raw.broken.push("schedule"),
            },
            "checklist" => match deserialize::<Spanned<Vec<Spanned<RawChecklistItem>>>>(
                value,
                sink,
                "checklist",
            ) {
                Some(c) => raw.checklist = Some(c),
                None => raw.broken.push("checklist"),
            },
            "mutate" => match deserialize::<Spanned<RawMutate>>(value, sink, "mutate") {
                Some(m) => raw.mutate = Some(m),
                None => raw.broken.push("mutate"),
            },
            "cell" => read_cells(value, sink, &mut raw),
            "matrix" => read_matrices(value, sink, &mut raw),
            other => sink.error(
                Some(key.span()),
                "",
                format!(
                    "unknown section \"{other}\"{}; expected one of {}",
                    did_you_mean(other, SECTIONS),
                    SECTIONS.join(", ")
                ),
            ),
        }
    }
    raw
}

fn read_artifacts(value: Spanned<DeValue<'_>>, sink: &mut Problems<'_>, raw: &mut RawMatrix) {
    let span = value.span();
    let DeValue::Table(table) = value.into_inner() else {
        sink.error(
            Some(span),
            "artifacts",
            "expected a table of artifacts, like [artifacts.previous]",
        );
        raw.broken.push("artifacts");
        return;
    };
    let mut entries: Vec<_> = table.into_iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    for (key, value) in entries {
        let name = Spanned::new(key.span(), key.get_ref().to_string());
        let context = format!("artifact \"{}\"", name.get_ref());
        if !value.get_ref().is_table() {
            sink.error(
                Some(value.span()),
                &context,
                "expected a table with one of release = \"X.Y.Z\", build = \"workspace\" or image = \"REF\"",
            );
            continue;
        }
        if let Some(artifact) = deserialize::<RawArtifact>(value, sink, &context) {
            raw.artifacts.push((name, artifact));
        }
    }
}

fn read_cells(value: Spanned<DeValue<'_>>, sink: &mut Problems<'_>, raw: &mut RawMatrix) {
    let span = value.span();
    let DeValue::Array(cells) = value.into_inner() else {
        sink.error(
            Some(span),
            "cell",
            "expected an array of tables: write each cell as [[cell]]",
        );
        raw.broken.push("cell");
        return;
    };
    for (index, mut cell) in cells.into_iter().enumerate() {
        let context = match cell
            .get_ref()
            .get("name")
            .and_then(|n| n.get_ref().as_str())
        {
            Some(name) => format!("cell \"{name}\""),
            None => format!("cell #{}", index + 1),
        };
        let DeValue::Table(table) = cell.get_mut() else {
            sink.error(
                Some(cell.span()),
                &context,
                "expected a table: write each cell as [[cell]]",
            );
            raw.broken.push("cell");
            continue;
        };
        let steps = table.remove("steps");
        match deserialize::<Spanned<RawCell>>(cell, sink, &context) {
            Some(mut cell) => {
                cell.get_mut().steps = read_steps(steps, sink, &context);
                raw.cells.push(cell);
            }
            None => raw.broken.push("cell"),
        }
    }
}

fn read_matrices(value: Spanned<DeValue<'_>>, sink: &mut Problems<'_>, raw: &mut RawMatrix) {
    let span = value.span();
    let DeValue::Table(table) = value.into_inner() else {
        sink.error(
            Some(span),
            "matrix",
            "expected a table of named cell lists, like smoke = [\"fence\"]",
        );
        raw.broken.push("matrix");
        return;
    };
    let mut entries: Vec<_> = table.into_iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    for (key, value) in entries {
        let name = Spanned::new(key.span(), key.get_ref().to_string());
        let context = format!("matrix \"{}\"", name.get_ref());
        if let Some(list) = deserialize::<Spanned<Vec<Spanned<String>>>>(value, sink, &context) {
            raw.matrices.push((name, list));
        }
    }
}

/// Deserializes one subtree; a failure becomes a located diagnostic.
fn deserialize<T: for<'de> Deserialize<'de>>(
    value: Spanned<DeValue<'_>>,
    sink: &mut Problems<'_>,
    context: &str,
) -> Option<T> {
    match T::deserialize(ValueDeserializer::from(value)) {
        Ok(v) => Some(v),
        Err(e) => {
            sink.toml(&e, context);
            None
        }
    }
}

/// The span to blame for a missing key inside `table`: its first line.
pub(crate) fn table_head(span: &Range<usize>) -> Option<Range<usize>> {
    Some(span.start..span.start)
}
