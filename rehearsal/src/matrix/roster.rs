//! A static model of which processes run after each step of a cell.
//!
//! Validation uses it to refuse steps that cannot happen (killing a worker
//! of an artifact none of whose workers runs, rolling when there is
//! nothing to roll, a fence before any flip); the plan uses it to know
//! how many candidates a kill chooses from. It is seed-independent: an
//! untargeted kill in a mixed fleet may hit either artifact, so counts
//! per artifact are kept as bounds, and a step that needs a process of
//! an artifact requires the lower bound to be at least one.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{
    Check, FlipStep, KillStep, KillTarget, Outcome, ResumeStep, RollStep, RollbackStep, Step,
    SuspendStep, When,
};

/// Lower and upper bound of how many processes of one artifact run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub lo: u32,
    pub hi: u32,
}

/// One role's processes (workers or producers).
#[derive(Clone, Debug, Default)]
pub(crate) struct Pool {
    /// Exact number running.
    total: u32,
    by_artifact: BTreeMap<String, Bounds>,
}

impl Pool {
    fn start(&mut self, artifact: &str, n: u32) {
        if n == 0 {
            return;
        }
        self.total += n;
        let b = self.by_artifact.entry(artifact.to_owned()).or_default();
        b.lo += n;
        b.hi += n;
    }

    /// Every process now runs `artifact`; the count is unchanged.
    fn replace_all(&mut self, artifact: &str) {
        self.by_artifact.clear();
        self.start_fresh(artifact, self.total);
    }

    fn start_fresh(&mut self, artifact: &str, n: u32) {
        self.total = 0;
        self.by_artifact.clear();
        self.start(artifact, n);
    }

    /// How many may run of `of` (of any artifact when `None`).
    pub(crate) fn count(&self, of: Option<&str>) -> Bounds {
        match of {
            Some(a) => self.by_artifact.get(a).copied().unwrap_or_default(),
            None => Bounds {
                lo: self.total,
                hi: self.total,
            },
        }
    }

    /// True when some process may run another artifact than `artifact`.
    fn has_other_than(&self, artifact: &str) -> bool {
        self.by_artifact
            .iter()
            .any(|(a, b)| a != artifact && b.hi > 0)
    }

    /// Removes one process of `of` (any when `None`), which must surely exist.
    fn remove_one(&mut self, of: Option<&str>) {
        self.total = self.total.saturating_sub(1);
        match of {
            Some(a) => {
                if let Some(b) = self.by_artifact.get_mut(a) {
                    b.lo = b.lo.saturating_sub(1);
                    b.hi = b.hi.saturating_sub(1);
                }
            }
            None => {
                let candidates = self.by_artifact.values().filter(|b| b.hi > 0).count();
                for b in self.by_artifact.values_mut() {
                    b.lo = b.lo.saturating_sub(1);
                    if candidates == 1 {
                        b.hi = b.hi.saturating_sub(1);
                    }
                }
            }
        }
        self.by_artifact.retain(|_, b| b.hi > 0);
        // With a known total, no artifact can have more than the total.
        for b in self.by_artifact.values_mut() {
            b.hi = b.hi.min(self.total);
        }
    }

    /// "2 of previous, 1 of current", or "none".
    fn describe(&self) -> String {
        if self.total == 0 {
            return "none".to_owned();
        }
        let parts: Vec<String> = self
            .by_artifact
            .iter()
            .map(|(a, b)| {
                if b.lo == b.hi {
                    format!("{} of {a}", b.hi)
                } else {
                    format!("{}-{} of {a}", b.lo, b.hi)
                }
            })
            .collect();
        parts.join(", ")
    }
}

/// A problem the model found, against the 1-based index of the step at fault.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub step: usize,
    pub message: String,
}

/// A kill the model executed: at which step it was written and how many candidates it had.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KillPoint {
    pub step: usize,
    /// Candidates for a worker or producer kill; `None` for a leader kill.
    pub among: Option<u32>,
}

/// Walks a cell's steps, tracking the fleet and the schema state.
pub(crate) struct Roster {
    workers: Pool,
    /// At most this many of the workers are idle (`idle = true`): they
    /// promote and rescue only when they start. A kill may hit one, or not.
    idle_workers: u32,
    producers: Pool,
    fresh_install: bool,
    migrated: bool,
    flipped: bool,
    worker_artifacts_seen: BTreeSet<String>,
    /// Faults waiting for the next migrate or flip: (step, when, kill).
    armed: Vec<(usize, When, Option<KillStep>)>,
    pub problems: Vec<Problem>,
    pub kills: Vec<KillPoint>,
    /// Suspensions, with their candidates (the same shape as kills).
    pub suspends: Vec<KillPoint>,
    /// Suspensions without `for` not yet ended by a `resume`: (step, target, of).
    open_suspensions: Vec<(usize, KillTarget, Option<String>)>,
}

