//! The flags each subcommand takes, as clap argument groups: what every
//! subcommand understands, the selection, the seed, what a run needs, and
//! one struct per subcommand naming the groups it accepts.

use std::path::PathBuf;

use clap::Args;

use super::flag_values::{
    DEFAULT_JOBS, DEFAULT_RETRIES, parse_database_url, parse_jobs, parse_partition, parse_pull,
    parse_registry, parse_repeat, parse_retries, parse_seed, parse_stress,
};
use super::{
    BACKEND_ENV, Backend, Color, DATABASE_URL_ENV, FORMAT_ENV, Format, Jobs, STRESS_ENV, Stress,
};

/// Flags every subcommand understands.
#[derive(Debug, Args)]
pub(super) struct CommonArgs {
    /// Matrix file [default: matrix.toml in this directory or a parent].
    #[arg(long, global = true, value_name = "PATH", env = crate::matrix::FILE_ENV)]
    pub(super) matrix_file: Option<PathBuf>,

    /// Print only warnings, errors and the final summary.
    #[arg(short, long, global = true)]
    pub(super) quiet: bool,

    /// Colour the summary: auto (a terminal without NO_COLOR), always or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = Color::Auto)]
    pub(super) color: Color,
}

/// Which cells, and the seed of every random choice.
#[derive(Debug, Args)]
pub(super) struct SelectArgs {
    /// Named matrix, from the matrix table of the matrix file (e.g. smoke, full).
    #[arg(short, long, value_name = "NAME")]
    pub(super) matrix: Option<String>,

    /// Restrict to this cell (repeatable).
    #[arg(short, long = "cell", value_name = "NAME")]
    pub(super) cells: Vec<String>,

    #[command(flatten)]
    pub(super) seed: SeedArg,
}

/// `--seed`.
#[derive(Debug, Args)]
pub(super) struct SeedArg {
    /// Seed for every random choice: any u64, decimal or 0x hex [default: from the clock; printed, and in the replay line of a run that fails].
    #[arg(short, long, value_name = "N", value_parser = parse_seed, allow_negative_numbers = true)]
    pub(super) seed: Option<u64>,
}

/// How a run executes: shared by `run` and `selftest`.
#[derive(Debug, Args)]
pub(super) struct ExecArgs {
    /// Cells to run at once, each on its own database and fleet; auto: from the cores, the CPU a cell used in a report of these cells (else matrix.toml's [schedule] estimate) and the machine's load.
    #[arg(short, long, value_name = "N|auto", default_value_t = DEFAULT_JOBS, value_parser = parse_jobs, allow_negative_numbers = true)]
    pub(super) jobs: Jobs,

    /// Use this PostgreSQL server (postgres://USER[:PASSWORD]@HOST[:PORT][/DB][?sslmode=...])
    /// instead of a throwaway cluster; each cell gets its own database. The
    /// variable keeps a password out of the command line (and `--help` never shows its value).
    #[arg(long, value_name = "URL", value_parser = parse_database_url, env = DATABASE_URL_ENV, hide_env_values = true)]
    pub(super) database_url: Option<String>,

    /// Keep the throwaway cluster, databases and containers after the run.
    #[arg(long)]
    pub(super) keep: bool,

    /// Try a cell that came out inconclusive for the harness's own reasons
    /// (an action it could not prove, starvation, a race not reached, a
    /// fault that did not fire) up to N more times, each with a new seed;
    /// every try is in the report (0: never; replay never retries).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RETRIES, value_parser = parse_retries, allow_negative_numbers = true)]
    pub(super) retries: u32,

    #[command(flatten)]
    pub(super) servers: ServerArgs,

    /// How runtime processes are started: containers (docker), child processes (process), or docker when an engine answers, else process (auto; the run says which and why).
    #[arg(long, value_enum, env = BACKEND_ENV, default_value_t = Backend::Auto)]
    pub(super) backend: Backend,

    /// Where run folders go [default: reports/ of the repository].
    #[arg(long, value_name = "DIR", env = crate::driver::run::REPORTS_DIR_ENV)]
    pub(super) reports_dir: Option<PathBuf>,

    /// Pull release artifact NAME from a registry instead of its archive, as
    /// production does: REPOSITORY on the release's line at or above it (the
    /// newest 0.6.x for release 0.6.2), or exactly REPOSITORY:X.Y.Z[@sha256:...];
    /// resolved to a digest and pulled by it (repeatable; containers only).
    #[arg(long, value_name = "NAME=REPOSITORY", value_parser = parse_pull)]
    pub(super) from_registry: Vec<(String, String)>,

