//! The mutants a run asks for: every mutant of the workspace's
//! awa-runtime in scope (the diff against the previous release's archive
//! unless `--all`), sampled by `--sample N --seed S`, cut to a
//! `--partition` share, or the `--mutant` ids named.

use std::collections::BTreeMap;

use super::mutant::identify;
use super::{Counts, Mutant, Options, Scope, Tree, report, rust, scope, tree, unit};
use crate::plan::SplitMix64;

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
            unit::sql_file_units(path, text)
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
    Tree(#[from] tree::TreeError),
}

impl MutateError {
    /// Whether the user can fix it (exit 2) rather than the machine (exit 3).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, MutateError::Tree(_))
    }
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
