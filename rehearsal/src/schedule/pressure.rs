//! The machine's CPU load as the kernel reports it, and what `--jobs
//! auto` does about it: fewer cells when the machine is busy with other
//! work at the start, and no further cell while the CPU is under pressure.
//!
//! Both readings are small functions over the text of a `/proc` file, so
//! they are tested on sample texts; reading the file is a line beside.

use std::time::{Duration, Instant};

use crate::stream::HeldBack;
pub use crate::vocab::cpu::{PRESSURE_FILE, some_avg10, some_total_us};

/// The run-queue load averages, where there is no pressure file.
pub const LOADAVG_FILE: &str = "/proc/loadavg";

/// The one-minute load average of a `/proc/loadavg` text (its first field).
pub fn load1(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// How long [`Busy::now`] watches the kernel's pressure counter: what is
/// busy now, not `some avg10`'s last ten seconds, which still carry a run
/// that has just ended (a chained nightly: the full matrix under
/// `--stress` read "84% busy at start" from the selftest before it and
/// ran one cell at a time, 33 cells in 18 minutes).
pub const WATCH: Duration = Duration::from_millis(500);

/// How busy the machine was with other work when the run began: the
/// share of the CPU `--jobs auto` leaves to it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Busy {
    /// From 0 (idle) to 1 (nothing left for the run).
    pub share: f64,
    /// Which reading it came from, for the schedule line.
    pub source: BusySource,
}

/// Where a [`Busy`] share came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BusySource {
    /// CPU pressure: the share of [`WATCH`] at the start in which some
    /// task waited for a CPU (`some total`), else `some avg10`.
    Pressure,
    /// The one-minute load average, against the cores.
    LoadAverage {
        /// The load average read.
        load: f64,
        /// The cores it was read against.
        cores: u32,
    },
}

impl Busy {
    /// From the texts of [`PRESSURE_FILE`] and [`LOADAVG_FILE`] (either
    /// may be missing): the pressure where the kernel reports it, else
    /// the load average over the cores, at most all of them.
    ///
    /// Pressure is preferred: it covers ten seconds, not a minute, and
    /// counts only waiting for a CPU, where the load average also counts
    /// tasks asleep on disk. Neither tells the run's own work from other
    /// work, so the caller reads them before the run starts anything.
    pub fn from_texts(pressure: Option<&str>, loadavg: Option<&str>, cores: u32) -> Option<Busy> {
        if let Some(percent) = pressure.and_then(some_avg10) {
            return Some(Busy {
                share: percent / 100.0,
                source: BusySource::Pressure,
            });
        }
        let load = loadavg.and_then(load1)?;
        let cores = cores.max(1);
        Some(Busy {
            share: (load / f64::from(cores)).min(1.0),
            source: BusySource::LoadAverage { load, cores },
        })
    }

    /// From two texts of [`PRESSURE_FILE`] read `elapsed` apart: the
    /// share of that time in which some task waited for a CPU. `None`
    /// when either has no `some total`, or the counter went back.
    pub fn from_window(before: &str, after: &str, elapsed: Duration) -> Option<Busy> {
        let waited = some_total_us(after)?.checked_sub(some_total_us(before)?)?;
        let us = elapsed.as_micros().max(1) as f64;
        Some(Busy {
            share: (waited as f64 / us).min(1.0),
            source: BusySource::Pressure,
        })
    }

    /// The machine as it is now, on `cores`: the pressure over [`WATCH`]
    /// where the kernel counts it, else `some avg10`, else the load
    /// average.
    pub fn now(cores: u32) -> Option<Busy> {
        let pressure = std::fs::read_to_string(PRESSURE_FILE).ok();
        if let Some(before) = &pressure {
            let start = Instant::now();
            std::thread::sleep(WATCH);
            let after = std::fs::read_to_string(PRESSURE_FILE).ok();
            if let Some(busy) = after.and_then(|a| Busy::from_window(before, &a, start.elapsed())) {
                return Some(busy);
            }
        }
        let loadavg = std::fs::read_to_string(LOADAVG_FILE).ok();
        Busy::from_texts(pressure.as_deref(), loadavg.as_deref(), cores)
    }

