//! Runaway loops: while the fleet stands idle, the database hears from
//! the runtimes only as often as their periods say.
//!
//! Every loop of a runtime is periodic: a worker polls for work, beats
//! and bids for leadership; the leader promotes, fires cron, rescues,
//! rotates and prunes each ring and folds, each on its own interval. A
//! loop whose next due time is computed wrong (`now - period`, a due
//! time never moved on) runs on every pass of its task instead, hundreds
//! of times a second, and every job still ends as designed: no other
//! rule sees it, and in production it is a leader that keeps a core and
//! a database connection busy for nothing. While the plan holds the fleet
//! idle ([`IdleWindow`]: the drain's idle tail, a `rings_pruned_back`
//! wait with the load off), everything the cell's database does is
//! those loops and the harness's own reads, so the transactions it ends
//! (`pg_stat_database`, sampled every monitor tick) are bounded by the
//! live runtimes' cadences: [`Budget`]. A window whose rate is past the
//! budget is a `runaway_loop` finding.
//!
//! That total is mostly the workers' polls, and a loop slowed by a busy
//! machine may spin inside it unseen (a leader folding on every pass ran
//! 636 transactions a second beside one other cell, 387 beside five, under
//! a budget of 401). So each table that only the leader's slow duties
//! read while the fleet is idle ([`DutyTable`], [`readers`]) is judged on its own too:
//! its reads (`pg_stat_user_tables`, sampled with the transactions)
//! against those duties' periods and the harness's own reads of it. A fold
//! on every pass reads `queue_terminal_rollup_deltas` a hundred times a
//! second where its period allows one every two seconds.
//!
//! Each backend reports its transactions about once a second (and a
//! backend that goes quiet, some seconds later), so a window's first
//! [`SETTLE_MS`] are left out (the busy phase before it is still being
//! reported then) and a window must span [`MIN_SPAN_MS`] to be judged.
//! A window that a PostgreSQL outage crossed (a crash resets the
//! counters) is not judged.
//!
//! Starvation only lowers a loop's rate, but it can also hold a
//! backend's report back until it lands inside the window, with the busy
//! phase's transactions in it. So a window over its budget in which the
//! harness's own pulse ran [`SQUEEZED_PULSE_MS`] late is a finding only
//! past [`SQUEEZED_STRETCH`] times the budget; under that it is
//! [`doubted`], and the cell cannot pass on it (inconclusive, as a ring
//! stall in a squeezed window is).
//!
//! A busy machine can also slow the leader's loop while the harness's
//! pulse stays on time (its database round trips queue behind other
//! cells'), and a loop that already takes a fifth of a second a pass
//! spends little more by spinning: a cell that exists to catch a runaway
//! loop cannot call it missed unless its leader kept its cron duty's pace
//! ([`MIN_LEADER_PACE`]) in a window judged; otherwise it is [`unseen`].

use super::rules::{RECONCILE, phase_at};
use crate::matrix::{Duration, FindingRule, Timings};
use crate::observe::{self, CensusSample, DutyTable, Finding, IdleWindow, Observations};

/// The first part of a window left out: the busy phase before it is
/// still being reported then (a backend reports about once a second).
pub(super) const SETTLE_MS: u64 = 1_000;
/// The shortest span of samples a window is judged on: at least two
/// reports of every connection that keeps working.
pub(super) const MIN_SPAN_MS: u64 = 2_000;
/// Transactions each wake of a runtime's loop may end. Measured on the
/// process backend (two cells at once beside other runs): the clean
/// `fresh-install` fleet (two runtimes) ended 248 a second in its idle
/// tail, 1.6 a wake; with `maintenance_spins` armed, 636 (4.0 a wake).
/// At 2.5 the budget (401 for two runtimes) sits as far above the one as
/// below the other.
const XACTS_PER_WAKE: f64 = 2.5;
/// What the harness itself ends a second in a cell's database while the
/// fleet is idle: the monitor's sample and lock-queue reads (4 a second
/// each) and a step's own polling (a `rings_pruned_back` wait's, 4 a
/// second), with room.
const HARNESS_PER_S: f64 = 20.0;
/// Transactions each job started in the window may bring (a cron fire:
/// enqueue, claim, heartbeats, close), with room.
const XACTS_PER_JOB: f64 = 20.0;
/// Rings each rotation tick prunes and rotates.
const RINGS: f64 = 3.0;
/// The harness's pulse this late (ms) in a window makes it squeezed.
pub(super) const SQUEEZED_PULSE_MS: u64 = 250;
/// How many times its budget a squeezed window must reach to be a finding.
pub(super) const SQUEEZED_STRETCH: f64 = 2.0;
/// The share of its cron duty's pace (one pass a `cron` period) under
/// which the leader's own loop counts as slowed in a window: too slow for
/// a spin to show. Its cron pass reads `cron_schedules` about once, and a
/// fold on every pass reads the deltas table at least that often; that
/// table is judged against 10 reads a second, 4 to 5 of them the
/// monitor's, so a spin shows only while the loop makes more than about 6
/// passes a second at a 100 ms cron period (0.6 of its pace). Measured on
/// docker with every core busy and the harness's pulse on time: a leader
/// folding on every pass at 4.6 cron reads a second stayed inside every
/// budget (8 reads of the deltas table in 2.4 s); at 11.9 it read the
/// table 96 times a second.
const MIN_LEADER_PACE: f64 = 0.7;

