//! Upgrade paths: `path = ["pre_guard", "previous", "current"]`.
//!
//! A path is a declaration the steps are checked against, not sugar for
//! steps: the cell still says how the fleet rolls, when it migrates and
//! what must be refused, and the path says which releases it walks and in
//! what order. Its first release creates the cell's database (instead of
//! `previous`); each later one must be a later version (an earlier one
//! with `downgrade = true`); and the steps must walk it in order: a fleet
//! or roll reaches the next release on the path or stays where it is,
//! never skips one (a skip is rehearsed by leaving the skipped release off
//! the path), a rollback goes back, and the fleet reaches the last release.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use toml::Spanned;

use super::diagnostic::{Problems, did_you_mean};
use super::model::{Artifact, ArtifactSource, BuildSource, PathStop, Step, UpgradePath, Version};
use super::roster::Problem;

/// An artifact's version as far as the matrix knows it before anything runs.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Known {
    /// A release, the workspace's version, or an image tagged `X.Y.Z`.
    Exact(Version),
    /// An image resolved on a release line at run time: some release
    /// `major.minor.*` at or above the floor, when the line has one.
    Line(u64, u64, Option<Version>),
    /// An image named by a digest or a tag that is not a version.
    Unknown,
}

impl Known {
    fn of(artifact: &Artifact) -> Known {
        match &artifact.source {
            ArtifactSource::Release(v) => Known::Exact(v.clone()),
            ArtifactSource::Build(BuildSource::Workspace) => awa_runtime::version::VERSION
                .parse()
                .map_or(Known::Unknown, Known::Exact),
            ArtifactSource::Image(image) => match &image.line {
                Some(line) => Known::Line(line.major, line.minor, line.floor.clone()),
                None => crate::vocab::image::Reference::parse(&image.reference)
                    .ok()
                    .and_then(|r| r.tag)
                    .and_then(|tag| tag.parse().ok())
                    .map_or(Known::Unknown, Known::Exact),
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            Known::Exact(v) => v.to_string(),
            Known::Line(major, minor, None) => format!("{major}.{minor}.x"),
            Known::Line(major, minor, Some(floor)) => {
                format!("{major}.{minor}.x, at least {floor}")
            }
            Known::Unknown => "of unknown version".into(),
        }
    }

    /// The order of two versions, when the matrix alone can tell it: two
    /// exact versions; versions on different lines; or an exact version
    /// below a line's floor (whatever the line resolves to is later).
    fn order(&self, other: &Known) -> Option<Ordering> {
        let line = |k: &Known| match k {
            Known::Exact(v) => Some((v.as_semver().major, v.as_semver().minor)),
            Known::Line(major, minor, _) => Some((*major, *minor)),
            Known::Unknown => None,
        };
        match (self, other) {
            (Known::Exact(a), Known::Exact(b)) => Some(a.cmp(b)),
            _ => match line(self)?.cmp(&line(other)?) {
                Ordering::Equal => match (self, other) {
                    (Known::Exact(v), Known::Line(_, _, Some(floor))) if v < floor => {
                        Some(Ordering::Less)
                    }
                    (Known::Line(_, _, Some(floor)), Known::Exact(v)) if v < floor => {
                        Some(Ordering::Greater)
                    }
                    _ => None,
                },
                unequal => Some(unequal),
            },
        }
    }
}

/// Checks a cell's `path` and `downgrade` keys; `artifacts` are the
/// validated artifacts (`None` when some failed: versions are then not
/// compared, to avoid a cascade). Names not declared are reported here.
pub(crate) fn check(
    path: &Spanned<Vec<Spanned<String>>>,
    downgrade: bool,
    declared: &std::collections::BTreeSet<String>,
    artifacts: Option<&BTreeMap<String, Artifact>>,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<UpgradePath> {
    let names = path.get_ref();
    if names.len() < 2 {
        sink.error(
            Some(path.span()),
            context,
            format!(
                "a path walks at least two releases, found {}; list them in order, like [\"pre_guard\", \"previous\", \"current\"], or drop path (the cell then starts on previous)",
                names.len()
            ),
        );
        return None;
    }
    let mut ok = true;
    let mut stops: Vec<(PathStop, Known)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let text = name.get_ref();
        if !declared.contains(text) {
            sink.error(
                Some(name.span()),
                context,
                format!(
                    "path names unknown artifact \"{text}\"{}; declared: {}",
                    did_you_mean(text, declared.iter().map(String::as_str)),
                    declared.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
            ok = false;
            continue;
        }
        if names[..i].iter().any(|n| n.get_ref() == text) {
            sink.error(
                Some(name.span()),
                context,
                format!("path lists \"{text}\" twice; a path visits each release once (a rollback step goes back)"),
            );
            ok = false;
            continue;
        }
        let known = artifacts
            .and_then(|a| a.get(text))
            .map_or(Known::Unknown, Known::of);
        stops.push((
            PathStop {
                artifact: text.clone(),
                version: known.describe(),
            },
            known,
        ));
    }
    if !ok {
        return None;
    }
    if artifacts.is_some() {
        ok = check_order(names, &stops, downgrade, context, sink);
    }
    ok.then(|| UpgradePath {
        releases: stops.into_iter().map(|(stop, _)| stop).collect(),
        downgrade,
    })
}

/// Each release later than the one before (earlier for a downgrade).
fn check_order(
    names: &[Spanned<String>],
    stops: &[(PathStop, Known)],
    downgrade: bool,
    context: &str,
    sink: &mut Problems<'_>,
) -> bool {
    let (want, word, fix) = if downgrade {
        (Ordering::Greater, "an earlier", "drop downgrade = true")
    } else {
        (
            Ordering::Less,
            "a later",
            "reorder the path, or declare downgrade = true",
        )
    };
    for (i, pair) in stops.windows(2).enumerate() {
        let ((a, ka), (b, kb)) = (&pair[0], &pair[1]);
        let at = Some(names[i + 1].span());
        match ka.order(kb) {
            Some(o) if o == want => {}
            Some(_) => {
                sink.error(
                    at,
                    context,
                    format!(
                        "path goes from {} {} to {} {}, which is not {word} version; {fix}",
                        a.artifact, a.version, b.artifact, b.version
                    ),
                );
                return false;
            }
            None => {
                sink.error(
                    at,
                    context,
                    format!(
                        "path cannot order {} ({}) after {} ({}): the matrix does not know both versions; name images on a path by a version tag (:0.6.2)",
                        b.artifact, b.version, a.artifact, a.version
                    ),
                );
                return false;
            }
        }
    }
    true
}

/// Checks that `steps` walk `path` in order; problems are against the
/// 1-based step, or step 0 for the path itself (never reaching its end).
pub(crate) fn walk(path: &UpgradePath, steps: &[Step]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut stage = 0;
    let mut since = 0;
    let last = path.releases.len() - 1;
    for (i, step) in steps.iter().enumerate() {
        let index = i + 1;
        let (artifact, moves) = match step {
            Step::Fleet(s) => (&s.artifact, true),
            Step::Roll(s) => (&s.artifact, true),
            Step::Rollback(s) => (&s.artifact, true),
            Step::Migrate(s) => (&s.artifact, false),
            Step::Fence(s) => (&s.artifact, false),
            Step::Cancel(s) => (&s.artifact, false),
            Step::Revoke(s) => (&s.artifact, false),
            _ => continue,
        };
        let Some(at) = path.position(artifact) else {
            problems.push(Problem {
                step: index,
                message: format!(
                    "{artifact} is not on this cell's path ({path}); add it to the path, or use one of its releases"
                ),
            });
            continue;
        };
        if !moves {
            continue;
        }
        let here = &path.releases[stage].artifact;
        let message = match step {
            Step::Rollback(_) if at > stage => Some(format!(
                "rollback to {artifact} goes forward along the path (the fleet is at {here}); use a roll step"
            )),
            Step::Rollback(_) => None,
            _ if at > stage + 1 => Some(format!(
                "{} to {artifact} skips {}, the next release on the path ({path}); walk the path in order, or leave {} off the path to rehearse the skip",
                step.name(),
                path.releases[stage + 1].artifact,
                path.releases[stage + 1].artifact,
            )),
            _ if at < stage => Some(format!(
                "{} {artifact} goes back along the path: the fleet walked on to {here} at step {since}; use {{ rollback = \"{artifact}\" }} to go back",
                step.name()
            )),
            _ => None,
        };
        match message {
            Some(message) => problems.push(Problem {
                step: index,
                message,
            }),
            None if at != stage => {
                stage = at;
                since = index;
            }
            None => {}
        }
    }
    if stage != last && problems.is_empty() {
        problems.push(Problem {
            step: 0,
            message: format!(
                "the path ends at {}, but the fleet never gets past {}; add a roll to {}, or end the path at {}",
                path.releases[last].artifact,
                path.releases[stage].artifact,
                path.releases[stage + 1].artifact,
                path.releases[stage].artifact
            ),
        });
    }
    problems
}
