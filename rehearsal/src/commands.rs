//! What each subcommand does with the parsed flags.
//!
//! Every command validates before it acts: the matrix is loaded and
//! checked in full, the selection resolved and the plan expanded before
//! anything would start. Output goes to the writers passed in, so tests
//! read it as text.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Error;
use crate::cli::{Cli, Command};
use crate::exit::Outcome;
use crate::matrix::{self, Expectation, Matrix, NamedMatrix};
use crate::plan::{self, Plan, Selection};

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
) -> Result<Outcome, Error> {
    match &cli.command {
        Some(Command::Report { .. }) => Err(Error::NotImplemented {
            what: "rehearse report",
        }),
        Some(Command::List) => list(cli, env, out),
        Some(Command::Plan) => plan_command(cli, env, out),
        Some(Command::Run) | None => run(cli, env, err),
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
    let matrix = matrix::load(&path)?;
    Ok((path, matrix))
}

/// Loads, selects and expands; the replay names the matrix file only if it was given.
fn make_plan(cli: &Cli, env: &Environment) -> Result<Plan, Error> {
    let (_, matrix) = load(cli, env)?;
    let selection = selection(cli);
    let seed = cli.global.seed.unwrap_or_else(plan::random_seed);
    let mut plan = plan::expand(&matrix, &selection, seed)?;
    plan.replay = plan::replay_command(&selection, seed, cli.global.matrix_file.as_deref());
    Ok(plan)
}

fn plan_command(cli: &Cli, env: &Environment, out: &mut dyn Write) -> Result<Outcome, Error> {
    let plan = make_plan(cli, env)?;
    if cli.global.json {
        let json = serde_json::to_string_pretty(&plan).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
    } else {
        out.write_all(plan::render(&plan).as_bytes())?;
    }
    Ok(Outcome::AllMet)
}

fn run(cli: &Cli, env: &Environment, err: &mut dyn Write) -> Result<Outcome, Error> {
    if let Some(url) = &cli.global.database_url {
        check_database_url(url)?;
    }
    let plan = make_plan(cli, env)?;
    writeln!(err, "seed {} (replay: {})", plan.seed, plan.replay)?;
    if !cli.global.quiet {
        let names: Vec<&str> = plan.cells.iter().map(|c| c.name.as_str()).collect();
        writeln!(
            err,
            "matrix valid; planned {} {}: {}",
            names.len(),
            if names.len() == 1 { "cell" } else { "cells" },
            names.join(", ")
        )?;
    }
    Err(Error::NotImplemented {
        what: "the run driver",
    })
}

fn check_database_url(url: &str) -> Result<(), Error> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(())
    } else {
        Err(Error::BadFlag {
            flag: "--database-url",
            message: format!(
                "\"{url}\" is not a PostgreSQL URL; expected postgres://USER@HOST:PORT/DATABASE"
            ),
        })
    }
}

/// `rehearse list --json`
#[derive(Serialize)]
struct Listing<'a> {
    file: String,
    cells: Vec<ListedCell<'a>>,
    matrices: &'a std::collections::BTreeMap<String, NamedMatrix>,
}

#[derive(Serialize)]
struct ListedCell<'a> {
    name: &'a str,
    about: &'a str,
    expect: Expectation,
    fresh_install: bool,
    steps: usize,
}

fn list(cli: &Cli, env: &Environment, out: &mut dyn Write) -> Result<Outcome, Error> {
    let (path, matrix) = load(cli, env)?;
    let selection = selection(cli);
    let cells = if selection.matrix.is_none() && selection.cells.is_empty() {
        matrix.cells.iter().collect()
    } else {
        plan::select(&matrix, &selection)?
    };
    if cli.global.json {
        let listing = Listing {
            file: path.display().to_string(),
            cells: cells
                .iter()
                .map(|c| ListedCell {
                    name: &c.name,
                    about: &c.about,
                    expect: c.expect,
                    fresh_install: c.fresh_install,
                    steps: c.steps.len(),
                })
                .collect(),
            matrices: &matrix.matrices,
        };
        let json = serde_json::to_string_pretty(&listing).map_err(Error::Json)?;
        writeln!(out, "{json}")?;
        return Ok(Outcome::AllMet);
    }
    out.write_all(render_list(&path, &matrix, &cells).as_bytes())?;
    Ok(Outcome::AllMet)
}

