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

/// The machine's CPU pressure now (`some avg10`, in whole percent);
/// `None` where the kernel does not report it.
pub fn pressure_now() -> Option<u8> {
    let text = std::fs::read_to_string(PRESSURE_FILE).ok()?;
    some_avg10(&text).map(|p| p.round() as u8)
}
