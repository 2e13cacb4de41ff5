//! The `[artifacts]` checks: each artifact's one source (a workspace build, a
//! release of the manifest, an image or an image line), its failpoints, and
//! the registries `--from-registry` may pull from.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::is_identifier;
use crate::matrix::Known;
use crate::matrix::diagnostic::{Problems, did_you_mean};
use crate::matrix::model::{
    Artifact, ArtifactSource, BuildSource, ImageLine, ImageSource, Version,
};
use crate::matrix::raw::{RawArtifact, RawMatrix};

pub(super) fn validate_artifacts(
    raw: &RawMatrix,
    known: &Known,
    sink: &mut Problems<'_>,
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
pub(super) fn pulls_known(raw: &RawMatrix, known: &Known, sink: &mut Problems<'_>) -> bool {
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
// A String: the caller records it in the matrix's diagnostics as it is.
pub(super) fn from_registry(a: &RawArtifact, reference: &str) -> Result<RawArtifact, String> {
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

pub(super) fn validate_artifact(
    name: &Spanned<String>,
    a: &RawArtifact,
    context: &str,
    known: &Known,
    sink: &mut Problems<'_>,
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
pub(super) fn one_source(
    name: &Spanned<String>,
    sources: &[(&str, &Spanned<String>)],
    context: &str,
    known: &Known,
    sink: &mut Problems<'_>,
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
pub(super) fn failpoint_ok(
    fp: &Spanned<String>,
    sources: &[(&str, &Spanned<String>)],
    context: &str,
    sink: &mut Problems<'_>,
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
pub(super) fn known_source(
    source: &ArtifactSource,
    value: &Spanned<String>,
    context: &str,
    known: &Known,
    sink: &mut Problems<'_>,
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

pub(super) fn source(
    key: &str,
    value: &Spanned<String>,
    context: &str,
    sink: &mut Problems<'_>,
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
pub(super) fn image_line(
    a: &RawArtifact,
    source: Option<ArtifactSource>,
    context: &str,
    sink: &mut Problems<'_>,
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
pub(super) fn without_image(
    a: &RawArtifact,
    source: Option<ArtifactSource>,
    context: &str,
    sink: &mut Problems<'_>,
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
pub(super) fn pinned_image(
    a: &RawArtifact,
    image: ImageSource,
    reference: &crate::vocab::image::Reference,
    span: Range<usize>,
    context: &str,
    sink: &mut Problems<'_>,
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
pub(super) fn line_reference(
    image: &ImageSource,
    reference: &crate::vocab::image::Reference,
    span: Range<usize>,
    context: &str,
    sink: &mut Problems<'_>,
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
pub(super) fn release_line(text: &str) -> Option<(u64, u64)> {
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
pub(super) fn line_floor(
    f: &Spanned<String>,
    (major, minor): (u64, u64),
    context: &str,
    sink: &mut Problems<'_>,
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