impl Roster {
    pub(crate) fn new(fresh_install: bool) -> Self {
        Roster {
            workers: Pool::default(),
            idle_workers: 0,
            producers: Pool::default(),
            fresh_install,
            migrated: fresh_install,
            flipped: false,
            worker_artifacts_seen: BTreeSet::new(),
            armed: Vec::new(),
            problems: Vec::new(),
            kills: Vec::new(),
            suspends: Vec::new(),
            open_suspensions: Vec::new(),
        }
    }

    /// Runs the model over a whole cell.
    pub(crate) fn walk(fresh_install: bool, steps: &[Step]) -> Self {
        let mut model = Roster::new(fresh_install);
        for (i, step) in steps.iter().enumerate() {
            model.apply(i + 1, step);
        }
        model.finish();
        model
    }

    fn problem(&mut self, step: usize, message: impl Into<String>) {
        self.problems.push(Problem {
            step,
            message: message.into(),
        });
    }

    /// Applies step `index` (1-based).
    pub(crate) fn apply(&mut self, index: usize, step: &Step) {
        match step {
            Step::Fleet(s) => {
                self.workers.start(&s.artifact, s.workers);
                if s.idle {
                    self.idle_workers += s.workers;
                }
                self.producers.start(&s.artifact, s.producers);
                if s.workers > 0 {
                    self.worker_artifacts_seen.insert(s.artifact.clone());
                }
            }
            Step::Load(s) => {
                if s.on && self.producers.total == 0 {
                    self.problem(index, "load = \"on\" needs a running producer; start one first with a fleet step (producers = 1)");
                }
            }
            Step::Migrate(s) => {
                self.fire_armed(When::DuringMigrate);
                if s.expect == Outcome::Ok {
                    self.migrated = true;
                }
            }
            Step::Roll(s) => self.roll(index, s),
            Step::Rollback(s) => self.rollback(index, s),
            Step::Kill(k) => match k.when {
                When::Now => self.kill(index, k),
                when => self.armed.push((index, when, Some(k.clone()))),
            },
            Step::Suspend(s) => self.suspend(index, s),
            Step::Resume(s) => self.resume(index, s),
            Step::PgCrash(s) => {
                if s.when != When::Now {
                    self.armed.push((index, s.when, None));
                }
            }
            Step::Flip(s) => self.flip(index, s),
            Step::Fence(s) => {
                if !self.flipped && !self.fresh_install {
                    self.problem(index, format!("fence {} needs an earlier flip (or fresh_install = true): before the flip an N-1 binary may run", s.artifact));
                }
            }
            Step::Hold(_) | Step::Drain(_) => {}
            Step::Revoke(_) => {
                if self.workers.total == 0 {
                    self.problem(index, "revoke needs a running fleet besides what it starts: its workers' attempts are rescued by the others; start a fleet first");
                } else if self.workers.total <= self.idle_workers {
                    self.problem(index, format!(
                        "revoke needs a running worker that rescues besides what it starts, and every worker here may be idle (idle = true rescues only when it starts; running workers: {}); start one without idle = true first",
                        self.workers.describe()
                    ));
                }
            }
            Step::Cancel(_) => {
                if self.workers.total == 0 {
                    self.problem(index, "cancel needs running workers (a job runs only while a worker claims it); start a fleet first");
                }
            }
            Step::Assert(s) => self.check_assert(index, &s.check),
        }
    }

    /// `roll`: every worker (and producer, when asked) now runs the
    /// artifact; a roll that replaces nothing is a problem.
    fn roll(&mut self, index: usize, s: &RollStep) {
        let workers_to_roll = self.workers.has_other_than(&s.artifact);
        let producers_to_roll = s.producers && self.producers.has_other_than(&s.artifact);
        if !workers_to_roll && !producers_to_roll {
            let what = if s.producers {
                "worker and producer"
            } else {
                "worker"
            };
            self.problem(
                index,
                format!(
                    "nothing to roll: every {what} already runs {} (running workers: {})",
                    s.artifact,
                    self.workers.describe()
                ),
            );
        }
        self.workers.replace_all(&s.artifact);
        if s.producers {
            self.producers.replace_all(&s.artifact);
        }
        if self.workers.total > 0 {
            self.worker_artifacts_seen.insert(s.artifact.clone());
        }
    }

