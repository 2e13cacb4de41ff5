//! The content of `report.json`: one run, its artifacts, and every cell.
//!
//! The driver fills a [`RunReport`]; every renderer (Markdown, JUnit,
//! HTML, the terminal table) reads only this, so `rehearse report DIR`
//! can re-render a run long after it happened. The JSON is a contract
//! with release engineers' tooling: fields are only ever added, with
//! `#[serde(default)]`, and each addition bumps [`FORMAT_VERSION`].

use serde::{Deserialize, Serialize};

use crate::matrix::Expectation;
use crate::observe::{
    CensusSample, FenceRecord, Finding, FlipRecord, KillRecord, Phase, ProcessRecord, RingSample,
    Verdict,
};
use crate::plan::CellPlan;
pub use crate::stream::{RunEnd, RunHeader};
use crate::vocab::RunOutcome;

pub use crate::observe::ArtifactInfo;
use crate::reconcile::Detection;

/// The `report.json` format this build writes, as `MAJOR.MINOR`.
///
/// A reader accepts any minor revision of its major version (fields it
/// does not know are ignored; fields a file lacks take their defaults) and
/// refuses a newer major version, whose meaning it cannot know.
///
/// Revisions:
/// - `1.0`: first version: `run`, `artifacts` (with digests), and per
///   cell the plan, timeline of phases, kills, flips, fences, processes,
///   ring and census samples, findings, verdict and what it proved.
/// - `1.1`: per cell `step_failures` (defaults to empty).
/// - `1.2`: per cell `verdict_reason` (one line: `caught by name: X (phase)`,
///   `expected X, got Y and Z`, `expected X, got none`; defaults to empty)
///   and `detection` (`by_name`, `as_other`, `not_caught` for a `detect`
///   cell that reached a verdict; defaults to null); per run `selftest`
///   (the seeded-defect score of `rehearse selftest`; defaults to null).
/// - `1.3`: `run.seed_string`, the seed in decimal as a JSON string. A seed
///   is any u64, and above 2^53 a JSON number is read as a different value
///   by jq and browsers; `run.seed` stays a number because 1.x readers
///   require it, and a reader prefers `seed_string` when both are present.
/// - `1.4`: per run `backend_reason`, `engine` and `container_cpu_ms`; per
///   artifact `image` (docker backend); per process `signal` and
///   `container` (all default to empty/null).
/// - `1.5`: per run `cores`, `jobs` (cells at once) and `schedule` (how
///   `--jobs` was chosen and the cells ordered); 0 and empty by default,
///   which hides the run's CPU floor.
/// - `1.6`: per cell plan `path` (the releases an upgrade path walks) and
///   `schema_intended` (the declared schema differences); per cell
///   `schema_history` (`schema_version` after setup and each migrate) and
///   `schema_checks` (each `schema_matches_fresh` comparison, with its
///   differences and wall time); finding rules `schema_rewritten` and
///   `schema_drift` (all default to empty/null).
/// - `1.7`: per run `servers` (major, version, bindir, origin of each
///   PostgreSQL server); per cell `plan.server`, the major it ran on (a
///   run over several majors names its cells `NAME@pgMAJOR`). Both
///   default to empty/absent.
/// - `1.8`: per cell `plan.timings.budget`, the cell's time budget
///   (defaults to 5m); a cell past it is inconclusive with a
///   `harness_error` saying what it was waiting for.
/// - `1.9`: per run `container_cpu_source` (`cgroup` or `stats`) and
///   `start_to_ready` (median, 90th percentile and maximum over the
///   processes that printed `ready`); per process `start_to_ready_ms`
///   (all default to null).
/// - `1.10`: per run `matrix_checksum` (sha256 of the matrix file's
///   bytes) and `partition` (`--partition`: strategy, index, count and
///   every cell of the whole selection); default empty/null.
/// - `1.11`: per process `contract`, its stdout lines read against the
///   runtime's event contract: `events`, `unknown` (a newer release's
///   event kinds) and `garbled` (not events); default zeros.
/// - `1.12`: per run `merged_from`, the partial runs `rehearse merge`
///   joined (empty for a run; defaults to empty).
/// - `1.13`: per finding `at_ms`, when it was seen (ms from the cell's
///   start) where its rule knows: a breach's sample, a stall, the kill an
///   unproven rescue follows, a schema check; absent otherwise.
/// - `1.14`: per cell `late`, the monitor ticks that found
///   the harness or a runtime that should be beating late (starvation),
///   and `tries`, the earlier inconclusive tries of a cell tried again.
/// - `1.15`: per run `stress` (`--stress`: the flag's value as `spec`,
///   the busy `processes` started and the `cores` they were counted on);
///   defaults to null, a run beside no load of its own; and per run
///   `held_back` (`times`, `ms`, `within_ms`): how often and how long
///   `--jobs auto` held a cell back because a running cell had ticked
///   starved within `within_ms` (absent: no such gate, as with `--jobs N`).
/// - `1.16`: per run `checklist` (matrix.toml's `[[checklist]]`: each
///   ADR-041 §9 `item` with the `cells` that cover it; empty before).
/// - `1.17`: the finding rules `early_start` (an attempt started before
///   its `run_at`, retry backoff or snooze ended, by the database's
///   clock) and `unstopped_handler`, and per accepted job of the observations `run_at_ms`
///   (scheduled jobs only; absent otherwise).
/// - `1.18`: per cell `misplaced`, the monitor ticks (the first 20) that
///   found ready entries, claims or leases outside the slot their ring's
///   cursor and generation give them, per ring and kind of row; absent
///   when none did; and per cell `cancels`, every job a `cancel` step
///   cancelled as an operator (job, its state when picked, the binary
///   that cancelled it, whether it was live); absent when none.
/// - `1.19`: per cell `late_runtimes` (runtime, first tick, oldest
///   heartbeat age) and `queued_runtimes` (runtime, first tick, longest
///   wait, the requester's version or null when it names none, the
///   table): the monitor's evidence behind an excused rescue; absent when
///   none. (Late leases stay out: a cell can have thousands.)
/// - `1.20`: each of `queued_runtimes` is one waiting statement, with
///   `since_unix_ms` (when it began) and `explains_until_unix_ms` (the
///   latest a rescue it held back can have come), by the database's
///   clock: a heartbeat rescue is excused only inside that window.
/// - `1.21`: per run `engine_cpu_ms` on the docker backend: the container
///   engine's own CPU during the run (daemons, shims, storage driver),
///   also counted in `children_cpu_ms` and so in the floor and in
///   `--jobs auto`'s cores per cell; absent elsewhere.
/// - `1.22`: per `schema_history` record `reported`, the versions the
///   migrate's `migrated` event named (`from`, `to`; absent when it printed
///   none or ran twice), and the finding rule `migration_misrecorded`.
/// - `1.23`: per flip `holder_ages` (each holder a `blocked` event named: the age
///   it printed, the database's when the driver read it, and the window
///   between; absent when none), and the finding rule `holder_misreported`.
/// - `1.24`: per run `held_back.grew_to`, the most cells at once when
///   `--jobs auto` grew above its schedule while the cores idled; absent
///   when it did not grow.
/// - `1.25`: per census sample `xacts`, the transactions the cell's
///   database had ended so far (`pg_stat_database`), per cell `idle`, the
///   stretches the plan held the fleet idle, and the finding rule
///   `runaway_loop` (judged in the windows the plan held the fleet idle,
///   such as the drain's new idle tail).
/// - `1.26`: per cell `held_by_commands`: statements of runtimes that
///   name no session (0.6) the monitor saw waiting, for at least half
///   `stale_after`, on a lock a one-shot command held or requested (a
///   migration, a flip), with the command's version, the table and the
///   window it explains (as `queued_runtimes`); absent when none.
/// - `1.27`: per cell `leaderships`, every term of maintenance leadership
///   (the process, when it reported `leader`, when the harness asked it to
///   stop and when it ended), and the finding rule `leadership_lost`.
/// - `1.28`: per census sample `scans`, the reads so far of each table
///   only the leader's slow duties read while the fleet is idle, and
///   `runaway_loop` judged per table too; in `cell_finished` events,
///   `doubts`, the rules reconciliation could not judge the cell on (a
///   rescue where the monitor had no reading), whose words become the
///   cell's harness error when its verdict rested on them.
/// - `1.29`: per run `prepare_ms`, the wall time before the cells' window
///   (artifacts built, images made), which the CPU figures never counted:
///   the floor is now weighed against the window's wall time.
/// - `1.30`: in `cell_finished` events' observations, per ring of a
///   `rings_pruned_back` check `left`, the first rows it found left (table,
///   job, run lease, slot, generation, holder, heartbeat age, and the job's
///   state and run lease then); the failure and the `ring_stalled` finding
///   name them.
/// - `1.31`: per flip `ids_drawn_before`, the job-id sequence's last value
///   read once the flip had committed, and `fence_breached` on the enqueue
///   path: a job accepted from a pre-flip producer with an id above it.
/// - `1.32`: per run `held_back.shrank_to`, the fewest cells at once when
///   `--jobs auto` went below its schedule while cells kept starving.
/// - `1.33`: per process `secret_lines` and `first_secret_line` (when,
///   which stream, the line redacted), the lines it printed that carried a
///   secret, and the finding rule `secret_printed`.
/// - `1.34`: per process `target_hidden_lines` and
///   `first_target_hidden_line`, the lines that printed the DSN it was
///   handed with more than its password masked, and the finding rule
///   `target_hidden`.
/// - `1.35`: a ring sample's `column_slot` and `column_generation` are
///   null where the schema under test has no compat cursor columns (a
///   contract migration dropped them).
pub const FORMAT_VERSION: &str = "1.35";

