//! What each subcommand does with the parsed flags: `execute` hands each
//! to its file (`list`, `planning` for `plan`, `launch` for `run`,
//! `replay`, `merge_runs`, `rerender` for `report`, `verify_folder`,
//! `doctor_check`, `selftest_run`, `repeat_runs`, `mutants`, `images` for
//! `artifacts`); `preflight` holds the checks of flags every run makes.
//!
//! Every command validates before it acts: the matrix is loaded and
//! checked in full, the selection resolved and the plan expanded before
//! anything would start. Output goes to the writers passed in, so tests
//! read it as text.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::cli::{ArtifactsAction, Cli, Command};
use crate::exit::RunOutcome;
use crate::matrix::{self, Matrix};
use crate::plan::Selection;

mod doctor_check;
mod images;
mod launch;
mod list;
mod merge_runs;
mod mutants;
mod planning;
mod preflight;
mod repeat_runs;
mod replay;
mod rerender;
mod selftest_run;
mod verify_folder;

/// What a command needs from the process environment, gathered once by `main`.
#[derive(Clone, Debug)]
pub struct Environment {
    /// Where the search for matrix.toml starts.
    pub cwd: PathBuf,
    /// `$REHEARSE_MATRIX_FILE`, the fallback when no matrix.toml is found.
    pub matrix_file_env: Option<PathBuf>,
}

