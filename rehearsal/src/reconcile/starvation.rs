//! Starvation: whether a cell's processes (or the harness itself) ran
//! later than the cell's timings tolerate while a timing-sensitive step
//! ran.
//!
//! The runtime's timings decide who is alive: a heartbeat older than
//! `stale_after` reads as a dead runtime. A live runtime starved of CPU
//! past that point is rescued, outvoted for leadership, or left out of a
//! flip's fresh-runtime check while it still runs: what follows can look
//! exactly like a release's bug (a fence breach, a floor bypassed, an
//! attempt interrupted for no reason), and a race the cell exists for
//! may have run with other timings than the ones it tests. A cell judged
//! under such starvation is therefore inconclusive, naming the figure:
//! never a failure of the release, and never a pass on conditions the
//! cell did not have.

use crate::matrix::Timings;
use crate::observe::{LateSample, Phase, duration};

/// Steps whose outcome depends on who is alive and who leads, by the
/// runtime's heartbeats: starvation while they run changes what they see.
/// Starting a fleet, switching load, asserts and setup are not: what they
/// check does not depend on timing.
pub const SENSITIVE: [&str; 11] = [
    "suspend", "resume", "kill", "flip", "migrate", "roll", "rollback", "fence", "hold",
    "pg_crash", "drain",
];

/// The worst starvation of a sensitive phase past the tolerance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Starved {
    /// The phase's step (1-based).
    pub step: usize,
    /// The phase's step kind (`flip`).
    pub kind: String,
    /// How late heartbeats ran (0 when only the harness was late).
    pub beat_late_ms: u64,
    /// Whose heartbeat that was.
    pub runtime: Option<String>,
    /// How late the harness's own pulse ran.
    pub tick_late_ms: u64,
}

impl std::fmt::Display for Starved {
    /// `heartbeats up to 2.4s late during step 8 (flip) (previous-worker-2)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.beat_late_ms > 0 {
            let whose = self
                .runtime
                .as_deref()
                .map_or(String::new(), |r| format!(" ({r})"));
            parts.push(format!(
                "heartbeats up to {} late{whose}",
                duration(self.beat_late_ms)
            ));
        }
        if self.tick_late_ms > 0 {
            parts.push(format!(
                "the harness's own pulse up to {} late",
                duration(self.tick_late_ms)
            ));
        }
        write!(
            f,
            "{} during step {} ({})",
            parts.join(" and "),
            self.step,
            self.kind
        )
    }
}

/// The worst sample of a sensitive phase in which a runtime that should
/// have been beating went unseen past `stale_after` (its heartbeat late by
/// more than `stale_after` less one interval), or the harness's ticks ran
/// `stale_after` late; `None` when the cell's timings held throughout.
pub fn starved(phases: &[Phase], late: &[LateSample], timings: &Timings) -> Option<Starved> {
    let heartbeat = timings.heartbeat.as_millis();
    let stale = timings.stale_after.as_millis();
    let beat_tolerance = stale.saturating_sub(heartbeat);
    late.iter()
        .filter_map(|s| {
            // A late sample measures the window before it: the phase it
            // was late in is the latest sensitive one that window overlaps.
            let from = s.at_ms.saturating_sub(s.beat_late_ms.max(s.tick_late_ms));
            phases
                .iter()
                .rfind(|p| {
                    p.step > 0
                        && p.start_ms <= s.at_ms
                        && from <= p.end_ms
                        && SENSITIVE.contains(&p.name.as_str())
                })
                .map(|phase| (phase, s))
        })
        .filter(|(_, s)| s.beat_late_ms > beat_tolerance || s.tick_late_ms > stale)
        .max_by_key(|(_, s)| s.beat_late_ms.max(s.tick_late_ms))
        .map(|(phase, s)| {
            let beat = s.beat_late_ms > beat_tolerance;
            let tick = s.tick_late_ms > stale;
            Starved {
                step: phase.step,
                kind: phase.name.clone(),
                beat_late_ms: if beat { s.beat_late_ms } else { 0 },
                runtime: if beat { s.runtime.clone() } else { None },
                tick_late_ms: if tick { s.tick_late_ms } else { 0 },
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Duration;
    use crate::observe::StepOutcome;

    fn timings() -> Timings {
        let ms = |n: u64| Duration::from_millis(n);
        Timings {
            heartbeat: ms(200),
            stale_after: ms(1_500),
            rescue_every: ms(250),
            rotate_every: ms(1_000),
            deadline: ms(2_000),
            drain_timeout: ms(60_000),
            budget: ms(300_000),
        }
    }

    fn phase(step: usize, name: &str, start_ms: u64, end_ms: u64) -> Phase {
        Phase {
            step,
            name: name.into(),
            detail: String::new(),
            start_ms,
            end_ms,
            outcome: StepOutcome::Ok,
        }
    }

    fn late(at_ms: u64, beat_late_ms: u64, tick_late_ms: u64) -> LateSample {
        LateSample {
            at_ms,
            tick_late_ms,
            beat_late_ms,
            runtime: (beat_late_ms > 0).then(|| "previous-worker-2".to_owned()),
        }
    }

    fn phases() -> Vec<Phase> {
        vec![
            phase(0, "setup", 0, 1_000),
            phase(1, "fleet", 1_000, 3_000),
            phase(2, "load", 3_000, 3_100),
            phase(3, "flip", 3_100, 6_000),
            phase(4, "assert", 6_000, 7_000),
        ]
    }

    #[test]
    fn heartbeats_late_past_stale_after_in_a_flip_starve_the_cell() {
        let found = starved(&phases(), &[late(4_000, 2_400, 0)], &timings()).expect("starved");
        assert_eq!(
            found.to_string(),
            "heartbeats up to 2.4s late (previous-worker-2) during step 3 (flip)"
        );
        // The worst of several, and the harness's own lateness named too.
        let found = starved(
            &phases(),
            &[
                late(3_500, 1_400, 0),
                late(5_000, 0, 1_900),
                late(5_500, 1_350, 0),
            ],
            &timings(),
        )
        .expect("starved");
        assert_eq!(
            found.to_string(),
            "the harness's own pulse up to 1.9s late during step 3 (flip)"
        );
    }

    #[test]
    fn lateness_within_tolerance_or_outside_sensitive_steps_is_not_starvation() {
        let t = timings();
        // 1.3 s late is a 1.5 s old heartbeat: still fresh.
        assert_eq!(starved(&phases(), &[late(4_000, 1_300, 1_500)], &t), None);
        // Late while the fleet started, the load switched, an assert ran,
        // or during setup: nothing those check depends on timing.
        for at in [500, 2_000, 3_050] {
            assert_eq!(
                starved(&phases(), &[late(at, 1_400, 1_600)], &t),
                None,
                "{at}"
            );
        }
        // Seen in the assert after the flip, but late since inside the flip.
        let found = starved(&phases(), &[late(6_500, 2_000, 0)], &t).expect("starved");
        assert_eq!((found.step, found.kind.as_str()), (3, "flip"));
        assert_eq!(starved(&phases(), &[], &t), None);
    }
}
