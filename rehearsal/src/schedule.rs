//! Which cell starts when, and how many run at once (`--jobs`).
//!
//! On one machine the order decides the wall time: a long cell started
//! last runs alone while the cores idle. Cells therefore start longest
//! first, by their durations in the last `report.json` under `reports/`
//! (by a static estimate from the plan for a cell that has none); with
//! no cell measured at all they start in matrix order, which packed
//! better than the estimate did.
//!
//! `--jobs auto` picks the concurrency from the cores and the CPU the
//! cells used before: a cell spends most of its time in holds, so two
//! cells on two cores leave the machine half idle. Without history it
//! takes one cell per core (what `--jobs 2` does on the reference
//! machine); with history, as many cells as ask half again the cores'
//! CPU (their CPU comes in bursts between holds), but
//! never more than an earlier run that saturated the machine had, since
//! its cells' CPU per second is then understated, and timing-sensitive
//! cells (heartbeats, deadlines) start to feel the queueing.
//!
//! A cell that must catch a seeded defect is timing-sensitive: its
//! defect shows only inside a race window (a flip landing in a
//! rotation's stale read, a rotator falling behind a cron period) that
//! CPU queueing shifts, so with enough cells per core it goes unseen
//! now and then. [`Admission`] therefore never runs such a cell beside
//! more than [`SENSITIVE_CELLS_PER_CORE`] cells per core in all, which
//! only a `--jobs N` above [`MAX_CELLS_PER_CORE`] per core reaches. The
//! bound was one, then two cells per core while detections and clean
//! cells still failed under load for the harness's own reasons (a start
//! gate that pinned the MVCC horizon, a liveness rule broken by late
//! monitor ticks and by any worker's row-lock wait, a drain bounded in
//! total instead of by progress, a rescue check that gave a late rescue
//! no second look) and for one of the runtime's (a new leader rescuing
//! its inheritance one transaction per attempt, for seconds, with
//! rotation waiting). With those fixed, the full matrix at six cells on
//! two cores passed 38 of 38 with every seeded defect caught.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::matrix::{Expectation, FlipMode, Step};
use crate::plan::CellPlan;
use crate::report::RunReport;

/// `--jobs`: a number of cells at once, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jobs {
    /// Exactly this many (1 to [`MAX_JOBS`]).
    Fixed(u32),
    /// Chosen from the cores and the history ([`auto_jobs`]).
    Auto,
}

/// The most cells `--jobs` accepts at once.
pub const MAX_JOBS: u32 = 256;

impl FromStr for Jobs {
    type Err = String;

    fn from_str(s: &str) -> Result<Jobs, String> {
        if s == "auto" {
            return Ok(Jobs::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=MAX_JOBS).contains(&n) => Ok(Jobs::Fixed(n)),
            Ok(n) => Err(format!(
                "{n} is not in 1..={MAX_JOBS}; give a number of cells or auto"
            )),
            Err(_) => Err(format!(
                "\"{s}\" is neither a number of cells (1..={MAX_JOBS}) nor auto"
            )),
        }
    }
}

impl fmt::Display for Jobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Jobs::Fixed(n) => write!(f, "{n}"),
            Jobs::Auto => f.write_str("auto"),
        }
    }
}

/// What an earlier run tells the scheduler.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// The report it came from (`None`: no earlier report).
    pub source: Option<PathBuf>,
    /// Wall time of each cell by name, in ms.
    pub durations: BTreeMap<String, u64>,
    /// The run's CPU and how busy the machine was.
    pub load: Option<Load>,
}

/// The CPU an earlier run used, against the time its cells ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// Harness and children CPU of the whole run, in ms.
    pub cpu_ms: u64,
    /// The cells' wall times added up, in ms.
    pub cell_ms: u64,
    /// The run's wall time, in ms.
    pub wall_ms: u64,
    /// Cores of the machine it ran on (0: not recorded).
    pub cores: u32,
    /// Cells it ran at once (0: not recorded).
    pub jobs: u32,
}

impl Load {
    /// Cores a running cell keeps busy on average.
    pub fn cores_per_cell(&self) -> f64 {
        self.cpu_ms as f64 / self.cell_ms.max(1) as f64
    }

    /// Whether the run kept its cores busy most of the time: its cells
    /// then waited for CPU, and their CPU per second understates demand.
    pub fn saturated(&self) -> bool {
        self.cores > 0
            && self.cpu_ms as f64 >= SATURATED * (self.wall_ms as f64 * f64::from(self.cores))
    }
}

/// The share of the cores a run must have used to count as saturated.
const SATURATED: f64 = 0.85;

