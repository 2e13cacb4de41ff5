//! `leadership_lost`: a maintenance leader of the release under test that
//! stopped leading when nothing the cell did explains it.
//!
//! Leadership is a session advisory lock: a runtime gives it up only when
//! its leader's connection goes (a duty that failed, a session the server
//! ended) or when it is asked to stop. Every change of leader in a cell
//! therefore has a cause the harness injected, or it is a finding: a
//! leader whose duty fails on something it should take in its stride (a
//! prune that loses a deadlock, a rescue that meets a lock conflict)
//! drops its connection and the fleet is without rotation, rescue and
//! cron until someone takes over, while every job still ends as designed.
//!
//! A term of leadership ends when the next one begins, whoever begins it
//! (the same runtime again is a term lost too). Its end is explained when,
//! before the next term began, its runtime was killed, suspended, asked to
//! stop (a roll, a rollback, a drain) or had ended (a fence, a revoked
//! role, a crash: an unasked end is judged as a step failure of its own),
//! when PostgreSQL crashed during the term or shortly before it ended (every
//! session goes, and reconnecting runtimes may trade the lead), or when the
//! monitor saw the runtime's heartbeat late during the term (a starved or
//! held-back runtime's idle leader session outlives the server's
//! `idle_session_timeout`, by design). Terms of earlier releases are not
//! judged: the rehearsal judges the release under test.

use super::release_line::flip_aware;
use super::rules::{RECONCILE, phase_at};
use crate::matrix::FindingRule;
use crate::observe::{Finding, LeaderTerm, Observations, duration};

/// How long after a process's end its reaping may be seen: its leader
/// session closes with the process, so the next leader's event can be
/// read before the harness reaps it.
const ENDED_SLACK_MS: u64 = 2_000;

/// How long after PostgreSQL came back runtimes may still trade the lead
/// (each reconnects on its own after a failed statement).
const AFTER_CRASH_MS: u64 = 5_000;

/// Every finding of this module.
pub(super) fn findings(obs: &Observations) -> Vec<Finding> {
    let lost: Vec<(&LeaderTerm, &LeaderTerm)> = obs
        .leaderships
        .windows(2)
        .map(|w| (&w[0], &w[1]))
        .filter(|(term, _)| flip_aware(&term.version))
        // A lead taken by an earlier release is not judged here: a 0.6
        // runtime asks for the leader's lock on every tick and its prune
        // holds ACCESS EXCLUSIVE locks up to 2 s, past the cells'
        // compressed stale_after, so a 0.7 duty can fail behind it; the
        // monitor does not yet tell that wait apart (a clean fence cell
        // on docker lost its 0.7 leader to 0.6.2 so in CI). The handoff
        // reaches judge who leads across versions.
        .filter(|(_, next)| flip_aware(&next.version))
        .filter(|(term, next)| !explained(obs, term, next.from_ms))
        .collect();
    let Some((term, next)) = lost.first() else {
        return vec![];
    };
    let taken = if next.process == term.process {
        format!("it took the lead again at {}", duration(next.from_ms))
    } else {
        format!(
            "{} ({}) took the lead at {}",
            next.process,
            next.version,
            duration(next.from_ms)
        )
    };
    let more = match lost.len() {
        1 => String::new(),
        n => format!(" ({n} terms lost so in all)"),
    };
    vec![Finding {
        rule: FindingRule::LeadershipLost,
        phase: phase_at(obs, next.from_ms).unwrap_or(RECONCILE).into(),
        message: format!(
            "{} ({}) stopped leading unasked: it led from {}, and {taken}, though it was neither \
             killed, suspended, asked to stop nor ended, PostgreSQL did not crash, and the monitor \
             never saw its heartbeat late{more}",
            term.process,
            term.version,
            duration(term.from_ms)
        ),
        ids: vec![],
        count: lost.len() as u64,
        at_ms: Some(next.from_ms),
    }]
}

