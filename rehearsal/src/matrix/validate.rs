//! Turns matrix.toml as written into a [`Matrix`], checking everything first.
//!
//! Every check runs and records its problem; nothing short-circuits but
//! a syntax error. References are checked against what is declared even
//! when the declaration itself is broken, so one typo yields one message,
//! not a cascade. A matrix comes out only when no problem was found:
//! a typo must never cost a PostgreSQL start or an image build.
//!
//! This file holds the entry point and the small sections (`[mutate]`,
//! `[schedule]`, `[postgres]`); the larger ones have a file each:
//! `artifact_sources` (`[artifacts]`), `workload` (`[workload]`,
//! `[timings]`, a cell's override), `cells` (`[[cell]]`), `matrices`
//! (`[matrix]`).

use std::collections::BTreeSet;

use toml::Spanned;

use super::Known;
use super::diagnostic::Problems;
use super::model::{
    CORES_PER_CELL_RANGE, CURRENT, Matrix, MutatePolicy, ScheduleEstimate, SchemaPolicy, Timings,
    Workload,
};
use super::raw::{RawMatrix, table_head};

mod artifact_sources;
mod cells;
mod matrices;
mod workload;

use artifact_sources::validate_artifacts;
use cells::validate_cells;
use matrices::validate_matrices;
use workload::validate_timings;
use workload::validate_workload;

/// Highest live enqueue rate a matrix may ask for.
pub const MAX_RATE_PER_S: i64 = 100_000;
/// Largest banked backlog.
pub const MAX_BACKLOG: i64 = 10_000_000;
/// Largest single mix weight.
pub const MAX_WEIGHT: i64 = 1_000_000;

/// Checks the raw matrix; returns it validated only if `sink` stayed empty.
pub(crate) fn validate(raw: RawMatrix, known: &Known, sink: &mut Problems<'_>) -> Option<Matrix> {
    // Names count as declared even when their body is broken, to avoid cascades.
    let declared: BTreeSet<String> = raw
        .artifacts
        .iter()
        .map(|(name, _)| name.get_ref().clone())
        .collect();
    let artifacts = validate_artifacts(&raw, known, sink);
    require_current(&raw, &declared, sink);
    let workload = required_workload(&raw, sink);
    let timings = required_timings(&raw, sink);
    let schema = match &raw.schema {
        Some(s) => super::intended::validate(s, sink),
        None => Some(SchemaPolicy::default()),
    };
    let (cells, cell_names) = validate_cells(&raw.cells, &declared, artifacts.as_ref(), sink);
    if cell_names.is_empty() && !raw.broken.contains(&"cell") {
        sink.error(
            None,
            "",
            "no cells: add at least one [[cell]] with a name, about and steps",
        );
    }
    let matrices = validate_matrices(&raw.matrices, &cell_names, sink);
    let servers = raw
        .postgres
        .as_ref()
        .map(|p| validate_servers(p, sink))
        .unwrap_or_default();
    let schedule = raw
        .schedule
        .as_ref()
        .map_or(Some(ScheduleEstimate::default()), |s| {
            validate_schedule(s, sink)
        });
    let checklist = raw.checklist.as_ref().map_or(Some(Vec::new()), |c| {
        super::checklist::validate(c, &cell_names, cells.as_deref(), sink)
    });
    let mutate = raw
        .mutate
        .as_ref()
        .map_or(Some(MutatePolicy::default()), |m| validate_mutate(m, sink));
    if sink.has_errors() {
        return None;
    }
    Some(Matrix {
        artifacts: artifacts?,
        workload: workload?,
        timings: timings?,
        cells: cells?,
        matrices,
        schema: schema?,
        servers,
        schedule: schedule?,
        checklist: checklist?,
        mutate: mutate?,
    })
}

