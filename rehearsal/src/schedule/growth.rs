//! `--jobs auto` follows the machine: one more cell at once each time
//! the machine spent a whole window under [`GROW_BELOW`] busy with a cell
//! waiting for room and no running cell starved; one fewer at each look
//! (every 2 s, and whenever a cell ends) while a running cell ticked
//! starved in the last 10 s, down to the schedule's own figure. Below
//! the figure it moves as slowly both ways: after [`SHRINK_EVERY`] of
//! starvation without a break, one fewer than the cells then running
//! (down to one); after as long without a starved tick, one back.
//!
//! The schedule's figure comes from an estimate of the cores a running
//! cell keeps busy: shipped with the matrix on a first run, measured by
//! an earlier report otherwise. Either is one machine's figure, and CPU
//! counters miss what the kernel does for the docker engine's storage
//! and network. The machine's own idle time, read from `/proc/stat`,
//! counts every kind of work, so a first run that packed too few cells
//! finds out within one window. Other work on the machine, and
//! `--stress`, keep it busy, so they never grow a run.
//!
//! A slower machine than the figure was measured on (a CI host that ran
//! the same cells at half the speed) starves at the figure with nothing
//! else running; there the figure is wrong, not the cells, so the run
//! goes below it rather than starving its retries too.

use std::time::{Duration, Instant};

use super::{Admission, MAX_CELLS_PER_CORE, Schedule};
use crate::vocab::cpu::CpuTimes;

/// How long the machine must have been measured before a cell is added.
pub const GROW_EVERY: Duration = Duration::from_secs(10);

/// The busy share of the cores under which a window counts as idle: the
/// full matrix at 5 cells on 2 cores kept them 84% busy (1.20x its floor),
/// at 6 89% (1.13x), every timing kept.
pub const GROW_BELOW: f64 = 0.90;

/// How long starvation must go on without a break for `--jobs auto` to
/// go below the schedule's figure (and below that again), and how long
/// without a starved tick to come back one: twice
/// [`STARVED_WITHIN`](super::pressure::STARVED_WITHIN), for which one
/// starved tick counts, so a lone tick (a burst) leaves the figure alone.
pub const SHRINK_EVERY: Duration = Duration::from_secs(20);

/// The schedule's concurrency as the run goes.
#[derive(Clone, Debug)]
pub struct Growth {
    base: u32,
    ceiling: u32,
    limit: u32,
    peak: u32,
    low: u32,
    window: Option<(Instant, Option<CpuTimes>)>,
    starving_since: Option<Instant>,
    last_look: Option<Instant>,
}

impl Growth {
    /// From the schedule's `base` cells at once, up to `ceiling`.
    pub fn new(base: u32, ceiling: u32) -> Growth {
        let base = base.max(1);
        Growth {
            base,
            ceiling: ceiling.max(base),
            limit: base,
            peak: base,
            low: base,
            window: None,
            starving_since: None,
            last_look: None,
        }
    }

    /// A run's growth under `--jobs auto` (the schedule's gate), from its
    /// figure up to [`MAX_CELLS_PER_CORE`] per core and its `cells`; none
    /// under `--jobs N`, which runs exactly N.
    pub fn of(schedule: &Schedule, cells: usize) -> Option<Growth> {
        schedule.gate.then(|| {
            let ceiling = (cells as u32).min(schedule.cores * MAX_CELLS_PER_CORE);
            Growth::new(schedule.jobs, ceiling)
        })
    }

    /// One look from the run's loop: the machine's counters now, whether
    /// one more cell at once would let a `waiting` cell start beside
    /// `running` under `admission`; the cells at once from here.
    pub fn look(
        &mut self,
        admission: &Admission,
        waiting: &[usize],
        running: &[usize],
        starved: bool,
    ) -> u32 {
        let limit = self.limit();
        let wanting = admission.next_within(waiting, running, limit).is_none()
            && admission.next_within(waiting, running, limit + 1).is_some();
        let look = Look {
            times: CpuTimes::now(),
            starved,
            wanting,
            running: running.len() as u32,
        };
        self.observe(Instant::now(), look);
        self.limit()
    }