    /// `machine 40% busy at start (CPU pressure)`.
    pub fn describe(&self) -> String {
        let percent = (self.share * 100.0).round();
        match self.source {
            BusySource::Pressure => format!("machine {percent}% busy at start (CPU pressure)"),
            BusySource::LoadAverage { load, cores } => format!(
                "machine {percent}% busy at start (load average {load:.2} on {cores} core{})",
                if cores == 1 { "" } else { "s" }
            ),
        }
    }
}

/// How recently a running cell must have ticked starved for `--jobs auto`
/// to start no further cell: a starved tick is one whose harness pulse
/// ran late by half the cell's `stale_after` (see the monitor's
/// `Starving`), halfway to what makes a cell inconclusive. Heartbeats
/// are not read here: on a quiet machine at five cells on two cores they
/// ran up to 1 s late for the runtime's own lock waits, and holding cells
/// back for them took the first run to 1.31x its floor.
///
/// The gate reads the cells' own evidence, not the kernel's CPU
/// pressure: `--jobs auto` packs half again the cores' CPU on purpose (a
/// cell's CPU comes in bursts between holds), so pressure above any bar
/// is the run working as planned; the full matrix from a fresh reports
/// folder held a cell back 13 times for 2m04s at a 50% `some avg10` bar
/// and took 1.36x its floor. What must not happen is a cell's timings
/// slipping, and that is what the monitors measure.
pub const STARVED_WITHIN: Duration = Duration::from_secs(10);

/// How often a held-back start looks at the pressure again: the kernel
/// recomputes its averages every two seconds.
pub const RECHECK: Duration = Duration::from_secs(2);

/// Whether another cell may start now, with `running` cells running and
/// at most `limit` at once, when a running cell ticked starved within
/// [`STARVED_WITHIN`] (`starved`). The first cell always starts, so a run
/// on a starved machine still makes progress.
pub fn may_start(starved: bool, running: usize, limit: u32) -> bool {
    if running == 0 {
        return true;
    }
    if running >= limit as usize {
        return false;
    }
    !starved
}

/// The tally of held-back starts: each stretch during which a cell that
/// had room waited for the pressure to fall counts once, with its length.
#[derive(Clone, Debug, Default)]
pub struct Holds {
    since: Option<Instant>,
    tally: HeldBack,
}

impl Holds {
    /// A cell with room was held back at `now`.
    pub fn hold(&mut self, now: Instant) {
        if self.since.is_none() {
            self.since = Some(now);
            self.tally.times += 1;
        }
    }

    /// Whether a cell is being held back.
    pub fn holding(&self) -> bool {
        self.since.is_some()
    }

    /// The held-back cell started at `now`, or nothing waits any more.
    pub fn release(&mut self, now: Instant) {
        if let Some(since) = self.since.take() {
            self.tally.ms += now.saturating_duration_since(since).as_millis() as u64;
        }
    }