    /// Print report.json on stdout at the end, instead of the summary table
    /// (which goes to stderr); for the events as they happen, --format json.
    #[arg(long, conflicts_with = "format")]
    pub(super) json: bool,

    /// What stdout carries: the summary table (human), or every event of the
    /// run as one JSON object a line as it happens, the lines of events.jsonl
    /// (json; progress and the summary go to stderr).
    #[arg(long, value_enum, value_name = "FORMAT", env = FORMAT_ENV, default_value_t = Format::Human)]
    pub(super) format: Format,

    /// Run beside a load, to prove the verdicts hold on an oversubscribed
    /// machine: cpu=N keeps N busy processes (1 to 256) running, cpu=Nx N
    /// per core (1x to 16x), from before the schedule is chosen until the
    /// run ends (recorded in the report and the replay line).
    #[arg(long, value_name = "cpu=N|cpu=Nx", env = STRESS_ENV, value_parser = parse_stress)]
    pub(super) stress: Option<Stress>,
}

/// Which PostgreSQL servers the cells run on, and where their binaries are.
#[derive(Debug, Args)]
pub(super) struct ServerArgs {
    /// Run every cell once per PostgreSQL major, each on its own throwaway
    /// cluster (e.g. 15,18; cell ids become NAME@pg18) [default: [postgres]
    /// servers of the matrix file, else the first server found].
    #[arg(long, value_name = "MAJORS", value_delimiter = ',', value_parser = crate::servers::Major::parse)]
    pub(super) postgres: Vec<crate::servers::Major>,

    #[command(flatten)]
    pub(super) bindirs: BinDirArgs,
}

/// Where PostgreSQL's binaries are looked for first.
#[derive(Debug, Args)]
pub(super) struct BinDirArgs {
    /// PostgreSQL bin directories (':'-separated) searched first for the
    /// throwaway clusters; each major is read from its own `postgres --version`.
    #[arg(long, value_name = "DIRS", env = awa_harness::pgtemp::BINDIR_ENV)]
    pub(super) pg_bindir: Option<PathBuf>,

    /// The older name of --pg-bindir, searched after it.
    #[arg(long, value_name = "DIRS", env = awa_harness::pgtemp::LEGACY_BINDIR_ENV)]
    pub(super) awa_pg_bindir: Option<PathBuf>,
}

impl BinDirArgs {
    /// Each listed directory with the variable (or flag) it came from.
    pub(super) fn dirs(self) -> Vec<(&'static str, PathBuf)> {
        let mut dirs = Vec::new();
        for (var, value) in [
            (awa_harness::pgtemp::BINDIR_ENV, self.pg_bindir),
            (awa_harness::pgtemp::LEGACY_BINDIR_ENV, self.awa_pg_bindir),
        ] {
            if let Some(value) = value.filter(|v| !v.as_os_str().is_empty()) {
                dirs.extend(std::env::split_paths(&value).map(|d| (var, d)));
            }
        }
        dirs
    }
}

/// `--partition` and where `duration` reads its times.
#[derive(Debug, Args)]
pub(super) struct PartitionArgs {
    /// Run only share I of N of the selected cells (after --postgres multiplied them):
    /// hash:I/N (by a stable hash of the cell id), slice:I/N (contiguous, in matrix
    /// order) or duration:I/N (balanced by --durations, unknown cells by hash); for
    /// `rehearse merge`.
    #[arg(long, value_name = "STRATEGY:I/N", value_parser = parse_partition)]
    pub(super) partition: Option<crate::partition::Partition>,

    /// The report.json (of one run, or merged) whose cell times --partition duration balances.
    #[arg(long, value_name = "FILE")]
    pub(super) durations: Option<PathBuf>,
}

/// `rehearse run`.
#[derive(Debug, Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    pub(super) select: SelectArgs,

    #[command(flatten)]
    pub(super) partition: PartitionArgs,

    /// Run the selection N times with fresh seeds (the first is --seed, the
    /// rest derive from it) and print, per cell, how many runs met its expectation.
    #[arg(long, value_name = "N", value_parser = parse_repeat, allow_negative_numbers = true)]
    pub(super) repeat: Option<u32>,

    /// Take this awa binary as the `build = "workspace"` artifact instead of
    /// building the workspace (failpoint builds are still built): a candidate
    /// built elsewhere; `rehearse mutate` runs each mutant's build this way.
    #[arg(long, value_name = "PATH")]
    pub(super) workspace_binary: Option<PathBuf>,

    #[command(flatten)]
    pub(super) exec: ExecArgs,
}