    /// `rollback`: the fleet restarted on the artifact, with at least one worker.
    fn rollback(&mut self, index: usize, s: &RollbackStep) {
        let workers = s.workers.unwrap_or(self.workers.total);
        if workers == 0 {
            self.problem(index, "rollback leaves no worker running: set workers = N");
        }
        self.workers.start_fresh(&s.artifact, workers);
        // Its idle workers stay (the new ones it adds are not idle).
        self.idle_workers = self.idle_workers.min(workers);
        self.producers.replace_all(&s.artifact);
        if workers > 0 {
            self.worker_artifacts_seen.insert(s.artifact.clone());
        }
    }

    /// `flip`: one expected to succeed needs the schema expanded first.
    fn flip(&mut self, index: usize, s: &FlipStep) {
        if s.expect == Outcome::Ok && !self.migrated {
            self.problem(index, "flip expected to succeed, but no earlier migrate step expected to succeed has expanded the schema; add { migrate = \"...\" } before it (or expect = \"refused\")");
        }
        self.fire_armed(When::DuringFlip);
        if s.expect == Outcome::Ok {
            self.flipped = true;
        }
    }

    fn check_assert(&mut self, index: usize, check: &Check) {
        let ledger = self.flipped || self.fresh_install;
        match check {
            Check::SchemaExpanded if !self.migrated => {
                self.problem(
                    index,
                    "schema_expanded needs an earlier migrate step that is expected to succeed",
                );
            }
            Check::SchemaMatchesFresh if !self.migrated => {
                self.problem(
                    index,
                    "schema_matches_fresh compares an upgraded schema with a fresh install: it needs an earlier migrate step that is expected to succeed (or fresh_install = true)",
                );
            }
            Check::AuthorityColumns if ledger => {
                self.problem(index, "authority_columns cannot hold here: authority is ledger after a flip or on a fresh install");
            }
            Check::AuthorityLedger | Check::FenceActive if !ledger => {
                self.problem(index, format!("{check} needs an earlier flip that is expected to succeed (or fresh_install = true)"));
            }
            Check::MixedFleetClaimed if self.worker_artifacts_seen.len() < 2 => {
                let seen: Vec<&str> = self
                    .worker_artifacts_seen
                    .iter()
                    .map(String::as_str)
                    .collect();
                self.problem(index, format!(
                    "mixed_fleet_claimed needs workers of two artifacts before it; workers so far ran: {}",
                    if seen.is_empty() { "none".to_owned() } else { seen.join(", ") }
                ));
            }
            Check::LeaderIs(artifact) if self.workers.count(Some(artifact)).hi == 0 => {
                self.problem(index, format!("no worker of {artifact} is running here, so it cannot be leader (running workers: {})", self.workers.describe()));
            }
            _ => {}
        }
    }

    fn fire_armed(&mut self, phase: When) {
        let (firing, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.armed)
            .into_iter()
            .partition(|(_, w, _)| *w == phase);
        self.armed = waiting;
        for (index, _, kill) in firing {
            if let Some(kill) = kill {
                self.kill(index, &kill);
            }
        }
    }

    fn kill(&mut self, index: usize, k: &KillStep) {
        let (pool, role) = match k.target {
            KillTarget::Worker | KillTarget::Leader => (&self.workers, "worker"),
            KillTarget::Producer => (&self.producers, "producer"),
        };
        let of = k.of.as_deref();
        let count = pool.count(of);
        let describe = pool.describe();
        let whose = of.map_or(String::new(), |a| format!(" of {a}"));
        if count.lo == 0 {
            let message = if count.hi == 0 {
                format!(
                    "kill {}: no {role}{whose} is running here (running {role}s: {describe})",
                    k.target.name()
                )
            } else {
                format!(
                    "kill {}: a {role}{whose} may not be running here, because an earlier kill without `of` may have hit it (running {role}s: {describe}); add of = \"...\" to that kill",
                    k.target.name()
                )
            };
            self.problem(index, message);
            return;
        }
        let among = match k.target {
            KillTarget::Leader => None,
            _ => Some(count.hi),
        };
        self.kills.push(KillPoint { step: index, among });
        match k.target {
            KillTarget::Worker | KillTarget::Leader => self.remove_worker(of),
            KillTarget::Producer => self.producers.remove_one(of),
        }
    }

    /// One worker of `of` (any when `None`) gone: an idle one or not.
    fn remove_worker(&mut self, of: Option<&str>) {
        self.workers.remove_one(of);
        self.idle_workers = self.idle_workers.min(self.workers.total);
    }