/// Reads of one table each pass of a duty that reads it may make, with
/// room (a fold reads each ring's ledger twice and its state once).
const READS_PER_PASS: f64 = 4.0;
/// Reads of one table the harness makes a second while the fleet is idle:
/// the monitor's sample (4 a second; it reads the deltas table once each,
/// no other duty table), with room.
/// Measured: the clean fleet's idle tail read the deltas table 4 to 5
/// times a second (the monitor's count and the fold), a leader folding on
/// every pass 35 to 42 times beside two other cells.
const HARNESS_READS_PER_S: f64 = 8.0;
/// Reads of one table each job started in the window may bring (a cron
/// fire's enqueue, claim and close), with room.
const READS_PER_JOB: f64 = 4.0;

/// A leader's duty, each on its own period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Duty {
    Cron,
    Rescue,
    Rotate,
    Fold,
}

/// The duties of the leader that read each [`DutyTable`] while the fleet
/// is idle: in 0.7, and in the earlier releases that have the table
/// (0.6.2 has no deltas table, and reads the others in the same duties).
/// Every other table is also read by the workers' polls or heartbeats,
/// so it is judged only through the transactions' total.
pub(super) fn readers(table: DutyTable) -> &'static [Duty] {
    match table {
        DutyTable::QueueTerminalRollupDeltas => &[Duty::Fold],
        DutyTable::QueueTerminalRollups => &[Duty::Fold, Duty::Rotate],
        DutyTable::CronSchedules | DutyTable::CronFires => &[Duty::Cron],
        DutyTable::DeadLetters => &[Duty::Rescue],
        DutyTable::TerminalArchive => &[Duty::Rotate],
    }
}

/// The periods a cell's runtimes loop at: the matrix's timings and the
/// intervals the driver gives every process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Cadence {
    poll: Duration,
    heartbeat: Duration,
    promote: Duration,
    cron: Duration,
    rescue: Duration,
    rotate: Duration,
    fold: Duration,
}

/// Wakes a second of a loop with period `d` (a zero period counts as
/// one wake a millisecond).
fn hz(d: Duration) -> f64 {
    1_000.0 / d.as_millis().max(1) as f64
}

impl Cadence {
    /// The cadence of a cell with `timings`.
    pub(super) fn of(timings: &Timings) -> Cadence {
        let fixed = |var: &str, default_ms: u64| {
            crate::driver::env::fixed_interval(var).unwrap_or(Duration::from_millis(default_ms))
        };
        Cadence {
            poll: fixed("AWA_POLL_INTERVAL", 20),
            heartbeat: timings.heartbeat,
            promote: fixed("AWA_PROMOTE_INTERVAL", 100),
            cron: fixed("AWA_CRON_INTERVAL", 100),
            rescue: timings.rescue_every,
            rotate: timings.rotate_every,
            fold: fixed("AWA_FOLD_INTERVAL", 2_000),
        }
    }

    /// Passes a second of one of the leader's duties.
    fn duty_hz(&self, duty: Duty) -> f64 {
        match duty {
            Duty::Cron => hz(self.cron),
            Duty::Rescue => hz(self.rescue),
            Duty::Rotate => RINGS * hz(self.rotate),
            Duty::Fold => hz(self.fold),
        }
    }

    /// `fold every 2.0s`.
    fn describe(&self, duty: Duty) -> String {
        let (what, every) = match duty {
            Duty::Cron => ("cron", self.cron),
            Duty::Rescue => ("rescue", self.rescue),
            Duty::Rotate => ("prune and rotation of each ring", self.rotate),
            Duty::Fold => ("fold", self.fold),
        };
        format!("{what} every {}", observe::duration(every.as_millis()))
    }

    /// What `duties` may read of one of their tables a second, with the
    /// harness's reads of it and `jobs_per_s` jobs started.
    fn reads_budget(&self, duties: &[Duty], jobs_per_s: f64) -> f64 {
        READS_PER_PASS * duties.iter().map(|&d| self.duty_hz(d)).sum::<f64>()
            + HARNESS_READS_PER_S
            + READS_PER_JOB * jobs_per_s
    }

    /// Wakes a second of each runtime: its polls for work, its heartbeat
    /// and its bid for leadership (at most once a heartbeat).
    fn per_runtime(&self) -> f64 {
        hz(self.poll) + 2.0 * hz(self.heartbeat)
    }

