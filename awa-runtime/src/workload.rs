//! The built-in `rehearsal` job kind: each mode has exactly one designed
//! terminal `(state, attempt)`, so reconciliation can judge every job.

use crate::outcome::Outcome;
use std::time::Duration;

/// The job kind of the rehearsal workload.
pub const KIND: &str = "rehearsal";

/// The mode in a job's args, when it names one.
pub fn mode_of(args: &serde_json::Value) -> Option<Mode> {
    args.get("mode")
        .and_then(serde_json::Value::as_str)
        .and_then(Mode::parse)
}

/// A workload mode.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Complete,
    RetryOnce,
    FailTerminal,
    ExhaustRetries,
    SnoozeOnce,
    CancelSelf,
    Sleep,
    /// `complete` with a future `run_at`.
    Scheduled,
    OverrunDeadline,
}

impl Mode {
    /// Every mode, in a stable order.
    pub const ALL: [Mode; 9] = [
        Mode::Complete,
        Mode::RetryOnce,
        Mode::FailTerminal,
        Mode::ExhaustRetries,
        Mode::SnoozeOnce,
        Mode::CancelSelf,
        Mode::Sleep,
        Mode::Scheduled,
        Mode::OverrunDeadline,
    ];

    /// The mode's name in args, flags and events.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Complete => "complete",
            Mode::RetryOnce => "retry_once",
            Mode::FailTerminal => "fail_terminal",
            Mode::ExhaustRetries => "exhaust_retries",
            Mode::SnoozeOnce => "snooze_once",
            Mode::CancelSelf => "cancel_self",
            Mode::Sleep => "sleep",
            Mode::OverrunDeadline => "overrun_deadline",
            Mode::Scheduled => "scheduled",
        }
    }

    /// Parse a mode name.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The designed terminal `(state, attempt)` for a job of this mode
    /// enqueued with `max_attempts`.
    pub fn designed_terminal(self, max_attempts: i32) -> (&'static str, i32) {
        match self {
            Mode::Complete | Mode::Sleep | Mode::Scheduled => ("completed", 1),
            Mode::RetryOnce | Mode::SnoozeOnce | Mode::OverrunDeadline => ("completed", 2),
            Mode::FailTerminal => ("failed", 1),
            Mode::ExhaustRetries => ("failed", max_attempts),
            Mode::CancelSelf => ("cancelled", 1),
        }
    }
}

/// How the handler behaves; the timings come from the worker's config.
#[derive(Debug, Clone)]
pub struct HandlerTimings {
    pub retry_backoff: Duration,
    pub snooze: Duration,
}

/// How long the first attempt of an `overrun_deadline` job runs at least
/// when no deadline rescue takes it. The 0.6 releases run it for 30
/// deadlines (30 s at a 1 s deadline), which a cell's N-1 leadership could
/// outlast: the attempt then completed unrescued, as if rescue were optional.
pub const OVERRUN_HOLD: Duration = Duration::from_secs(600);

/// The attempt after which the retry backoff stops doubling.
pub const BACKOFF_DOUBLES_UNTIL: i32 = 6;

/// How long a job waits after attempt `attempt` asked to be retried, in
/// ms: `base` doubled for each attempt before it, up to
/// [`BACKOFF_DOUBLES_UNTIL`] (the 0.6 releases wait the same). The
/// designed wait reconciliation holds every retry to.
pub fn retry_backoff_ms(base: Duration, attempt: i32) -> f64 {
    base.as_secs_f64() * 1000.0 * f64::from(1u32 << (attempt.clamp(1, BACKOFF_DOUBLES_UNTIL) - 1))
}