    /// Cells at once now.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The most cells at once it allowed, when that was above the base.
    pub fn grew_to(&self) -> Option<u32> {
        (self.peak > self.base).then_some(self.peak)
    }

    /// The fewest cells at once it allowed, when that was below the base.
    pub fn shrank_to(&self) -> Option<u32> {
        (self.low < self.base).then_some(self.low)
    }

    /// One look at `now`. Looks further apart than
    /// [`STARVED_WITHIN`](super::pressure::STARVED_WITHIN) (the loop looks
    /// every 2 s only while a cell waits) say nothing about the time
    /// between them: starvation and calm are counted again from here.
    pub fn observe(&mut self, now: Instant, look: Look) {
        let Look {
            times,
            starved,
            wanting,
            running,
        } = look;
        let gap = self
            .last_look
            .is_some_and(|at| now.saturating_duration_since(at) > super::pressure::STARVED_WITHIN);
        self.last_look = Some(now);
        if gap {
            self.starving_since = None;
            self.window = None;
        }
        if starved {
            self.shrink(now, running);
            self.window = Some((now, times));
            return;
        }
        self.starving_since = None;
        let Some((since, earlier)) = self.window else {
            self.window = Some((now, times));
            return;
        };
        let calm = now.saturating_duration_since(since);
        if self.limit < self.base {
            if calm >= SHRINK_EVERY {
                // As long without a starved tick: one back toward the figure.
                self.limit += 1;
                self.window = Some((now, times));
            }
            return;
        }
        if calm < GROW_EVERY {
            return;
        }
        let idle = times
            .zip(earlier)
            .and_then(|(t, e)| t.busy_since(&e))
            .is_some_and(|b| b < GROW_BELOW);
        if idle && wanting && self.limit < self.ceiling {
            self.limit += 1;
            self.peak = self.peak.max(self.limit);
        }
        self.window = Some((now, times));
    }

    /// A running cell ticked starved lately, with `running` cells running:
    /// one fewer at once, down to the base at each look; below it, after
    /// [`SHRINK_EVERY`] of starvation without a break at no more cells
    /// than the limit, one fewer than the cells running (the cells that
    /// starve), at least one. Cells still running above a limit that
    /// already went down are what starves, not the limit.
    fn shrink(&mut self, now: Instant, running: u32) {
        if self.limit > self.base {
            self.limit -= 1;
            return;
        }
        if running == 0 || running > self.limit {
            self.starving_since = None;
            return;
        }
        let since = *self.starving_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= SHRINK_EVERY {
            self.limit = (running - 1).max(1);
            self.low = self.low.min(self.limit);
            self.starving_since = Some(now);
        }
    }
}

/// What one look at the run sees.
#[derive(Clone, Copy, Debug)]
pub struct Look {
    /// The machine's counters (`None` where the kernel gives none: the
    /// run never grows above its base).
    pub times: Option<CpuTimes>,
    /// Whether a running cell ticked starved lately.
    pub starved: bool,
    /// Whether a cell waits for room one more at once would give.
    pub wanting: bool,
    /// Cells running.
    pub running: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters after `busy` and `idle` ticks.
    fn at(busy: u64, idle: u64) -> Option<CpuTimes> {
        Some(CpuTimes {
            total: busy + idle,
            idle,
        })
    }

    /// A look with `running` cells running and a cell wanting room.
    fn look(times: Option<CpuTimes>, starved: bool, running: u32) -> Look {
        Look {
            times,
            starved,
            wanting: true,
            running,
        }
    }