impl History {
    /// What `report` says about its cells and its load. A run beside a
    /// `--stress` load says nothing of its load: its cells waited for CPU
    /// the load held, so their CPU per second understates what they ask,
    /// and the next unstressed run would start too many at once.
    pub fn of(report: &RunReport, source: PathBuf) -> History {
        let durations: BTreeMap<String, u64> = report
            .cells
            .iter()
            .map(|c| (c.name.clone(), c.elapsed_ms))
            .collect();
        let cell_ms: u64 = durations.values().sum();
        let measured = !report.run.end.interrupted && report.run.header.stress.is_none();
        let load = (cell_ms > 0 && measured).then(|| Load {
            // The containers' CPU is already part of children_cpu_ms.
            cpu_ms: report.run.end.harness_cpu_ms + report.run.end.children_cpu_ms,
            cell_ms,
            wall_ms: report.run.end.wall_ms,
            cores: report.run.header.cores,
            jobs: report.run.header.jobs,
        });
        History {
            source: Some(source),
            durations,
            load,
        }
    }

    /// The newest report under `reports_root` that can be read (folders
    /// are named by UTC time, so the last name is the newest); none when
    /// there is no such report.
    pub fn latest(reports_root: &Path) -> History {
        let Ok(entries) = std::fs::read_dir(reports_root) else {
            return History::default();
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        dirs.iter()
            .rev()
            .find_map(|d| History::of_file(&d.join("report.json")))
            .unwrap_or_default()
    }

    fn of_file(file: &Path) -> Option<History> {
        let report = crate::report::read_json(file).ok()?;
        Some(History::of(&report, file.to_owned()))
    }
}

/// A rough wall time of a cell from its plan alone, in ms: holds, pauses
/// and suspensions as written, a few seconds for setup, each step, the
/// drain and reconciliation. Only the order of cells depends on it.
pub fn estimate_ms(plan: &CellPlan) -> u64 {
    const SETUP_MS: u64 = 3_000;
    const STEP_MS: u64 = 500;
    const DRAIN_MS: u64 = 5_000;
    const RECONCILE_MS: u64 = 2_000;
    let mut ms = SETUP_MS + RECONCILE_MS;
    let mut drained = false;
    for step in &plan.steps {
        ms += STEP_MS
            + match step {
                Step::Hold(h) => h.duration.as_millis(),
                Step::Roll(r) if r.one_at_a_time => 3 * r.pause.as_millis(),
                Step::Suspend(s) => s.duration.map_or(0, |d| d.as_millis()),
                Step::Flip(f) if f.mode == FlipMode::Auto => {
                    f.timeout.map_or(10_000, |t| t.as_millis().min(10_000))
                }
                Step::Kill(_) => 2_000,
                Step::Drain(_) => {
                    drained = true;
                    DRAIN_MS
                }
                _ => 0,
            };
    }
    if !drained {
        ms += DRAIN_MS;
    }
    ms
}

/// The expected duration of each cell: measured where the history has
/// it, estimated from the plan otherwise.
pub fn expected_ms(cells: &[CellPlan], history: &History) -> Vec<u64> {
    cells
        .iter()
        .map(|c| {
            history
                .durations
                .get(&c.name)
                .copied()
                .unwrap_or_else(|| estimate_ms(c))
        })
        .collect()
}

/// Indices of `durations` longest first; equal durations keep plan order.
pub fn longest_first(durations: &[u64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..durations.len()).collect();
    order.sort_by(|&a, &b| durations[b].cmp(&durations[a]).then(a.cmp(&b)));
    order
}

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

/// `--jobs auto`: enough cells to keep `cores` busy given the CPU a
/// running cell used before ([`OFFERED`] times the cores, rounded up),
/// within 1 and the smaller of the cell count
/// and [`MAX_CELLS_PER_CORE`] per core; one cell per core without
/// history; never above the concurrency of a history that saturated its
/// machine.
pub fn auto_jobs(cores: u32, cells: usize, load: Option<&Load>) -> Pick {
    let cores = cores.max(1);
    let ceiling = (cells.max(1) as u32).min(cores * MAX_CELLS_PER_CORE);
    let (wanted, why) = match load {
        None => (cores, "no earlier report: one cell per core".to_owned()),
        Some(load) => {
            let per_cell = load.cores_per_cell();
            let fill = if per_cell > 0.0 {
                (OFFERED * f64::from(cores) / per_cell)
                    .ceil()
                    .min(f64::from(MAX_JOBS)) as u32
            } else {
                u32::MAX
            };
            let mut why = format!("earlier cells kept {per_cell:.2} cores busy each");
            // What saturated that machine, scaled to this one's cores.
            let cap = (load.jobs * cores / load.cores.max(1)).max(1);
            let wanted = if load.saturated() && load.jobs > 0 && fill > cap {
                why.push_str(&format!(
                    ", but that run saturated its {} cores at {} at once",
                    load.cores, load.jobs
                ));
                cap
            } else {
                fill
            };
            (wanted, why)
        }
    };
    let jobs = wanted.clamp(1, ceiling);
    Pick {
        jobs,
        why: format!(
            "jobs auto: {jobs} ({cores} core{}; {why})",
            if cores == 1 { "" } else { "s" }
        ),
    }
}

/// Cells per core a timing-sensitive cell may run among (itself
/// included): measured on 2 cores, where 6 at once kept every detection.
pub const SENSITIVE_CELLS_PER_CORE: u32 = 3;

/// Whether a cell's verdict depends on a race window that CPU queueing
/// shifts: every cell that must catch a seeded defect.
pub fn timing_sensitive(plan: &CellPlan) -> bool {
    matches!(plan.expect, Expectation::Detect(_))
}

/// Which waiting cell may start next, given the ones running: at most
/// `jobs` at once, and while a timing-sensitive cell runs (or to start
/// one), at most [`SENSITIVE_CELLS_PER_CORE`] cells per core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Cells at once.
    pub jobs: u32,
    /// Cells at once while a timing-sensitive cell runs:
    /// [`SENSITIVE_CELLS_PER_CORE`] per core, or `jobs` when that is fewer.
    pub sensitive_jobs: u32,
    /// Per cell of the plan, whether it is timing-sensitive.
    pub sensitive: Vec<bool>,
}

