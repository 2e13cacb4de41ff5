//! A step as the driver gets it: kills and suspensions with their
//! random choices made (which process, how long after the trigger), and
//! how each reads in a plan.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::matrix::{Duration, KillTarget, Signal, Step, SuspendAt, When};

/// A step of a cell plan: as in the matrix, except that kills and
/// suspensions are resolved.
pub type PlannedStep = Step<PlannedKill, PlannedSuspend>;

/// The artifacts `step` names (its own, `of`, `by`): each must be one
/// the cell declares, which `plan.json`'s checks hold a replay to.
pub fn artifacts_named(step: &PlannedStep) -> Vec<&str> {
    match step {
        Step::Fleet(s) => vec![s.artifact.as_str()],
        Step::Migrate(s) => vec![s.artifact.as_str()],
        Step::Roll(s) => vec![s.artifact.as_str()],
        Step::Rollback(s) => vec![s.artifact.as_str()],
        Step::Fence(s) => vec![s.artifact.as_str()],
        Step::Cancel(s) => vec![s.artifact.as_str()],
        Step::Revoke(s) => vec![s.artifact.as_str()],
        Step::Flip(s) => vec![s.by.as_str()],
        Step::Kill(s) => s.of.as_deref().into_iter().collect(),
        Step::Suspend(s) => s.of.as_deref().into_iter().collect(),
        Step::Resume(s) => s.of.as_deref().into_iter().collect(),
        Step::Load(_) | Step::PgCrash(_) | Step::Hold(_) | Step::Drain(_) | Step::Assert(_) => {
            Vec::new()
        }
    }
}

/// A suspension with its random choice made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSuspend {
    /// Which kind of process.
    pub target: KillTarget,
    /// Only processes of this artifact are candidates.
    pub of: Option<String>,
    /// How long it stays stopped; `None`: until a `resume` step.
    pub duration: Option<Duration>,
    /// Where in its work it is caught.
    pub at: SuspendAt,
    /// Which worker or producer; `None` for the leader (whoever holds it then).
    pub pick: Option<Pick>,
}

/// A kill with its random choices made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedKill {
    /// Which kind of process.
    pub target: KillTarget,
    /// Only processes of this artifact are candidates.
    pub of: Option<String>,
    /// When it fires.
    pub when: When,
    /// Signal sent.
    pub signal: Signal,
    /// Fire once the victim has started this many jobs (0: do not wait), as written.
    pub after_started: u64,
    /// Delay after the trigger, drawn from 0-500 ms when `after_started` is 0.
    pub jitter: Option<Duration>,
    /// Which worker or producer; `None` for the leader (whoever holds it then).
    pub pick: Option<Pick>,
}

/// The `nth` (1-based) of `among` candidate processes, in start order.
///
/// If the driver finds a different number of candidates alive, it takes
/// `nth` modulo that number, so a replay never fails to find a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pick {
    /// 1-based position in start order.
    pub nth: u32,
    /// How many candidates the plan expects.
    pub among: u32,
}

impl fmt::Display for PlannedSuspend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.target {
            KillTarget::Producer => "producer",
            _ => "worker",
        };
        let whose = self.of.as_ref().map_or(String::new(), |a| format!("{a} "));
        match (self.target, self.pick) {
            (KillTarget::Leader, _) => {
                f.write_str("suspend the leader")?;
                if let Some(of) = &self.of {
                    write!(f, " (a {of} worker)")?;
                }
            }
            (_, Some(Pick { among: 1, .. })) => write!(f, "suspend the only {whose}{role}")?,
            (_, Some(Pick { nth, among })) => {
                write!(f, "suspend {role} #{nth} of the {among} {whose}{role}s")?
            }
            (_, None) => write!(f, "suspend a {whose}{role}")?,
        }
        if self.at != SuspendAt::Any {
            write!(f, ", caught {}", self.at.name())?;
        }
        match self.duration {
            Some(d) => write!(f, " for {d}"),
            None => f.write_str(" until resumed"),
        }
    }
}

impl fmt::Display for PlannedKill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.target {
            KillTarget::Producer => "producer",
            _ => "worker",
        };
        let whose = self.of.as_ref().map_or(String::new(), |a| format!("{a} "));
        match (self.target, self.pick) {
            (KillTarget::Leader, _) => {
                f.write_str("kill the leader")?;
                if let Some(of) = &self.of {
                    write!(f, " (a {of} worker)")?;
                }
            }
            (_, Some(Pick { among: 1, .. })) => write!(f, "kill the only {whose}{role}")?,
            (_, Some(Pick { nth, among })) => {
                write!(f, "kill {role} #{nth} of the {among} {whose}{role}s")?
            }
            (_, None) => write!(f, "kill a {whose}{role}")?,
        }
        let when = match self.when {
            When::Now => "now",
            When::DuringMigrate => "during the next migrate",
            When::DuringFlip => "during the next flip",
        };
        write!(f, ": {when}")?;
        if self.after_started > 0 {
            write!(f, ", once it has started {} jobs", self.after_started)?;
        }
        if let Some(jitter) = self.jitter {
            write!(f, ", after {jitter} jitter")?;
        }
        Ok(())
    }
}