    #[test]
    fn an_idle_window_with_a_cell_waiting_adds_one_and_a_starved_tick_takes_it_back() {
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(n);
        let mut g = Growth::new(4, 6);
        g.observe(s(0), look(at(0, 0), false, 4));
        // Half busy, but the window is not over yet.
        g.observe(s(5), look(at(500, 500), false, 4));
        assert_eq!(g.limit(), 4);
        g.observe(s(10), look(at(1000, 1000), false, 4));
        assert_eq!(g.limit(), 5);
        assert_eq!(g.grew_to(), Some(5));
        g.observe(s(20), look(at(1500, 1500), false, 5));
        g.observe(s(30), look(at(2000, 2000), false, 6));
        assert_eq!(g.limit(), 6, "never above the ceiling");
        // A starved tick: one fewer at once, at once.
        g.observe(s(31), look(at(2100, 2000), true, 6));
        assert_eq!(g.limit(), 5);
        g.observe(s(32), look(at(2200, 2000), true, 6));
        g.observe(s(33), look(at(2300, 2000), true, 6));
        assert_eq!(g.limit(), 4, "down to the schedule's figure at each look");
        assert_eq!(g.grew_to(), Some(6));
        assert_eq!(g.shrank_to(), None);
    }

    #[test]
    fn a_busy_window_or_nothing_waiting_or_no_counters_keeps_the_schedule() {
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(n);
        // 92% busy: the cores are used.
        let mut busy = Growth::new(4, 6);
        busy.observe(s(0), look(at(0, 0), false, 4));
        busy.observe(s(10), look(at(920, 80), false, 4));
        assert_eq!(busy.limit(), 4);
        // Idle, but every waiting cell already has room.
        let mut full = Growth::new(4, 6);
        let no_want = |times| Look {
            wanting: false,
            ..look(times, false, 2)
        };
        full.observe(s(0), no_want(at(0, 0)));
        full.observe(s(10), no_want(at(100, 900)));
        assert_eq!(full.limit(), 4);
        // No /proc/stat.
        let mut blind = Growth::new(4, 6);
        blind.observe(s(0), look(None, false, 4));
        blind.observe(s(10), look(None, false, 4));
        assert_eq!(blind.limit(), 4);
        assert_eq!(blind.grew_to(), None);
        // A starved tick restarts the window: the idle time before it does not count.
        let mut restarted = Growth::new(4, 6);
        restarted.observe(s(0), look(at(0, 0), false, 4));
        restarted.observe(s(9), look(at(100, 800), true, 4));
        restarted.observe(s(10), look(at(110, 890), false, 4));
        assert_eq!(restarted.limit(), 4);
        // Looks further apart than 10 s say nothing of the time between:
        // an idle 30 s seen only at its ends does not grow the run.
        let mut sparse = Growth::new(4, 6);
        sparse.observe(s(0), look(at(0, 0), false, 4));
        sparse.observe(s(30), look(at(100, 2900), false, 4));
        assert_eq!(sparse.limit(), 4);
        sparse.observe(s(40), look(at(200, 3800), false, 4));
        assert_eq!(
            sparse.limit(),
            5,
            "counted again from the look after the gap"
        );
    }

