//! `rehearse mutate`: how many small bugs in awa-runtime the matrix catches.
//!
//! Mutation testing for an upgrade rehearsal: each mutant is one small
//! change of the runtime's Rust or SQL (a flipped comparison, a dropped
//! `WHERE` conjunct, a function that returns a default), built as the
//! `current` artifact and run through the matrix's clean cells. A mutant
//! that some cell fails on is killed; one that every cell passes shows a
//! bug of that shape the matrix would let through.
//!
//! This module generates the mutants (pure logic, no I/O but reading the
//! trees): [`rust`] for Rust (cargo-mutants' operators, over `syn` spans),
//! [`sql`] for the SQL in named constants and `.sql` files, [`scope`] for
//! which units count (`--in-diff`: what changed since the previous
//! release) and what is never mutated.
//!
//! cargo-mutants' CLI is not used: it cannot mutate SQL (most of what a
//! release of a job queue changes), and its test step is `cargo test`,
//! where ours is a rehearsal whose verdicts carry the cell and rule that
//! failed; its operators are simple enough to implement over `syn`.

mod child;
pub mod report;
pub mod run;
pub mod rust;
pub mod scope;
pub mod sql;
pub mod stop;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::plan::SplitMix64;

pub use scope::{Scope, Tree};

/// What `rehearse mutate` was asked for, beside the selection and run flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `--list`: print the mutants, run nothing.
    pub list: bool,
    /// `--all` (else `--in-diff`).
    pub all: bool,
    /// `--sample N`.
    pub sample: Option<usize>,
    /// `--mutant ID`, repeatable: only these.
    pub mutants: Vec<String>,
    /// `--partition STRATEGY:I/N`.
    pub partition: Option<crate::partition::Partition>,
    /// `--timeout SECS`: a mutant's budget per cell.
    pub timeout: Option<std::time::Duration>,
    /// `--work-dir DIR`: the work copy and its builds.
    pub work_dir: Option<std::path::PathBuf>,
    /// `--list --json`.
    pub json: bool,
}

/// A mutation operator: what kind of change a mutant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operator {
    /// A function's body replaced by a value of its return type.
    FnBody,
    /// A binary operator swapped (`<` for `<=`, `&&` for `||`, `+` for `-`).
    BinOp,
    /// A `!` deleted.
    DeleteNot,
    /// A SQL comparison changed.
    SqlCompare,
    /// `AND` <-> `OR`.
    SqlAndOr,
    /// `+` <-> `-` in SQL.
    SqlArith,
    /// A conjunct of a `WHERE` dropped.
    SqlDropConjunct,
    /// Two bind parameters swapped.
    SqlSwapParam,
    /// A column read for another of the same table.
    SqlSwapColumn,
    /// `ON CONFLICT ...` dropped.
    SqlDropOnConflict,
    /// A locking clause (`FOR UPDATE`, `SKIP LOCKED`, `NOWAIT`) dropped.
    SqlDropLocking,
    /// `IS NULL` <-> `IS NOT NULL`.
    SqlNullCheck,
    /// The statement's clock: `now()` shifted, a time parameter for `now()`.
    SqlNow,
}