/// The build under test is declared (unless `[artifacts]` is broken).
fn require_current(raw: &RawMatrix, declared: &BTreeSet<String>, sink: &mut Problems<'_>) {
    if !raw.broken.contains(&"artifacts") && !declared.contains(CURRENT) {
        sink.error(
            None,
            "artifacts",
            "artifact \"current\" (the build under test) is not declared; add [artifacts.current] with build = \"workspace\"",
        );
    }
}

/// `[workload]`, which every matrix needs.
fn required_workload(raw: &RawMatrix, sink: &mut Problems<'_>) -> Option<Workload> {
    match &raw.workload {
        Some(w) => validate_workload(w, sink),
        None => {
            if !raw.broken.contains(&"workload") {
                sink.error(
                    None,
                    "",
                    "missing [workload] section with rate_per_s, backlog and mix",
                );
            }
            None
        }
    }
}

/// `[timings]`, which every matrix needs.
fn required_timings(raw: &RawMatrix, sink: &mut Problems<'_>) -> Option<Timings> {
    match &raw.timings {
        Some(t) => validate_timings(t, sink),
        None => {
            if !raw.broken.contains(&"timings") {
                sink.error(
                    None,
                    "",
                    "missing [timings] section with heartbeat, stale_after, rescue_every, rotate_every, deadline and drain_timeout",
                );
            }
            None
        }
    }
}

/// `[mutate] min_score = 0.9`: a share from 0 to 1; `[[mutate.equivalent]]`:
/// mutant ids with the reason each is equivalent.
fn validate_mutate(
    m: &Spanned<super::raw::RawMutate>,
    sink: &mut Problems<'_>,
) -> Option<MutatePolicy> {
    let equivalent = validate_equivalent(m.get_ref().equivalent.as_deref().unwrap_or(&[]), sink);
    let min_score = validate_min_score(m.get_ref().min_score.as_ref(), sink);
    Some(MutatePolicy {
        min_score: min_score?,
        equivalent: equivalent?,
    })
}

/// Each `[[mutate.equivalent]]` names a mutant id as `--list` prints it
/// (`m` and 8 hex digits), once, with a reason.
fn validate_equivalent(
    items: &[Spanned<super::raw::RawEquivalent>],
    sink: &mut Problems<'_>,
) -> Option<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut ok = true;
    for item in items {
        let raw = item.get_ref();
        let (Some(id), Some(why)) = (&raw.mutant, &raw.why) else {
            sink.error(
                Some(item.span()),
                "mutate",
                "an equivalent mutant needs both `mutant` (its id, as `rehearse mutate --list` prints it) and `why` (the reason no matrix can kill it)",
            );
            ok = false;
            continue;
        };
        let well_formed = id.get_ref().len() == 9
            && id.get_ref().starts_with('m')
            && id.get_ref()[1..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        if !well_formed {
            sink.error(
                Some(id.span()),
                "mutate",
                format!(
                    "equivalent mutant \"{}\" is not a mutant id: `m` and 8 hex digits, as `rehearse mutate --list` prints them",
                    id.get_ref()
                ),
            );
            ok = false;
        } else if why.get_ref().trim().is_empty() {
            sink.error(
                Some(why.span()),
                "mutate",
                format!(
                    "equivalent mutant {} has an empty `why`: say why no matrix can kill it",
                    id.get_ref()
                ),
            );
            ok = false;
        } else if out
            .insert(id.get_ref().clone(), why.get_ref().trim().to_owned())
            .is_some()
        {
            sink.error(
                Some(id.span()),
                "mutate",
                format!("equivalent mutant {} is listed twice", id.get_ref()),
            );
            ok = false;
        }
    }
    ok.then_some(out)
}