/// Whether what the harness did explains why `term` ended by `until_ms`
/// (when the next term began).
fn explained(obs: &Observations, term: &LeaderTerm, until_ms: u64) -> bool {
    let killed = obs
        .kills
        .iter()
        .any(|k| k.process == term.process && k.at_ms <= until_ms);
    let suspended = obs.suspensions.iter().any(|s| {
        s.process == term.process
            && s.from_ms <= until_ms
            && s.to_ms.is_none_or(|to| to >= term.from_ms)
    });
    let stopped = term.stop_asked_ms.is_some_and(|at| at <= until_ms);
    let ended = term
        .ended_ms
        .is_some_and(|at| at <= until_ms + ENDED_SLACK_MS);
    let crashed = obs.phases.iter().any(|p| {
        p.name == "pg_crash" && p.start_ms <= until_ms && p.end_ms + AFTER_CRASH_MS >= term.from_ms
    });
    let seen_late = obs.late.iter().any(|l| {
        l.beat_late_ms > 0
            && l.runtime.as_deref() == Some(term.process.as_str())
            && term.from_ms <= l.at_ms
            && l.at_ms <= until_ms
    });
    killed || suspended || stopped || ended || crashed || seen_late
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{KillRecord, LateSample, Phase, StepOutcome, SuspensionRecord};

    const OWN: &str = awa_runtime::version::VERSION;

    fn term(process: &str, version: &str, from_ms: u64) -> LeaderTerm {
        LeaderTerm {
            process: process.into(),
            artifact: if version == OWN {
                "current"
            } else {
                "previous"
            }
            .into(),
            version: version.into(),
            from_ms,
            stop_asked_ms: None,
            ended_ms: None,
        }
    }

    /// The mutant's shape: the leader's prune lost a deadlock, its
    /// maintenance failed and dropped the connection, and leadership went
    /// to whoever asked next, itself or another runtime.
    fn lost_unasked() -> Observations {
        Observations {
            leaderships: vec![
                term("current-worker-1", OWN, 1_000),
                term("current-worker-2", OWN, 9_000),
                term("current-worker-2", OWN, 14_000),
            ],
            ..Observations::default()
        }
    }

    #[test]
    fn a_leader_that_stops_leading_with_nothing_injected_is_a_finding() {
        let found = findings(&lost_unasked());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.rule, FindingRule::LeadershipLost);
        assert_eq!(f.count, 2, "both terms ended unasked");
        assert_eq!(f.at_ms, Some(9_000));
        assert_eq!(
            f.message,
            format!(
                "current-worker-1 ({OWN}) stopped leading unasked: it led from 1.0s, and \
                 current-worker-2 ({OWN}) took the lead at 9.0s, though it was neither killed, \
                 suspended, asked to stop nor ended, PostgreSQL did not crash, and the monitor \
                 never saw its heartbeat late (2 terms lost so in all)"
            )
        );
        // Taking the lead back is a term lost as well.
        let obs = Observations {
            leaderships: vec![
                term("current-worker-1", OWN, 1_000),
                term("current-worker-1", OWN, 3_000),
            ],
            ..Observations::default()
        };
        let found = findings(&obs);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].message.contains("it took the lead again at 3.0s"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn one_term_and_earlier_releases_terms_are_not_judged() {
        let obs = Observations {
            leaderships: vec![term("current-worker-1", OWN, 1_000)],
            ..Observations::default()
        };
        assert_eq!(findings(&obs), vec![]);
        assert_eq!(findings(&Observations::default()), vec![]);
        let obs = Observations {
            leaderships: vec![
                term("previous-worker-1", "0.6.2", 1_000),
                term("current-worker-1", OWN, 5_000),
            ],
            ..Observations::default()
        };
        assert_eq!(findings(&obs), vec![]);
    }

    #[test]
    fn a_term_ended_by_what_the_harness_did_is_no_finding() {
        let excused = |change: &dyn Fn(&mut Observations)| {
            let mut obs = lost_unasked();
            // The second term ends unasked in every case: only the first
            // is excused here.
            obs.leaderships.pop();
            change(&mut obs);
            findings(&obs)
        };
        assert_eq!(findings(&lost_unasked())[0].count, 2);
        let killed = |obs: &mut Observations| {
            obs.kills.push(KillRecord {
                process: "current-worker-1".into(),
                version: OWN.into(),
                role: "leader".into(),
                at_ms: 8_500,
                in_flight: vec![],
            })
        };
        assert_eq!(excused(&killed), vec![]);
        let suspended = |obs: &mut Observations| {
            obs.suspensions.push(SuspensionRecord {
                process: "current-worker-1".into(),
                version: OWN.into(),
                leader: true,
                from_ms: 6_000,
                to_ms: Some(12_000),
            })
        };
        assert_eq!(excused(&suspended), vec![]);
        let stopped = |obs: &mut Observations| obs.leaderships[0].stop_asked_ms = Some(8_000);
        assert_eq!(excused(&stopped), vec![]);
        // Reaped a moment after the next leader spoke: its session went
        // with the process.
        let ended = |obs: &mut Observations| obs.leaderships[0].ended_ms = Some(9_500);
        assert_eq!(excused(&ended), vec![]);
        let crashed = |obs: &mut Observations| {
            obs.phases.push(Phase {
                step: 4,
                name: "pg_crash".into(),
                detail: String::new(),
                start_ms: 7_000,
                end_ms: 8_000,
                outcome: StepOutcome::Ok,
            })
        };
        assert_eq!(excused(&crashed), vec![]);
        let late = |obs: &mut Observations| {
            obs.late.push(LateSample {
                at_ms: 8_700,
                tick_late_ms: 0,
                beat_late_ms: 900,
                runtime: Some("current-worker-1".into()),
            })
        };
        assert_eq!(excused(&late), vec![]);
    }

    #[test]
    fn what_the_harness_did_elsewhere_or_later_explains_nothing() {
        let judged = |change: &dyn Fn(&mut Observations)| {
            let mut obs = lost_unasked();
            obs.leaderships.pop();
            change(&mut obs);
            findings(&obs).len()
        };
        // Another runtime killed; this one asked to stop, or ended, only
        // after the lead had changed hands.
        assert_eq!(
            judged(&|obs| obs.kills.push(KillRecord {
                process: "current-worker-3".into(),
                version: OWN.into(),
                role: "worker".into(),
                at_ms: 8_500,
                in_flight: vec![],
            })),
            1
        );
        assert_eq!(
            judged(&|obs| obs.leaderships[0].stop_asked_ms = Some(30_000)),
            1
        );
        assert_eq!(judged(&|obs| obs.leaderships[0].ended_ms = Some(30_000)), 1);
        // A crash more than 5 s before the term, a suspension let go
        // before it began, a late heartbeat of another runtime or after
        // the change.
        assert_eq!(
            judged(&|obs| {
                obs.phases.push(Phase {
                    step: 2,
                    name: "pg_crash".into(),
                    detail: String::new(),
                    start_ms: 0,
                    end_ms: 200,
                    outcome: StepOutcome::Ok,
                });
                obs.leaderships[0].from_ms = 5_300;
            }),
            1
        );
        assert_eq!(
            judged(&|obs| obs.suspensions.push(SuspensionRecord {
                process: "current-worker-1".into(),
                version: OWN.into(),
                leader: false,
                from_ms: 100,
                to_ms: Some(500),
            })),
            1
        );
        assert_eq!(
            judged(&|obs| {
                obs.late.push(LateSample {
                    at_ms: 8_700,
                    tick_late_ms: 0,
                    beat_late_ms: 900,
                    runtime: Some("current-worker-2".into()),
                });
                obs.late.push(LateSample {
                    at_ms: 9_400,
                    tick_late_ms: 0,
                    beat_late_ms: 900,
                    runtime: Some("current-worker-1".into()),
                });
            }),
            1
        );
    }

    #[test]
    fn leadership_lost_depends_on_timing() {
        assert!(!FindingRule::LeadershipLost.timing_independent());
    }

    #[test]
    fn a_lead_taken_by_an_earlier_release_is_not_judged_here() {
        // CI, docker fence cell: the 0.7 leader's term ended and 0.6.2
        // took the lead with no cause on record.
        let obs = Observations {
            leaderships: vec![
                term("current-worker-1", OWN, 37_000),
                term("previous-worker-2", "0.6.2", 49_200),
            ],
            ..Default::default()
        };
        assert_eq!(findings(&obs), vec![]);
        // The same loss to a runtime of the release under test is judged.
        let obs = Observations {
            leaderships: vec![
                term("current-worker-1", OWN, 37_000),
                term("current-worker-2", OWN, 49_200),
            ],
            ..Default::default()
        };
        assert_eq!(findings(&obs).len(), 1);
    }
}