impl Operator {
    /// The name the report and `--list` print.
    pub fn name(self) -> &'static str {
        match self {
            Operator::FnBody => "fn-body",
            Operator::BinOp => "binop",
            Operator::DeleteNot => "delete-not",
            Operator::SqlCompare => "sql-compare",
            Operator::SqlAndOr => "sql-and-or",
            Operator::SqlArith => "sql-arith",
            Operator::SqlDropConjunct => "sql-drop-conjunct",
            Operator::SqlSwapParam => "sql-swap-param",
            Operator::SqlSwapColumn => "sql-swap-column",
            Operator::SqlDropOnConflict => "sql-drop-on-conflict",
            Operator::SqlDropLocking => "sql-drop-locking",
            Operator::SqlNullCheck => "sql-null-check",
            Operator::SqlNow => "sql-now",
        }
    }

    /// Whether it changes SQL.
    pub fn is_sql(self) -> bool {
        !matches!(
            self,
            Operator::FnBody | Operator::BinOp | Operator::DeleteNot
        )
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One mutant: one byte range of one file of awa-runtime, replaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutant {
    /// Stable name (`m3f2a9c1d`): a hash of what identifies the mutation,
    /// never of where it sits (see `Mutant::name`), so an edit elsewhere
    /// in its file leaves it its id.
    pub id: String,
    /// The file, relative to awa-runtime's root (`src/store/claim.rs`).
    pub file: String,
    /// The 1-based line where the change starts.
    pub line: usize,
    /// The function or statement it is in (`claim::claim`, `const CLAIM`).
    pub unit: String,
    /// The kind of change.
    pub operator: Operator,
    /// Bytes of the file replaced.
    pub range: Range<usize>,
    /// The replaced text.
    pub original: String,
    /// What replaces it.
    pub replacement: String,
}

impl Mutant {
    /// Builds a mutant, named as the first of its kind in its unit
    /// (`identify` numbers the others once the file's are all known).
    pub fn new(
        file: &str,
        text: &str,
        unit: &str,
        operator: Operator,
        range: Range<usize>,
        replacement: String,
    ) -> Mutant {
        let line = text[..range.start].matches('\n').count() + 1;
        let mut m = Mutant {
            id: String::new(),
            file: file.to_owned(),
            line,
            unit: unit.to_owned(),
            operator,
            original: text[range.clone()].to_owned(),
            range,
            replacement,
        };
        m.id = m.name(0);
        m
    }

    /// Its id when it is the `occurrence`-th (from 0, in file order) of
    /// the mutations of its unit with its operator and original text: a
    /// hash of the file, the unit, the operator, the original text, the
    /// replacement and that number. Its byte range and line stay out, so
    /// a line added above it (before its function, inside another) does
    /// not rename it, and a `[[mutate.equivalent]]` entry keeps naming it;
    /// an edit of the text it changes does.
    fn name(&self, occurrence: usize) -> String {
        // The number first: ids of neighbours that differ in it alone
        // do not look alike.
        let key = format!(
            "{occurrence}\0{}\0{}\0{}\0{}\0{}",
            self.file, self.unit, self.operator, self.original, self.replacement
        );
        format!("m{:08x}", crate::plan::fnv1a64(key.as_bytes()) as u32)
    }

    /// The file's text with this mutant applied.
    pub fn apply(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + self.replacement.len());
        out.push_str(&text[..self.range.start]);
        out.push_str(&self.replacement);
        out.push_str(&text[self.range.end..]);
        out
    }

    /// The one-line diff: the changed line before and after, trimmed
    /// (a function body: its first line, and what replaces it).
    pub fn one_line(&self, text: &str) -> String {
        let (before, after) = self.changed_lines(text);
        let first = |lines: &[String]| -> String {
            let joined = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            shorten(&joined, 100)
        };
        format!("-{} +{}", first(&before), first(&after))
    }

    /// The unified diff of the lines it changes (at most `MAX_DIFF_LINES` a side).
    pub fn diff(&self, text: &str) -> String {
        let (before, after) = self.changed_lines(text);
        let mut out = format!(
            "--- {}:{}\n+++ {}:{} ({})\n",
            self.file, self.line, self.file, self.line, self.operator
        );
        for (sign, lines) in [('-', &before), ('+', &after)] {
            for (n, l) in lines.iter().enumerate() {
                if n == MAX_DIFF_LINES {
                    out.push_str(&format!("{sign} ... ({} more lines)\n", lines.len() - n));
                    break;
                }
                out.push(sign);
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The whole lines the change touches, before and after.
    fn changed_lines(&self, text: &str) -> (Vec<String>, Vec<String>) {
        let start = text[..self.range.start].rfind('\n').map_or(0, |i| i + 1);
        let end = text[self.range.end..]
            .find('\n')
            .map_or(text.len(), |i| self.range.end + i);
        let before = &text[start..end];
        let after = format!(
            "{}{}{}",
            &text[start..self.range.start],
            self.replacement,
            &text[self.range.end..end]
        );
        (
            before.lines().map(str::to_owned).collect(),
            after.lines().map(str::to_owned).collect(),
        )
    }
}

/// The most lines a side of a mutant's diff shows.
const MAX_DIFF_LINES: usize = 12;

/// `text` cut to `max` characters, with an ellipsis.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max).collect();
    s.push('…');
    s
}

/// Names the mutants of one file (all of them, in scope or not, so a
/// mutant's id is the same under `--all` and `--in-diff`): two that make
/// the same change of the same text in the same unit are told apart by
/// their order in the file, counted among those alone. Several
/// replacements of one place share its number.
fn identify<'a>(mutants: impl IntoIterator<Item = &'a mut Mutant>) {
    let mut all: Vec<&mut Mutant> = mutants.into_iter().collect();
    all.sort_by_key(|m| (m.range.start, m.range.end));
    let mut places: BTreeMap<(String, Operator, String), Vec<Range<usize>>> = BTreeMap::new();
    for m in all {
        let key = (m.unit.clone(), m.operator, m.original.clone());
        let seen = places.entry(key).or_default();
        if seen.last() != Some(&m.range) {
            seen.push(m.range.clone());
        }
        m.id = m.name(seen.len() - 1);
    }
}

/// Every mutant of `current` in `scope`, in file order: the Rust of its
/// `src/` and the SQL of its constants and `migrations/`.
pub fn generate(current: &Tree, scope: &Scope) -> Vec<Mutant> {
    let mut out = Vec::new();
    for (path, text) in &current.files {
        if scope::excluded_file(path) {
            continue;
        }
        let mut units = if path.ends_with(".rs") {
            match rust::units(path, text) {
                Ok(units) => units,
                // A file that does not parse has nothing to mutate; the
                // build of any mutant would say why.
                Err(_) => continue,
            }
        } else if path.ends_with(".sql") {
            scope::sql_file_units(path, text)
        } else {
            continue;
        };
        identify(units.iter_mut().flat_map(|u| u.mutants.iter_mut()));
        for unit in units {
            if scope.includes(&unit.name, &unit.fingerprint) {
                out.extend(unit.mutants);
            }
        }
    }
    out.sort_by(|a, b| {
        (
            &a.file,
            a.range.start,
            a.range.end,
            a.operator,
            &a.replacement,
        )
            .cmp(&(
                &b.file,
                b.range.start,
                b.range.end,
                b.operator,
                &b.replacement,
            ))
    });
    out.dedup_by(|a, b| a.id == b.id);
    out
}

/// Why the mutants could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum MutateError {
    /// `--in-diff` needs the previous release's sources (bad input).
    #[error(
        "--in-diff compares with the previous release, but artifact \"previous\" of the matrix is {what}; declare previous = {{ release = \"X.Y.Z\" }} or pass --all"
    )]
    NoPreviousRelease {
        /// What `previous` is instead.
        what: String,
    },
    /// The previous release's archive is not listed or not intact (bad input).
    #[error("the previous release's archive: {0}")]
    Release(#[from] awa_harness::release::ReleaseError),
    /// `--mutant ID` names no mutant in scope (bad input).
    #[error(
        "--mutant {id}: no such mutant in scope; `rehearse mutate --list` (with the same --all/--in-diff) prints the ids"
    )]
    UnknownMutant {
        /// The id given.
        id: String,
    },
    /// A source tree could not be read (infrastructure).
    #[error(transparent)]
    Tree(#[from] scope::TreeError),
}