impl Admission {
    /// The rule for `cells` at `jobs` at once on `cores`.
    pub fn new(cells: &[CellPlan], jobs: u32, cores: u32) -> Admission {
        let jobs = jobs.max(1);
        Admission {
            jobs,
            sensitive_jobs: (cores * SENSITIVE_CELLS_PER_CORE).clamp(1, jobs),
            sensitive: cells.iter().map(timing_sensitive).collect(),
        }
    }

    /// The first of `waiting` (in start order) that may start beside
    /// `running`; `None`: wait until a running cell ends. A sensitive
    /// cell that does not fit lets the plain cells behind it pass: held
    /// back, they would leave the cores idle until it fits, and at the
    /// end of a run the sensitive cells still run side by side, one per
    /// core.
    pub fn next(&self, waiting: &[usize], running: &[usize]) -> Option<usize> {
        let sensitive = |i: usize| self.sensitive.get(i).copied().unwrap_or(false);
        let room = if running.iter().any(|&i| sensitive(i)) {
            self.sensitive_jobs
        } else {
            self.jobs
        };
        waiting.iter().copied().find(|&i| {
            let room = if sensitive(i) {
                self.sensitive_jobs
            } else {
                room
            };
            (running.len() as u32) < room
        })
    }
}

/// How a run's cells are scheduled: how many at once, and in which order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The machine's cores.
    pub cores: u32,
    /// Cells at once.
    pub jobs: u32,
    /// Indices into the plan's cells, in the order they start.
    pub order: Vec<usize>,
    /// Which cell may start beside which.
    pub admission: Admission,
    /// How both were chosen, in one line (printed, and in the report).
    pub describe: String,
}

impl Schedule {
    /// The schedule of `cells` under `--jobs`, from an earlier run's
    /// `history` and the machine's cores.
    pub fn new(cells: &[CellPlan], jobs: Jobs, history: &History) -> Schedule {
        Schedule::with(cells, jobs, history, cores())
    }

