//! Steps as one line of text, for `rehearse plan` and the reports
//! (`roll to current one at a time, pause 2s`).

use std::fmt;

use super::{
    FleetStep, FlipStep, HoldStep, KillStep, MigrateStep, Outcome, ResumeSignal, ResumeStep,
    RollStep, RollbackStep, Step, SuspendAt, SuspendStep, When,
};

impl fmt::Display for KillStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kill {}", self.target.name())?;
        if let Some(of) = &self.of {
            write!(f, " of {of}")?;
        }
        write!(f, ": {}", self.when.describe())?;
        if self.after_started > 0 {
            write!(f, ", once it has started {} jobs", self.after_started)?;
        }
        Ok(())
    }
}

impl<K: fmt::Display, S: fmt::Display> fmt::Display for Step<K, S> {
    /// One line for `rehearse plan`, e.g. `roll to current one at a time, pause 2s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Fleet(s) => write_fleet(f, s),
            Step::Load(s) => write!(f, "load {}", if s.on { "on" } else { "off" }),
            Step::Migrate(s) => write_migrate(f, s),
            Step::Roll(s) => write_roll(f, s),
            Step::Rollback(s) => write_rollback(f, s),
            Step::Kill(k) => write!(f, "{k}"),
            Step::Suspend(s) => write!(f, "{s}"),
            Step::Resume(s) => write_resume(f, s),
            Step::PgCrash(s) => write!(f, "pg_crash {}", s.when.describe()),
            Step::Flip(s) => write_flip(f, s),
            Step::Fence(s) => write!(
                f,
                "fence {}: its worker must refuse and change nothing",
                s.artifact
            ),
            Step::Hold(s) => write_hold(f, s),
            Step::Drain(s) => write!(f, "drain, until {} without progress", s.timeout),
            Step::Assert(s) => write!(f, "assert {}", s.check),
            Step::Cancel(s) => write!(
                f,
                "cancel {} and {} as an operator with {}",
                plural(s.running, "running job"),
                plural(s.available, "available job"),
                s.artifact
            ),
            Step::Revoke(s) => write!(
                f,
                "revoke {}: {} as a role of their own, then its privileges revoked: each must surface the permanent error at once",
                s.artifact,
                [
                    (s.workers > 0).then(|| plural(s.workers, "worker")),
                    (s.producers > 0).then(|| plural(s.producers, "producer")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" and ")
            ),
        }
    }
}

/// `fleet previous: 3 workers, 1 producer, first worker becomes leader`.
fn write_fleet(f: &mut fmt::Formatter<'_>, s: &FleetStep) -> fmt::Result {
    write!(f, "fleet {}:", s.artifact)?;
    let mut parts = Vec::new();
    if s.workers > 0 {
        parts.push(plural(s.workers, "worker"));
    }
    if s.producers > 0 {
        parts.push(plural(s.producers, "producer"));
    }
    write!(f, " {}", parts.join(", "))?;
    if s.leader {
        f.write_str(", first worker becomes leader")?;
    }
    if s.idle {
        f.write_str(", idle (claims nothing, rotates only)")?;
    }
    if s.when != When::Now {
        write!(f, ", {}", s.when.describe())?;
    }
    Ok(())
}

/// `migrate with current, must be refused`.
fn write_migrate(f: &mut fmt::Formatter<'_>, s: &MigrateStep) -> fmt::Result {
    write!(f, "migrate with {}", s.artifact)?;
    if s.allow_live_runtimes {
        f.write_str(" --allow-live-runtimes")?;
    }
    if s.expect == Outcome::Refused {
        f.write_str(", must be refused")?;
    }
    Ok(())
}

/// `roll to current one at a time, pause 2s`.
fn write_roll(f: &mut fmt::Formatter<'_>, s: &RollStep) -> fmt::Result {
    write!(f, "roll to {}", s.artifact)?;
    if s.one_at_a_time {
        write!(f, " one at a time, pause {}", s.pause)?;
    } else {
        f.write_str(" all at once")?;
    }
    if !s.producers {
        f.write_str(", workers only")?;
    }
    Ok(())
}

/// `rollback to previous with 2 workers`.
fn write_rollback(f: &mut fmt::Formatter<'_>, s: &RollbackStep) -> fmt::Result {
    write!(f, "rollback to {}", s.artifact)?;
    if let Some(n) = s.workers {
        write!(f, " with {}", plural(n, "worker"))?;
    }
    Ok(())
}

/// `resume (SIGCONT) the suspended leader`.
fn write_resume(f: &mut fmt::Formatter<'_>, s: &ResumeStep) -> fmt::Result {
    let verb = match s.signal {
        ResumeSignal::Cont => "resume (SIGCONT)",
        ResumeSignal::Kill => "SIGKILL",
    };
    write!(f, "{verb} the suspended {}", s.target.name())?;
    if let Some(of) = &s.of {
        write!(f, " of {of}")?;
    }
    Ok(())
}

/// `flip auto by current, timeout 30s`.
fn write_flip(f: &mut fmt::Formatter<'_>, s: &FlipStep) -> fmt::Result {
    write!(f, "flip {} by {}", s.mode.name(), s.by)?;
    if let Some(t) = s.timeout {
        write!(f, ", timeout {t}")?;
    }
    match s.expect {
        Outcome::Refused => f.write_str(", must be refused")?,
        Outcome::Blocked => f.write_str(", must give up on a held lock")?,
        Outcome::Ok => {}
    }
    Ok(())
}

/// `hold 2s, a client reading in 3 statements meanwhile`.
fn write_hold(f: &mut fmt::Formatter<'_>, s: &HoldStep) -> fmt::Result {
    match s.until {
        Some(until) => write!(f, "hold up to {}, until {until}", s.duration)?,
        None => write!(f, "hold {}", s.duration)?,
    }
    if let Some(reads) = s.reads {
        write!(f, ", a client reading in {reads} statements meanwhile")?;
    }
    if let Some(ring) = s.lock_ring {
        write!(
            f,
            ", a client holding the {ring} ring's partitions now and then"
        )?;
        if s.deadlock {
            f.write_str(", in the other order from a prune's (a deadlock)")?;
        }
    }
    Ok(())
}

/// "1 worker", "3 workers".
fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

impl fmt::Display for SuspendStep {
    /// `suspend the leader of previous for 5s`, as written (before planning).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "suspend a {}", self.target.name())?;
        if let Some(of) = &self.of {
            write!(f, " of {of}")?;
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