/// Everything a run produced: the file `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// [`FORMAT_VERSION`] when written; checked on read.
    pub format_version: String,
    /// Who ran what, when, where, and how to replay it.
    pub run: RunInfo,
    /// Every artifact the run used, with the digest of what actually ran.
    pub artifacts: Vec<ArtifactInfo>,
    /// One entry per cell, in run order.
    pub cells: Vec<CellReport>,
    /// The seeded-defect score, for a `rehearse selftest` run. Added in 1.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selftest: Option<crate::selftest::Score>,
}

/// The run as a whole: its header (who ran what, when, where, how to
/// replay it) and how it ended, both as the event stream said them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The header the run started with, its fields flat in `run`.
    #[serde(flatten)]
    pub header: RunHeader,
    /// How the run ended, its fields flat in `run`.
    #[serde(flatten)]
    pub end: RunEnd,
    /// From spawn request to `ready`, over every process that printed it. Added in 1.9.
    #[serde(default)]
    pub start_to_ready: Option<ReadyTimes>,
    /// `rehearse merge`: the run ids of the partial runs joined, by share. Added in 1.12.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
}

impl RunInfo {
    /// The shortest wall time the run could have had on its machine:
    /// its longest cell, or its CPU spread over every core, whichever is
    /// longer (`None` when the cores were not recorded).
    pub fn floor_ms(&self, longest_cell_ms: u64) -> Option<u64> {
        (self.header.cores > 0).then(|| {
            let cpu = self.end.harness_cpu_ms + self.end.children_cpu_ms;
            longest_cell_ms.max(cpu / u64::from(self.header.cores))
        })
    }
}