    /// A suspension needs a live candidate, like a kill; the process stays
    /// in its pool (it is stopped, not gone).
    fn suspend(&mut self, index: usize, s: &SuspendStep) {
        let (pool, role) = match s.target {
            KillTarget::Worker | KillTarget::Leader => (&self.workers, "worker"),
            KillTarget::Producer => (&self.producers, "producer"),
        };
        let of = s.of.as_deref();
        let count = pool.count(of);
        if count.lo == 0 {
            let whose = of.map_or(String::new(), |a| format!(" of {a}"));
            let describe = pool.describe();
            self.problem(
                index,
                format!(
                    "suspend {}: no {role}{whose} is surely running here (running {role}s: {describe})",
                    s.target.name()
                ),
            );
            return;
        }
        let among = match s.target {
            KillTarget::Leader => None,
            _ => Some(count.hi),
        };
        self.suspends.push(KillPoint { step: index, among });
        if s.duration.is_none() {
            if let Some((open, ..)) = self
                .open_suspensions
                .iter()
                .find(|(_, t, o)| *t == s.target && o.as_deref() == of)
            {
                let open = *open;
                self.problem(index, format!(
                    "suspend {}: step {open} already holds one suspended until a resume; resume it first (or give one of them for = \"...\")",
                    s.target.name()
                ));
                return;
            }
            self.open_suspensions.push((index, s.target, s.of.clone()));
        }
    }

    fn resume(&mut self, index: usize, s: &ResumeStep) {
        let found = self
            .open_suspensions
            .iter()
            .position(|(_, t, o)| *t == s.target && *o == s.of);
        match found {
            Some(i) => {
                self.open_suspensions.remove(i);
                if s.signal == super::model::ResumeSignal::Kill {
                    match s.target {
                        KillTarget::Worker | KillTarget::Leader => {
                            self.remove_worker(s.of.as_deref())
                        }
                        KillTarget::Producer => self.producers.remove_one(s.of.as_deref()),
                    }
                }
            }
            None => {
                let whose =
                    s.of.as_ref()
                        .map_or(String::new(), |a| format!(" of = \"{a}\""));
                self.problem(index, format!(
                    "resume {}: no earlier suspend = \"{}\"{whose} without `for` is still suspended here",
                    s.target.name(),
                    s.target.name()
                ));
            }
        }
    }

    /// Reports faults armed for a migrate or flip that never comes.
    pub(crate) fn finish(&mut self) {
        for (index, target, of) in std::mem::take(&mut self.open_suspensions) {
            let whose = of.map_or(String::new(), |a| format!(", of = \"{a}\""));
            self.problem(index, format!(
                "suspend {0} stays suspended to the end of the cell: add a later {{ resume = \"{0}\"{whose} }} step, or give it for = \"...\"",
                target.name()
            ));
        }
        for (index, when, kill) in std::mem::take(&mut self.armed) {
            let (value, step) = match when {
                When::DuringMigrate => ("during_migrate", "migrate"),
                _ => ("during_flip", "flip"),
            };
            let key = if kill.is_some() { "when" } else { "pg_crash" };
            self.problem(
                index,
                format!("{key} = \"{value}\" needs a later {step} step in this cell"),
            );
        }
        self.problems.sort_by_key(|p| p.step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untargeted_kill_in_a_mixed_fleet_keeps_bounds() {
        let mut pool = Pool::default();
        pool.start("previous", 2);
        pool.start("current", 1);
        pool.remove_one(None);
        assert_eq!(pool.total, 2);
        assert_eq!(pool.count(Some("previous")), Bounds { lo: 1, hi: 2 });
        assert_eq!(pool.count(Some("current")), Bounds { lo: 0, hi: 1 });
        assert_eq!(pool.describe(), "0-1 of current, 1-2 of previous");
        pool.remove_one(Some("previous"));
        assert_eq!(pool.count(Some("previous")), Bounds { lo: 0, hi: 1 });
        assert_eq!(pool.count(Some("current")), Bounds { lo: 0, hi: 1 });
    }

    #[test]
    fn untargeted_kill_in_a_single_artifact_fleet_is_exact() {
        let mut pool = Pool::default();
        pool.start("current", 3);
        pool.remove_one(None);
        assert_eq!(pool.count(Some("current")), Bounds { lo: 2, hi: 2 });
        pool.replace_all("previous");
        assert_eq!(pool.count(Some("previous")), Bounds { lo: 2, hi: 2 });
        assert_eq!(pool.count(Some("current")), Bounds::default());
    }
}