    /// [`Schedule::new`] with the history and cores given.
    pub fn with(cells: &[CellPlan], jobs: Jobs, history: &History, cores: u32) -> Schedule {
        let (jobs, why) = match jobs {
            Jobs::Fixed(n) => (n, format!("jobs {n}")),
            Jobs::Auto => {
                let pick = auto_jobs(cores, cells.len(), history.load.as_ref());
                (pick.jobs, pick.why)
            }
        };
        let measured = cells
            .iter()
            .filter(|c| history.durations.contains_key(&c.name))
            .count();
        // With no cell measured, the plan's estimate ordered worse than the
        // matrix does (the same 20 cells at --jobs 2: 253 s longest first
        // by estimate, 223 s in matrix order): keep the matrix's order.
        let order = if measured == 0 {
            (0..cells.len()).collect()
        } else {
            longest_first(&expected_ms(cells, history))
        };
        let by = match &history.source {
            Some(source) if measured > 0 => format!(
                "longest first: {measured} of {} by their time in run {}, the rest estimated from the plan",
                crate::observe::count(cells.len() as u64, "cell"),
                source.parent().and_then(|d| d.file_name()).map_or_else(
                    || source.display().to_string(),
                    |d| d.to_string_lossy().into_owned()
                )
            ),
            _ => "in matrix order (no earlier report of these cells)".to_owned(),
        };
        let admission = Admission::new(cells, jobs, cores);
        let sensitive = admission.sensitive.iter().filter(|&&s| s).count();
        let room = if sensitive > 0 && admission.sensitive_jobs < admission.jobs {
            format!(
                "; {} beside at most {}",
                crate::observe::count(sensitive as u64, "timing-sensitive cell"),
                crate::observe::count(u64::from(admission.sensitive_jobs - 1), "other"),
            )
        } else {
            String::new()
        };
        Schedule {
            cores,
            jobs,
            order,
            admission,
            describe: format!("{why}{room}; {by}"),
        }
    }
}