    /// Wakes a second of the leader's duties: promotion, cron, rescue,
    /// prune and rotation of each ring, folds, and its flip check (once
    /// a heartbeat).
    fn leader(&self) -> f64 {
        hz(self.promote)
            + hz(self.cron)
            + hz(self.rescue)
            + RINGS * hz(self.rotate)
            + hz(self.fold)
            + hz(self.heartbeat)
    }
}

/// What a window's database may end a second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Budget {
    /// Transactions a second.
    pub(super) per_s: f64,
    /// The live runtimes it was given for.
    pub(super) runtimes: u64,
}

impl Budget {
    /// For `runtimes` live runtimes (one of them leading) at `cadence`,
    /// starting `jobs_per_s` jobs a second.
    pub(super) fn of(cadence: &Cadence, runtimes: u64, jobs_per_s: f64) -> Budget {
        let wakes = runtimes as f64 * cadence.per_runtime() + cadence.leader();
        Budget {
            per_s: XACTS_PER_WAKE * wakes + HARNESS_PER_S + XACTS_PER_JOB * jobs_per_s,
            runtimes,
        }
    }
}

/// What an idle window is judged on.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Measure {
    /// Every transaction the database ended, against the live runtimes'
    /// cadence.
    Transactions {
        xacts: i64,
        /// Jobs started in the window.
        jobs: u64,
        budget: Budget,
    },
    /// The reads of one table only the leader's slow duties read.
    Reads {
        table: DutyTable,
        reads: i64,
        duties: &'static [Duty],
        /// Reads a second allowed.
        per_s: f64,
    },
}

/// One idle window as judged on one measure: its rate against its budget.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Judged {
    pub(super) window: IdleWindow,
    /// The samples the rate is taken between (ms since the cell started).
    pub(super) from_ms: u64,
    pub(super) to_ms: u64,
    pub(super) measure: Measure,
    /// The harness's pulse's worst lateness in the window, in ms.
    pub(super) pulse_late_ms: u64,
    /// The loops' periods, for the wording.
    cadence: Cadence,
}

impl Judged {
    fn count(&self) -> i64 {
        match self.measure {
            Measure::Transactions { xacts, .. } => xacts,
            Measure::Reads { reads, .. } => reads,
        }
    }

    /// Transactions (or reads) a second.
    pub(super) fn rate(&self) -> f64 {
        self.count() as f64 * 1_000.0 / (self.to_ms - self.from_ms).max(1) as f64
    }

    /// What the measure allows a second.
    pub(super) fn budget(&self) -> f64 {
        match self.measure {
            Measure::Transactions { budget, .. } => budget.per_s,
            Measure::Reads { per_s, .. } => per_s,
        }
    }

    fn excess(&self) -> f64 {
        self.rate() / self.budget()
    }

    fn over(&self) -> bool {
        self.rate() > self.budget()
    }

    fn squeezed(&self) -> bool {
        self.pulse_late_ms >= SQUEEZED_PULSE_MS
    }

    /// Over its budget and judged so: on a machine that kept up, or past
    /// [`SQUEEZED_STRETCH`] times it.
    fn found(&self) -> bool {
        self.over() && (!self.squeezed() || self.excess() > SQUEEZED_STRETCH)
    }

    fn doubted(&self) -> bool {
        self.over() && !self.found()
    }

    /// `the cell's database ended 412 transactions a second (1,236 in
    /// 3.0s, from 13.2s to 16.2s)`, or `awa.cron_fires was read ...`.
    fn figures(&self) -> String {
        let (what, verb, unit) = match &self.measure {
            Measure::Transactions { .. } => {
                ("the cell's database".to_owned(), "ended", "transactions")
            }
            Measure::Reads { table, .. } => (format!("awa.{}", table.name()), "was read", "times"),
        };
        format!(
            "{what} {verb} {:.0} {unit} a second ({} in {}, from {} to {})",
            self.rate(),
            observe::thousands(self.count().unsigned_abs()),
            observe::duration(self.to_ms - self.from_ms),
            observe::duration(self.from_ms),
            observe::duration(self.to_ms),
        )
    }

    /// `a budget of 325 a second for 2 live runtimes at their cadence`,
    /// or `a budget of 10 a second for the leader's duties that read it (fold
    /// every 2.0s) and the harness's own reads`.
    fn against(&self) -> String {
        match &self.measure {
            Measure::Transactions { jobs, budget, .. } => {
                let jobs = if *jobs > 0 {
                    format!(" and {} started", observe::count(*jobs, "job"))
                } else {
                    String::new()
                };
                format!(
                    "a budget of {:.0} a second for {}{jobs} ({:.0} a runtime)",
                    budget.per_s,
                    observe::count(budget.runtimes, "live runtime"),
                    budget.per_s / budget.runtimes.max(1) as f64,
                )
            }
            Measure::Reads { duties, per_s, .. } => {
                let duties: Vec<String> =
                    duties.iter().map(|&d| self.cadence.describe(d)).collect();
                format!(
                    "a budget of {per_s:.0} a second for the leader's duties that read it ({}) and the harness's own reads",
                    duties.join(", ")
                )
            }
        }
    }
}