impl Environment {
    /// The real process environment.
    pub fn from_process() -> Result<Self, Error> {
        Ok(Environment {
            cwd: std::env::current_dir().map_err(Error::CurrentDir)?,
            matrix_file_env: std::env::var_os(matrix::FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// Runs the command `cli` asks for.
pub fn execute(
    cli: &Cli,
    env: &Environment,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    match &cli.command {
        Some(Command::Completions { shell }) => {
            out.write_all(&crate::cli::completions(*shell))?;
            Ok(RunOutcome::AllMet)
        }
        Some(Command::Report { dir }) => rerender::report_command(cli, env, dir, out, err),
        Some(Command::Verify { dir }) => verify_folder::verify_command(cli, env, dir, out, err),
        Some(Command::Replay { plan }) => replay::replay_command(cli, env, plan, out, err),
        Some(Command::Merge { dirs, out: to }) => {
            merge_runs::merge_command(cli, env, dirs, to.as_deref(), out, err)
        }
        Some(Command::List) => list::list(cli, env, out),
        Some(Command::Plan) => planning::plan_command(cli, env, out),
        Some(Command::Artifacts { action }) => artifacts_command(env, action, out, err),
        Some(Command::Selftest) => selftest_run::selftest(cli, env, out, err),
        Some(Command::Mutate(options)) => mutants::mutate_command(cli, env, options, out, err),
        Some(Command::Doctor { registry }) => {
            doctor_check::doctor(cli, env, registry.as_deref(), out)
        }
        Some(Command::Run) | None => match cli.global.repeat {
            Some(n) => repeat_runs::repeat(cli, env, n, out, err),
            None => launch::run(cli, env, out, err),
        },
    }
}

fn selection(cli: &Cli) -> Selection {
    Selection {
        matrix: cli.global.matrix.clone(),
        cells: cli.global.cells.clone(),
    }
}

fn load(cli: &Cli, env: &Environment) -> Result<(PathBuf, Matrix), Error> {
    let path = matrix::find(
        cli.global.matrix_file.as_deref(),
        &env.cwd,
        env.matrix_file_env.as_deref(),
    )?;
    let known = known(cli, env, &path)?;
    let matrix = matrix::load_against(&path, &known)?;
    Ok((path, matrix))
}

/// What the matrix at `matrix_file` is checked against: the release
/// manifest of the tree it is run from (none outside a tree) and the backend.
fn known(cli: &Cli, env: &Environment, matrix_file: &Path) -> Result<matrix::Known, Error> {
    let manifest = match crate::artifacts::Repo::find(&[&env.cwd, &matrix_dir(env, matrix_file)]) {
        Ok(repo) => {
            let dir = repo.artifacts();
            let manifest = awa_harness::release::load_manifest(&dir).map_err(|source| {
                crate::artifacts::ArtifactError::Release {
                    name: "(manifest)".into(),
                    source,
                }
            })?;
            Some(matrix::KnownManifest {
                path: dir.join("manifest.toml").display().to_string(),
                releases: manifest.releases.into_iter().map(|r| r.version).collect(),
            })
        }
        Err(crate::artifacts::ArtifactError::NoWorkspace { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let backend = cli.global.backend;
    Ok(matrix::Known {
        manifest,
        images: backend != crate::cli::Backend::Process,
        backend: backend.name(),
        from_registry: cli.global.from_registry.clone(),
    })
}

/// The directory of the matrix file, absolute.
fn matrix_dir(env: &Environment, matrix_file: &Path) -> PathBuf {
    matrix_file
        .parent()
        .map(|d| env.cwd.join(d))
        .unwrap_or_else(|| env.cwd.clone())
}

/// `rehearse artifacts build|publish|list|prune`: images outside a run.
fn artifacts_command(
    env: &Environment,
    action: &ArtifactsAction,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let repo = crate::artifacts::Repo::find(&[&env.cwd])?;
    match action {
        ArtifactsAction::Build => images::build(&repo, out, err),
        ArtifactsAction::Publish { registry } => images::publish(&repo, registry, out, err),
        ArtifactsAction::List { registry } => images::list(&repo, registry.as_deref(), out, err),
        ArtifactsAction::Prune { all, repository } => {
            images::prune(&repo, *all, repository.as_deref(), out, err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::planning::make_plan;
    use super::*;

    const MATRIX: &str = include_str!("../../matrix.toml");

    /// How many cells the shipped matrix has (sections only ever grow).
    fn shipped_cells() -> usize {
        crate::matrix::parse("matrix.toml", MATRIX)
            .unwrap()
            .cells
            .len()
    }

    /// A scratch directory with the shipped matrix.toml, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("rehearse-test-{tag}-{}", std::process::id()));
            let nested = dir.join("a").join("b");
            std::fs::create_dir_all(&nested).unwrap();
            std::fs::write(dir.join("matrix.toml"), MATRIX).unwrap();
            Scratch(dir)
        }
    }

    impl Scratch {
        /// Makes the scratch directory look like a checkout: the real
        /// manifest, and an awa-runtime/Cargo.toml (never built here).
        fn make_tree(&self) {
            std::fs::create_dir_all(self.0.join("artifacts")).unwrap();
            std::fs::create_dir_all(self.0.join("awa-runtime")).unwrap();
            std::fs::write(
                self.0.join("artifacts").join("manifest.toml"),
                include_str!("../../artifacts/manifest.toml"),
            )
            .unwrap();
            std::fs::write(self.0.join("awa-runtime").join("Cargo.toml"), "").unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn exec(args: &[&str], env: &Environment) -> (Result<RunOutcome, Error>, String, String) {
        let cli =
            Cli::try_parse_from(std::iter::once("rehearse").chain(args.iter().copied())).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let result = execute(&cli, env, &mut out, &mut err);
        (
            result,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn finds_matrix_toml_by_walking_up() {
        let scratch = Scratch::new("walk");
        let env = Environment {
            cwd: scratch.0.join("a").join("b"),
            matrix_file_env: None,
        };
        let (result, out, _) = exec(&["list"], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        assert!(
            out.starts_with(&format!(
                "cells ({}) in {}:",
                shipped_cells(),
                scratch.0.join("matrix.toml").display()
            )),
            "{out}"
        );
        assert!(
            out.contains("  smoke    migrate-first, binary-first, fence\n"),
            "{out}"
        );
        assert!(
            out.contains(&format!("  full     every cell ({})\n", shipped_cells())),
            "{out}"
        );
    }

    #[test]
    fn falls_back_to_the_environment_variable() {
        let scratch = Scratch::new("env");
        let nowhere =
            std::env::temp_dir().join(format!("rehearse-test-none-{}", std::process::id()));
        std::fs::create_dir_all(&nowhere).unwrap();
        // A matrix.toml above the temp dir would (rightly) win over the variable.
        assert!(
            !nowhere.ancestors().any(|d| d.join("matrix.toml").is_file()),
            "a matrix.toml above {} breaks this test's premise",
            nowhere.display()
        );
        let file = scratch.0.join("matrix.toml");
        let env = Environment {
            cwd: nowhere.clone(),
            matrix_file_env: Some(file.clone()),
        };
        let (result, json, _) = exec(&["list", "--json"], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        let listing: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(listing["file"], file.display().to_string());
        assert_eq!(listing["cells"].as_array().unwrap().len(), shipped_cells());
        assert_eq!(listing["matrices"]["smoke"]["cells"][2], "fence");
        let env = Environment {
            cwd: nowhere.clone(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["list"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert!(
            error.to_string().starts_with("no matrix.toml found in "),
            "{error}"
        );
        std::fs::remove_dir_all(&nowhere).unwrap();
    }

    #[test]
    fn plan_prints_seed_replay_and_numbered_steps() {
        let scratch = Scratch::new("plan");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, out, _) = exec(&["plan", "--matrix", "smoke", "--seed", "7"], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        assert!(
            out.starts_with("plan: 3 cells, seed 7\nreplay: rehearse --matrix smoke --seed 7\n"),
            "{out}"
        );
        assert!(out.contains("\ncell migrate-first: "), "{out}");
        assert!(
            out.contains(
                "   1. fleet previous: 3 workers, 1 producer, first worker becomes leader\n"
            ),
            "{out}"
        );
        let (_, json, _) = exec(
            &["plan", "--matrix", "smoke", "--seed", "7", "--json"],
            &env,
        );
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["seed"], 7);
        assert_eq!(value["cells"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn the_replay_line_repeats_the_stress_before_the_share() {
        let scratch = Scratch::new("stress");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let cli = Cli::try_parse_from([
            "rehearse",
            "--matrix",
            "smoke",
            "--seed",
            "7",
            "--stress",
            "cpu=2x",
            "--partition",
            "hash:1/2",
        ])
        .unwrap();
        // `rehearse merge` cuts the line at --partition: the stress must come first.
        assert_eq!(
            make_plan(&cli, &env).unwrap().replay,
            "rehearse --matrix smoke --seed 7 --stress cpu=2x --partition hash:1/2"
        );
        let cli = Cli::try_parse_from(["rehearse", "--matrix", "smoke", "--seed", "7"]).unwrap();
        assert_eq!(
            make_plan(&cli, &env).unwrap().replay,
            "rehearse --matrix smoke --seed 7"
        );
    }

    #[test]
    fn explicit_matrix_file_appears_in_the_replay() {
        let scratch = Scratch::new("explicit");
        let file = scratch.0.join("matrix.toml");
        let env = Environment {
            cwd: std::env::temp_dir(),
            matrix_file_env: None,
        };
        let (result, out, _) = exec(
            &[
                "plan",
                "--matrix-file",
                file.to_str().unwrap(),
                "--cell",
                "fence",
                "--seed",
                "1",
            ],
            &env,
        );
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
        let expected = format!(
            "replay: rehearse --matrix-file {} --cell fence --seed 1\n",
            file.display()
        );
        assert!(out.contains(&expected), "{out}");
    }

    #[test]
    fn unknown_cell_is_bad_input_listing_valid_names() {
        let scratch = Scratch::new("unknown");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["plan", "--cell", "fense"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let text = error.to_string();
        assert!(text.starts_with("unknown cell \"fense\" (did you mean \"fence\"?); cells: migrate-first, binary-first,"), "{text}");
    }

    #[test]
    fn selftest_takes_no_selection_and_needs_its_matrices() {
        let scratch = Scratch::new("selftest");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        // The selection flags are not flags of `selftest` at all.
        for args in [
            &["selftest", "--cell", "fence"][..],
            &["selftest", "--matrix", "smoke"],
            &["selftest", "--repeat", "2"],
        ] {
            let refused =
                Cli::try_parse_from(std::iter::once("rehearse").chain(args.iter().copied()))
                    .unwrap_err();
            assert_eq!(
                crate::exit::for_clap(&refused),
                crate::exit::BAD_INPUT,
                "{args:?}"
            );
        }
        let without = MATRIX.replace("defects = [\"defect-*\"]\n", "");
        std::fs::write(scratch.0.join("matrix.toml"), without).unwrap();
        let (result, _, _) = exec(&["selftest"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert!(
            error.to_string().contains("has no [matrix] defects"),
            "{error}"
        );
    }

    #[test]
    fn run_validates_before_anything_starts() {
        let scratch = Scratch::new("run");
        scratch.make_tree();
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        // Without a selection nothing is run, and the message says how to select.
        let (result, out, _) = exec(&["run"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert_eq!(
            error.to_string(),
            "nothing selected: pass --matrix NAME (one of: defects, full, nightly, paths, smoke) or --cell NAME"
        );
        assert!(out.is_empty());
        let refused = Cli::try_parse_from([
            "rehearse",
            "--matrix",
            "smoke",
            "--database-url",
            "mysql://x",
        ])
        .unwrap_err();
        assert_eq!(crate::exit::for_clap(&refused), crate::exit::BAD_INPUT);
        // (`--backend docker` without an engine: tests/docker.rs, which sets DOCKER_HOST.)
    }

    /// The report's text with ANSI colour removed (stdout may be a terminal under `cargo test`).
    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                chars.by_ref().find(char::is_ascii_alphabetic);
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn report_rerenders_from_report_json_and_prints_the_summary() {
        let scratch = Scratch::new("report");
        let dir = scratch.0.join("run");
        let mut written = crate::report::fixture::report();
        crate::report::write_all(&dir, &written).unwrap();
        let json_before = std::fs::read(dir.join("report.json")).unwrap();
        // Edit report.json by hand and drop report.md: the command must render from the JSON.
        written.cells[0].about = "edited after the run".into();
        std::fs::write(
            dir.join("report.json"),
            crate::report::to_json(&written).unwrap(),
        )
        .unwrap();
        std::fs::remove_file(dir.join("report.md")).unwrap();
        std::fs::remove_file(dir.join("junit.xml")).unwrap();
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, out, err) = exec(&["report", "run"], &env);
        // The fixture run has a failed cell, so the command exits as that run did.
        assert_eq!(result.unwrap(), RunOutcome::CellFailed);
        let out = strip_ansi(&out);
        assert!(
            out.contains("│ fence         │ pass                  │ fail         │"),
            "{out}"
        );
        assert!(
            out.contains("3 cells: 1 pass, 1 fail, 1 inconclusive in 2m28s\n"),
            "{out}"
        );
        assert!(
            out.ends_with("replay: rehearse --matrix smoke --seed 42\n"),
            "{out}"
        );
        assert_eq!(
            err.replace(&dir.display().to_string(), "[dir]"),
            "rendered report.md, junit.xml and report.html in [dir]\n"
        );
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert_eq!(md, crate::report::render_markdown(&written));
        assert!(md.contains("\nedited after the run\n"), "{md}");
        assert!(dir.join("junit.xml").is_file());
        assert_ne!(std::fs::read(dir.join("report.json")).unwrap(), json_before);
        assert_eq!(
            std::fs::read(dir.join("report.json")).unwrap(),
            crate::report::to_json(&written).unwrap().into_bytes(),
            "report.json is the input: left as it was"
        );
        // --quiet keeps the summary and drops the note.
        let (result, out, err) = exec(&["report", "run", "--quiet"], &env);
        assert_eq!(result.unwrap(), RunOutcome::CellFailed);
        assert!(strip_ansi(&out).contains("replay: "), "{out}");
        assert!(err.is_empty(), "{err}");
    }

    #[test]
    fn report_of_a_passing_run_exits_zero() {
        let scratch = Scratch::new("report-pass");
        let mut run = crate::report::fixture::report();
        run.cells.truncate(1);
        crate::report::write_all(&scratch.0, &run).unwrap();
        let env = Environment {
            cwd: std::env::temp_dir(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["report", scratch.0.to_str().unwrap()], &env);
        assert_eq!(result.unwrap(), RunOutcome::AllMet);
    }

    #[test]
    fn report_with_a_missing_or_corrupt_report_json_is_bad_input_naming_the_file() {
        let scratch = Scratch::new("report-bad");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let file = scratch.0.join("report.json").display().to_string();
        let (result, out, _) = exec(&["report", "."], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let file_here = scratch
            .0
            .join(".")
            .join("report.json")
            .display()
            .to_string();
        assert_eq!(
            error.to_string(),
            format!(
                "invalid DIR: failed to read {file_here}: No such file or directory (os error 2)"
            )
        );
        assert!(out.is_empty());

        std::fs::write(
            scratch.0.join("report.json"),
            "{\"format_version\": \"1.0\", \"run\": [",
        )
        .unwrap();
        let (result, _, _) = exec(&["report", scratch.0.to_str().unwrap()], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("invalid DIR: {file} is not a valid report.json: ")),
            "{text}"
        );
        assert!(text.contains("line 1 column"), "{text}");
        assert!(
            !scratch.0.join("report.md").exists(),
            "nothing is written from a bad report"
        );

        let mut newer = serde_json::to_value(crate::report::fixture::report()).unwrap();
        newer["format_version"] = "2.1".into();
        std::fs::write(scratch.0.join("report.json"), newer.to_string()).unwrap();
        let (result, _, _) = exec(&["report", scratch.0.to_str().unwrap()], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert!(
            error.to_string().starts_with(&format!(
                "invalid DIR: {file} is report format 2.1, but this rehearse reads format {}",
                crate::report::model::FORMAT_VERSION
            )),
            "{error}"
        );
    }

    #[test]
    fn invalid_matrix_file_is_bad_input_with_located_errors() {
        let scratch = Scratch::new("invalid");
        std::fs::write(
            scratch.0.join("matrix.toml"),
            "[workload]\nrate_per_s = \"fast\"\n",
        )
        .unwrap();
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["list"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        let text = error.to_string();
        let file = scratch.0.join("matrix.toml").display().to_string();
        assert!(text.starts_with("invalid matrix file ("), "{text}");
        assert!(
            text.contains(&format!(
                "\n{file}:2:14: workload: invalid type: string \"fast\", expected i64"
            )),
            "{text}"
        );
    }
}
