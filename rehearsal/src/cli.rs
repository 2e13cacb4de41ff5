//! The command line, declared with clap's derive API.
//!
//! `rehearse --matrix NAME` is `rehearse run --matrix NAME`: the flags are
//! global, so they work before or after the subcommand. Parsing is all
//! this module does; `commands` decides what the flags mean.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Rehearse a rolling upgrade of awa-runtime against a real PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "rehearse", version)]
pub struct Cli {
    /// What to do; without one, `run`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags every subcommand understands.
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate the matrix, plan the selected cells and run them.
    Run,
    /// Print the concrete plan (every random choice resolved) without running anything.
    Plan,
    /// List the cells, with one-line descriptions, and the named matrices.
    List,
    /// Run the `defects` matrix (one cell per seeded defect of the runtime)
    /// beside the clean `smoke` matrix and print the score: defects caught
    /// by name / seeded, clean cells passed / run. Exit 0 only when every
    /// defect is caught by name and every clean cell passes.
    Selftest,
    /// Re-render a run's reports from its report.json.
    Report {
        /// The run's report folder.
        dir: PathBuf,
    },
}

/// Flags shared by every subcommand.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Named matrix to run, from the matrix table of the matrix file (e.g. smoke, full).
    #[arg(long, global = true, value_name = "NAME")]
    pub matrix: Option<String>,

    /// Matrix file [default: matrix.toml in this directory or a parent, else $REHEARSE_MATRIX_FILE].
    #[arg(long, global = true, value_name = "PATH")]
    pub matrix_file: Option<PathBuf>,

    /// Restrict to this cell (repeatable).
    #[arg(long = "cell", global = true, value_name = "NAME")]
    pub cells: Vec<String>,

    /// Seed for every random choice [default: from the clock; always printed].
    #[arg(long, global = true, value_name = "N")]
    pub seed: Option<u64>,

    /// Run the selection N times with fresh seeds (the first is --seed, the
    /// rest derive from it) and print, per cell, how many runs met its expectation.
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::repeat::MAX_REPEAT)))]
    pub repeat: Option<u32>,

    /// Cells to run at once, each on its own database and fleet. Two keep a
    /// 2-core machine busy: one cell alone leaves it half idle in holds.
    #[arg(long, global = true, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub jobs: u32,

    /// Use this PostgreSQL server instead of a throwaway cluster (each cell gets its own database).
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// Keep the throwaway cluster, databases and containers after the run.
    #[arg(long, global = true)]
    pub keep: bool,

    /// Print only warnings, errors and the final summary.
    #[arg(long, global = true)]
    pub quiet: bool,

    /// Print plan and list output as JSON.
    #[arg(long, global = true)]
    pub json: bool,

    /// How runtime processes are started.
    #[arg(long, global = true, value_enum, default_value_t = Backend::Process)]
    pub backend: Backend,
}

/// Where worker and producer processes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Child processes of the artifact's binary.
    Process,
    /// Containers through the Docker API.
    Docker,
    /// Docker when an engine answers, else process.
    Auto,
}

impl Backend {
    /// The flag's word.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Process => "process",
            Backend::Docker => "docker",
            Backend::Auto => "auto",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rehearse").chain(args.iter().copied()))
    }

    #[test]
    fn the_declaration_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn matrix_without_subcommand_means_run() {
        let cli = parse(&["--matrix", "smoke"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.global.matrix.as_deref(), Some("smoke"));
        assert_eq!(cli.global.backend, Backend::Process);
        assert_eq!(cli.global.jobs, 2);
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = parse(&[
            "plan",
            "--matrix",
            "full",
            "--seed",
            "42",
            "--cell",
            "fence",
            "--cell",
            "fresh-install",
            "--json",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(Command::Plan)));
        assert_eq!(cli.global.seed, Some(42));
        assert_eq!(cli.global.cells, ["fence", "fresh-install"]);
        assert!(cli.global.json);
        let cli = parse(&[
            "--backend",
            "docker",
            "--jobs",
            "4",
            "--keep",
            "--quiet",
            "run",
        ])
        .unwrap();
        assert_eq!(cli.global.backend, Backend::Docker);
        assert_eq!(cli.global.jobs, 4);
        assert!(cli.global.keep && cli.global.quiet);
        let cli = parse(&["--matrix", "full", "--repeat", "5"]).unwrap();
        assert_eq!(cli.global.repeat, Some(5));
        let cli = parse(&["selftest", "--seed", "3"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Selftest)));
        assert_eq!(cli.global.seed, Some(3));
        let cli = parse(&["report", "reports/x"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Report { dir }) if dir == Path::new("reports/x"))
        );
    }

    #[test]
    fn bad_flags_are_refused() {
        for args in [
            &["--seed", "-1"][..],
            &["--seed", "soon"],
            &["--jobs", "0"],
            &["--repeat", "0"],
            &["--repeat", "101"],
            &["--backend", "podman"],
            &["--bogus"],
            &["report"],
            &["frobnicate"],
        ] {
            let err = parse(args).expect_err(&format!("{args:?} accepted"));
            assert_eq!(
                crate::exit::for_clap(&err),
                crate::exit::BAD_INPUT,
                "{args:?}"
            );
        }
        let help = parse(&["--help"]).unwrap_err();
        assert_eq!(crate::exit::for_clap(&help), crate::exit::ALL_MET);
    }
}