/// Jobs started so far, over every version.
fn started(s: &CensusSample) -> u64 {
    s.by_version
        .values()
        .filter_map(|kinds| kinds.get("started"))
        .sum()
}

/// Live runtimes at a sample.
fn runtimes(s: &CensusSample) -> u64 {
    s.fresh_runtimes.values().sum()
}

/// Every idle window that can be judged, on each measure, with its rate
/// and budget.
pub(super) fn judge_windows(obs: &Observations, cadence: &Cadence) -> Vec<Judged> {
    obs.idle
        .iter()
        .flat_map(|w| judge_window(obs, cadence, *w))
        .collect()
}

fn judge_window(obs: &Observations, cadence: &Cadence, window: IdleWindow) -> Vec<Judged> {
    let from = window.from_ms + SETTLE_MS;
    let samples: Vec<(&CensusSample, i64)> = obs
        .census
        .iter()
        .filter(|s| from <= s.at_ms && s.at_ms <= window.to_ms)
        .filter_map(|s| Some((s, s.xacts?)))
        .collect();
    let (Some(&(first, first_xacts)), Some(&(last, last_xacts))) =
        (samples.first(), samples.last())
    else {
        return Vec::new();
    };
    if last.at_ms - first.at_ms < MIN_SPAN_MS || last_xacts < first_xacts {
        return Vec::new();
    }
    // A sample after the database did not answer: the window crossed an
    // outage (a crash also resets the counters).
    let in_window = |at_ms: u64| window.from_ms <= at_ms && at_ms <= last.at_ms;
    if obs
        .liveness
        .iter()
        .any(|l| in_window(l.at_ms) && l.after_outage)
    {
        return Vec::new();
    }
    let live = samples.iter().map(|(s, _)| runtimes(s)).max().unwrap_or(0);
    if live == 0 {
        return Vec::new();
    }
    let span_s = (last.at_ms - first.at_ms) as f64 / 1_000.0;
    let jobs = started(last).saturating_sub(started(first));
    let pulse_late_ms = obs
        .liveness
        .iter()
        .filter(|l| in_window(l.at_ms))
        .map(|l| l.load.pulse_late_ms)
        .max()
        .unwrap_or(0);
    let judged = |measure| Judged {
        window,
        from_ms: first.at_ms,
        to_ms: last.at_ms,
        measure,
        pulse_late_ms,
        cadence: *cadence,
    };
    let total = judged(Measure::Transactions {
        xacts: last_xacts - first_xacts,
        jobs,
        budget: Budget::of(cadence, live, jobs as f64 / span_s),
    });
    let tables = DutyTable::ALL.into_iter().filter_map(|table| {
        let (before, after) = (first.scans.get(&table)?, last.scans.get(&table)?);
        let duties = readers(table);
        (after >= before).then(|| {
            judged(Measure::Reads {
                table,
                reads: after - before,
                duties,
                per_s: cadence.reads_budget(duties, jobs as f64 / span_s),
            })
        })
    });
    std::iter::once(total).chain(tables).collect()
}

/// One `runaway_loop` finding for the window furthest past its budget,
/// counting every window past it.
pub(super) fn findings(obs: &Observations, cadence: &Cadence) -> Vec<Finding> {
    let found: Vec<Judged> = judge_windows(obs, cadence)
        .into_iter()
        .filter(Judged::found)
        .collect();
    let Some(worst) = found
        .iter()
        .max_by(|a, b| a.excess().total_cmp(&b.excess()))
    else {
        return Vec::new();
    };
    let mut windows: Vec<IdleWindow> = found.iter().map(|j| j.window).collect();
    windows.dedup();
    vec![Finding {
        rule: FindingRule::RunawayLoop,
        phase: phase_at(obs, worst.from_ms).unwrap_or(RECONCILE).to_owned(),
        message: format!(
            "while the fleet stood idle (step {}), {}, against {}: \
             a periodic loop of the runtime ran far faster than its period ({} of {} past the budget)",
            worst.window.step,
            worst.figures(),
            worst.against(),
            windows.len(),
            observe::count(obs.idle.len() as u64, "idle window"),
        ),
        ids: Vec::new(),
        count: windows.len() as u64,
        at_ms: Some(worst.from_ms),
    }]
}

/// Why the cell cannot pass on its loops: the window furthest past its
/// budget that a squeezed machine leaves unjudged, with the load in it;
/// `None` when every window over its budget (if any) was judged.
pub fn doubted(obs: &Observations, timings: &Timings) -> Option<String> {
    let worst = judge_windows(obs, &Cadence::of(timings))
        .into_iter()
        .filter(Judged::doubted)
        .max_by(|a, b| a.excess().total_cmp(&b.excess()))?;
    Some(format!(
        "while the fleet stood idle (step {}), {}, past {}, while the machine \
         was squeezed (the harness's pulse up to {} late): a rate under {SQUEEZED_STRETCH} times the budget \
         in such a window may be reports held back from the busy phase before it, so the runtimes' loops were not judged",
        worst.window.step,
        worst.figures(),
        worst.against(),
        observe::duration(worst.pulse_late_ms),
    ))
}

