//! Where a run's CPU figures came from, as the fleet measures them and
//! the event stream and report record them.

/// How the containers' CPU time was counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuSource {
    /// The kernel's counter of the run's parent cgroup: every container's whole CPU.
    Cgroup,
    /// The engine's stats, sampled about once a second per container: a lower bound.
    Stats,
}