/// `rehearse replay`.
#[derive(Debug, Args)]
pub(super) struct ReplayArgs {
    /// The plan.json of a run folder (reports/<run>/plan.json).
    pub(super) plan: PathBuf,

    /// Only this cell of the plan (repeatable; a cell id as the plan names it, e.g. fence@pg18).
    #[arg(short, long = "cell", value_name = "NAME")]
    pub(super) cells: Vec<String>,

    #[command(flatten)]
    pub(super) exec: ExecArgs,
}

/// `rehearse plan`.
#[derive(Debug, Args)]
pub(super) struct PlanArgs {
    #[command(flatten)]
    pub(super) select: SelectArgs,

    #[command(flatten)]
    pub(super) partition: PartitionArgs,

    /// Print the plan as JSON.
    #[arg(long)]
    pub(super) json: bool,

    /// The backend the plan is checked for (image artifacts need docker; auto accepts them).
    #[arg(long, value_enum, env = BACKEND_ENV, default_value_t = Backend::Auto)]
    pub(super) backend: Backend,

    /// Plan every cell once per PostgreSQL major (e.g. 15,18), as `run --postgres`.
    #[arg(long, value_name = "MAJORS", value_delimiter = ',', value_parser = crate::servers::Major::parse)]
    pub(super) postgres: Vec<crate::servers::Major>,
}

/// `rehearse list`.
#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// Only the cells of this named matrix.
    #[arg(short, long, value_name = "NAME")]
    pub(super) matrix: Option<String>,

    /// Only this cell (repeatable).
    #[arg(short, long = "cell", value_name = "NAME")]
    pub(super) cells: Vec<String>,

    /// Print the listing as JSON.
    #[arg(long)]
    pub(super) json: bool,
}

/// `rehearse doctor`.
#[derive(Debug, Args)]
pub(super) struct DoctorArgs {
    /// Also require these PostgreSQL majors (e.g. 15,18) [default: [postgres] servers of the matrix file].
    #[arg(long, value_name = "MAJORS", value_delimiter = ',', value_parser = crate::servers::Major::parse)]
    pub(super) postgres: Vec<crate::servers::Major>,

    /// Also check this registry, HOST:PORT [default: $REHEARSE_REGISTRY].
    #[arg(long, value_name = "HOST:PORT", env = "REHEARSE_REGISTRY", value_parser = parse_registry)]
    pub(super) registry: Option<String>,

    #[command(flatten)]
    pub(super) bindirs: BinDirArgs,
}

/// `rehearse mutate`.
#[derive(Debug, Args)]
pub(super) struct MutateArgs {
    /// Print the mutants (id, file:line, operator, unit, one-line diff) without running any.
    #[arg(long)]
    pub(super) list: bool,

    /// Mutate only the functions and statements changed or added since the
    /// previous release (the `previous` artifact's archive) [default].
    #[arg(long, conflicts_with = "all")]
    pub(super) in_diff: bool,

    /// Mutate every function and statement of awa-runtime (failpoints, the audit API and tests excepted).
    #[arg(long)]
    pub(super) all: bool,

    /// Draw N of the mutants (reproducible: the same N and --seed draw the same ones).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) sample: Option<u32>,

    /// Only this mutant, by the id --list prints (repeatable).
    #[arg(long = "mutant", value_name = "ID")]
    pub(super) mutants: Vec<String>,

    /// Run only share I of N of the mutants (after --sample): hash:I/N (by
    /// the mutant's id), slice:I/N (contiguous, in file order) or
    /// duration:I/N (balanced by the mutants' times in the last mutate
    /// report, unknown ones by hash); for `rehearse merge`.
    #[arg(long, value_name = "STRATEGY:I/N", value_parser = parse_partition)]
    pub(super) partition: Option<crate::partition::Partition>,

    /// A mutant's budget for each cell, in seconds [default: 3 times the
    /// cell's time on the unmutated build, plus 60 s for the run's start,
    /// for each try --retries allows];
    /// a mutant past it is a timeout, which is not a kill.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) timeout: Option<u64>,

    /// Where the work copy of the workspace and its builds are kept
    /// [default: target/mutate of the repository]; two mutate runs at once need one each.
    #[arg(long, value_name = "DIR")]
    pub(super) work_dir: Option<PathBuf>,

    #[command(flatten)]
    pub(super) select: SelectArgs,

    #[command(flatten)]
    pub(super) exec: ExecArgs,
}

/// `rehearse selftest`: the seed and how to run, never a selection.
#[derive(Debug, Args)]
pub(super) struct SelftestArgs {
    #[command(flatten)]
    pub(super) seed: SeedArg,

    #[command(flatten)]
    pub(super) exec: ExecArgs,
}