    /// What was held back, once every stretch is released.
    pub fn tally(&self) -> HeldBack {
        HeldBack {
            within_ms: STARVED_WITHIN.as_millis() as u64,
            ..self.tally
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pressure_at_the_start_is_the_counters_rise_over_the_watch() {
        let text = |total: u64| {
            format!(
                "some avg10=84.00 avg60=70.00 avg300=20.00 total={total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            )
        };
        let half = Duration::from_millis(500);
        // 50 ms of waiting in half a second: 10%, whatever avg10 still says.
        let busy = Busy::from_window(&text(1_000_000), &text(1_050_000), half).unwrap();
        assert_eq!((busy.share, busy.source), (0.1, BusySource::Pressure));
        assert_eq!(busy.describe(), "machine 10% busy at start (CPU pressure)");
        // Waiting the whole time: all of it, and never more.
        let full = Busy::from_window(&text(0), &text(600_000), half).unwrap();
        assert_eq!(full.share, 1.0);
        // No total (an older kernel's text), or a counter that went back.
        assert_eq!(
            Busy::from_window("some avg10=5.00\n", &text(10), half),
            None
        );
        assert_eq!(Busy::from_window(&text(10), &text(5), half), None);
    }

    /// This machine's file while other work kept it busy, and the shapes
    /// older and newer kernels write (a `full` line since 5.13).
    const PRESSURE: &str = "some avg10=28.86 avg60=30.26 avg300=13.31 total=89834509\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn the_pressure_reader_takes_some_avg10() {
        for (text, want) in [
            (PRESSURE, Some(28.86)),
            (
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                Some(0.0),
            ),
            (
                "full avg10=3.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=99.50 avg60=1.00 avg300=0.00 total=7\n",
                Some(99.5),
            ),
            (
                "some avg10=100.00 avg60=100.00 avg300=100.00 total=1\n",
                Some(100.0),
            ),
            ("", None),
            ("some avg60=1.00 avg300=0.00 total=0\n", None),
            ("some avg10=x avg60=1.00\n", None),
            ("some avg10=-1.00\n", None),
            ("some avg10=250.00\n", None),
            ("cpu  10 0 5 100\n", None),
        ] {
            assert_eq!(some_avg10(text), want, "{text:?}");
        }
    }

    #[test]
    fn the_load_average_reader_takes_the_first_field() {
        for (text, want) in [
            ("2.96 1.75 1.07 3/129 25615\n", Some(2.96)),
            ("0.00 0.01 0.05 1/80 1\n", Some(0.0)),
            ("", None),
            ("-1 0 0\n", None),
            ("busy 1 2\n", None),
        ] {
            assert_eq!(load1(text), want, "{text:?}");
        }
    }

    #[test]
    fn busy_prefers_pressure_and_falls_back_to_the_load_average() {
        let loadavg = "1.20 1.00 0.50 2/100 7\n";
        let busy = Busy::from_texts(Some(PRESSURE), Some(loadavg), 2).unwrap();
        assert!((busy.share - 0.2886).abs() < 1e-9, "{busy:?}");
        assert_eq!(busy.describe(), "machine 29% busy at start (CPU pressure)");
        // No pressure file, or one without the figure: the load over the cores.
        for pressure in [None, Some("")] {
            let busy = Busy::from_texts(pressure, Some(loadavg), 2).unwrap();
            assert!((busy.share - 0.6).abs() < 1e-9, "{busy:?}");
            assert_eq!(
                busy.describe(),
                "machine 60% busy at start (load average 1.20 on 2 cores)"
            );
        }
        // More runnable than cores is all of them.
        let busy = Busy::from_texts(None, Some("4.16 2.51 1.43 5/129 3\n"), 2).unwrap();
        assert_eq!(busy.share, 1.0);
        assert_eq!(Busy::from_texts(None, None, 2), None);
        assert_eq!(Busy::from_texts(None, Some("garbage"), 2), None);
    }

    #[test]
    fn another_cell_starts_only_with_room_and_no_starved_cell() {
        for (starved, running, limit, start) in [
            // Nothing runs: the first cell starts whatever was seen.
            (true, 0, 5, true),
            (false, 0, 1, true),
            // Room, and no running cell ticked starved lately.
            (false, 1, 5, true),
            (false, 4, 5, true),
            // Room, but a running cell's timings slipped.
            (true, 1, 5, false),
            (true, 4, 5, false),
            // No room, whatever was seen.
            (false, 5, 5, false),
            (false, 6, 5, false),
            (false, 1, 1, false),
        ] {
            assert_eq!(
                may_start(starved, running, limit),
                start,
                "starved {starved}, {running} running of {limit}"
            );
        }
    }

    #[test]
    fn holds_count_each_stretch_once_with_its_length() {
        let t = Instant::now();
        let at = |s: u64| t + Duration::from_secs(s);
        let mut holds = Holds::default();
        holds.release(at(0));
        assert_eq!(holds.tally().times, 0);
        assert_eq!(holds.tally().ms, 0);
        holds.hold(at(1));
        holds.hold(at(3));
        assert!(holds.holding());
        holds.release(at(5));
        assert!(!holds.holding());
        holds.hold(at(10));
        holds.release(at(12));
        holds.release(at(20));
        assert_eq!(
            holds.tally(),
            HeldBack {
                times: 2,
                ms: 6_000,
                within_ms: STARVED_WITHIN.as_millis() as u64,
                grew_to: None,
                shrank_to: None,
            }
        );
    }
}