fn render_list(path: &Path, matrix: &Matrix, cells: &[&matrix::Cell]) -> String {
    let mut text = format!("cells ({}) in {}:\n", cells.len(), path.display());
    let width = cells.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for cell in cells {
        let expect = match cell.expect {
            Expectation::Pass => String::new(),
            Expectation::Detect(rule) => format!(" [must detect {}]", rule.name()),
        };
        text.push_str(&format!("  {:width$}  {}{expect}\n", cell.name, cell.about));
    }
    text.push_str("named matrices:\n");
    let width = matrix.matrices.keys().map(String::len).max().unwrap_or(0);
    for (name, named) in &matrix.matrices {
        let what = if named.entries == ["*"] {
            format!("every cell ({})", named.cells.len())
        } else {
            named.cells.join(", ")
        };
        text.push_str(&format!("  {name:width$}  {what}\n"));
    }
    if matrix.matrices.is_empty() {
        text.push_str("  none\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    const MATRIX: &str = include_str!("../../matrix.toml");

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

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn exec(args: &[&str], env: &Environment) -> (Result<Outcome, Error>, String, String) {
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
        assert_eq!(result.unwrap(), Outcome::AllMet);
        assert!(
            out.starts_with(&format!(
                "cells (20) in {}:",
                scratch.0.join("matrix.toml").display()
            )),
            "{out}"
        );
        assert!(
            out.contains("  smoke    migrate-first, binary-first, fence\n"),
            "{out}"
        );
        assert!(out.contains("  full     every cell (20)\n"), "{out}");
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
        assert_eq!(result.unwrap(), Outcome::AllMet);
        let listing: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(listing["file"], file.display().to_string());
        assert_eq!(listing["cells"].as_array().unwrap().len(), 20);
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
        assert_eq!(result.unwrap(), Outcome::AllMet);
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
        assert_eq!(result.unwrap(), Outcome::AllMet);
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
    fn run_validates_then_says_the_driver_is_missing() {
        let scratch = Scratch::new("run");
        let env = Environment {
            cwd: scratch.0.clone(),
            matrix_file_env: None,
        };
        let (result, out, err) = exec(&["--matrix", "smoke", "--seed", "5"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::INCONCLUSIVE);
        assert_eq!(error.to_string(), "the run driver is not yet implemented");
        assert!(out.is_empty());
        assert!(
            err.starts_with("seed 5 (replay: rehearse --matrix smoke --seed 5)\n"),
            "{err}"
        );
        // Without a selection nothing is run, and the message says how to select.
        let (result, _, _) = exec(&["run"], &env);
        let error = result.unwrap_err();
        assert_eq!(crate::exit::for_error(&error), crate::exit::BAD_INPUT);
        assert_eq!(
            error.to_string(),
            "nothing selected: pass --matrix NAME (one of: full, nightly, smoke) or --cell NAME"
        );
        let (result, _, _) = exec(&["--matrix", "smoke", "--database-url", "mysql://x"], &env);
        assert_eq!(
            crate::exit::for_error(&result.unwrap_err()),
            crate::exit::BAD_INPUT
        );
    }

    #[test]
    fn report_is_a_stub_exiting_inconclusive() {
        let env = Environment {
            cwd: std::env::temp_dir(),
            matrix_file_env: None,
        };
        let (result, _, _) = exec(&["report", "reports/somewhere"], &env);
        let error = result.unwrap_err();
        assert_eq!(error.to_string(), "rehearse report is not yet implemented");
        assert_eq!(crate::exit::for_error(&error), crate::exit::INCONCLUSIVE);
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