/// `[mutate] min_score`: a share from 0 to 1 (`Some(None)`: not set).
fn validate_min_score(
    value: Option<&Spanned<toml::Value>>,
    sink: &mut Problems<'_>,
) -> Option<Option<f64>> {
    let Some(value) = value else {
        return Some(None);
    };
    let wanted = "a share from 0 to 1 (killed / (killed + survived) mutants, e.g. 0.9)";
    let number = match value.get_ref() {
        toml::Value::Float(f) => Some(*f),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    };
    match number {
        Some(n) if (0.0..=1.0).contains(&n) => Some(Some(n)),
        _ => {
            let found = match value.get_ref() {
                toml::Value::String(text) => format!("the string \"{text}\""),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Integer(i) => i.to_string(),
                other => format!("a {}", other.type_str()),
            };
            sink.error(
                Some(value.span()),
                "mutate",
                format!("min_score must be {wanted}, found {found}"),
            );
            None
        }
    }
}

/// `[schedule] cores_per_cell = 0.7` (and `docker_cores_per_cell`, the
/// docker backend's when it differs): numbers of cores in
/// [`CORES_PER_CELL_RANGE`]; without the key, the default.
fn validate_schedule(
    s: &Spanned<super::raw::RawSchedule>,
    sink: &mut Problems<'_>,
) -> Option<ScheduleEstimate> {
    let raw = s.get_ref();
    let default = ScheduleEstimate::default();
    let cores_per_cell = match &raw.cores_per_cell {
        Some(value) => cores_of("cores_per_cell", value, sink),
        None => Some(default.cores_per_cell),
    };
    let docker_cores_per_cell = match &raw.docker_cores_per_cell {
        Some(value) => cores_of("docker_cores_per_cell", value, sink).map(Some),
        None => Some(None),
    };
    Some(ScheduleEstimate {
        cores_per_cell: cores_per_cell?,
        docker_cores_per_cell: docker_cores_per_cell?,
    })
}

/// `[schedule]`'s `key`: a number of cores in [`CORES_PER_CELL_RANGE`].
fn cores_of(key: &str, value: &Spanned<toml::Value>, sink: &mut Problems<'_>) -> Option<f64> {
    let (low, high) = (CORES_PER_CELL_RANGE.start(), CORES_PER_CELL_RANGE.end());
    let wanted = format!(
        "a number of cores from {low} to {high} (the CPU time a running cell keeps busy over its wall time; report.md's schedule row shows what a run measured)"
    );
    let number = match value.get_ref() {
        toml::Value::Float(f) => *f,
        toml::Value::Integer(i) => *i as f64,
        other => {
            let found = match other {
                toml::Value::String(text) => format!("the string \"{text}\""),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(_) => "an array".to_owned(),
                _ => format!("a {}", other.type_str()),
            };
            sink.error(
                Some(value.span()),
                "schedule",
                format!("{key} must be {wanted}, found {found}"),
            );
            return None;
        }
    };
    if !CORES_PER_CELL_RANGE.contains(&number) {
        sink.error(
            Some(value.span()),
            "schedule",
            format!("{key} must be {wanted}, found {number}"),
        );
        return None;
    }
    Some(number)
}

/// `[postgres] servers = [15, 18]`: distinct majors.
fn validate_servers(
    p: &Spanned<super::raw::RawPostgres>,
    sink: &mut Problems<'_>,
) -> Vec<crate::vocab::major::Major> {
    let Some(list) = &p.get_ref().servers else {
        sink.error(
            table_head(&p.span()),
            "postgres",
            "missing servers = [...]: the PostgreSQL majors every cell runs on, like [15, 18]",
        );
        return Vec::new();
    };
    let mut majors = Vec::new();
    for item in list.get_ref() {
        let text = item.get_ref().to_string();
        match crate::vocab::major::Major::parse(&text) {
            Ok(m) if majors.contains(&m) => sink.error(
                Some(item.span()),
                "postgres.servers",
                format!("{text} is listed twice"),
            ),
            Ok(m) => majors.push(m),
            Err(e) => sink.error(Some(item.span()), "postgres.servers", e),
        }
    }
    majors
}

fn is_identifier(name: &str, extra: char) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == extra)
}