/// How long processes took from the spawn request (a container's create
/// and start included) to their `ready` event: the backend's start cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyTimes {
    /// How many processes printed `ready`.
    pub processes: usize,
    /// The median, in ms (the lower middle of an even count).
    pub median_ms: u64,
    /// The 90th percentile (nearest rank), in ms.
    pub p90_ms: u64,
    /// The slowest, in ms.
    pub max_ms: u64,
}

impl ReadyTimes {
    /// Over every process of `cells`; `None` when none printed `ready`.
    pub fn of(cells: &[CellReport]) -> Option<ReadyTimes> {
        let mut ms: Vec<u64> = cells
            .iter()
            .flat_map(|c| &c.processes)
            .filter_map(|p| p.start_to_ready_ms)
            .collect();
        if ms.is_empty() {
            return None;
        }
        ms.sort_unstable();
        let rank = |q: usize| ms[(ms.len() * q).div_ceil(100).saturating_sub(1)];
        Some(ReadyTimes {
            processes: ms.len(),
            median_ms: ms[(ms.len() - 1) / 2],
            p90_ms: rank(90),
            max_ms: ms[ms.len() - 1],
        })
    }
}

/// One cell: what was planned, what happened, and the verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellReport {
    /// The cell's name.
    pub name: String,
    /// Its one-line description from matrix.toml.
    pub about: String,
    /// What the cell had to show: nothing wrong, or one named finding.
    pub expect: Expectation,
    /// Whether it met that expectation.
    pub verdict: Verdict,
    /// For a `detect` cell that reached a verdict: caught by name, as
    /// something else, or not at all. Added in 1.2.
    #[serde(default)]
    pub detection: Option<Detection>,
    /// Why the verdict is what it is, in one line. Added in 1.2.
    #[serde(default)]
    pub verdict_reason: String,
    /// Everything reconciliation and the monitor found (the required one, for a `detect` cell).
    pub findings: Vec<Finding>,
    /// Phases in order, with start and end in ms since the cell started.
    pub timeline: Vec<Phase>,
    /// The plan that was executed, so the cell can be replayed and reviewed.
    pub plan: CellPlan,
    /// Jobs producers reported accepted (committed).
    pub accepted: u64,
    /// Jobs whose commit's fate was unknown (a producer killed mid-commit).
    pub uncertain: u64,
    /// Hard kills performed, with the attempts each had in flight.
    pub kills: Vec<KillRecord>,
    /// Authority flips run.
    pub flips: Vec<FlipRecord>,
    /// Old binaries started after the flip to prove the fence.
    pub fences: Vec<FenceRecord>,
    /// Every process the cell started.
    pub processes: Vec<ProcessRecord>,
    /// Ring cursor samples from the monitor.
    pub rings: Vec<RingSample>,
    /// Throughput and fleet samples from the monitor (cumulative counts).
    pub census: Vec<CensusSample>,
    /// Wall time of the whole cell, reconciliation included.
    pub elapsed_ms: u64,
    /// Of which reconciliation.
    pub reconcile_ms: u64,
    /// Why the harness could not reach a verdict (set when inconclusive).
    pub harness_error: Option<String>,
    /// Steps that did not do what the cell said (a refusal where success
    /// was expected, an assert that did not hold, a runtime that died):
    /// each fails a `pass` cell. Added in 1.1.
    #[serde(default)]
    pub step_failures: Vec<String>,
    /// What the cell proved, one sentence each (empty unless it passed).
    pub proved: Vec<String>,
    /// `schema_version` after setup and after each migrate step. Added in 1.6.
    #[serde(default)]
    pub schema_history: Vec<crate::observe::SchemaRecord>,
    /// Each `schema_matches_fresh` comparison: differences, intended ones,
    /// stale declarations, wall time. Added in 1.6.
    #[serde(default)]
    pub schema_checks: Vec<crate::observe::SchemaCheck>,
    /// Monitor ticks that found the harness or a runtime that should be
    /// beating late: the starvation the cell met. Added in 1.14.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<crate::observe::LateSample>,
    /// Monitor ticks that found ring rows outside the slot their ring's
    /// cursor gives them (the first 20). Added in 1.18.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub misplaced: Vec<crate::observe::MisplacedSample>,
    /// Every job a `cancel` step cancelled as an operator, with the
    /// command's answer. Added in 1.18.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancels: Vec<crate::observe::CancelRecord>,
    /// Runtimes the monitor saw with a heartbeat older than half
    /// `stale_after`, whatever held it: what a crash rescue of their
    /// attempts was excused by. Added in 1.19.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_runtimes: Vec<crate::observe::LateRuntime>,
    /// Runtimes the monitor saw queued behind a lock request on the lease
    /// table, with the requester's version: what a heartbeat rescue of
    /// their attempts was excused by when another release asked for the
    /// lock. Added in 1.19.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_runtimes: Vec<crate::observe::QueuedRuntime>,
    /// Statements of runtimes that name no session (0.6) the monitor saw
    /// held behind a one-shot command's lock (a migration's, a flip's):
    /// what a heartbeat or crash rescue of an earlier release's attempts
    /// was excused by inside the wait's window. Added in 1.26.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by_commands: Vec<crate::observe::HeldByCommand>,
    /// The stretches the plan held the fleet idle (the drain's idle tail,
    /// a `rings_pruned_back` wait), which `runaway_loop` judges against
    /// the census's `xacts`. Added in 1.25.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<crate::observe::IdleWindow>,
    /// Every term of maintenance leadership, which `leadership_lost`
    /// judges. Added in 1.27.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaderships: Vec<crate::observe::LeaderTerm>,
    /// Earlier tries that were inconclusive for the harness's own reasons
    /// (`--retries`); the cell's verdict is its last try's. Added in 1.14.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tries: Vec<crate::stream::CellTry>,
}

