//! Broken inputs a release engineer types (matrix files, repository
//! copies, flags and the environment variables bound to them), each
//! refused before anything starts: exit 2, the first message located
//! (`FILE:LINE:` for a matrix problem, the file for a broken repository
//! copy, the flag for a bad flag or variable), and nothing started. "Nothing started" is checked with traps:
//! `cargo`, `initdb`, `postgres`, `pg_ctl`, `pg_config` and `docker` on
//! PATH (and as $CARGO and $AWA_PG_BINDIR) are scripts that leave a
//! marker file and fail, and no target/ or reports/ folder may appear.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SHIPPED: &str = include_str!("../../matrix.toml");
const MANIFEST: &str = include_str!("../../artifacts/manifest.toml");

/// What the first message must name.
enum Where {
    /// `matrix.toml:LINE:` where LINE holds the first occurrence of this text.
    Line(&'static str),
    /// The same, at the last occurrence (a cell appended to the file).
    Last(&'static str),
    /// The matrix file, without a line (the file as a whole).
    File,
    /// This text, e.g. a path in the repository copy or a flag.
    Names(&'static str),
}

/// One broken input.
struct Case {
    name: &'static str,
    /// The matrix file's bytes.
    matrix: Vec<u8>,
    /// Changes to the repository copy.
    repo: fn(&Path),
    args: &'static [&'static str],
    /// Environment variables set for the run.
    env: &'static [(&'static str, &'static str)],
    expect: Where,
}

fn keep(_: &Path) {}

/// The shipped matrix with `from` replaced by `to` once (which must match).
fn edit(from: &str, to: &str) -> Vec<u8> {
    assert!(SHIPPED.contains(from), "{from:?} not in matrix.toml");
    SHIPPED.replacen(from, to, 1).into_bytes()
}

/// The shipped matrix with one more cell.
fn with_cell(name: &str, steps: &[&str]) -> Vec<u8> {
    let steps: String = steps.iter().map(|s| format!("  {s},\n")).collect();
    format!(
        "{SHIPPED}\n[[cell]]\nname = \"{name}\"\nabout = \"a broken cell\"\nsteps = [\n{steps}]\n"
    )
    .into_bytes()
}

fn cases() -> Vec<Case> {
    let plain = |name, matrix, args, expect| Case {
        name,
        matrix,
        repo: keep,
        args,
        env: &[],
        expect,
    };
    let with_env = |name, env, args, expect| Case {
        name,
        matrix: SHIPPED.as_bytes().to_vec(),
        repo: keep,
        args,
        env,
        expect,
    };
    let smoke: &'static [&'static str] = &["--matrix", "smoke", "--seed", "1"];
    let cell = |c: &'static str| -> &'static [&'static str] {
        Box::leak(vec!["run", "--cell", c, "--seed", "1"].into_boxed_slice())
    };
    let mut bad_utf8 = SHIPPED.as_bytes().to_vec();
    let at = SHIPPED
        .find("about = \"N-1")
        .expect("a migrate-first about");
    bad_utf8[at + 9] = 0xff;
    let mut cases = vec![
        // Matrix files.
        plain("empty file", Vec::new(), smoke, Where::File),
        plain("whitespace only", b"\n  \n".to_vec(), smoke, Where::File),
        plain(
            "missing closing brace",
            edit("leader = true },", "leader = true ,"),
            smoke,
            Where::Line("leader = true ,"),
        ),
        plain(
            "unclosed table header",
            edit("\n[workload]\n", "\n[workload\n"),
            smoke,
            Where::Line("[workload\n"),
        ),
        plain(
            "duplicate key",
            edit(
                "[workload]\n",
                "[workload]\nbacklog = 1 # dup\nbacklog = 2 # dup2\n",
            ),
            smoke,
            Where::Line("# dup2"),
        ),
        plain(
            "bad UTF-8",
            bad_utf8,
            smoke,
            Where::Line("about = \"\u{fffd}-1"),
        ),
        plain(
            "release not in the manifest",
            edit("release = \"0.6.2\"", "release = \"0.6.9\""),
            smoke,
            Where::Line("release = \"0.6.9\""),
        ),
        plain(
            "release that is not a version",
            edit("release = \"0.6.2\"", "release = \"0.6\""),
            smoke,
            Where::Line("release = \"0.6\""),
        ),
        plain(
            "misspelled failpoint",
            edit(
                "failpoint = \"flip_skip_reconcile\"",
                "failpoint = \"flip_skip_reconcle\"",
            ),
            smoke,
            Where::Line("flip_skip_reconcle"),
        ),
        plain(
            "image on the process backend",
            edit("release = \"0.6.2\"", "image = \"awa-runtime:0.6.2\""),
            // auto (the default) accepts images where an engine answers.
            &["--matrix", "smoke", "--seed", "1", "--backend", "process"],
            Where::Line("image = \"awa-runtime:0.6.2\""),
        ),
        plain(
            "failpoint on a release",
            edit(
                "release = \"0.6.2\"",
                "release = \"0.6.2\"\nfailpoint = \"fold_any_xmin\"",
            ),
            smoke,
            Where::Line("failpoint = \"fold_any_xmin\""),
        ),
        plain(
            "flip before any migrate",
            with_cell(
                "flip-first",
                &[
                    r#"{ fleet = "previous", workers = 2, producers = 1 }"#,
                    r#"{ flip = "manual" }"#,
                ],
            ),
            cell("flip-first"),
            Where::Last("  { flip = \"manual\" },\n]"),
        ),
        plain(
            "fence before a flip",
            with_cell(
                "fence-first",
                &[
                    r#"{ fleet = "previous", workers = 2, producers = 1 }"#,
                    r#"{ migrate = "current" }"#,
                    r#"{ fence = "previous" }"#,
                ],
            ),
            cell("fence-first"),
            Where::Last("  { fence = \"previous\" },\n]"),
        ),
        plain(
            "kill of an artifact with no process",
            with_cell(
                "kill-nothing",
                &[
                    r#"{ fleet = "previous", workers = 2, producers = 1 }"#,
                    r#"{ kill = "worker", of = "current" }"#,
                ],
            ),
            cell("kill-nothing"),
            Where::Last("{ kill = \"worker\", of = \"current\" }"),
        ),
        plain(
            "roll to what already runs",
            with_cell(
                "roll-nothing",
                &[
                    r#"{ fleet = "current", workers = 2, producers = 1 }"#,
                    r#"{ roll = "current" }"#,
                ],
            ),
            cell("roll-nothing"),
            Where::Last("{ roll = \"current\" }"),
        ),
        plain(
            "load without a producer",
            with_cell(
                "load-nobody",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ load = "on" }"#,
                ],
            ),
            cell("load-nobody"),
            Where::Last("  { load = \"on\" },\n]"),
        ),
        plain(
            "crash during a flip that never comes",
            with_cell(
                "crash-never",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ pg_crash = "during_flip" }"#,
                ],
            ),
            cell("crash-never"),
            Where::Last("{ pg_crash = \"during_flip\" }"),
        ),
        plain(
            "unknown step kind",
            with_cell(
                "typo-step",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ hodl = "1s" }"#,
                ],
            ),
            cell("typo-step"),
            Where::Last("{ hodl = \"1s\" }"),
        ),
        plain(
            "bad duration",
            with_cell(
                "bad-duration",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ hold = "3 sec" }"#,
                ],
            ),
            cell("bad-duration"),
            Where::Last("{ hold = \"3 sec\" }"),
        ),
        plain(
            "step of an undeclared artifact",
            with_cell(
                "no-such-artifact",
                &[r#"{ fleet = "previuos", workers = 2 }"#],
            ),
            cell("no-such-artifact"),
            Where::Last("previuos"),
        ),
        plain(
            "unknown finding in expect",
            edit(
                "expect = { detect = \"",
                "expect = { detect = \"no_such_rule_",
            ),
            smoke,
            Where::Line("no_such_rule"),
        ),
        plain(
            "named matrix lists an unknown cell",
            edit("smoke = [", "smoke = [\"no-such-cell\", "),
            smoke,
            Where::Line("no-such-cell"),
        ),
        plain(
            "misspelled section",
            edit("[timings]", "[timing]"),
            smoke,
            Where::Line("[timing]"),
        ),
        plain(
            "string where a number goes",
            edit("rate_per_s = ", "rate_per_s = \"fast\" # "),
            smoke,
            Where::Line("rate_per_s = \"fast\""),
        ),
        // Repository copies.
        Case {
            name: "copy without artifacts/manifest.toml",
            matrix: SHIPPED.as_bytes().to_vec(),
            repo: |root| std::fs::remove_file(root.join("artifacts/manifest.toml")).unwrap(),
            args: smoke,
            env: &[],
            expect: Where::Names("artifacts/manifest.toml is missing"),
        },
        Case {
            name: "manifest that is not TOML",
            matrix: SHIPPED.as_bytes().to_vec(),
            repo: |root| {
                std::fs::write(root.join("artifacts/manifest.toml"), "[[release]\n").unwrap()
            },
            args: smoke,
            env: &[],
            expect: Where::Names("manifest.toml is not a valid manifest"),
        },
        Case {
            name: "manifest without the release",
            matrix: SHIPPED.as_bytes().to_vec(),
            repo: |root| {
                let text = MANIFEST.replace("version = \"0.6.2\"", "version = \"0.6.3\"");
                std::fs::write(root.join("artifacts/manifest.toml"), text).unwrap();
            },
            args: smoke,
            env: &[],
            expect: Where::Line("release = \"0.6.2\""),
        },
        Case {
            name: "tampered archive digest",
            matrix: SHIPPED.as_bytes().to_vec(),
            repo: |root| {
                let text = MANIFEST.replacen("sha256 = \"", "sha256 = \"00", 1);
                std::fs::write(root.join("artifacts/manifest.toml"), text).unwrap();
                for archive in ["awa-runtime-0.6.1.crate", "awa-runtime-0.6.2.crate"] {
                    std::fs::write(root.join("artifacts").join(archive), b"not the release")
                        .unwrap();
                }
            },
            args: &["--cell", "floor-refuses-pre-guard", "--seed", "1"],
            env: &[],
            expect: Where::Names("restore artifacts/manifest.toml"),
        },
        // Flags.
        plain(
            "matrix file that does not exist",
            SHIPPED.as_bytes().to_vec(),
            &["--matrix-file", "nowhere/matrix.toml", "plan"],
            Where::Names("nowhere/matrix.toml"),
        ),
        plain(
            "unknown named matrix",
            SHIPPED.as_bytes().to_vec(),
            &["--matrix", "smoek"],
            Where::Names("smoke"),
        ),
        plain(
            "unknown cell",
            SHIPPED.as_bytes().to_vec(),
            &["--cell", "fense"],
            Where::Names("fence"),
        ),
        plain(
            "nothing selected",
            SHIPPED.as_bytes().to_vec(),
            &["run"],
            Where::Names("--matrix"),
        ),
        plain(
            "database URL without a host",
            SHIPPED.as_bytes().to_vec(),
            &[
                "--matrix",
                "smoke",
                "--database-url",
                "postgres://u:hunter22@/db",
            ],
            Where::Names("--database-url"),
        ),
        plain(
            "database URL with a bad port",
            SHIPPED.as_bytes().to_vec(),
            &[
                "--matrix",
                "smoke",
                "--database-url",
                "postgres://h:99999/db",
            ],
            Where::Names("--database-url"),
        ),
        plain(
            "database URL with a bad sslmode",
            SHIPPED.as_bytes().to_vec(),
            &[
                "--matrix",
                "smoke",
                "--database-url",
                "postgres://h/db?sslmode=sometimes",
            ],
            Where::Names("sslmode"),
        ),
        plain(
            "not a PostgreSQL URL",
            SHIPPED.as_bytes().to_vec(),
            &["--matrix", "smoke", "--database-url", "mysql://h/db"],
            Where::Names("--database-url"),
        ),
        plain(
            "seed out of range",
            SHIPPED.as_bytes().to_vec(),
            &["--matrix", "smoke", "--seed", "18446744073709551616"],
            Where::Names("--seed"),
        ),
        plain(
            "jobs zero",
            SHIPPED.as_bytes().to_vec(),
            &["--matrix", "smoke", "--jobs", "0"],
            Where::Names("--jobs"),
        ),
        plain(
            "flag of another subcommand",
            SHIPPED.as_bytes().to_vec(),
            &["report", "reports/x", "--jobs", "2"],
            Where::Names("--jobs"),
        ),
        plain(
            "database URL to plan",
            SHIPPED.as_bytes().to_vec(),
            &["plan", "--database-url", "garbage"],
            Where::Names("--database-url"),
        ),
        plain(
            "unknown backend",
            SHIPPED.as_bytes().to_vec(),
            &["--matrix", "smoke", "--backend", "podman"],
            Where::Names("--backend"),
        ),
        plain(
            "report of a folder without report.json",
            SHIPPED.as_bytes().to_vec(),
            &["report", "reports/none"],
            Where::Names("report.json"),
        ),
    ];
    cases.extend(more_matrix_files(&plain));
    cases.extend(more_trees());
    cases.extend(more_flags(&plain));
    cases.extend([
        // Environment variables: the same checks as their flags, named as such.
        with_env(
            "backend variable with an unknown backend",
            &[("REHEARSE_BACKEND", "podman")],
            smoke,
            Where::Names("--backend"),
        ),
        with_env(
            "database URL variable that is not a URL",
            &[("REHEARSE_DATABASE_URL", "garbage")],
            smoke,
            Where::Names("--database-url"),
        ),
        with_env(
            "database URL variable without a host, with a password",
            &[("REHEARSE_DATABASE_URL", "postgres://u:hunter22@/db")],
            smoke,
            Where::Names("--database-url"),
        ),
        with_env(
            "format variable with an unknown format",
            &[("REHEARSE_FORMAT", "xml")],
            smoke,
            Where::Names("--format"),
        ),
        with_env(
            "backend variable, named as the variable",
            &[("REHEARSE_BACKEND", "bogus")],
            smoke,
            Where::Names("environment variable REHEARSE_BACKEND"),
        ),
        with_env(
            "stress variable out of range, named as the variable",
            &[("REHEARSE_STRESS", "cpu=0")],
            smoke,
            Where::Names("environment variable REHEARSE_STRESS"),
        ),
        with_env(
            "database URL variable, named as the variable",
            &[("REHEARSE_DATABASE_URL", "postgres://u:hunter22@/db")],
            smoke,
            Where::Names("environment variable REHEARSE_DATABASE_URL"),
        ),
        with_env(
            "matrix file variable naming no file",
            &[("REHEARSE_MATRIX_FILE", "elsewhere/matrix.toml")],
            &["plan", "--matrix", "smoke"],
            Where::Names("elsewhere/matrix.toml"),
        ),
        with_env(
            "reports variable naming a file",
            &[("REHEARSE_REPORTS_DIR", "matrix.toml")],
            smoke,
            Where::Names("matrix.toml"),
        ),
    ]);
    cases
}

