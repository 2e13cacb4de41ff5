//! `--jobs auto` grows while the cores idle: one more cell at once each
//! time the machine spent a whole window under [`GROW_BELOW`] busy with
//! a cell waiting for room and no running cell starved, and one fewer
//! at each look (every 2 s, and whenever a cell ends) while a running
//! cell ticked starved in the last 10 s (never below the schedule's own
//! figure): starvation shrinks it back fast, growth is slow.
//!
//! The schedule's figure comes from an estimate of the cores a running
//! cell keeps busy: shipped with the matrix on a first run, measured by
//! an earlier report otherwise. Either is one machine's figure, and CPU
//! counters miss what the kernel does for the docker engine's storage
//! and network. The machine's own idle time, read from `/proc/stat`,
//! counts every kind of work, so a first run that packed too few cells
//! finds out within one window. Other work on the machine, and
//! `--stress`, keep it busy, so they never grow a run.

use std::time::{Duration, Instant};

use super::{Admission, MAX_CELLS_PER_CORE, Schedule};
use crate::vocab::cpu::CpuTimes;

/// How long the machine must have been measured before a cell is added.
pub const GROW_EVERY: Duration = Duration::from_secs(10);

/// The busy share of the cores under which a window counts as idle: the
/// full matrix at 5 cells on 2 cores kept them 84% busy (1.20x its floor),
/// at 6 89% (1.13x), every timing kept.
pub const GROW_BELOW: f64 = 0.90;

/// The schedule's concurrency as the run goes.
#[derive(Clone, Debug)]
pub struct Growth {
    base: u32,
    ceiling: u32,
    extra: u32,
    peak: u32,
    window: Option<(Instant, CpuTimes)>,
}

impl Growth {
    /// From the schedule's `base` cells at once, up to `ceiling`.
    pub fn new(base: u32, ceiling: u32) -> Growth {
        Growth {
            base,
            ceiling: ceiling.max(base),
            extra: 0,
            peak: base,
            window: None,
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
        self.observe(Instant::now(), CpuTimes::now(), starved, wanting);
        self.limit()
    }

    /// Cells at once now.
    pub fn limit(&self) -> u32 {
        self.base + self.extra
    }

    /// The most cells at once it allowed, when that was above the base.
    pub fn grew_to(&self) -> Option<u32> {
        (self.peak > self.base).then_some(self.peak)
    }

    /// One look at `now`: the machine's counters (`None` where the kernel
    /// gives none: the run never grows), whether a running cell ticked
    /// starved lately, and whether a cell waits for room.
    pub fn observe(&mut self, now: Instant, times: Option<CpuTimes>, starved: bool, wanting: bool) {
        let Some(times) = times else {
            return;
        };
        if starved {
            self.extra = self.extra.saturating_sub(1);
            self.window = Some((now, times));
            return;
        }
        let Some((since, earlier)) = self.window else {
            self.window = Some((now, times));
            return;
        };
        if now.saturating_duration_since(since) < GROW_EVERY {
            return;
        }
        let idle = times.busy_since(&earlier).is_some_and(|b| b < GROW_BELOW);
        if idle && wanting && self.limit() < self.ceiling {
            self.extra += 1;
            self.peak = self.peak.max(self.limit());
        }
        self.window = Some((now, times));
    }
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

    #[test]
    fn an_idle_window_with_a_cell_waiting_adds_one_and_a_starved_tick_takes_it_back() {
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(n);
        let mut g = Growth::new(4, 6);
        g.observe(s(0), at(0, 0), false, true);
        // Half busy, but the window is not over yet.
        g.observe(s(5), at(500, 500), false, true);
        assert_eq!(g.limit(), 4);
        g.observe(s(10), at(1000, 1000), false, true);
        assert_eq!(g.limit(), 5);
        assert_eq!(g.grew_to(), Some(5));
        g.observe(s(20), at(1500, 1500), false, true);
        g.observe(s(30), at(2000, 2000), false, true);
        assert_eq!(g.limit(), 6, "never above the ceiling");
        // A starved tick: one fewer at once, at once.
        g.observe(s(31), at(2100, 2000), true, true);
        assert_eq!(g.limit(), 5);
        g.observe(s(32), at(2200, 2000), true, true);
        g.observe(s(33), at(2300, 2000), true, true);
        assert_eq!(g.limit(), 4, "never below the schedule's figure");
        assert_eq!(g.grew_to(), Some(6));
    }

    #[test]
    fn a_busy_window_or_nothing_waiting_or_no_counters_keeps_the_schedule() {
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(n);
        // 92% busy: the cores are used.
        let mut busy = Growth::new(4, 6);
        busy.observe(s(0), at(0, 0), false, true);
        busy.observe(s(10), at(920, 80), false, true);
        assert_eq!(busy.limit(), 4);
        // Idle, but every waiting cell already has room.
        let mut full = Growth::new(4, 6);
        full.observe(s(0), at(0, 0), false, false);
        full.observe(s(10), at(100, 900), false, false);
        assert_eq!(full.limit(), 4);
        // No /proc/stat.
        let mut blind = Growth::new(4, 6);
        blind.observe(s(0), None, false, true);
        blind.observe(s(10), None, false, true);
        assert_eq!(blind.limit(), 4);
        assert_eq!(blind.grew_to(), None);
        // A starved tick restarts the window: the idle time before it does not count.
        let mut restarted = Growth::new(4, 6);
        restarted.observe(s(0), at(0, 0), false, true);
        restarted.observe(s(9), at(100, 800), true, true);
        restarted.observe(s(10), at(110, 890), false, true);
        assert_eq!(restarted.limit(), 4);
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
