//! `--jobs auto`: how many cells run at once, from the cores, the CPU a
//! running cell keeps busy (an earlier report's, else matrix.toml's
//! estimate) and other work on the machine at the start.

use super::pressure::Busy;
use super::{Coverage, Load, MAX_JOBS};

/// The concurrency `--jobs auto` chose, and why, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    /// Cells at once.
    pub jobs: u32,
    /// `jobs auto: 5 (2 cores; earlier cells kept 0.70 cores busy each)`.
    pub why: String,
}

/// At most this many cells per core, whatever the history says: beyond
/// it the fleets' processes alone outnumber the cores many times over.
pub const MAX_CELLS_PER_CORE: u32 = 3;

/// How much CPU `--jobs auto` asks of the cores, as a share of them: a
/// cell's CPU comes in bursts (setup, migrate, roll, drain) with holds
/// between them, so cells that would keep the cores busy on average
/// leave them idle through the holds. Measured on 2 cores, the full
/// matrix (cells at 0.61 cores each at 2 at once): 4 at once (1.2 times
/// the cores) sat at 1.19x its floor, 6 at once at 1.06x.
const OFFERED: f64 = 1.5;

/// The same on the docker backend, whose CPU figure is a lower bound: the
/// kernel's work for the storage driver's FUSE requests and the bridge
/// network lands in no process the run can meter. Its cells measured 0.45
/// cores each (containers, engine, PostgreSQL and harness), yet five at
/// once on two cores (1.1 times the cores by that figure) starved with
/// nothing else running: CPU pressure near 99%, the pulse 1.2 s late, a
/// third of the cells inconclusive. Three at once kept every timing. At
/// 0.8, cells measured anywhere from 0.40 to 0.53 pack 4 (rounded up).
const OFFERED_DOCKER: f64 = 0.8;

/// What `--jobs auto` asks of the cores on `backend`.
fn offered(backend: &str) -> f64 {
    if backend == "docker" {
        OFFERED_DOCKER
    } else {
        OFFERED
    }
}

/// What an earlier run says about the cells `--jobs auto` is sizing for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Basis<'a> {
    /// No earlier report.
    Nothing,
    /// A report without CPU figures (its run was cut short).
    CutShort,
    /// A report with its CPU figures.
    Measured(Evidence<'a>),
}

/// An earlier run's CPU, and how far it speaks for this run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evidence<'a> {
    /// Its CPU against its cells' time.
    pub load: &'a Load,
    /// How much of this run's selection it measured.
    pub coverage: Coverage,
    /// Its backend when that is not this run's (`None`: the same).
    pub other_backend: Option<&'a str>,
    /// This run's backend.
    pub backend: &'a str,
}

impl Evidence<'_> {
    /// Cores a running cell keeps busy, and why, given the shipped
    /// `estimate`: the report's figure where it covers the selection on
    /// this backend, weighted by time with the estimate where it covers
    /// at least half; otherwise, weighted so, it may make a cell heavier
    /// than the estimate (fewer cells at once) but never lighter, since a
    /// thin or foreign sample is what packed six cells on two cores.
    fn cores_per_cell(&self, estimate: f64) -> (f64, String) {
        let measured = self.load.cores_per_cell();
        let c = &self.coverage;
        let weighed = c.weigh(measured, estimate);
        let trusted = self.other_backend.is_none() && c.enough();
        if trusted && c.full() {
            return (
                measured,
                format!("earlier cells kept {measured:.2} cores busy each"),
            );
        }
        if trusted {
            return (
                weighed,
                format!(
                    "history covers {} of {} cells: their {measured:.2} cores each, the shipped {estimate:.2} for the rest, {weighed:.2} by time",
                    c.measured, c.cells
                ),
            );
        }
        let what = match self.other_backend {
            Some(other) if c.enough() => {
                format!(
                    "no {} report of these cells; the {other} run's",
                    self.backend
                )
            }
            Some(other) => format!(
                "the {other} history covers {} of {} cells",
                c.measured, c.cells
            ),
            None => format!("history covers {} of {} cells", c.measured, c.cells),
        };
        if weighed > estimate {
            (
                weighed,
                format!(
                    "{what}, heavier than the shipped estimate: {weighed:.2} cores a cell weighted by the cells it measured"
                ),
            )
        } else {
            (
                estimate,
                format!(
                    "{what}: ignored, packing from the shipped estimate of {estimate:.2} cores a cell"
                ),
            )
        }
    }
}

/// What `--jobs auto` weighs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoInput<'a> {
    /// The machine's cores.
    pub cores: u32,
    /// Cells in the selection.
    pub cells: usize,
    /// matrix.toml's `[schedule] cores_per_cell`.
    pub estimate: f64,
    /// What an earlier run measured.
    pub basis: Basis<'a>,
    /// Other work on the machine when the run began.
    pub busy: Option<Busy>,
    /// The backend the cells run on (`process`, `docker`).
    pub backend: &'a str,
}

/// Cells at once that ask `offered` times `cores` of CPU at `per_cell`
/// cores each, rounded up.
pub(super) fn fill(offered: f64, cores: f64, per_cell: f64) -> u32 {
    if per_cell > 0.0 {
        (offered * cores / per_cell).ceil().min(f64::from(MAX_JOBS)) as u32
    } else {
        u32::MAX
    }
}

/// `--jobs auto`: enough cells to keep the cores busy given the CPU a
/// running cell keeps busy ([`OFFERED`] times the cores, rounded up),
/// within 1 and the smaller of the cell count and [`MAX_CELLS_PER_CORE`]
/// per core; never above the concurrency of a history that saturated
/// its machine; fewer by the share of the CPU other work took at the start.
pub fn auto_jobs(input: &AutoInput<'_>) -> Pick {
    let cores = input.cores.max(1);
    let ceiling = (input.cells.max(1) as u32).min(cores * MAX_CELLS_PER_CORE);
    let estimate = input.estimate;
    let shipped = || format!("packing from the shipped estimate of {estimate:.2} cores a cell");
    let (per_cell, mut why, load) = match input.basis {
        Basis::Nothing => (estimate, format!("no earlier report: {}", shipped()), None),
        Basis::CutShort => (
            estimate,
            format!("the earlier report was cut short: {}", shipped()),
            None,
        ),
        Basis::Measured(evidence) => {
            let (per_cell, why) = evidence.cores_per_cell(estimate);
            (per_cell, why, Some(evidence.load))
        }
    };
    let offered = offered(input.backend);
    let mut wanted = fill(offered, f64::from(cores), per_cell);
    if let Some(load) = load {
        // What saturated that machine, scaled to this one's cores.
        let cap = (load.jobs * cores / load.cores.max(1)).max(1);
        if load.saturated() && load.jobs > 0 && wanted > cap {
            why.push_str(&format!(
                ", but that run saturated its {} cores at {} at once",
                load.cores, load.jobs
            ));
            wanted = cap;
        }
    }
    let mut jobs = wanted.clamp(1, ceiling);
    if let Some(busy) = input.busy {
        let free = f64::from(cores) * (1.0 - busy.share.clamp(0.0, 1.0));
        let lowered = fill(offered, free, per_cell).min(wanted).clamp(1, ceiling);
        if lowered < jobs {
            why.push_str(&format!(
                "; {}: {lowered} instead of {jobs}",
                busy.describe()
            ));
            jobs = lowered;
        }
    }
    Pick {
        jobs,
        why: format!(
            "jobs auto: {jobs} ({cores} core{}; {why})",
            if cores == 1 { "" } else { "s" }
        ),
    }
}