/// How many cells reached each verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Cells that met their expectation.
    pub pass: usize,
    /// Cells that did not.
    pub fail: usize,
    /// Cells the harness could not judge.
    pub inconclusive: usize,
}

impl RunReport {
    /// Verdict counts over all cells.
    pub fn tally(&self) -> Tally {
        let mut tally = Tally::default();
        for cell in &self.cells {
            match cell.verdict {
                Verdict::Pass => tally.pass += 1,
                Verdict::Fail => tally.fail += 1,
                Verdict::Inconclusive => tally.inconclusive += 1,
            }
        }
        tally
    }

    /// How the run turned out, for the exit code: any failure wins, then
    /// inconclusive (an interrupted run is never "all met": cells are missing).
    pub fn outcome(&self) -> RunOutcome {
        if let Some(score) = &self.selftest {
            // Also fails for a seeded defect without a cell.
            return match (score.outcome(), self.run.end.interrupted) {
                (RunOutcome::AllMet, true) => RunOutcome::Inconclusive,
                (outcome, _) => outcome,
            };
        }
        let tally = self.tally();
        if tally.fail > 0 {
            RunOutcome::CellFailed
        } else if tally.inconclusive > 0 || self.run.end.interrupted {
            RunOutcome::Inconclusive
        } else {
            RunOutcome::AllMet
        }
    }
}