/// How fast the leader's loop went in a window, by the table only its
/// cron duty reads while the fleet is idle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LeaderPace {
    /// `cron_schedules` reads a second in the window.
    pub(super) reads_per_s: f64,
    /// Cron passes a second its period asks for.
    pub(super) due_per_s: f64,
}

/// The leader's pace in `window` when it fell under [`MIN_LEADER_PACE`];
/// `None` when it kept up, or when the window's samples do not say
/// (no table reads recorded).
pub(super) fn leader_slowed(judged: &[Judged], window: IdleWindow) -> Option<LeaderPace> {
    let cron = judged.iter().find(|j| {
        j.window == window
            && matches!(
                j.measure,
                Measure::Reads {
                    table: DutyTable::CronSchedules,
                    ..
                }
            )
    })?;
    let pace = LeaderPace {
        reads_per_s: cron.rate(),
        due_per_s: cron.cadence.duty_hz(Duty::Cron),
    };
    (pace.reads_per_s < MIN_LEADER_PACE * pace.due_per_s).then_some(pace)
}

/// Why a cell that exists to catch a runaway loop and found none cannot
/// call it missed: no idle window could be judged, or every one was
/// squeezed (a busy machine slows a spinning loop too, and may keep it
/// under its budget), or the leader's own loop fell under
/// [`MIN_LEADER_PACE`] of its pace in every window that was not; `None` when a window judged on a machine
/// (and a leader) that kept up found nothing, a real miss.
pub fn unseen(obs: &Observations, timings: &Timings) -> Option<String> {
    let judged = judge_windows(obs, &Cadence::of(timings));
    if judged.is_empty() {
        return Some(format!(
            "no idle window could be judged ({} held, none with {} of samples after the first {} \
             and no outage): the runtimes' loops were not measured",
            observe::count(obs.idle.len() as u64, "idle window"),
            observe::duration(MIN_SPAN_MS),
            observe::duration(SETTLE_MS),
        ));
    }
    let kept_up = |j: &&Judged| !j.squeezed() && leader_slowed(&judged, j.window).is_none();
    if judged.iter().any(|j| kept_up(&j)) {
        return None;
    }
    // The pulse was on time but the leader's loop itself ran slow (its
    // database round trips, its own CPU): a spin costs such a loop little
    // more than it already spends, so it may stay inside every budget.
    let slowed = judged
        .iter()
        .filter(|j| !j.squeezed())
        .find_map(|j| Some((j, leader_slowed(&judged, j.window)?)));
    if let Some((j, pace)) = slowed {
        let worst = judged
            .iter()
            .filter(|w| w.window == j.window)
            .max_by(|a, b| a.excess().total_cmp(&b.excess()))?;
        return Some(format!(
            "while the fleet stood idle (step {}) the leader's own loop ran slow: awa.cron_schedules \
             was read {:.1} times a second where its {} asks for {:.0} (under {:.0}% of that pace), \
             and a loop that slow may spin within its budget, so {}, within {}, does not rule a runaway loop out",
            worst.window.step,
            pace.reads_per_s,
            j.cadence.describe(Duty::Cron),
            pace.due_per_s,
            MIN_LEADER_PACE * 100.0,
            worst.figures(),
            worst.against(),
        ));
    }
    // The most squeezed window, on its measure nearest its budget.
    let pulse = judged.iter().map(|j| j.pulse_late_ms).max()?;
    let worst = judged
        .iter()
        .filter(|j| j.pulse_late_ms == pulse)
        .max_by(|a, b| a.excess().total_cmp(&b.excess()))?;
    Some(format!(
        "while the fleet stood idle (step {}) the machine was squeezed (the harness's pulse up to {} late), \
         and a busy machine slows a spinning loop too: {}, under {}, rules no runaway out",
        worst.window.step,
        observe::duration(worst.pulse_late_ms),
        worst.figures(),
        worst.against(),
    ))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::observe::{LivenessSample, TickLoad};
    use std::collections::BTreeMap;

    fn timings() -> Timings {
        Timings {
            heartbeat: Duration::from_millis(200),
            stale_after: Duration::from_millis(1_500),
            rescue_every: Duration::from_millis(250),
            rotate_every: Duration::from_millis(1_000),
            deadline: Duration::from_millis(2_000),
            drain_timeout: Duration::from_secs(60),
            budget: crate::matrix::DEFAULT_BUDGET,
        }
    }

    /// A census sample at `at_ms` with `xacts` ended so far, `runtimes`
    /// fresh and `started` jobs started so far.
    fn census(at_ms: u64, xacts: i64, runtimes: u64, started: u64) -> CensusSample {
        let mut kinds = BTreeMap::new();
        kinds.insert("started".to_owned(), started);
        CensusSample {
            at_ms,
            by_version: BTreeMap::from([("0.7.0".to_owned(), kinds)]),
            fresh_runtimes: BTreeMap::from([("0.7.0".to_owned(), runtimes)]),
            delta_rows: 0,
            lock_waits: 0,
            xacts: Some(xacts),
            scans: BTreeMap::new(),
        }
    }

    fn liveness(at_ms: u64, pulse_late_ms: u64) -> LivenessSample {
        LivenessSample {
            load: TickLoad {
                pulse_late_ms,
                ..TickLoad::default()
            },
            ..super::super::liveness::tests::at(at_ms, 1, false, false)
        }
    }

    /// A cell whose drain holds the fleet (`runtimes` of it) idle from
    /// 10 s to 14 s, its database ending `busy_per_s` transactions a
    /// second before that and `idle_per_s` during it, the harness's pulse
    /// `pulse_late_ms` late throughout.
    pub(in crate::reconcile) fn cell(
        runtimes: u64,
        busy_per_s: i64,
        idle_per_s: i64,
        pulse_late_ms: u64,
    ) -> Observations {
        let mut xacts = 0;
        let mut samples = Vec::new();
        let mut load = Vec::new();
        for at_ms in (0..=14_000u64).step_by(250) {
            samples.push(census(at_ms, xacts, runtimes, 0));
            load.push(liveness(at_ms, pulse_late_ms));
            let per_s = if at_ms < 10_000 {
                busy_per_s
            } else {
                idle_per_s
            };
            xacts += per_s / 4;
        }
        Observations {
            census: samples,
            liveness: load,
            idle: vec![IdleWindow {
                step: 7,
                from_ms: 10_000,
                to_ms: 14_000,
            }],
            ..Observations::default()
        }
    }

    #[test]
    fn the_budget_follows_the_cadence_and_the_live_runtimes() {
        let c = Cadence::of(&timings());
        // Poll 20 ms, heartbeat 200 ms: 50 + 2 * 5 wakes a runtime;
        // promote and cron 100 ms, rescue 250 ms, three rings a second,
        // a fold every 2 s and a flip check a heartbeat: 32.5 the leader.
        assert_eq!(c.per_runtime(), 60.0);
        assert_eq!(c.leader(), 32.5);
        let two = Budget::of(&c, 2, 0.0);
        assert_eq!(two.per_s, XACTS_PER_WAKE * 152.5 + HARNESS_PER_S);
        let four = Budget::of(&c, 4, 0.0);
        assert_eq!(four.per_s - two.per_s, XACTS_PER_WAKE * 120.0);
        // A cron job started a second adds its own.
        assert_eq!(Budget::of(&c, 2, 1.0).per_s - two.per_s, XACTS_PER_JOB);
    }

    #[test]
    fn an_idle_fleet_at_its_cadence_passes_and_a_spinning_leader_is_found() {
        let t = timings();
        let c = Cadence::of(&t);
        // Two runtimes ending what a clean idle fleet ends, after a busy
        // drain: nothing.
        let quiet = cell(2, 4_000, 160, 0);
        assert_eq!(findings(&quiet, &c), []);
        assert_eq!(doubted(&quiet, &t), None);
        let judged = judge_windows(&quiet, &c);
        assert_eq!(judged.len(), 1);
        // Judged from the first sample a second in to the last.
        assert_eq!((judged[0].from_ms, judged[0].to_ms), (11_000, 14_000));
        assert_eq!(judged[0].rate(), 160.0);
        // The same fleet with a leader that folds on every 5 ms pass
        // (two transactions each): found.
        let spinning = cell(2, 4_000, 160 + 480, 0);
        let found = findings(&spinning, &c);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, FindingRule::RunawayLoop);
        assert_eq!((found[0].count, found[0].at_ms), (1, Some(11_000)));
        assert!(
            found[0].message.starts_with(
                "while the fleet stood idle (step 7), the cell's database ended 640 transactions a second \
                 (1,920 in 3.0s, from 11.0s to 14.0s), against a budget of 401 a second for 2 live runtimes"
            ),
            "{}",
            found[0].message
        );
    }

    /// `obs` with `table` read `busy_per_s` a second before the idle
    /// window and `idle_per_s` during it.
    fn with_reads(
        mut obs: Observations,
        table: DutyTable,
        busy_per_s: i64,
        idle_per_s: i64,
    ) -> Observations {
        let mut reads = 0;
        for s in &mut obs.census {
            s.scans.insert(table, reads);
            reads += if s.at_ms < 10_000 {
                busy_per_s
            } else {
                idle_per_s
            } / 4;
        }
        obs
    }

    #[test]
    fn a_duty_spinning_inside_the_total_is_found_by_the_table_only_it_reads() {
        let t = timings();
        let c = Cadence::of(&t);
        // A machine busy enough that the whole fleet's transactions stay
        // under their budget (387 of 401) while the leader folds on every
        // pass: the deltas table is read 160 times a second.
        let base = || cell(2, 4_000, 387, 0);
        assert_eq!(findings(&base(), &c), [], "the total alone misses it");
        let spinning = with_reads(base(), DutyTable::QueueTerminalRollupDeltas, 400, 160);
        let found = findings(&spinning, &c);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].count, found[0].at_ms), (1, Some(11_000)));
        assert!(
            found[0].message.starts_with(
                "while the fleet stood idle (step 7), awa.queue_terminal_rollup_deltas was read 160 times \
                 a second (480 in 3.0s, from 11.0s to 14.0s), against a budget of 10 a second for the \
                 leader's duties that read it (fold every 2.0s) and the harness's own reads"
            ),
            "{}",
            found[0].message
        );
        // The same table read at the duties' periods and the monitor's: nothing.
        let clean = with_reads(base(), DutyTable::QueueTerminalRollupDeltas, 400, 5);
        assert_eq!(findings(&clean, &c), []);
        // Jobs started in the window (a cron fire's claim and close) bring
        // their own reads: 52 a second is within 48 and 4 for each of two
        // jobs a second, and past it without the jobs.
        let mut with_jobs = with_reads(base(), DutyTable::CronFires, 400, 52);
        for s in &mut with_jobs.census {
            let jobs = s.at_ms.saturating_sub(10_000) / 500;
            s.by_version
                .get_mut("0.7.0")
                .unwrap()
                .insert("started".into(), jobs);
        }
        assert_eq!(findings(&with_jobs, &c), []);
        assert_eq!(
            findings(&with_reads(base(), DutyTable::CronFires, 400, 52), &c).len(),
            1
        );
        // Squeezed, and past the budget by less than twice: doubted.
        let squeezed = with_reads(cell(2, 4_000, 387, 600), DutyTable::CronFires, 400, 80);
        assert_eq!(findings(&squeezed, &c), []);
        let doubt = doubted(&squeezed, &t).expect("doubted");
        assert!(
            doubt.contains("awa.cron_fires was read 80 times a second"),
            "{doubt}"
        );
        // Squeezed, but far past it: found.
        let far = with_reads(cell(2, 4_000, 387, 600), DutyTable::CronFires, 400, 150);
        assert_eq!(findings(&far, &c).len(), 1);
    }

    #[test]
    fn the_busy_phase_before_the_window_is_left_to_settle() {
        let c = Cadence::of(&timings());
        // The drain's last second is reported in the window's first: a
        // burst of 3,000 transactions lands at 10.5 s.
        let mut late_report = cell(2, 4_000, 160, 0);
        for s in &mut late_report.census {
            if s.at_ms >= 10_500 {
                s.xacts = s.xacts.map(|x| x + 3_000);
            }
        }
        assert_eq!(findings(&late_report, &c), []);
    }

    #[test]
    fn a_window_that_cannot_be_read_is_not_judged() {
        let c = Cadence::of(&timings());
        let spinning = || cell(2, 4_000, 1_000, 0);
        assert_eq!(findings(&spinning(), &c).len(), 1, "the baseline is found");
        // The database did not answer inside it (a crash resets counters).
        let mut crashed = spinning();
        crashed.liveness[50].after_outage = true;
        assert_eq!(findings(&crashed, &c), []);
        // No runtime was live: nothing to judge.
        assert_eq!(findings(&cell(0, 4_000, 1_000, 0), &c), []);
        // Too short a window, once settled.
        let mut short = spinning();
        short.idle[0].to_ms = 12_500;
        assert_eq!(findings(&short, &c), []);
        // Counters that went backwards (a reset).
        let mut reset = spinning();
        reset.census.last_mut().unwrap().xacts = Some(0);
        assert_eq!(findings(&reset, &c), []);
        // Samples without the figure (a report before it was recorded).
        let mut old = spinning();
        for s in &mut old.census {
            s.xacts = None;
        }
        assert_eq!(findings(&old, &c), []);
        // No idle window at all.
        let mut busy = spinning();
        busy.idle.clear();
        assert_eq!(findings(&busy, &c), []);
    }

    #[test]
    fn a_rate_past_the_budget_in_a_squeezed_window_is_doubted_unless_far_past() {
        let t = timings();
        let c = Cadence::of(&t);
        // 480 a second against a budget of 401, the pulse 600 ms late:
        // doubted, not found.
        let squeezed = cell(2, 4_000, 480, 600);
        assert_eq!(findings(&squeezed, &c), []);
        let doubt = doubted(&squeezed, &t).expect("doubted");
        assert!(
            doubt.contains("while the machine was squeezed (the harness's pulse up to 600ms late)"),
            "{doubt}"
        );
        // The same rate on a machine that kept up: found.
        assert_eq!(findings(&cell(2, 4_000, 480, 100), &c).len(), 1);
        assert_eq!(doubted(&cell(2, 4_000, 480, 100), &t), None);
        // Past twice the budget, squeezed or not: found.
        let far = cell(2, 4_000, 840, 600);
        assert_eq!(findings(&far, &c).len(), 1);
        assert_eq!(doubted(&far, &t), None);
        // Under the budget, squeezed: nothing to doubt.
        assert_eq!(doubted(&cell(2, 4_000, 160, 600), &t), None);
    }

    #[test]
    fn a_miss_counts_only_where_a_window_was_judged_on_a_machine_that_kept_up() {
        let t = timings();
        // Judged and kept up: a real miss.
        assert_eq!(unseen(&cell(2, 4_000, 160, 100), &t), None);
        // Every window squeezed: a spinning loop may have been slowed.
        let squeezed = unseen(&cell(2, 4_000, 160, 600), &t).expect("unseen");
        assert!(
            squeezed.starts_with(
                "while the fleet stood idle (step 7) the machine was squeezed (the harness's pulse up to 600ms late)"
            ),
            "{squeezed}"
        );
        // One window squeezed, another that kept up: judged.
        let mut two = cell(2, 4_000, 160, 600);
        for l in &mut two.liveness {
            if l.at_ms >= 11_000 {
                l.load.pulse_late_ms = 0;
            }
        }
        two.idle = vec![
            IdleWindow {
                step: 5,
                from_ms: 6_000,
                to_ms: 10_000,
            },
            IdleWindow {
                step: 7,
                from_ms: 11_000,
                to_ms: 14_000,
            },
        ];
        assert_eq!(unseen(&two, &t), None);
        // No window could be judged: nothing measured.
        let mut none = cell(2, 4_000, 160, 0);
        none.idle[0].to_ms = 12_500;
        let why = unseen(&none, &t).expect("unseen");
        assert!(
            why.starts_with("no idle window could be judged (1 idle window held"),
            "{why}"
        );
    }

    #[test]
    fn a_miss_where_the_leaders_own_loop_ran_slow_is_not_a_miss() {
        let t = timings();
        // The pulse on time and the leader's cron duty about its pace
        // (12 reads a second, at 100 ms): a real miss.
        let kept_up = with_reads(cell(2, 4_000, 160, 0), DutyTable::CronSchedules, 40, 12);
        assert_eq!(unseen(&kept_up, &t), None);
        // The same window with the leader's loop at 4 passes a second
        // (its round trips slowed): a spin may hide inside the budget.
        let slow = with_reads(cell(2, 4_000, 160, 0), DutyTable::CronSchedules, 40, 4);
        let why = unseen(&slow, &t).expect("unseen");
        assert!(
            why.starts_with(
                "while the fleet stood idle (step 7) the leader's own loop ran slow: awa.cron_schedules \
                 was read 4.0 times a second where its cron every 100ms asks for 10 (under 70% of that pace)"
            ),
            "{why}"
        );
        // A slowed leader does not excuse a finding: the rate past the
        // budget is found as before.
        let spinning = with_reads(cell(2, 4_000, 1_000, 0), DutyTable::CronSchedules, 40, 4);
        assert_eq!(findings(&spinning, &Cadence::of(&t)).len(), 1);
        // One window slowed, another where the leader kept up: judged.
        let mut two = with_reads(cell(2, 4_000, 160, 0), DutyTable::CronSchedules, 40, 4);
        let mut reads = two
            .census
            .last()
            .and_then(|s| s.scans.get(&DutyTable::CronSchedules).copied())
            .unwrap_or(0);
        for at_ms in (14_250..=18_000u64).step_by(250) {
            reads += 10 / 4 + i64::from(at_ms % 1_000 == 0) * 2;
            let mut sample = two.census.last().cloned().expect("a sample");
            sample.at_ms = at_ms;
            sample.xacts = sample.xacts.map(|x| x + 40);
            sample.scans.insert(DutyTable::CronSchedules, reads);
            two.census.push(sample);
        }
        two.idle.push(IdleWindow {
            step: 9,
            from_ms: 14_000,
            to_ms: 18_000,
        });
        assert_eq!(unseen(&two, &t), None);
    }

    #[test]
    fn cron_jobs_started_in_the_window_bring_their_own_transactions() {
        let c = Cadence::of(&timings());
        // 420 a second with one cron job started a second: within 401 + 20.
        let mut cron = cell(2, 4_000, 420, 0);
        for s in &mut cron.census {
            let jobs = s.at_ms.saturating_sub(10_000) / 1_000;
            s.by_version
                .get_mut("0.7.0")
                .unwrap()
                .insert("started".into(), jobs);
        }
        assert_eq!(findings(&cron, &c), []);
        // Without them the same rate is past the budget.
        assert_eq!(findings(&cell(2, 4_000, 420, 0), &c).len(), 1);
    }
}
