//! Where a run's CPU figures came from, as the fleet measures them and
//! the event stream and report record them, and the kernel's CPU
//! pressure, which the scheduler reads before it starts cells and the
//! monitor reads at every tick.

/// How the containers' CPU time was counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuSource {
    /// The kernel's counter of the run's parent cgroup: every container's whole CPU.
    Cgroup,
    /// The engine's stats, sampled about once a second per container: a lower bound.
    Stats,
}

/// The kernel's CPU pressure (PSI, Linux 4.20 and later): the share of
/// recent time in which runnable work waited for a CPU.
pub const PRESSURE_FILE: &str = "/proc/pressure/cpu";

/// `some avg10` of a `/proc/pressure/cpu` text, in percent: in how much
/// of the last ten seconds at least one runnable task waited for a CPU.
/// `None` when the text has no such figure.
pub fn some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let value = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("avg10="))?;
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && (0.0..=100.0).contains(v))
}

/// `some total` of a `/proc/pressure/cpu` text: the microseconds, since
/// boot, in which at least one runnable task waited for a CPU (the
/// kernel brings it up to date when the file is read). Two readings give
/// the pressure of the time between them alone.
pub fn some_total_us(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The machine's CPU pressure now (`some avg10`, in whole percent);
/// `None` where the kernel does not report it.
pub fn pressure_now() -> Option<u8> {
    let text = std::fs::read_to_string(PRESSURE_FILE).ok()?;
    some_avg10(&text).map(|p| p.round() as u8)
}

/// The kernel's CPU time counters of the whole machine.
pub const STAT_FILE: &str = "/proc/stat";

/// The machine's CPU time so far, in clock ticks: all of it, and the part
/// spent idle (idle and iowait). Two readings give the busy share of the
/// time between them, the engine's and the kernel's work included, which
/// no per-process or cgroup counter sees whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    /// Every tick counted on the aggregate `cpu` line.
    pub total: u64,
    /// Ticks spent idle or waiting for I/O.
    pub idle: u64,
}

impl CpuTimes {
    /// The aggregate `cpu` line of a `/proc/stat` text; `None` when it has
    /// none or it is malformed.
    pub fn parse(text: &str) -> Option<CpuTimes> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // user nice system idle iowait irq softirq steal (guest time is
        // already inside user and nice).
        let (idle, iowait) = (*ticks.get(3)?, ticks.get(4).copied().unwrap_or(0));
        let total = ticks.iter().take(8).sum();
        Some(CpuTimes {
            total,
            idle: idle + iowait,
        })
    }

    /// The machine's counters now; `None` where the kernel has no such file.
    pub fn now() -> Option<CpuTimes> {
        CpuTimes::parse(&std::fs::read_to_string(STAT_FILE).ok()?)
    }

    /// The share of the time since `earlier` the cores were busy, 0 to 1;
    /// `None` when no tick passed in between.
    pub fn busy_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total).filter(|&t| t > 0)?;
        let idle = self.idle.saturating_sub(earlier.idle).min(total);
        Some(1.0 - idle as f64 / total as f64)
    }
}