/// The word used for a verdict in every report (`pass`, `fail`, `inconclusive`).
pub fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Inconclusive => "inconclusive",
    }
}

#[cfg(test)]
mod seed_tests {
    #[test]
    fn a_seed_above_2_pow_53_is_written_exactly_as_a_string_and_read_back() {
        let mut report = crate::report::fixture::report();
        report.run.header.seed = u64::MAX - 1;
        let json = crate::report::to_json(&report).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["run"]["seed_string"], "18446744073709551614");
        assert_eq!(value["run"]["seed"].as_u64(), Some(u64::MAX - 1));
        let back = crate::report::from_json(std::path::Path::new("r.json"), &json).unwrap();
        assert_eq!(back.run.header.seed, u64::MAX - 1);
        // A 1.2 file has only the number; a string wins over a number.
        let mut old = value.clone();
        old["run"].as_object_mut().unwrap().remove("seed_string");
        old["run"]["seed"] = 7.into();
        let back =
            crate::report::from_json(std::path::Path::new("r.json"), &old.to_string()).unwrap();
        assert_eq!(back.run.header.seed, 7);
        old["run"]["seed_string"] = "9".into();
        let back =
            crate::report::from_json(std::path::Path::new("r.json"), &old.to_string()).unwrap();
        assert_eq!(back.run.header.seed, 9);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ready_times(ms: &[Option<u64>]) -> Vec<CellReport> {
        let mut report = super::super::fixture::report();
        let cell = &mut report.cells[0];
        let template = cell.processes[0].clone();
        cell.processes = ms
            .iter()
            .map(|&t| crate::observe::ProcessRecord {
                start_to_ready_ms: t,
                ..template.clone()
            })
            .collect();
        vec![report.cells.swap_remove(0)]
    }

    #[test]
    fn start_to_ready_is_summarised_over_the_processes_that_were_ready() {
        assert_eq!(ReadyTimes::of(&with_ready_times(&[None, None])), None);
        let one = ReadyTimes::of(&with_ready_times(&[Some(40)])).unwrap();
        assert_eq!(
            (one.processes, one.median_ms, one.p90_ms, one.max_ms),
            (1, 40, 40, 40)
        );
        // 1..=20 ms, shuffled, with a process that never got ready.
        let mut times: Vec<Option<u64>> = (1..=20).rev().map(Some).collect();
        times.insert(7, None);
        let t = ReadyTimes::of(&with_ready_times(&times)).unwrap();
        assert_eq!(
            (t.processes, t.median_ms, t.p90_ms, t.max_ms),
            (20, 10, 18, 20)
        );
    }
}