/// Matrix files a release engineer breaks by hand, beyond the classes above.
fn more_matrix_files(
    plain: &dyn Fn(&'static str, Vec<u8>, &'static [&'static str], Where) -> Case,
) -> Vec<Case> {
    let smoke: &'static [&'static str] = &["--matrix", "smoke", "--seed", "1"];
    let cell = |c: &'static str| -> &'static [&'static str] {
        Box::leak(vec!["run", "--cell", c, "--seed", "1"].into_boxed_slice())
    };
    vec![
        plain(
            "a JSON file given as the matrix",
            b"{\"cells\": []}\n".to_vec(),
            smoke,
            Where::Line("{"),
        ),
        plain(
            "a cell without a name",
            format!("{SHIPPED}\n[[cell]]\nabout = \"nameless\"\nsteps = [{{ hold = \"1s\" }}]\n")
                .into_bytes(),
            smoke,
            Where::Last("[[cell]]"),
        ),
        plain(
            "two cells of one name",
            with_cell("fence", &[r#"{ fleet = "previous", workers = 2 }"#]),
            smoke,
            Where::Last("name = \"fence\""),
        ),
        plain(
            "a cell without steps",
            with_cell("no-steps", &[]),
            cell("no-steps"),
            Where::Last("steps = ["),
        ),
        plain(
            "an expectation that is not pass or detect",
            edit("expect = { detect = \"", "expect = \"fail\" # \""),
            smoke,
            Where::Line("expect = \"fail\""),
        ),
        plain(
            "a negative worker count",
            with_cell(
                "negative-workers",
                &[r#"{ fleet = "previous", workers = -1 }"#],
            ),
            cell("negative-workers"),
            Where::Last("workers = -1"),
        ),
        plain(
            "an unknown job mode in the mix",
            edit(
                "mix = { complete = 60,",
                "mix = { teleport = 5, complete = 60,",
            ),
            smoke,
            Where::Line("teleport"),
        ),
        plain(
            "a negative rate",
            edit("rate_per_s = 200", "rate_per_s = -200"),
            smoke,
            Where::Line("rate_per_s = -200"),
        ),
        plain(
            "an artifact with two sources",
            edit(
                "[artifacts.previous]        # N-1: the mandatory 0.6.2 stepping stone\nrelease = \"0.6.2\"",
                "[artifacts.previous]        # N-1: the mandatory 0.6.2 stepping stone\nrelease = \"0.6.2\"\nbuild = \"workspace\"",
            ),
            smoke,
            Where::Line("build = \"workspace\""),
        ),
        plain(
            "an artifact without a source",
            edit(
                "[artifacts.pre_guard]       # 0.6.1: no forward-schema guard, below the expand migration's floor\nrelease = \"0.6.1\"",
                "[artifacts.pre_guard]       # 0.6.1: no forward-schema guard, below the expand migration's floor",
            ),
            smoke,
            Where::Line("[artifacts.pre_guard]"),
        ),
        plain(
            "an unknown build",
            edit(
                "[artifacts.current]         # N: this workspace's awa-runtime\nbuild = \"workspace\"",
                "[artifacts.current]         # N: this workspace's awa-runtime\nbuild = \"elsewhere\"",
            ),
            smoke,
            Where::Line("build = \"elsewhere\""),
        ),
        plain(
            "a step with an unknown option",
            with_cell(
                "step-option",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ hold = "1s", forever = true }"#,
                ],
            ),
            cell("step-option"),
            Where::Last("forever = true"),
        ),
        plain(
            "a step of two kinds",
            with_cell(
                "two-kinds",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ hold = "1s", drain = "2s" }"#,
                ],
            ),
            cell("two-kinds"),
            Where::Last("{ hold = \"1s\", drain = \"2s\" }"),
        ),
        plain(
            "a named matrix that is a string",
            edit("smoke = [", "smoke = \"migrate-first\"\nsmoked = ["),
            smoke,
            Where::Line("smoke = \"migrate-first\""),
        ),
        plain(
            "a duration too long to hold",
            with_cell(
                "forever",
                &[
                    r#"{ fleet = "previous", workers = 2 }"#,
                    r#"{ hold = "99999999999999999999h" }"#,
                ],
            ),
            cell("forever"),
            Where::Last("99999999999999999999h"),
        ),
        plain(
            "a kill after a negative number of jobs",
            with_cell(
                "kill-negative",
                &[
                    r#"{ fleet = "previous", workers = 2, producers = 1 }"#,
                    r#"{ load = "on" }"#,
                    r#"{ kill = "worker", after_started = -5 }"#,
                ],
            ),
            cell("kill-negative"),
            Where::Last("after_started = -5"),
        ),
    ]
}

