//! Turns matrix.toml as written into a [`Matrix`], checking everything first.
//!
//! Every check runs and records its problem; nothing short-circuits but
//! a syntax error. References are checked against what is declared even
//! when the declaration itself is broken, so one typo yields one message,
//! not a cascade. A matrix comes out only when no problem was found:
//! a typo must never cost a PostgreSQL start or an image build.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use toml::Spanned;

use super::Known;
use super::diagnostic::{Sink, did_you_mean};
use super::duration::Duration;
use super::model::{
    Artifact, ArtifactSource, BuildSource, CORES_PER_CELL_RANGE, CURRENT, Cell, Cron,
    DEFAULT_BUDGET, DEFAULT_SLEEP, Expectation, FindingRule, ImageLine, ImageSource, JobMode,
    Matrix, MutatePolicy, NamedMatrix, PREVIOUS, Reach, ScheduleEstimate, SchemaPolicy, Step,
    Timings, Version, Workload, WorkloadOverride,
};
use super::raw::{
    RawArtifact, RawCell, RawMatrix, RawMix, RawNamedMatrix, RawSteps, RawTimings, RawWorkload,
    table_head,
};
use super::roster::Roster;
use super::step::{convert, describe, step_context};

/// Highest live enqueue rate a matrix may ask for.
pub const MAX_RATE_PER_S: i64 = 100_000;
/// Largest banked backlog.
pub const MAX_BACKLOG: i64 = 10_000_000;
/// Largest single mix weight.
pub const MAX_WEIGHT: i64 = 1_000_000;

/// Checks the raw matrix; returns it validated only if `sink` stayed empty.
pub(crate) fn validate(raw: RawMatrix, known: &Known, sink: &mut Sink<'_>) -> Option<Matrix> {
    // Names count as declared even when their body is broken, to avoid cascades.
    let declared: BTreeSet<String> = raw
        .artifacts
        .iter()
        .map(|(name, _)| name.get_ref().clone())
        .collect();
    let artifacts = validate_artifacts(&raw, known, sink);
    if !raw.broken.contains(&"artifacts") && !declared.contains(CURRENT) {
        sink.error(
            None,
            "artifacts",
            "artifact \"current\" (the build under test) is not declared; add [artifacts.current] with build = \"workspace\"",
        );
    }
    let workload = match &raw.workload {
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
    };
    let timings = match &raw.timings {
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
    };
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

/// `[mutate] min_score = 0.9`: a share from 0 to 1.
fn validate_mutate(
    m: &Spanned<super::raw::RawMutate>,
    sink: &mut Sink<'_>,
) -> Option<MutatePolicy> {
    let Some(value) = &m.get_ref().min_score else {
        return Some(MutatePolicy::default());
    };
    let wanted = "a share from 0 to 1 (killed / (killed + survived) mutants, e.g. 0.9)";
    let number = match value.get_ref() {
        toml::Value::Float(f) => Some(*f),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    };
    match number {
        Some(n) if (0.0..=1.0).contains(&n) => Some(MutatePolicy { min_score: Some(n) }),
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

/// `[schedule] cores_per_cell = 0.7`: a number of cores in
/// [`CORES_PER_CELL_RANGE`]; without the key, the default.
fn validate_schedule(
    s: &Spanned<super::raw::RawSchedule>,
    sink: &mut Sink<'_>,
) -> Option<ScheduleEstimate> {
    let Some(value) = &s.get_ref().cores_per_cell else {
        return Some(ScheduleEstimate::default());
    };
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
                format!("cores_per_cell must be {wanted}, found {found}"),
            );
            return None;
        }
    };
    if !CORES_PER_CELL_RANGE.contains(&number) {
        sink.error(
            Some(value.span()),
            "schedule",
            format!("cores_per_cell must be {wanted}, found {number}"),
        );
        return None;
    }
    Some(ScheduleEstimate {
        cores_per_cell: number,
    })
}