/// The machine's cores, as the scheduler counts them.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_parse_a_number_or_auto() {
        for (text, parsed) in [
            ("auto", Ok(Jobs::Auto)),
            ("1", Ok(Jobs::Fixed(1))),
            ("256", Ok(Jobs::Fixed(256))),
            ("0", Err("0 is not in 1..=256")),
            ("257", Err("257 is not in 1..=256")),
            ("Auto", Err("\"Auto\" is neither")),
            ("-1", Err("\"-1\" is neither")),
            ("", Err("\"\" is neither")),
        ] {
            match (text.parse::<Jobs>(), parsed) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text}"),
                (Err(got), Err(want)) => assert!(got.starts_with(want), "{text}: {got}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(Jobs::Auto.to_string(), "auto");
        assert_eq!(Jobs::Fixed(3).to_string(), "3");
    }

    #[test]
    fn cells_start_longest_first_and_ties_keep_plan_order() {
        assert_eq!(longest_first(&[10, 50, 20, 50, 5]), [1, 3, 2, 0, 4]);
        assert_eq!(longest_first(&[]), Vec::<usize>::new());
        assert_eq!(longest_first(&[7]), [0]);
    }

    fn load(cpu_s: u64, cell_s: u64, wall_s: u64, jobs: u32) -> Load {
        Load {
            cpu_ms: cpu_s * 1_000,
            cell_ms: cell_s * 1_000,
            wall_ms: wall_s * 1_000,
            cores: 2,
            jobs,
        }
    }

    #[test]
    fn jobs_auto_stays_within_its_bounds() {
        // The issue's run: 309 CPU-s over 439 cell-s in 226 s at --jobs 2 (68% of 2 cores).
        let issue = load(309, 439, 226, 2);
        // A run that kept 2 cores 95% busy at 3 at once, and one whose
        // cells look light but that kept its cores 97% busy.
        let full = load(380, 600, 200, 3);
        let crowded = load(390, 700, 200, 3);
        // Cells that barely use the CPU, and cells that use none.
        let idle = load(10, 1_000, 500, 2);
        let none = load(0, 1_000, 500, 2);
        // Cells that each need more than a core.
        let heavy = load(900, 300, 400, 2);
        for (cores, cells, history, jobs) in [
            (2, 35, None, 2),
            (8, 35, None, 8),
            (0, 35, None, 1),
            (2, 1, None, 1),
            (2, 0, None, 1),
            (2, 35, Some(&issue), 5),
            (2, 2, Some(&issue), 2),
            (2, 35, Some(&full), 3),
            (4, 35, Some(&full), 6),
            (2, 35, Some(&crowded), 3),
            (4, 35, Some(&crowded), 6),
            (2, 35, Some(&idle), 6),
            (2, 35, Some(&none), 6),
            (1, 35, Some(&idle), 3),
            (2, 35, Some(&heavy), 1),
            (64, 35, Some(&issue), 35),
        ] {
            let pick = auto_jobs(cores, cells, history);
            assert_eq!(
                pick.jobs, jobs,
                "{cores} cores, {cells} cells, {history:?}: {pick:?}"
            );
            assert!(pick.jobs >= 1 && pick.jobs <= (cells.max(1) as u32));
            assert!(pick.jobs <= cores.max(1) * MAX_CELLS_PER_CORE);
            assert!(
                pick.why.starts_with(&format!("jobs auto: {jobs} (")),
                "{}",
                pick.why
            );
        }
        let why = auto_jobs(2, 35, Some(&crowded)).why;
        assert!(why.contains("saturated its 2 cores at 3 at once"), "{why}");
        let why = auto_jobs(2, 35, Some(&issue)).why;
        assert_eq!(
            why,
            "jobs auto: 5 (2 cores; earlier cells kept 0.70 cores busy each)"
        );
    }

    #[test]
    fn a_stressed_run_orders_the_next_one_but_does_not_size_it() {
        let mut report = crate::report::fixture::report();
        let unstressed = History::of(&report, "r/report.json".into());
        assert!(unstressed.load.is_some());
        report.run.header.stress = Some(crate::stress::Stress::PerCore(2).info(2));
        let stressed = History::of(&report, "r/report.json".into());
        assert_eq!(stressed.load, None);
        assert_eq!(stressed.durations, unstressed.durations);
        assert!(!stressed.durations.is_empty());
    }

    fn admission(jobs: u32, cores: u32, sensitive: &[bool]) -> Admission {
        Admission {
            jobs,
            sensitive_jobs: (cores * SENSITIVE_CELLS_PER_CORE).clamp(1, jobs),
            sensitive: sensitive.to_vec(),
        }
    }

    #[test]
    fn a_timing_sensitive_cell_never_runs_among_more_than_three_cells_per_core() {
        // Cells 0 and 1 are sensitive; 2 to 5 are not. 5 at once on 1 core.
        let a = admission(5, 1, &[true, true, false, false, false, false]);
        // Nothing runs: the head starts, whatever it is.
        assert_eq!(a.next(&[0, 2, 3], &[]), Some(0));
        assert_eq!(a.next(&[2, 0, 3], &[]), Some(2));
        // A sensitive cell runs: two more fit (3 per core), then nothing.
        assert_eq!(a.next(&[2, 3], &[0]), Some(2));
        assert_eq!(a.next(&[1, 3], &[0, 2]), Some(1));
        assert_eq!(a.next(&[3, 4], &[0, 2, 3]), None);
        // Only plain cells run: up to 5 of them.
        assert_eq!(a.next(&[3, 4], &[2]), Some(3));
        assert_eq!(a.next(&[5], &[2, 3, 4, 4]), Some(5));
        assert_eq!(a.next(&[5], &[2, 3, 4, 4, 5]), None);
        // A sensitive cell waits for room beside plain cells...
        assert_eq!(a.next(&[0], &[2, 3, 4]), None);
        assert_eq!(a.next(&[0], &[2, 3]), Some(0));
        // ...and lets the plain cells behind it pass.
        assert_eq!(a.next(&[0, 5], &[2, 3, 4]), Some(5));
        assert_eq!(a.next(&[0, 1], &[2, 3, 4]), None);
        // With jobs at or below three per core, sensitivity changes nothing:
        // what --jobs auto picks on two cores (at most 6).
        let six = admission(6, 2, &[true, false, false, false, false, false]);
        assert_eq!(six.next(&[5], &[0, 1, 2, 3, 4]), Some(5));
        assert_eq!(six.next(&[0], &[1, 2, 3, 4, 5]), Some(0));
        // Two cores, eight at once: a sensitive cell runs among six at most.
        let eight = admission(
            8,
            2,
            &[true, false, false, false, false, false, false, false],
        );
        assert_eq!(eight.next(&[5], &[0, 1, 2, 3, 4]), Some(5));
        assert_eq!(eight.next(&[6], &[0, 1, 2, 3, 4, 5]), None);
        assert_eq!(eight.next(&[0], &[1, 2, 3, 4, 5, 6]), None);
        assert_eq!(eight.next(&[6], &[1, 2, 3, 4, 5]), Some(6));
    }

    #[test]
    fn saturation_needs_the_cores_it_ran_on() {
        assert!(load(380, 600, 200, 3).saturated());
        assert!(!load(309, 439, 226, 2).saturated());
        let unknown = Load {
            cores: 0,
            ..load(380, 600, 200, 3)
        };
        assert!(!unknown.saturated());
    }

    #[test]
    fn containers_are_counted_once() {
        // children_cpu_ms already holds the containers' CPU (report.json 1.4 on).
        let mut r = crate::report::fixture::report();
        r.run.end.harness_cpu_ms = 1_000;
        r.run.end.children_cpu_ms = 9_000;
        r.run.end.container_cpu_ms = Some(6_000);
        let load = History::of(&r, PathBuf::from("report.json")).load.unwrap();
        assert_eq!(load.cpu_ms, 10_000);
    }
}