impl MutateError {
    /// Whether the user can fix it (exit 2) rather than the machine (exit 3).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, MutateError::Tree(_))
    }
}

/// Why a session stopped before its report: the library's `Error` wraps
/// it (as `Output` and `Harness`, so a closed pipe stays quiet).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Writing the report folder, stdout or stderr failed.
    #[error("failed to write output")]
    Output(#[from] std::io::Error),
    /// The harness failed outside any mutant (the rehearse binary, a child run).
    #[error("{0}")]
    Harness(String),
}

/// The mutants of a run, and the tree they apply to.
#[derive(Clone, Debug)]
pub struct Generated {
    /// awa-runtime's sources as the workspace has them.
    pub current: Tree,
    /// The mutants in scope, sampled.
    pub mutants: Vec<Mutant>,
    /// How many were in scope before sampling.
    pub in_scope: Counts,
    /// `in-diff against X.Y.Z` or `all`.
    pub scope: String,
}

/// A mutant's budget for a cell: this many times the cell's clean time...
pub const TIMEOUT_FACTOR: u32 = 3;
/// ...plus this, for the run's start (cluster, artifacts, fleet).
pub const TIMEOUT_FLOOR: std::time::Duration = std::time::Duration::from_secs(60);

/// What a mutate run needs, checked by the command.
#[derive(Debug)]
pub struct SessionArgs {
    /// The repository.
    pub repo: crate::artifacts::Repo,
    /// The matrix file (absolute).
    pub matrix_file: std::path::PathBuf,
    /// The matrix.
    pub matrix: crate::matrix::Matrix,
    /// The clean cells selected, in matrix order.
    pub cells: Vec<String>,
    /// The seed of the sample and of every cell.
    pub seed: u64,
    /// The mutants.
    pub generated: Generated,
    /// Where the run's folder goes.
    pub reports_root: std::path::PathBuf,
    /// `--sample N`.
    pub sample: Option<usize>,
    /// `--backend`'s word.
    pub backend: String,
    /// `--pg-bindir` directories.
    pub pg_bindirs: Vec<std::path::PathBuf>,
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--quiet`.
    pub quiet: bool,
    /// `--partition`, as given.
    pub partition: Option<String>,
    /// `--timeout`.
    pub timeout: Option<std::time::Duration>,
    /// `--work-dir`.
    pub work_dir: Option<std::path::PathBuf>,
    /// `--jobs`: cells at once.
    pub jobs: crate::schedule::Jobs,
    /// `--retries`, for each cell's child run.
    pub retries: u32,
}

/// Cells at once for a mutate run of `cells` clean cells: `--jobs N`, or
/// `auto` as a run with no history packs (the shipped `[schedule]`
/// estimate and the machine's load at the start): each child runs one
/// cell, so a run's own history of these cells does not apply.
fn jobs(
    jobs: crate::schedule::Jobs,
    cells: usize,
    matrix: &crate::matrix::Matrix,
    backend: &str,
) -> crate::schedule::Pick {
    use crate::schedule::{AutoInput, Basis, Jobs, Pick, auto_jobs, cores, pressure::Busy};
    match jobs {
        Jobs::Fixed(n) => Pick {
            jobs: n,
            why: format!("jobs {n}"),
        },
        Jobs::Auto => {
            let cores = cores();
            auto_jobs(&AutoInput {
                cores,
                cells,
                estimate: matrix.schedule.cores_per_cell_on(backend),
                basis: Basis::Nothing,
                busy: Busy::now(cores),
            })
        }
    }
}

/// Runs the mutants and writes the report: exit 0 when the score meets
/// `[mutate] min_score`, 1 when not, 3 when SIGINT or SIGTERM stopped the
/// run (its child runs stopped first, the report kept what finished).
pub fn session(
    args: SessionArgs,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> Result<crate::vocab::RunOutcome, SessionError> {
    let last = report::newest(&args.reports_root);
    let order = report::kill_order(&args.cells, last.as_ref().map(|(_, r)| r));
    let stamp = crate::report::utc(std::time::SystemTime::now());
    let base =
        crate::report::report_dir(&args.reports_root, &stamp.compact, args.repo.git().short());
    let dir = std::path::PathBuf::from(format!("{}-mutate", base.display()));
    std::fs::create_dir_all(&dir).map_err(SessionError::Output)?;
    let pick = jobs(args.jobs, args.cells.len(), &args.matrix, &args.backend);
    let rehearse = std::env::current_exe().map_err(|e| {
        SessionError::Harness(format!(
            "could not find the rehearse binary to run cells with: {e}"
        ))
    })?;
    let runner = run::Runner {
        root: args.repo.root.clone(),
        work_dir: args
            .work_dir
            .clone()
            .unwrap_or_else(|| args.repo.root.join("target").join("mutate")),
        matrix_file: args.matrix_file.clone(),
        seed: args.seed,
        backend: args.backend.clone(),
        pg_bindirs: args.pg_bindirs.clone(),
        database_url: args.database_url.clone(),
        dir: dir.clone(),
        timeout_factor: TIMEOUT_FACTOR,
        timeout_floor: TIMEOUT_FLOOR,
        timeout: args.timeout,
        rehearse,
        jobs: pick.jobs,
        retries: args.retries,
        // From here on a signal stops the child runs before rehearse exits.
        stop: stop::Stop::on_signals().map_err(|e| {
            SessionError::Harness(format!("could not watch for SIGINT and SIGTERM: {e}"))
        })?,
    };
    let g = &args.generated;
    let header = report::MutateReport {
        format_version: report::FORMAT_VERSION.to_owned(),
        started_at: stamp.rfc3339.clone(),
        seed: args.seed,
        scope: g.scope.clone(),
        sample: args.sample,
        partition: args.partition.clone(),
        in_scope: g.in_scope,
        clean: Vec::new(),
        min_score: args.matrix.mutate.min_score,
        equivalent: args.matrix.mutate.equivalent.clone(),
        mutants: Vec::new(),
        interrupted: false,
    };
    let c = Counts::of(&g.mutants);
    writeln!(
        err,
        "mutate: {} mutants ({} SQL, {} Rust; {} in scope, {}), cells in order: {}; {}; report in {}",
        g.mutants.len(),
        c.sql,
        c.rust,
        g.in_scope.sql + g.in_scope.rust,
        g.scope,
        order.join(", "),
        pick.why,
        dir.display()
    )?;
    let quiet = args.quiet;
    let mut progress = |line: String| {
        if !quiet {
            let _ = writeln!(err, "{line}");
        }
    };
    let finished = run::session(
        &runner,
        &g.current,
        &g.mutants,
        &order,
        header,
        &mut progress,
    )
    .map_err(|e| SessionError::Harness(awa_runtime::error::chain(&e)))?;
    writeln!(out, "{}", finished.headline())?;
    writeln!(out, "report: {}", dir.join(report::MUTATE_MD).display())?;
    Ok(finished.outcome())
}

/// The mutants `options` ask for: of the workspace's awa-runtime, in the
/// diff against the `previous` artifact's release archive (unless
/// `--all`), sampled by `--sample N` with `seed` (0 without one: a sample
/// is reproducible by default).
pub fn generate_for(
    repo: &crate::artifacts::Repo,
    matrix: &crate::matrix::Matrix,
    options: &Options,
    seed: Option<u64>,
) -> Result<Generated, MutateError> {
    let current = Tree::read_dir(&repo.root.join("awa-runtime"))?;
    let mut described = "all".to_owned();
    let scope = if options.all {
        Scope::All
    } else {
        let previous = match matrix
            .artifacts
            .get(crate::matrix::PREVIOUS)
            .map(|a| &a.source)
        {
            Some(crate::matrix::ArtifactSource::Release(v)) => v.to_string(),
            Some(other) => {
                return Err(MutateError::NoPreviousRelease {
                    what: format!("{other:?}"),
                });
            }
            None => {
                return Err(MutateError::NoPreviousRelease {
                    what: "not declared".into(),
                });
            }
        };
        let artifacts = repo.artifacts();
        let manifest = awa_harness::release::load_manifest(&artifacts)?;
        let entry = manifest.release(&previous, &artifacts)?;
        let archive = awa_harness::release::verify(&artifacts, entry)?;
        described = format!("in-diff against {previous}");
        Scope::in_diff(&Tree::read_crate(&archive)?)
    };
    let all = generate(&current, &scope);
    let in_scope = Counts::of(&all);
    if let Some(id) = options
        .mutants
        .iter()
        .find(|id| !all.iter().any(|m| &m.id == *id))
    {
        return Err(MutateError::UnknownMutant { id: id.clone() });
    }
    let mut mutants = match options.sample {
        Some(n) => sample(all, n, seed.unwrap_or(0)),
        None => all,
    };
    if !options.mutants.is_empty() {
        mutants.retain(|m| options.mutants.contains(&m.id));
    }
    Ok(Generated {
        current,
        mutants,
        in_scope,
        scope: described,
    })
}

/// `--partition STRATEGY:I/N` of the mutants: by a hash of each id, in
/// contiguous slices, or balanced by their times in `last` (the last
/// mutate report).
pub fn share(
    mutants: Vec<Mutant>,
    partition: &crate::partition::Partition,
    last: Option<&report::MutateReport>,
) -> Vec<Mutant> {
    let ids: Vec<String> = mutants.iter().map(|m| m.id.clone()).collect();
    let durations: BTreeMap<String, u64> = last
        .map(|r| {
            r.mutants
                .iter()
                .map(|m| (m.mutant.id.clone(), m.elapsed_ms))
                .collect()
        })
        .unwrap_or_default();
    let shares = crate::partition::shares(&ids, partition.strategy, partition.count, &durations);
    let keep: Vec<usize> = shares
        .get(partition.index.saturating_sub(1) as usize)
        .cloned()
        .unwrap_or_default();
    mutants
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, m)| m)
        .collect()
}

/// `--sample N --seed S`: `n` mutants drawn without replacement, the same
/// for the same list and seed, kept in file order.
pub fn sample(mutants: Vec<Mutant>, n: usize, seed: u64) -> Vec<Mutant> {
    if n >= mutants.len() {
        return mutants;
    }
    let mut rng = SplitMix64::new(SplitMix64::new(seed).next_u64());
    let mut index: Vec<usize> = (0..mutants.len()).collect();
    for i in 0..n {
        let left = (index.len() - i) as u64;
        let j = i + rng.below(left) as usize;
        index.swap(i, j);
    }
    let mut chosen = index[..n].to_vec();
    chosen.sort_unstable();
    let mut slots: Vec<Option<Mutant>> = mutants.into_iter().map(Some).collect();
    chosen.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Counts of a list, for `--list` and the report's header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Mutants of SQL.
    pub sql: usize,
    /// Mutants of Rust.
    pub rust: usize,
}

impl Counts {
    /// Counts `mutants`.
    pub fn of(mutants: &[Mutant]) -> Counts {
        let sql = mutants.iter().filter(|m| m.operator.is_sql()).count();
        Counts {
            sql,
            rust: mutants.len() - sql,
        }
    }
}

/// `rehearse mutate --list`: one line a mutant (id, file:line, operator,
/// the one-line diff) and the counts.
pub fn render_list(mutants: &[Mutant], tree: &Tree) -> String {
    let mut out = String::new();
    for m in mutants {
        let text = tree.files.get(&m.file).map_or("", String::as_str);
        out.push_str(&format!(
            "{}  {}:{}  {}  {}  {}\n",
            m.id,
            m.file,
            m.line,
            m.operator,
            m.unit,
            m.one_line(text)
        ));
    }
    let c = Counts::of(mutants);
    out.push_str(&format!(
        "{} mutants ({} SQL, {} Rust)\n",
        mutants.len(),
        c.sql,
        c.rust
    ));
    out
}

/// Mutants by file, for the runner (each file read once).
pub fn by_file(mutants: &[Mutant]) -> BTreeMap<&str, Vec<&Mutant>> {
    let mut map: BTreeMap<&str, Vec<&Mutant>> = BTreeMap::new();
    for m in mutants {
        map.entry(m.file.as_str()).or_default().push(m);
    }
    map
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree {
            files: files
                .iter()
                .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
                .collect(),
        }
    }

    const CURRENT: &str = r#"
/// Claims.
const CLAIM: &str = "SELECT id FROM t WHERE run_at <= now() AND queue = $1 FOR UPDATE SKIP LOCKED";

/// Unchanged since the release.
pub fn old(a: u32, b: u32) -> bool {
    a < b
}

/// New in this release.
pub fn new(a: u32) -> u32 {
    if !ready(a) { a + 1 } else { a }
}

#[cfg(test)]
mod tests {
    fn helper() -> bool { 1 < 2 }
}
"#;

    const PREVIOUS: &str = r#"
const CLAIM: &str = "SELECT id FROM t WHERE run_at <= now() FOR UPDATE SKIP LOCKED";

/// Unchanged since the release (its doc may change).
pub fn old(a: u32, b: u32) -> bool {
    a  <  b
}
"#;

    #[test]
    fn in_diff_keeps_changed_and_new_units_only() {
        let current = tree(&[("src/store/claim.rs", CURRENT)]);
        let previous = tree(&[("src/store/claim.rs", PREVIOUS)]);
        let all = generate(&current, &Scope::All);
        let diff = generate(&current, &Scope::in_diff(&previous));
        let units = |ms: &[Mutant]| {
            let mut u: Vec<String> = ms.iter().map(|m| m.unit.clone()).collect();
            u.dedup();
            u
        };
        assert_eq!(
            units(&all),
            vec![
                "const store::claim::CLAIM",
                "store::claim::old",
                "store::claim::new"
            ]
        );
        assert_eq!(
            units(&diff),
            vec!["const store::claim::CLAIM", "store::claim::new"]
        );
        // Nothing from the test module.
        assert!(all.iter().all(|m| !m.unit.contains("helper")));
    }

    #[test]
    fn generation_and_sampling_are_deterministic() {
        let current = tree(&[("src/store/claim.rs", CURRENT)]);
        let a = generate(&current, &Scope::All);
        let b = generate(&current, &Scope::All);
        assert_eq!(a, b);
        let c = Counts::of(&a);
        assert!(c.sql > 0 && c.rust > 0, "{c:?}");
        let s1 = sample(a.clone(), 4, 7);
        assert_eq!(s1, sample(b, 4, 7));
        assert_eq!(s1.len(), 4);
        assert!(
            s1.windows(2)
                .all(|w| w[0].range.start < w[1].range.start || w[0].file < w[1].file)
        );
        let other: Vec<_> = (0..20).map(|seed| sample(a.clone(), 4, seed)).collect();
        assert!(
            other.iter().any(|s| *s != s1),
            "seeds must draw different samples"
        );
        // Ids are unique and stable.
        let mut ids: Vec<&str> = a.iter().map(|m| m.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), a.len());
    }

    /// Each mutant of `text` (as `src/store/claim.rs`, every unit in
    /// scope) by what it changes: unit, operator, original, replacement,
    /// and its rank among those alike, to its id.
    fn ids(text: &str) -> BTreeMap<(String, Operator, String, String, usize), String> {
        let all = generate(&tree(&[("src/store/claim.rs", text)]), &Scope::All);
        let mut rank: BTreeMap<(String, Operator, String, String), usize> = BTreeMap::new();
        all.into_iter()
            .map(|m| {
                let n = rank
                    .entry((
                        m.unit.clone(),
                        m.operator,
                        m.original.clone(),
                        m.replacement.clone(),
                    ))
                    .or_insert(0);
                *n += 1;
                ((m.unit, m.operator, m.original, m.replacement, *n), m.id)
            })
            .collect()
    }

    #[test]
    fn ids_stay_put_when_lines_are_added_above_them() {
        let before = ids(CURRENT);
        assert!(before.len() > 5, "{before:?}");
        // A line before the function, and one inside another function.
        let above = CURRENT.replace(
            "/// Unchanged since the release.",
            "/// Added above.\nconst LIMIT: u32 = 3;\n\n/// Unchanged since the release.",
        );
        assert_ne!(above, CURRENT);
        assert_eq!(ids(&above), before, "{above}");
        // A line inside `old`, above `new` and above `old`'s own `<`:
        // only the mutants that replace `old`'s whole body (whose text
        // changed) are renamed.
        let inside = ids(&CURRENT.replace("    a < b\n", "    let _ = 3;\n    a < b\n"));
        let whole_body = |(unit, op, ..): &(String, Operator, String, String, usize)| {
            unit == "store::claim::old" && *op == Operator::FnBody
        };
        let kept = |m: &BTreeMap<_, String>| -> BTreeMap<_, String> {
            m.iter()
                .filter(|(k, _)| !whole_body(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        assert_eq!(kept(&inside), kept(&before));
        assert!(
            kept(&before)
                .keys()
                .any(|(unit, ..)| unit == "store::claim::new")
        );
        assert!(
            kept(&before)
                .keys()
                .any(|(unit, ..)| unit == "store::claim::old")
        );
    }

    #[test]
    fn an_edit_of_the_mutated_text_renames_its_mutants() {
        let before = ids(CURRENT);
        // The statement's conjunct about the queue reworded: the mutants
        // whose original text holds it are other mutations, the rest of
        // the statement's keep their ids.
        let after = ids(&CURRENT.replace("queue = $1", "queue = $2"));
        let old: BTreeSet<&String> = before.values().collect();
        let new: BTreeSet<&String> = after.values().collect();
        let gone: Vec<&str> = before
            .iter()
            .filter(|(_, id)| !new.contains(id))
            .map(|((_, _, original, _, _), _)| original.as_str())
            .collect();
        let came: Vec<&str> = after
            .iter()
            .filter(|(_, id)| !old.contains(id))
            .map(|((_, _, original, _, _), _)| original.as_str())
            .collect();
        assert!(!gone.is_empty());
        assert!(gone.iter().all(|o| o.contains("$1")), "{gone:?}");
        assert!(came.iter().all(|o| o.contains("$2")), "{came:?}");
        assert_eq!(gone.len(), came.len());
        assert!(before.len() > gone.len());
    }

    #[test]
    fn two_identical_mutations_in_one_unit_have_their_own_ids() {
        let text = "pub fn twice(a: u32, b: u32) -> bool {\n    a < b && b < a\n}\n";
        let all = generate(&tree(&[("src/x.rs", text)]), &Scope::All);
        let same: Vec<&Mutant> = all
            .iter()
            .filter(|m| m.operator == Operator::BinOp && m.original == "<" && m.replacement == "<=")
            .collect();
        assert_eq!(same.len(), 2, "{all:?}");
        assert_ne!(same[0].id, same[1].id);
        // And each keeps its own when a line is added above both.
        let moved = generate(
            &tree(&[("src/x.rs", &format!("// moved\n{text}"))]),
            &Scope::All,
        );
        let ids = |ms: &[Mutant]| ms.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&moved), ids(&all));
    }

    #[test]
    fn a_mutant_applies_and_shows_its_line() {
        let current = tree(&[("src/x.rs", CURRENT)]);
        let all = generate(&current, &Scope::All);
        let m = all
            .iter()
            .find(|m| m.operator == Operator::DeleteNot)
            .expect("a ! to delete");
        let text = &current.files["src/x.rs"];
        assert!(m.apply(text).contains("if ready(a) { a + 1 }"));
        assert_eq!(
            m.one_line(text),
            "-if !ready(a) { a + 1 } else { a } +if ready(a) { a + 1 } else { a }"
        );
        assert!(m.diff(text).contains("+    if ready(a)"));
        let listing = render_list(&all, &current);
        assert!(listing.contains(&format!(
            "{}  src/x.rs:{}  delete-not  x::new",
            m.id, m.line
        )));
    }
}