/// Run one attempt of a `rehearsal` job.
pub async fn run(
    args: &serde_json::Value,
    attempt: i32,
    deadline_ms: Option<i32>,
    t: &HandlerTimings,
) -> Outcome {
    let backoff_ms = retry_backoff_ms(t.retry_backoff, attempt);
    let Some(mode) = args
        .get("mode")
        .and_then(|m| m.as_str())
        .and_then(Mode::parse)
    else {
        return Outcome::Failed;
    };
    match mode {
        Mode::Complete | Mode::Scheduled => Outcome::Completed,
        Mode::RetryOnce if attempt == 1 => Outcome::Retry {
            backoff_ms,
            reason: "retry_once: first attempt fails".into(),
        },
        Mode::RetryOnce => Outcome::Completed,
        Mode::FailTerminal => Outcome::Failed,
        Mode::ExhaustRetries => Outcome::Retry {
            backoff_ms,
            reason: "exhaust_retries: every attempt fails".into(),
        },
        Mode::SnoozeOnce if attempt == 1 => Outcome::Snooze {
            ms: t.snooze.as_secs_f64() * 1000.0,
        },
        Mode::SnoozeOnce => Outcome::Completed,
        Mode::CancelSelf => Outcome::Cancelled,
        Mode::Sleep => {
            let ms = args.get("ms").and_then(|v| v.as_u64()).unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Outcome::Completed
        }
        Mode::OverrunDeadline if attempt == 1 => {
            // Keep heartbeating (the worker does) while running far past
            // the deadline: only deadline rescue can take this attempt,
            // however long the rescue takes to come (a 0.6 leader never
            // deadline-rescues a 0.7 claim batch, so a 0.7 claim waits
            // for a 0.7 leader). Longer than any rehearsal cell: an attempt
            // that ends on its own was never rescued, and shows as a job
            // still running, not as a completion on the wrong attempt.
            let d = u64::try_from(deadline_ms.unwrap_or(1000)).unwrap_or(1000);
            tokio::time::sleep(OVERRUN_HOLD.max(Duration::from_millis(d.saturating_mul(30)))).await;
            Outcome::Completed
        }
        Mode::OverrunDeadline => Outcome::Completed,
    }
}

/// A weighted mix of modes, assigned by smooth weighted round robin:
/// deterministic, and every prefix is as close to the weights as can be.
#[derive(Debug, Clone)]
pub struct Mix {
    entries: Vec<(Mode, i64)>,
    current: Vec<i64>,
    total: i64,
}

impl Mix {
    /// Parse `complete=60,retry_once=8,...`.
    // A String: its caller words it into Error::Config, naming the flag.
    pub fn parse(s: &str) -> Result<Mix, String> {
        let mut entries = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part.split_once('=').ok_or_else(|| {
                format!("malformed mix entry {part:?}: expected mode=weight, like complete=60")
            })?;
            let mode = Mode::parse(name.trim()).ok_or_else(|| {
                let all: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown mode {:?} in the mix; expected one of {}",
                    name.trim(),
                    all.join(", ")
                )
            })?;
            let w: i64 = w.trim().parse().ok().filter(|w| *w >= 0).ok_or_else(|| {
                format!(
                    "malformed weight {:?} for mode {}: expected a whole number >= 0",
                    w.trim(),
                    mode.name()
                )
            })?;
            if entries.iter().any(|(m, _)| *m == mode) {
                return Err(format!("mode {} appears twice in the mix", mode.name()));
            }
            entries.push((mode, w));
        }
        let total: i64 = entries.iter().map(|e| e.1).sum();
        if total == 0 {
            return Err(format!(
                "the mix {s:?} has no positive weight; give at least one, like complete=1"
            ));
        }
        let current = vec![0; entries.len()];
        Ok(Mix {
            entries,
            current,
            total,
        })
    }

    /// The next mode.
    pub fn next_mode(&mut self) -> Mode {
        let mut best = 0;
        for (i, (_, w)) in self.entries.iter().enumerate() {
            self.current[i] += w;
            if self.current[i] > self.current[best] {
                best = i;
            }
        }
        self.current[best] -= self.total;
        self.entries[best].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_follows_weights_exactly_over_a_period() {
        let mut mix = Mix::parse("complete=3, sleep=1").unwrap();
        let got: Vec<Mode> = (0..8).map(|_| mix.next_mode()).collect();
        assert_eq!(got.iter().filter(|m| **m == Mode::Sleep).count(), 2);
        assert_eq!(got.iter().filter(|m| **m == Mode::Complete).count(), 6);
    }

    #[test]
    fn mix_rejects_bad_input() {
        for (bad, needle) in [
            ("complete", "expected mode=weight"),
            ("completed=1", "unknown mode"),
            ("complete=x", "malformed weight"),
            ("complete=-1", "malformed weight"),
            ("complete=0", "no positive weight"),
            ("complete=1,complete=2", "twice"),
        ] {
            let err = Mix::parse(bad).unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn the_backoff_doubles_per_attempt_up_to_its_cap() {
        let base = Duration::from_millis(200);
        let got: Vec<f64> = (0..=8).map(|a| retry_backoff_ms(base, a)).collect();
        assert_eq!(
            got,
            [
                200.0, 200.0, 400.0, 800.0, 1600.0, 3200.0, 6400.0, 6400.0, 6400.0
            ]
        );
    }

    #[test]
    fn every_mode_has_one_designed_terminal() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Some(m));
            let (state, attempt) = m.designed_terminal(3);
            assert!(["completed", "failed", "cancelled"].contains(&state));
            assert!((1..=3).contains(&attempt));
        }
    }
}
