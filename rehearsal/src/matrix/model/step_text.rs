//! Steps as one line of text, for `rehearse plan` and the reports
//! (`roll to current one at a time, pause 2s`).

use std::fmt;

use super::{KillStep, Outcome, ResumeSignal, Step, SuspendAt, SuspendStep, When};

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
            Step::Fleet(s) => {
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
            Step::Load(s) => write!(f, "load {}", if s.on { "on" } else { "off" }),
            Step::Migrate(s) => {
                write!(f, "migrate with {}", s.artifact)?;
                if s.allow_live_runtimes {
                    f.write_str(" --allow-live-runtimes")?;
                }
                if s.expect == Outcome::Refused {
                    f.write_str(", must be refused")?;
                }
                Ok(())
            }
            Step::Roll(s) => {
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
            Step::Rollback(s) => {
                write!(f, "rollback to {}", s.artifact)?;
                if let Some(n) = s.workers {
                    write!(f, " with {}", plural(n, "worker"))?;
                }
                Ok(())
            }
            Step::Kill(k) => write!(f, "{k}"),
            Step::Suspend(s) => write!(f, "{s}"),
            Step::Resume(s) => {
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
            Step::PgCrash(s) => write!(f, "pg_crash {}", s.when.describe()),
            Step::Flip(s) => {
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
            Step::Fence(s) => write!(
                f,
                "fence {}: its worker must refuse and change nothing",
                s.artifact
            ),
            Step::Hold(s) => {
                match s.until {
                    Some(until) => write!(f, "hold up to {}, until {until}", s.duration)?,
                    None => write!(f, "hold {}", s.duration)?,
                }
                if let Some(reads) = s.reads {
                    write!(f, ", a client reading in {reads} statements meanwhile")?;
                }
                Ok(())
            }
            Step::Drain(s) => write!(f, "drain, until {} without progress", s.timeout),
            Step::Assert(s) => write!(f, "assert {}", s.check),
            Step::Cancel(s) => write!(
                f,
                "cancel {} and {} as an operator with {}",
                plural(s.running, "running job"),
                plural(s.available, "available job"),
                s.artifact
            ),
        }
    }
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