/// `[postgres] servers = [15, 18]`: distinct majors.
fn validate_servers(
    p: &Spanned<super::raw::RawPostgres>,
    sink: &mut Sink<'_>,
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

fn validate_artifacts(
    raw: &RawMatrix,
    known: &Known,
    sink: &mut Sink<'_>,
) -> Option<BTreeMap<String, Artifact>> {
    let mut artifacts = BTreeMap::new();
    let mut ok = !raw.broken.contains(&"artifacts") && pulls_known(raw, known, sink);
    for (name, a) in &raw.artifacts {
        let reference = known
            .from_registry
            .iter()
            .find(|(n, _)| n == name.get_ref())
            .map(|(_, reference)| reference);
        let context = match reference {
            Some(r) => format!(
                "artifact \"{n}\" (--from-registry {n}={r})",
                n = name.get_ref()
            ),
            None => format!("artifact \"{}\"", name.get_ref()),
        };
        let pulled = reference.map(|r| from_registry(a, r));
        let a = match pulled {
            None => a,
            Some(Ok(ref pulled)) => pulled,
            Some(Err(message)) => {
                sink.error(Some(name.span()), &context, message);
                ok = false;
                continue;
            }
        };
        match validate_artifact(name, a, &context, known, sink) {
            Some(artifact) => {
                artifacts.insert(name.get_ref().clone(), artifact);
            }
            None => ok = false,
        }
    }
    ok.then_some(artifacts)
}

/// Every `--from-registry` names an artifact of the matrix, once.
fn pulls_known(raw: &RawMatrix, known: &Known, sink: &mut Sink<'_>) -> bool {
    let names: Vec<&str> = raw
        .artifacts
        .iter()
        .map(|(n, _)| n.get_ref().as_str())
        .collect();
    let mut ok = true;
    for (i, (name, reference)) in known.from_registry.iter().enumerate() {
        let context = format!("--from-registry {name}={reference}");
        if !names.contains(&name.as_str()) {
            sink.error(
                None,
                &context,
                format!(
                    "no artifact \"{name}\" in the matrix{}; its artifacts: {}",
                    did_you_mean(name, names.iter().copied()),
                    names.join(", ")
                ),
            );
            ok = false;
        } else if known.from_registry[..i].iter().any(|(n, _)| n == name) {
            sink.error(
                None,
                &context,
                format!("\"{name}\" is taken from a registry twice; give it once"),
            );
            ok = false;
        }
    }
    ok
}

/// A release artifact as the image it is published as, for
/// `--from-registry`: `reference` on the release's line at or above the
/// release (the newest patch, as a fleet's next pull would get), or,
/// when `reference` has a version tag (and perhaps a digest), exactly
/// that image; a digest without its tag is refused. Every key points at
/// the release's value, so the image checks read as usual.
fn from_registry(a: &RawArtifact, reference: &str) -> Result<RawArtifact, String> {
    let Some(release) = &a.release else {
        let what = if a.build.is_some() {
            "a build"
        } else {
            "an image already"
        };
        return Err(format!(
            "--from-registry takes a release artifact from a registry, and this one is {what}; name a release artifact such as previous"
        ));
    };
    let span = release.span();
    let at = |value: String| Some(Spanned::new(span.clone(), value));
    let parsed = crate::vocab::image::Reference::parse(reference).ok();
    if parsed
        .as_ref()
        .is_some_and(|r| r.tag.is_none() && r.digest.is_some())
    {
        return Err(format!(
            "a pinned digest needs its version tag, {repository}:{version}@sha256:..., so the release can be ordered among the others; or give {repository} alone for the newest on its line",
            repository = reference.split('@').next().unwrap_or(reference),
            version = release.get_ref()
        ));
    }
    let exact = parsed.is_some_and(|r| r.tag.is_some());
    let line = (!exact).then(|| {
        let parts: Vec<&str> = release.get_ref().splitn(3, '.').collect();
        parts[..parts.len().min(2)].join(".")
    });
    Ok(RawArtifact {
        release: None,
        build: None,
        image: at(reference.to_owned()),
        line: line.and_then(at),
        floor: if exact {
            None
        } else {
            at(release.get_ref().clone())
        },
        prerelease: None,
        failpoint: a.failpoint.clone(),
    })
}

fn validate_artifact(
    name: &Spanned<String>,
    a: &RawArtifact,
    context: &str,
    known: &Known,
    sink: &mut Sink<'_>,
) -> Option<Artifact> {
    let mut ok = true;
    if !is_identifier(name.get_ref(), '_') {
        sink.error(
            Some(name.span()),
            context,
            "an artifact name uses lowercase letters, digits and underscores, like pre_guard",
        );
        ok = false;
    }
    let sources: Vec<(&str, &Spanned<String>)> = [
        ("release", &a.release),
        ("build", &a.build),
        ("image", &a.image),
    ]
    .into_iter()
    .filter_map(|(key, v)| v.as_ref().map(|v| (key, v)))
    .collect();
    let source = one_source(name, &sources, context, known, sink);
    let failpoint = a.failpoint.as_ref().map(|fp| {
        ok &= failpoint_ok(fp, &sources, context, sink);
        fp.get_ref().clone()
    });
    let source = image_line(a, source, context, sink)?;
    ok.then_some(Artifact { source, failpoint })
}

/// The artifact's one source (`release`, `build` or `image`, whichever it
/// sets), valid and obtainable by this run; `None` with the error said.
fn one_source(
    name: &Spanned<String>,
    sources: &[(&str, &Spanned<String>)],
    context: &str,
    known: &Known,
    sink: &mut Sink<'_>,
) -> Option<ArtifactSource> {
    match sources {
        [] => {
            sink.error(
                Some(name.span()),
                context,
                "no source: set exactly one of release = \"X.Y.Z\", build = \"workspace\" or image = \"REF\"",
            );
            None
        }
        [(key, value)] => source(key, value, context, sink)
            .filter(|s| known_source(s, value, context, known, sink)),
        [_, (_, second), ..] => {
            let keys: Vec<&str> = sources.iter().map(|(k, _)| *k).collect();
            sink.error(
                Some(second.span()),
                context,
                format!(
                    "more than one source ({}); set exactly one of release, build or image",
                    keys.join(", ")
                ),
            );
            None
        }
    }
}

/// An artifact's `failpoint`: on a workspace build only (release archives
/// and images have none compiled in), and one the runtime defines.
fn failpoint_ok(
    fp: &Spanned<String>,
    sources: &[(&str, &Spanned<String>)],
    context: &str,
    sink: &mut Sink<'_>,
) -> bool {
    let mut ok = true;
    if matches!(sources, [(key, _)] if *key != "build") {
        sink.error(
            Some(fp.span()),
            context,
            "failpoint needs build = \"workspace\": release archives and images are built without failpoints",
        );
        ok = false;
    }
    if !is_identifier(fp.get_ref(), '_') || fp.get_ref().starts_with(|c: char| c.is_ascii_digit()) {
        sink.error(
            Some(fp.span()),
            context,
            format!("failpoint \"{}\" is not a failpoint name; use lowercase letters, digits and underscores, like flip_skip_reconcile", fp.get_ref()),
        );
        ok = false;
    } else if !awa_runtime::failpoint::ALL.contains(&fp.get_ref().as_str()) {
        sink.error(
            Some(fp.span()),
            context,
            format!(
                "unknown failpoint \"{}\"{}; the runtime's failpoints are: {}",
                fp.get_ref(),
                did_you_mean(fp.get_ref(), awa_runtime::failpoint::ALL),
                awa_runtime::failpoint::ALL.join(", ")
            ),
        );
        ok = false;
    }
    ok
}

/// Checks a well-formed source against what this run can obtain: a
/// release must be listed in the manifest, an image needs a backend that
/// runs images. True when it can be obtained.
fn known_source(
    source: &ArtifactSource,
    value: &Spanned<String>,
    context: &str,
    known: &Known,
    sink: &mut Sink<'_>,
) -> bool {
    match source {
        ArtifactSource::Release(version) => {
            let Some(manifest) = &known.manifest else {
                return true;
            };
            let text = version.to_string();
            if manifest.releases.contains(&text) {
                return true;
            }
            sink.error(
                Some(value.span()),
                context,
                format!(
                    "release \"{text}\" is not in {}{} (listed: {}); use a listed release, or cut {text} and add its archive and sha256 to the manifest",
                    manifest.path,
                    did_you_mean(&text, manifest.releases.iter().map(String::as_str)),
                    manifest.releases.join(", ")
                ),
            );
            false
        }
        ArtifactSource::Image(reference) if !known.images => {
            sink.error(
                Some(value.span()),
                context,
                format!(
                    "image \"{reference}\" cannot run on the {} backend, which starts binaries; use --backend docker, or release = \"X.Y.Z\" / build = \"workspace\"",
                    known.backend
                ),
            );
            false
        }
        _ => true,
    }
}

fn source(
    key: &str,
    value: &Spanned<String>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<ArtifactSource> {
    let text = value.get_ref();
    match key {
        "release" => match text.parse::<Version>() {
            Ok(v) => Some(ArtifactSource::Release(v)),
            Err(why) => {
                sink.error(
                    Some(value.span()),
                    context,
                    format!("release \"{text}\" is not a version: {why}"),
                );
                None
            }
        },
        "build" if text == "workspace" => Some(ArtifactSource::Build(BuildSource::Workspace)),
        "build" => {
            sink.error(
                Some(value.span()),
                context,
                format!("invalid build \"{text}\"; expected \"workspace\" (for a release use release = \"X.Y.Z\")"),
            );
            None
        }
        _ => match crate::vocab::image::Reference::parse(text) {
            Ok(_) => Some(ArtifactSource::Image(ImageSource {
                reference: text.clone(),
                line: None,
            })),
            Err(why) => {
                sink.error(
                    Some(value.span()),
                    context,
                    format!("invalid image \"{text}\": {why}; expected a reference like \"127.0.0.1:5000/awa-runtime:0.6.2\""),
                );
                None
            }
        },
    }
}

/// `line`, `floor` and `prerelease` of an image artifact: the line is
/// resolved in the registry, so the reference names a registry and
/// neither a tag nor a digest; without a line it must name one of them.
fn image_line(
    a: &RawArtifact,
    source: Option<ArtifactSource>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<ArtifactSource> {
    let Some(ArtifactSource::Image(mut image)) = source else {
        return without_image(a, source, context, sink);
    };
    let reference =
        crate::vocab::image::Reference::parse(&image.reference).expect("checked by source()");
    let span = a.image.as_ref().expect("an image source").span();
    let Some(line) = &a.line else {
        return pinned_image(a, image, &reference, span, context, sink);
    };
    let mut ok = line_reference(&image, &reference, span, context, sink);
    let Some((major, minor)) = release_line(line.get_ref()) else {
        sink.error(
            Some(line.span()),
            context,
            format!(
                "line \"{}\" is not a release line; expected two numbers, like \"0.6\"",
                line.get_ref()
            ),
        );
        return None;
    };
    let floor = a.floor.as_ref().and_then(|f| {
        let floor = line_floor(f, (major, minor), context, sink);
        ok &= floor.is_some();
        floor
    });
    image.line = Some(ImageLine {
        major,
        minor,
        floor,
        prerelease: a.prerelease.as_ref().is_some_and(|p| *p.get_ref()),
    });
    ok.then_some(ArtifactSource::Image(image))
}

/// An artifact that is not an image (or has no valid source) keeps its
/// source, unless it sets `line`, `floor` or `prerelease`.
fn without_image(
    a: &RawArtifact,
    source: Option<ArtifactSource>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<ArtifactSource> {
    let stray = [
        a.line.as_ref().map(|l| ("line", l.span())),
        a.floor.as_ref().map(|f| ("floor", f.span())),
        a.prerelease.as_ref().map(|p| ("prerelease", p.span())),
    ];
    if let Some((key, span)) = stray.into_iter().flatten().next() {
        if source.is_some() {
            sink.error(
                Some(span),
                context,
                format!("{key} belongs to an image artifact (image = \"REGISTRY/REPOSITORY\", line = \"0.6\")"),
            );
        }
        return None;
    }
    source
}

/// An image without a line: no `floor` or `prerelease`, and a tag or a
/// digest that says which image it is.
fn pinned_image(
    a: &RawArtifact,
    image: ImageSource,
    reference: &crate::vocab::image::Reference,
    span: Range<usize>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<ArtifactSource> {
    for (key, value) in [
        ("floor", a.floor.as_ref().map(|f| f.span())),
        ("prerelease", a.prerelease.as_ref().map(|p| p.span())),
    ] {
        if let Some(at) = value {
            sink.error(
                Some(at),
                context,
                format!("{key} needs line = \"X.Y\" (the release line it narrows)"),
            );
            return None;
        }
    }
    if reference.tag.is_none() && reference.digest.is_none() {
        sink.error(
            Some(span),
            context,
            format!("image \"{}\" names no tag, digest or line; add line = \"0.6\" (newest release on the line), a tag (:0.6.2) or a digest (@sha256:...)", image.reference),
        );
        return None;
    }
    Some(ArtifactSource::Image(image))
}

/// The reference of an image with a line: it names a registry (where the
/// line is resolved) and neither a tag nor a digest (the line picks the
/// tag). True when it does.
fn line_reference(
    image: &ImageSource,
    reference: &crate::vocab::image::Reference,
    span: Range<usize>,
    context: &str,
    sink: &mut Sink<'_>,
) -> bool {
    let mut ok = true;
    if reference.registry.is_none() {
        sink.error(Some(span.clone()), context, format!("image \"{}\" names no registry; a line is resolved in a registry, like \"127.0.0.1:5000/awa-runtime\"", image.reference));
        ok = false;
    }
    if reference.tag.is_some() || reference.digest.is_some() {
        sink.error(
            Some(span),
            context,
            format!(
                "image \"{}\" has a tag or digest and a line; drop one: the line picks the tag",
                image.reference
            ),
        );
        ok = false;
    }
    ok
}

/// `"0.6"` as (0, 6): two numbers of digits only, or `None`.
fn release_line(text: &str) -> Option<(u64, u64)> {
    text.split_once('.').and_then(|(major, minor)| {
        let number = |p: &str| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse::<u64>().ok())
                .flatten()
        };
        Some((number(major)?, number(minor)?))
    })
}

/// The `floor` of an image line: a version on that line, or `None` with
/// the error said.
fn line_floor(
    f: &Spanned<String>,
    (major, minor): (u64, u64),
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<Version> {
    match f.get_ref().parse::<Version>() {
        Ok(v) if (v.as_semver().major, v.as_semver().minor) == (major, minor) => Some(v),
        Ok(v) => {
            sink.error(
                Some(f.span()),
                context,
                format!("floor {v} is not on line {major}.{minor}"),
            );
            None
        }
        Err(why) => {
            sink.error(
                Some(f.span()),
                context,
                format!("floor \"{}\" is not a version: {why}", f.get_ref()),
            );
            None
        }
    }
}

/// Parses a required duration key of a section; `min_ms` is the smallest valid length.
fn duration_key(
    value: &Option<Spanned<String>>,
    key: &str,
    section: &Range<usize>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<Duration> {
    let Some(value) = value else {
        sink.error(
            table_head(section),
            context,
            format!("missing {key} = \"DURATION\""),
        );
        return None;
    };
    match value.get_ref().parse::<Duration>() {
        Ok(d) if d.is_zero() => {
            sink.error(
                Some(value.span()),
                context,
                format!("{key} must be longer than 0s"),
            );
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            sink.error(Some(value.span()), context, format!("{key}: {e}"));
            None
        }
    }
}

fn integer_key(
    value: &Option<Spanned<i64>>,
    key: &str,
    range: (i64, i64),
    section: &Range<usize>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<i64> {
    let Some(value) = value else {
        sink.error(
            table_head(section),
            context,
            format!(
                "missing {key} = N (an integer from {} to {})",
                range.0, range.1
            ),
        );
        return None;
    };
    let n = *value.get_ref();
    if !(range.0..=range.1).contains(&n) {
        sink.error(
            Some(value.span()),
            context,
            format!(
                "{key} must be an integer from {} to {}, found {n}",
                range.0, range.1
            ),
        );
        return None;
    }
    Some(n)
}

fn validate_workload(w: &Spanned<RawWorkload>, sink: &mut Sink<'_>) -> Option<Workload> {
    let context = "workload";
    let span = w.span();
    let w = w.get_ref();
    let rate = integer_key(
        &w.rate_per_s,
        "rate_per_s",
        (1, MAX_RATE_PER_S),
        &span,
        context,
        sink,
    );
    let backlog = match &w.backlog {
        Some(_) => integer_key(
            &w.backlog,
            "backlog",
            (0, MAX_BACKLOG),
            &span,
            context,
            sink,
        ),
        None => Some(0),
    };
    let mix = match &w.mix {
        Some(mix) => validate_mix(mix, sink),
        None => {
            sink.error(
                table_head(&span),
                context,
                "missing mix = { complete = N, ... } (job mode weights)",
            );
            None
        }
    };
    let cron = cron_of(w, "workload", sink);
    let sleep = match &w.sleep {
        Some(_) => duration_key(&w.sleep, "sleep", &span, context, sink),
        None => Some(DEFAULT_SLEEP),
    };
    Some(Workload {
        rate_per_s: u32::try_from(rate?).ok()?,
        backlog: u64::try_from(backlog?).ok()?,
        mix: mix?,
        cron: cron?,
        sleep: sleep?,
    })
}

/// `cron = { every = "DURATION" }` of a workload (`context`: its table),
/// `Some(None)` when it has none; `None` with the error said.
fn cron_of(w: &RawWorkload, context: &str, sink: &mut Sink<'_>) -> Option<Option<Cron>> {
    let Some(cron) = &w.cron else {
        return Some(None);
    };
    duration_key(
        &cron.get_ref().every,
        "every",
        &cron.span(),
        &format!("{context}.cron"),
        sink,
    )
    .map(|every| Some(Cron { every }))
}

/// A cell's `workload = { ... }`: each key given is checked as in
/// `[workload]`.
fn validate_override(
    w: &Spanned<RawWorkload>,
    label: &str,
    sink: &mut Sink<'_>,
) -> Option<WorkloadOverride> {
    let context = format!("{label}, workload");
    let span = w.span();
    let w = w.get_ref();
    let cron = cron_of(w, &context, sink);
    let rate = match &w.rate_per_s {
        Some(_) => integer_key(
            &w.rate_per_s,
            "rate_per_s",
            (1, MAX_RATE_PER_S),
            &span,
            &context,
            sink,
        )
        .map(|r| Some(u32::try_from(r).unwrap_or(u32::MAX))),
        None => Some(None),
    };
    let backlog = match &w.backlog {
        Some(_) => integer_key(
            &w.backlog,
            "backlog",
            (0, MAX_BACKLOG),
            &span,
            &context,
            sink,
        )
        .map(|b| Some(u64::try_from(b).unwrap_or(0))),
        None => Some(None),
    };
    let mix = match &w.mix {
        Some(mix) => validate_mix(mix, sink).map(Some),
        None => Some(None),
    };
    let sleep = match &w.sleep {
        Some(_) => duration_key(&w.sleep, "sleep", &span, &context, sink).map(Some),
        None => Some(None),
    };
    Some(WorkloadOverride {
        rate_per_s: rate?,
        backlog: backlog?,
        mix: mix?,
        sleep: sleep?,
        cron: cron?,
    })
}

fn validate_mix(mix: &RawMix, sink: &mut Sink<'_>) -> Option<BTreeMap<JobMode, u32>> {
    let context = "workload.mix";
    let names: Vec<&str> = JobMode::ALL.iter().map(|m| m.name()).collect();
    let mut weights = BTreeMap::new();
    let mut ok = true;
    let mut entries: Vec<_> = mix.get_ref().iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    for (key, weight) in entries {
        let Some(mode) = JobMode::ALL.into_iter().find(|m| m.name() == key.get_ref()) else {
            sink.error(
                Some(key.span()),
                context,
                format!(
                    "unknown job mode \"{}\"{}; expected one of {}",
                    key.get_ref(),
                    did_you_mean(key.get_ref(), names.iter().copied()),
                    names.join(", ")
                ),
            );
            ok = false;
            continue;
        };
        let n = *weight.get_ref();
        if !(0..=MAX_WEIGHT).contains(&n) {
            sink.error(
                Some(weight.span()),
                context,
                format!(
                    "weight of {} must be an integer from 0 to {MAX_WEIGHT}, found {n}",
                    key.get_ref()
                ),
            );
            ok = false;
            continue;
        }
        weights.insert(mode, n as u32);
    }
    if ok && weights.values().all(|&w| w == 0) {
        sink.error(
            Some(mix.span()),
            context,
            "the weights add up to 0; give at least one job mode a positive weight",
        );
        ok = false;
    }
    ok.then_some(weights)
}

fn validate_timings(t: &Spanned<RawTimings>, sink: &mut Sink<'_>) -> Option<Timings> {
    let context = "timings";
    let span = t.span();
    let t = t.get_ref();
    let heartbeat = duration_key(&t.heartbeat, "heartbeat", &span, context, sink);
    let stale_after = duration_key(&t.stale_after, "stale_after", &span, context, sink);
    let rescue_every = duration_key(&t.rescue_every, "rescue_every", &span, context, sink);
    let rotate_every = duration_key(&t.rotate_every, "rotate_every", &span, context, sink);
    let deadline = duration_key(&t.deadline, "deadline", &span, context, sink);
    let drain_timeout = duration_key(&t.drain_timeout, "drain_timeout", &span, context, sink);
    let budget = match &t.budget {
        None => Some(DEFAULT_BUDGET),
        Some(_) => duration_key(&t.budget, "budget", &span, context, sink),
    };
    if let (Some(h), Some(s), Some(raw)) = (heartbeat, stale_after, &t.stale_after)
        && s <= h
    {
        sink.error(
            Some(raw.span()),
            context,
            format!("stale_after ({s}) must be longer than heartbeat ({h}), or every live worker looks stale"),
        );
        return None;
    }
    Some(Timings {
        heartbeat: heartbeat?,
        stale_after: stale_after?,
        rescue_every: rescue_every?,
        rotate_every: rotate_every?,
        deadline: deadline?,
        drain_timeout: drain_timeout?,
        budget: budget?,
    })
}

/// Validates every cell; returns the cells (if all are valid) and every name seen.
fn validate_cells(
    raw: &[Spanned<RawCell>],
    artifacts: &BTreeSet<String>,
    validated: Option<&BTreeMap<String, Artifact>>,
    sink: &mut Sink<'_>,
) -> (Option<Vec<Cell>>, Vec<String>) {
    let mut cells = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    let mut ok = true;
    for (i, cell) in raw.iter().enumerate() {
        let name = cell.get_ref().name.as_ref();
        if let Some(name) = name {
            let line = sink.locate(name.span().start).line;
            if let Some(first) = first_line.get(name.get_ref()) {
                sink.error(
                    Some(name.span()),
                    &format!("cell \"{}\"", name.get_ref()),
                    format!(
                        "cell \"{}\" is defined twice; the first is at line {first}",
                        name.get_ref()
                    ),
                );
                ok = false;
            } else {
                first_line.insert(name.get_ref().clone(), line);
                names.push(name.get_ref().clone());
            }
        }
        match validate_cell(i + 1, cell, artifacts, validated, sink) {
            Some(c) => cells.push(c),
            None => ok = false,
        }
    }
    (ok.then_some(cells), names)
}

fn validate_cell(
    position: usize,
    cell: &Spanned<RawCell>,
    artifacts: &BTreeSet<String>,
    validated: Option<&BTreeMap<String, Artifact>>,
    sink: &mut Sink<'_>,
) -> Option<Cell> {
    let span = cell.span();
    let raw = cell.get_ref();
    let label = match &raw.name {
        Some(n) => format!("cell \"{}\"", n.get_ref()),
        None => format!("cell #{position}"),
    };
    let (name, name_ok) = cell_name(raw, &span, &label, sink);
    let (about, about_ok) = cell_about(raw, &span, &label, sink);
    let mut ok = name_ok && about_ok;
    let expect = match &raw.expect {
        None => Some(Expectation::Pass),
        Some(e) => expectation(e, &label, sink),
    };
    let fresh_install = raw.fresh_install.as_ref().is_some_and(|f| *f.get_ref());
    let (path, path_ok) = cell_path(raw, fresh_install, artifacts, validated, &label, sink);
    ok &= path_ok;
    if !fresh_install && raw.path.is_none() && !artifacts.contains(PREVIOUS) {
        sink.error(
            raw.name.as_ref().map_or_else(|| table_head(&span), |n| Some(n.span())),
            &label,
            "the cell starts on the N-1 schema prepared by artifact \"previous\", which is not declared; declare [artifacts.previous] or set fresh_install = true",
        );
        ok = false;
    }
    let (steps, steps_ok) = cell_steps(
        raw,
        &span,
        fresh_install,
        path.as_ref(),
        artifacts,
        &label,
        sink,
    );
    ok &= steps_ok;
    let workload = match &raw.workload {
        Some(w) => validate_override(w, &label, sink),
        None => Some(WorkloadOverride::default()),
    };
    let budget = match &raw.budget {
        None => Some(None),
        Some(_) => duration_key(&raw.budget, "budget", &span, &label, sink).map(Some),
    };
    let steps = steps?;
    if let (Some(Some(b)), Some(raw_budget)) = (budget, &raw.budget)
        && !budget_fits(b, &steps, raw_budget.span(), &label, sink)
    {
        ok = false;
    }
    let reach = cell_reach(raw, &label, sink);
    let cell = Cell {
        name,
        about,
        expect: expect?,
        fresh_install,
        workload: workload?,
        budget: budget?,
        steps,
        path,
        reach: reach?,
    };
    ok.then_some(cell)
}

/// A cell's `reach`: names of interleavings, each known and listed once.
fn cell_reach(raw: &RawCell, context: &str, sink: &mut Sink<'_>) -> Option<Vec<Reach>> {
    let Some(list) = &raw.reach else {
        return Some(Vec::new());
    };
    let names: Vec<&str> = Reach::ALL.iter().map(|r| r.name()).collect();
    let mut reach = Vec::new();
    let mut ok = true;
    for item in list.get_ref() {
        match Reach::from_name(item.get_ref()) {
            Some(r) if reach.contains(&r) => {
                sink.error(
                    Some(item.span()),
                    context,
                    format!("reach lists \"{}\" twice; list it once", r.name()),
                );
                ok = false;
            }
            Some(r) => reach.push(r),
            None => {
                sink.error(
                    Some(item.span()),
                    context,
                    format!(
                        "unknown interleaving \"{}\"{} in reach; expected one of {}",
                        item.get_ref(),
                        did_you_mean(item.get_ref(), names.iter().copied()),
                        names.join(", ")
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(reach)
}

/// A cell's `name`, and whether it is valid.
fn cell_name(
    raw: &RawCell,
    span: &std::ops::Range<usize>,
    label: &str,
    sink: &mut Sink<'_>,
) -> (String, bool) {
    match &raw.name {
        None => {
            sink.error(table_head(span), label, "missing name = \"...\"");
            (String::new(), false)
        }
        Some(n) => {
            let ok = is_identifier(n.get_ref(), '-');
            if !ok {
                sink.error(
                    Some(n.span()),
                    label,
                    "a cell name uses lowercase letters, digits and dashes, like migrate-first",
                );
            }
            (n.get_ref().clone(), ok)
        }
    }
}

/// A cell's `about`, and whether it is valid.
fn cell_about(
    raw: &RawCell,
    span: &std::ops::Range<usize>,
    label: &str,
    sink: &mut Sink<'_>,
) -> (String, bool) {
    match &raw.about {
        None => {
            sink.error(
                table_head(span),
                label,
                "missing about = \"...\" (a one-line description)",
            );
            (String::new(), false)
        }
        Some(a) if a.get_ref().trim().is_empty() || a.get_ref().contains('\n') => {
            sink.error(Some(a.span()), label, "about must be one non-empty line");
            (String::new(), false)
        }
        Some(a) => (a.get_ref().clone(), true),
    }
}

/// A cell's steps, each converted, then walked as a whole (the roster's
/// and the upgrade path's problems located at their steps); `None` when
/// a step does not convert, `false` when the walk found problems.
fn cell_steps(
    raw: &RawCell,
    span: &std::ops::Range<usize>,
    fresh_install: bool,
    path: Option<&super::model::UpgradePath>,
    artifacts: &BTreeSet<String>,
    label: &str,
    sink: &mut Sink<'_>,
) -> (Option<Vec<Step>>, bool) {
    match &raw.steps {
        RawSteps::List(steps) if !steps.get_ref().is_empty() => {
            let converted: Vec<Option<Step>> = steps
                .get_ref()
                .iter()
                .enumerate()
                .map(|(i, s)| convert(s, label, i + 1, artifacts, sink))
                .collect();
            let Some(valid) = converted.into_iter().collect::<Option<Vec<Step>>>() else {
                return (None, true);
            };
            let model = Roster::walk(fresh_install, &valid);
            let walked = path.map_or_else(Vec::new, |p| super::path::walk(p, &valid));
            for problem in model.problems.iter().chain(&walked) {
                if problem.step == 0 {
                    let at = raw.path.as_ref().map(|p| p.span());
                    sink.error(at, label, problem.message.clone());
                    continue;
                }
                let at = problem.step;
                let step_span = steps.get_ref()[at - 1].span();
                let context = step_context(label, at, Some(valid[at - 1].name()));
                sink.error(Some(step_span), &context, problem.message.clone());
            }
            let ok = model.problems.is_empty() && walked.is_empty();
            (Some(valid), ok)
        }
        RawSteps::List(steps) => {
            sink.error(Some(steps.span()), label, "the cell has no steps; add at least one, e.g. { fleet = \"previous\", workers = 2 }");
            (None, true)
        }
        RawSteps::Invalid => (None, true),
        RawSteps::Missing => {
            sink.error(
                table_head(span),
                label,
                "missing steps = [ ... ]; add at least one step",
            );
            (None, true)
        }
    }
}

/// A cell's `path` and `downgrade`: the path, and whether they are valid.
fn cell_path(
    raw: &RawCell,
    fresh_install: bool,
    artifacts: &BTreeSet<String>,
    validated: Option<&BTreeMap<String, Artifact>>,
    label: &str,
    sink: &mut Sink<'_>,
) -> (Option<super::model::UpgradePath>, bool) {
    let downgrade = raw.downgrade.as_ref();
    let Some(path) = &raw.path else {
        if let Some(d) = downgrade {
            sink.error(
                Some(d.span()),
                label,
                "downgrade = true declares the direction of a path; add path = [\"...\", \"...\"] or drop it",
            );
            return (None, false);
        }
        return (None, true);
    };
    if fresh_install {
        sink.error(
            Some(path.span()),
            label,
            "a path starts on a database its first release creates; drop fresh_install = true (or the path)",
        );
        return (None, false);
    }
    let downgrade = downgrade.is_some_and(|d| *d.get_ref());
    match super::path::check(path, downgrade, artifacts, validated, label, sink) {
        Some(p) => (Some(p), true),
        None => (None, false),
    }
}

/// A budget shorter than the cell's holds can never be met: refused,
/// naming both.
fn budget_fits(
    budget: Duration,
    steps: &[Step],
    span: Range<usize>,
    label: &str,
    sink: &mut Sink<'_>,
) -> bool {
    let held: u64 = steps
        .iter()
        .map(|s| match s {
            Step::Hold(h) => h.duration.as_millis(),
            _ => 0,
        })
        .sum();
    if budget.as_millis() > held {
        return true;
    }
    sink.error(
        Some(span),
        label,
        format!(
            "budget {budget} is not longer than the cell's holds alone ({}); raise the budget or shorten the holds",
            Duration::from_millis(held)
        ),
    );
    false
}

fn expectation(
    value: &Spanned<toml::Value>,
    context: &str,
    sink: &mut Sink<'_>,
) -> Option<Expectation> {
    let rules: Vec<&str> = FindingRule::ALL.iter().map(|r| r.name()).collect();
    let usage = "expected \"pass\" or { detect = \"RULE\" }";
    match value.get_ref() {
        toml::Value::String(s) if s == "pass" => Some(Expectation::Pass),
        toml::Value::Table(t) => {
            let Some((key, rule)) = t.iter().next().filter(|_| t.len() == 1) else {
                let keys: Vec<&str> = t.keys().map(String::as_str).collect();
                sink.error(
                    Some(value.span()),
                    context,
                    format!("invalid expect with keys ({}); {usage}", keys.join(", ")),
                );
                return None;
            };
            if key != "detect" {
                sink.error(
                    Some(value.span()),
                    context,
                    format!(
                        "invalid expect key \"{key}\"{}; {usage}",
                        did_you_mean(key, ["detect"])
                    ),
                );
                return None;
            }
            let Some(rule) = rule.as_str() else {
                sink.error(
                    Some(value.span()),
                    context,
                    format!("detect must name a finding rule, found {}", describe(rule)),
                );
                return None;
            };
            match FindingRule::from_name(rule) {
                Some(r) => Some(Expectation::Detect(r)),
                None => {
                    sink.error(
                        Some(value.span()),
                        context,
                        format!(
                            "unknown finding rule \"{rule}\"{}; expected one of {}",
                            did_you_mean(rule, rules.iter().copied()),
                            rules.join(", ")
                        ),
                    );
                    None
                }
            }
        }
        other => {
            sink.error(
                Some(value.span()),
                context,
                format!("invalid expect {}; {usage}", describe(other)),
            );
            None
        }
    }
}

fn validate_matrices(
    raw: &[RawNamedMatrix],
    cells: &[String],
    sink: &mut Sink<'_>,
) -> BTreeMap<String, NamedMatrix> {
    let mut matrices = BTreeMap::new();
    for (name, list) in raw {
        if let Some(matrix) = named_matrix(name, list, cells, sink) {
            matrices.insert(name.get_ref().clone(), matrix);
        }
    }
    matrices
}

/// One named matrix: its name, and the cells its entries select, each
/// once, in the order listed; `None` when it lists nothing.
fn named_matrix(
    name: &Spanned<String>,
    list: &Spanned<Vec<Spanned<String>>>,
    cells: &[String],
    sink: &mut Sink<'_>,
) -> Option<NamedMatrix> {
    let context = format!("matrix \"{}\"", name.get_ref());
    if !is_identifier(name.get_ref(), '-') {
        sink.error(
            Some(name.span()),
            &context,
            "a matrix name uses lowercase letters, digits and dashes, like smoke",
        );
    }
    if list.get_ref().is_empty() {
        sink.error(
            Some(list.span()),
            &context,
            "the matrix lists no cells; list cell names, or \"*\" for every cell",
        );
        return None;
    }
    let mut selected: Vec<String> = Vec::new();
    let mut entries = Vec::new();
    // With "*" present its own message covers the rest; no "listed twice" echoes.
    let listed = Listed {
        alone: list.get_ref().len() == 1,
        has_star: list.get_ref().iter().any(|e| e.get_ref() == "*"),
        context: &context,
    };
    for entry in list.get_ref() {
        entries.push(entry.get_ref().clone());
        select_entry(entry, &listed, cells, &mut selected, sink);
    }
    let mut seen = BTreeSet::new();
    selected.retain(|c| seen.insert(c.clone()));
    Some(NamedMatrix {
        entries,
        cells: selected,
    })
}

/// What an entry of a named matrix is judged beside.
struct Listed<'a> {
    /// It is the matrix's only entry.
    alone: bool,
    /// The matrix lists `"*"`.
    has_star: bool,
    context: &'a str,
}

/// One entry of a named matrix: `"*"` (every cell), `prefix*` (the cells
/// it starts), or a cell's name; adds what it selects to `selected`.
fn select_entry(
    entry: &Spanned<String>,
    listed: &Listed<'_>,
    cells: &[String],
    selected: &mut Vec<String>,
    sink: &mut Sink<'_>,
) {
    let (cell, context) = (entry.get_ref(), listed.context);
    if cell == "*" {
        if !listed.alone {
            sink.error(
                Some(entry.span()),
                context,
                "\"*\" already means every cell; list it alone",
            );
        }
        selected.extend(cells.iter().cloned());
    } else if let Some(prefix) = cell.strip_suffix('*') {
        // `defect-*`: every cell whose name starts with the prefix.
        let matching: Vec<&String> = cells.iter().filter(|c| c.starts_with(prefix)).collect();
        if matching.is_empty() {
            sink.error(
                Some(entry.span()),
                context,
                format!("\"{cell}\" matches no cell; no cell name starts with \"{prefix}\""),
            );
        }
        selected.extend(matching.into_iter().cloned());
    } else if !cells.contains(cell) {
        sink.error(
            Some(entry.span()),
            context,
            format!(
                "unknown cell \"{cell}\"{}; expected \"*\" or one of {}",
                did_you_mean(cell, cells.iter().map(String::as_str)),
                cells.join(", ")
            ),
        );
    } else if selected.contains(cell) {
        if !listed.has_star {
            sink.error(
                Some(entry.span()),
                context,
                format!("cell \"{cell}\" is listed twice"),
            );
        }
    } else {
        selected.push(cell.clone());
    }
}