    #[test]
    fn starvation_without_a_break_goes_below_the_figure_and_calm_brings_it_back() {
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(n);
        // A lone starved tick counts for 10 s: the figure stands.
        let mut burst = Growth::new(5, 6);
        for n in [0, 2, 4, 6, 8, 10] {
            burst.observe(s(n), look(at(n * 100, 0), true, 5));
        }
        burst.observe(s(12), look(at(1200, 0), false, 5));
        for n in [14, 16, 18, 20, 22] {
            burst.observe(s(n), look(at(n * 100, 0), true, 5));
        }
        assert_eq!(burst.limit(), 5, "two bursts with a break between");
        assert_eq!(burst.shrank_to(), None);
        // Starving on and on at the figure, the cells at the limit: one
        // fewer per 20 s of it, down to one, never to none.
        let mut slow = Growth::new(5, 6);
        for n in (0..=200).step_by(2) {
            let running = slow.limit();
            slow.observe(s(n), look(at(n * 100, 0), true, running));
            let want = 5u32.saturating_sub((n / 20) as u32).max(1);
            assert_eq!(slow.limit(), want, "after {n} s of starving");
        }
        assert_eq!(slow.shrank_to(), Some(1));
        // Calm again: one back per 20 s without a starved tick, busy or
        // idle, up to the figure and no further while the cores are busy.
        let calm = |n: u64, idle: u64| at(20_000 + n * 100, idle);
        slow.observe(s(202), look(calm(202, 0), false, 1));
        slow.observe(s(212), look(calm(212, 0), false, 1));
        assert_eq!(slow.limit(), 1, "20 s must pass first");
        for (n, want) in [(222, 2), (232, 2), (242, 3), (252, 3), (262, 4)] {
            slow.observe(s(n), look(calm(n, n * 1000), false, 2));
            assert_eq!(slow.limit(), want, "at {n} s");
        }
        // A starved tick on the way back: the 20 s start again.
        slow.observe(s(264), look(calm(264, 0), true, 4));
        assert_eq!(slow.limit(), 4);
        for n in [266, 276] {
            slow.observe(s(n), look(calm(n, 0), false, 4));
        }
        assert_eq!(slow.limit(), 4, "only 12 s since the starved look");
        for n in [286, 296, 306, 316] {
            slow.observe(s(n), look(calm(n, 0), false, 4));
        }
        assert_eq!(
            slow.limit(),
            5,
            "back at the figure, never above it while busy"
        );
        assert_eq!(slow.grew_to(), None);
        assert_eq!(slow.shrank_to(), Some(1), "the fewest stays in the record");
    }

    #[test]
    fn below_the_figure_it_goes_under_the_cells_that_starve_not_under_its_own_limit() {
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(n);
        // Three cells of a figure of five starve: two at once from here.
        let mut g = Growth::new(5, 6);
        for n in (0..=20).step_by(2) {
            g.observe(s(n), look(at(n * 100, 0), true, 3));
        }
        assert_eq!(g.limit(), 2);
        // All three still run, above the new limit: they are what starves,
        // so the limit waits for them to end instead of going on down.
        for n in (22..=80).step_by(2) {
            g.observe(s(n), look(at(n * 100, 0), true, 3));
        }
        assert_eq!(g.limit(), 2);
        // At the limit and still starving: one fewer.
        for n in (82..=102).step_by(2) {
            g.observe(s(n), look(at(n * 100, 0), true, 2));
        }
        assert_eq!(g.limit(), 1);
        // No counters: it still goes down and comes back.
        let mut blind = Growth::new(3, 6);
        for n in (0..=20).step_by(2) {
            blind.observe(s(n), look(None, true, 3));
        }
        assert_eq!(blind.limit(), 2);
        for n in (22..=42).step_by(2) {
            blind.observe(s(n), look(None, false, 2));
        }
        assert_eq!(blind.limit(), 3);
        // Starving looks seen only 30 s apart are not 20 s without a break.
        let mut sparse = Growth::new(3, 6);
        sparse.observe(s(0), look(at(0, 0), true, 3));
        sparse.observe(s(30), look(at(100, 0), true, 3));
        sparse.observe(s(60), look(at(200, 0), true, 3));
        assert_eq!(sparse.limit(), 3);
    }

    #[test]
    fn the_stat_reader_takes_the_aggregate_line() {
        let text = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n";
        let t = CpuTimes::parse(text).expect("parsed");
        assert_eq!(
            t,
            CpuTimes {
                total: 1000,
                idle: 840
            }
        );
        let later = CpuTimes {
            total: 2000,
            idle: 1040,
        };
        let busy = later.busy_since(&t).expect("ticks passed");
        assert!((busy - 0.8).abs() < 1e-9, "{busy}");
        assert_eq!(t.busy_since(&t), None);
        for bad in ["", "cpu0 1 2 3 4\n", "cpu  1 x 3 4\n", "cpu  1 2\n"] {
            assert_eq!(CpuTimes::parse(bad), None, "{bad:?}");
        }
    }
}