/// Repository copies broken in the ways a copy or a checkout goes wrong.
fn more_trees() -> Vec<Case> {
    let smoke: &'static [&'static str] = &["--matrix", "smoke", "--seed", "1"];
    let tree = |name, repo: fn(&Path), expect| Case {
        name,
        matrix: SHIPPED.as_bytes().to_vec(),
        repo,
        args: smoke,
        env: &[],
        expect,
    };
    vec![
        tree(
            "manifest entry without its digest",
            |root| {
                let text = MANIFEST.replacen("sha256 = \"", "# sha256 = \"", 1);
                std::fs::write(root.join("artifacts/manifest.toml"), text).unwrap();
            },
            Where::Names("manifest.toml"),
        ),
        tree(
            "artifacts that is a file",
            |root| {
                std::fs::remove_dir_all(root.join("artifacts")).unwrap();
                std::fs::write(root.join("artifacts"), "").unwrap();
            },
            Where::Names("artifacts"),
        ),
    ]
}

/// Flags mistyped beyond the classes above.
fn more_flags(
    plain: &dyn Fn(&'static str, Vec<u8>, &'static [&'static str], Where) -> Case,
) -> Vec<Case> {
    let shipped = || SHIPPED.as_bytes().to_vec();
    vec![
        plain(
            "an empty cell name",
            shipped(),
            &["--cell", ""],
            Where::Names("cell"),
        ),
        plain(
            "an empty matrix name",
            shipped(),
            &["--matrix", ""],
            Where::Names("matrix"),
        ),
        plain(
            "jobs that is not a number",
            shipped(),
            &["--matrix", "smoke", "--jobs", "many"],
            Where::Names("--jobs"),
        ),
        plain(
            "more jobs than allowed",
            shipped(),
            &["--matrix", "smoke", "--jobs", "100000"],
            Where::Names("--jobs"),
        ),
        plain(
            "a hex seed without digits",
            shipped(),
            &["--matrix", "smoke", "--seed", "0x"],
            Where::Names("--seed"),
        ),
        plain(
            "repeat that is not a number",
            shipped(),
            &["--matrix", "smoke", "--repeat", "twice"],
            Where::Names("--repeat"),
        ),
        plain(
            "an unknown colour choice",
            shipped(),
            &["--color", "maybe", "--matrix", "smoke"],
            Where::Names("--color"),
        ),
        plain(
            "an unknown output format",
            shipped(),
            &["--matrix", "smoke", "--format", "yaml"],
            Where::Names("--format"),
        ),
        plain(
            "the event stream and report.json both on stdout",
            shipped(),
            &["--matrix", "smoke", "--format", "json", "--json"],
            Where::Names("--json"),
        ),
        plain(
            "an unknown subcommand",
            shipped(),
            &["frobnicate"],
            Where::Names("frobnicate"),
        ),
        plain(
            "report without its folder",
            shipped(),
            &["report"],
            Where::Names("required arguments were not provided"),
        ),
        plain(
            "completions for an unknown shell",
            shipped(),
            &["completions", "powershell"],
            Where::Names("powershell"),
        ),
        plain(
            "a matrix file that is a directory",
            shipped(),
            &["--matrix-file", "artifacts", "plan", "--matrix", "smoke"],
            Where::Names("artifacts"),
        ),
        plain(
            "a reports folder that is a file",
            shipped(),
            &["--matrix", "smoke", "--reports-dir", "matrix.toml"],
            Where::Names("matrix.toml"),
        ),
        plain(
            "a negative number of jobs",
            shipped(),
            &["--matrix", "smoke", "--jobs", "-1"],
            Where::Names("must be at least 1"),
        ),
        plain(
            "a negative number of retries",
            shipped(),
            &["--matrix", "smoke", "--retries", "-2"],
            Where::Names("must be at least 0"),
        ),
        plain(
            "repeat zero times",
            shipped(),
            &["--matrix", "smoke", "--repeat", "0"],
            Where::Names("must be at least 1"),
        ),
        plain(
            "a misspelt subcommand",
            shipped(),
            &["pln", "--matrix", "smoke"],
            Where::Names("did you mean \"plan\""),
        ),
        plain(
            "one major listed twice",
            shipped(),
            &["--matrix", "smoke", "--postgres", "15,15"],
            Where::Names("twice"),
        ),
        plain(
            "a missing folder among the bin folders",
            shipped(),
            &["--matrix", "smoke", "--pg-bindir", "traps:no-such-bindir"],
            Where::Names("no-such-bindir"),
        ),
        plain(
            "a duration partition with no durations",
            shipped(),
            &["--matrix", "smoke", "--partition", "duration:1/2"],
            Where::Names("--durations"),
        ),
        plain(
            "a '#' in a database password",
            shipped(),
            &[
                "--matrix",
                "smoke",
                "--database-url",
                "postgres://u:hunter22#x@127.0.0.1:5432/db",
            ],
            Where::Names("%23"),
        ),
        plain(
            "a misspelt database URL parameter",
            shipped(),
            &[
                "--matrix",
                "smoke",
                "--database-url",
                "postgres://u:hunter22@127.0.0.1:5432/db?sslmod=require",
            ],
            Where::Names("did you mean \"sslmode\""),
        ),
        plain(
            "two majors on one database server",
            shipped(),
            &[
                "--matrix",
                "smoke",
                "--backend",
                "process",
                "--postgres",
                "15,18",
                "--database-url",
                "postgres://u:hunter22@127.0.0.1:1/db",
            ],
            Where::Names("--database-url"),
        ),
        plain(
            "a reports folder that cannot be made",
            shipped(),
            &[
                "--matrix",
                "smoke",
                "--backend",
                "process",
                "--reports-dir",
                "/proc/no-such-folder",
            ],
            Where::Names("/proc/no-such-folder"),
        ),
        plain(
            "selftest given a cell",
            shipped(),
            &["selftest", "--cell", "fence"],
            Where::Names("--cell"),
        ),
    ]
}

/// A repository copy: matrix.toml, artifacts/manifest.toml and an
/// awa-runtime/Cargo.toml (never built), plus the trap binaries.
struct Tree {
    root: PathBuf,
    traps: PathBuf,
}

impl Tree {
    fn new(index: usize) -> Tree {
        let root =
            std::env::temp_dir().join(format!("rehearse-refusal-{}-{index}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let traps = root.join("traps");
        std::fs::create_dir_all(root.join("artifacts")).unwrap();
        std::fs::create_dir_all(root.join("awa-runtime")).unwrap();
        std::fs::create_dir_all(&traps).unwrap();
        std::fs::write(root.join("artifacts/manifest.toml"), MANIFEST).unwrap();
        std::fs::write(root.join("awa-runtime/Cargo.toml"), "").unwrap();
        for name in [
            "cargo",
            "initdb",
            "postgres",
            "pg_ctl",
            "pg_config",
            "docker",
        ] {
            let path = traps.join(name);
            std::fs::write(
                &path,
                format!(
                    "#!/bin/sh\necho {name} >> '{}/started'\nexit 1\n",
                    root.display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Tree { root, traps }
    }

    fn rehearse(&self, args: &[&str]) -> Output {
        self.rehearse_with(args, &[])
    }

    fn rehearse_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_rehearse"))
            .args(args)
            .current_dir(&self.root)
            .env("PATH", format!("{}:/usr/bin:/bin", self.traps.display()))
            .env("CARGO", self.traps.join("cargo"))
            .env("AWA_PG_BINDIR", &self.traps)
            .env("CARGO_TARGET_DIR", self.root.join("target"))
            .env_remove("REHEARSE_MATRIX_FILE")
            .env_remove("REHEARSE_REPORTS_DIR")
            .env_remove("REHEARSE_BACKEND")
            .env_remove("REHEARSE_DATABASE_URL")
            .env_remove("REHEARSE_FORMAT")
            .env_remove("REHEARSE_STRESS")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("rehearse runs")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The first error line of stderr (after the seed and plan notes a run
/// prints); for a matrix error the first located problem under the
/// `error:` heading that only counts them.
fn first_message(stderr: &str) -> &str {
    let mut lines = stderr.lines().skip_while(|l| !l.starts_with("error"));
    let first = lines.next().unwrap_or("");
    if first.starts_with("error: invalid matrix file (") {
        lines.next().unwrap_or("")
    } else {
        first
    }
}

/// Checks one case; the reason it fails, if it does.
fn check(index: usize, case: &Case) -> Result<(), String> {
    let tree = Tree::new(index);
    std::fs::write(tree.root.join("matrix.toml"), &case.matrix).unwrap();
    (case.repo)(&tree.root);
    let out = tree.rehearse_with(case.args, case.env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = first_message(&stderr);
    let mut problems = Vec::new();
    if out.status.code() != Some(2) {
        problems.push(format!("exit {:?}, not 2", out.status.code()));
    }
    let file = tree.root.join("matrix.toml").display().to_string();
    match &case.expect {
        Where::Line(needle) | Where::Last(needle) => {
            let text = String::from_utf8_lossy(&case.matrix);
            let offset = match case.expect {
                Where::Last(_) => text.rfind(needle),
                _ => text.find(needle),
            }
            .expect("the needle is in the matrix");
            let line = text[..offset].matches('\n').count() + 1;
            if !first.starts_with(&format!("{file}:{line}:")) {
                problems.push(format!("first message is not at matrix.toml:{line}"));
            }
        }
        Where::File => {
            if !first.starts_with(&format!("{file}: ")) {
                problems.push("first message does not name the matrix file".into());
            }
        }
        Where::Names(text) => {
            if !first.contains(text) {
                problems.push(format!("first message does not name {text:?}"));
            }
        }
    }
    if stderr.contains("hunter22") {
        problems.push("a password reached the terminal".into());
    }
    if let Ok(started) = std::fs::read_to_string(tree.root.join("started")) {
        problems.push(format!("started: {}", started.trim().replace('\n', ", ")));
    }
    for dir in ["target", "reports"] {
        if tree.root.join(dir).exists() {
            problems.push(format!("{dir}/ appeared"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}\n    stderr: {}",
            case.name,
            problems.join("; "),
            stderr.trim().replace('\n', "\n            ")
        ))
    }
}

#[test]
fn every_broken_input_is_refused_with_a_located_message_before_anything_starts() {
    let cases = cases();
    let failures: Vec<String> = cases
        .iter()
        .enumerate()
        .filter_map(|(i, case)| check(i, case).err())
        .collect();
    eprintln!(
        "{} broken inputs, {} refused with exit 2, a located first message and nothing started",
        cases.len(),
        cases.len() - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn plan_json_into_head_exits_zero() {
    let tree = Tree::new(1000);
    std::fs::write(tree.root.join("matrix.toml"), SHIPPED).unwrap();
    let script = format!(
        "'{}' plan --matrix full --seed 1 --json | head -1; exit ${{PIPESTATUS[0]}}",
        env!("CARGO_BIN_EXE_rehearse")
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&tree.root)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{\n");
}

#[test]
fn a_copied_tree_without_its_manifest_is_refused_not_replaced() {
    let tree = Tree::new(1001);
    std::fs::write(tree.root.join("matrix.toml"), SHIPPED).unwrap();
    std::fs::remove_file(tree.root.join("artifacts/manifest.toml")).unwrap();
    for args in [&["plan", "--matrix", "smoke"][..], &["--matrix", "smoke"]] {
        let out = tree.rehearse(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: {}/artifacts/manifest.toml is missing",
                tree.root.display()
            )),
            "{stderr}"
        );
        assert!(
            !tree.root.join("started").exists(),
            "{args:?} started something"
        );
    }
}

#[test]
fn a_variable_is_read_only_by_the_commands_that_use_it() {
    let tree = Tree::new(9_001);
    std::fs::write(tree.root.join("matrix.toml"), SHIPPED).unwrap();
    // `plan` reads REHEARSE_BACKEND (images are checked against it); `list` none of them.
    let list: &[&str] = &["list"];
    let plan: &[&str] = &["plan", "--matrix", "smoke", "--seed", "1"];
    for (var, value, commands) in [
        ("REHEARSE_DATABASE_URL", "garbage", vec![list, plan]),
        ("REHEARSE_BACKEND", "bogus", vec![list]),
        ("REHEARSE_STRESS", "cpu=0", vec![list, plan]),
        ("REHEARSE_FORMAT", "yaml", vec![list, plan]),
    ] {
        for args in commands {
            let out = tree.rehearse_with(args, &[(var, value)]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{var}={value} rehearse {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Every flag and variable that takes a path, given a name that is not
/// UTF-8: refused or carried on with, never a panic.
#[test]
fn no_path_flag_or_variable_panics_on_a_name_that_is_not_utf8() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let tree = Tree::new(9_002);
    std::fs::write(tree.root.join("matrix.toml"), SHIPPED).unwrap();
    let bad = || OsString::from_vec(b"not-utf8-\xff".to_vec());
    let within = |subdir: &str| {
        let mut p = OsString::from(subdir);
        p.push(bad());
        p
    };
    let run = |extra: Vec<OsString>| -> Vec<OsString> {
        let mut args: Vec<OsString> = ["--matrix", "smoke", "--seed", "1", "--backend", "process"]
            .iter()
            .map(OsString::from)
            .collect();
        args.extend(extra);
        args
    };
    let flags: Vec<(&str, Vec<OsString>)> = vec![
        (
            "--reports-dir",
            run(vec!["--reports-dir".into(), within("reports-")]),
        ),
        (
            "--matrix-file",
            vec!["--matrix-file".into(), bad(), "list".into()],
        ),
        ("--pg-bindir", run(vec!["--pg-bindir".into(), bad()])),
        (
            "--durations",
            run(vec![
                "--partition".into(),
                "duration:1/2".into(),
                "--durations".into(),
                bad(),
            ]),
        ),
        ("merge DIR", vec!["merge".into(), bad()]),
        (
            "merge --out",
            vec!["merge".into(), "reports".into(), "--out".into(), bad()],
        ),
        ("replay PLAN", vec!["replay".into(), bad()]),
        ("report DIR", vec!["report".into(), bad()]),
        (
            "doctor --pg-bindir",
            vec!["doctor".into(), "--pg-bindir".into(), bad()],
        ),
    ];
    let vars = [
        "REHEARSE_REPORTS_DIR",
        "REHEARSE_MATRIX_FILE",
        "REHEARSE_PG_BINDIR",
        "AWA_PG_BINDIR",
    ];
    let mut problems = Vec::new();
    let mut look = |what: String, out: Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(101) || stderr.contains("panicked") {
            problems.push(format!("{what}: {}", stderr.trim()));
        }
    };
    for (name, args) in flags {
        let out = Command::new(env!("CARGO_BIN_EXE_rehearse"))
            .args(&args)
            .current_dir(&tree.root)
            .env("PATH", format!("{}:/usr/bin:/bin", tree.traps.display()))
            .env("CARGO", tree.traps.join("cargo"))
            .env("AWA_PG_BINDIR", &tree.traps)
            .env("CARGO_TARGET_DIR", tree.root.join("target"))
            .stdin(Stdio::null())
            .output()
            .expect("rehearse runs");
        look(name.to_owned(), out);
    }
    for var in vars {
        let out = Command::new(env!("CARGO_BIN_EXE_rehearse"))
            .args(["--matrix", "smoke", "--seed", "1", "--backend", "process"])
            .current_dir(&tree.root)
            .env("PATH", format!("{}:/usr/bin:/bin", tree.traps.display()))
            .env("CARGO", tree.traps.join("cargo"))
            .env("CARGO_TARGET_DIR", tree.root.join("target"))
            .env(var, within(""))
            .stdin(Stdio::null())
            .output()
            .expect("rehearse runs");
        look(format!("${var}"), out);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
