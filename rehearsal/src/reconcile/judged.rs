//! The verdict on a finished cell, as the event that follows it in the
//! stream: the driver asks for it through its `Reconcile` seam (wired in
//! `pipeline.rs`) and sends it right after the cell's `cell_finished`, so
//! reconciliation happens before the stream and its readers judge nothing.

use crate::matrix::{Expectation, FindingRule};
use crate::observe::Verdict;
use crate::stream::{CellRun, RunEvent};

/// The verdict on `event`, when it is a finished cell: the
/// [`RunEvent::CellJudged`] that follows it.
pub fn judged(event: &RunEvent) -> Option<RunEvent> {
    let RunEvent::CellFinished(run) = event else {
        return None;
    };
    Some(cell_judged(run))
}

/// The verdict on the finished cell `run`: the [`RunEvent::CellJudged`]
/// that follows its `cell_finished`. The first reading is doubted in turn
/// by each condition a verdict is only as good as (starvation, a ring
/// that stood still under a squeeze, a loop's rate in a squeezed window,
/// a rule judged on missing evidence); a doubt that holds makes the cell
/// inconclusive, with what the run otherwise read (a finding no timing
/// can produce stands under starvation, and says it was starved).
pub fn cell_judged(run: &CellRun) -> RunEvent {
    let reached = super::reached(&run.plan.reach, &run.observations, &run.proved.claimed_by);
    let mut judging = Judging::first(run, &reached);
    judging.doubt_starvation();
    judging.doubt_rings();
    judging.doubt_loops();
    judging.doubt_evidence();
    RunEvent::CellJudged {
        index: run.index,
        cell: run.plan.name.clone(),
        verdict: judging.judgement.verdict,
        detection: judging.judgement.detection,
        reason: judging.judgement.reason,
        harness_error: judging.harness_error,
        reached,
    }
}

/// Whether the cell's own rule fired (a `detect` cell caught its defect).
fn caught(run: &CellRun) -> bool {
    match &run.plan.expect {
        Expectation::Detect(rule) => run.findings.iter().any(|f| f.rule == *rule),
        Expectation::Pass => false,
    }
}

/// A cell's verdict as it is being judged: the reading so far, and why the
/// harness could not judge it, if it could not.
struct Judging<'a> {
    run: &'a CellRun,
    step_failures: Vec<String>,
    judgement: super::Judgement,
    harness_error: Option<String>,
}

impl<'a> Judging<'a> {
    /// The first reading: findings, failed steps, and the run's own
    /// harness error or what it did not do.
    fn first(run: &'a CellRun, reached: &[super::Reached]) -> Self {
        let step_failures: Vec<String> = run
            .observations
            .step_failures
            .iter()
            .map(ToString::to_string)
            .collect();
        // Findings stay in the report, but a fault that did not fire, or a
        // race the cell did not reach, leaves the cell unjudged: what it did
        // not do cannot show a defect missing. A cell whose own rule fired
        // caught its defect all the same (neither is the harness failing, so
        // nothing it did can have made the finding), and says what it missed.
        let unmet =
            super::unfired_faults(&run.observations).or_else(|| super::reach::missed(reached));
        let harness_error = run
            .harness_error
            .clone()
            .or_else(|| unmet.clone().filter(|_| !caught(run)));
        let mut judgement = super::judge(
            &run.plan.expect,
            &run.findings,
            &step_failures,
            harness_error.as_deref(),
        );
        if let (None, Some(unmet)) = (&harness_error, &unmet) {
            judgement.reason.push_str(&format!("; although {unmet}"));
        }
        Self {
            run,
            step_failures,
            judgement,
            harness_error,
        }
    }

    /// The cell is inconclusive for `doubt`, with what the run otherwise read.
    fn doubt(&mut self, doubt: impl std::fmt::Display) {
        let why = format!(
            "{doubt} (the run otherwise read: {})",
            self.judgement.reason
        );
        self.judgement = super::judge(
            &self.run.plan.expect,
            &self.run.findings,
            &self.step_failures,
            Some(&why),
        );
        self.harness_error = Some(why);
    }

    /// A verdict is only as good as the conditions it was taken in: what
    /// failed may be the starvation's doing, and what passed may not have
    /// met the timings the cell exists to test. A finding no timing can
    /// produce stands: a job lost under starvation is lost.
    fn doubt_starvation(&mut self) {
        let run = self.run;
        let Some(starved) = super::starved(
            &run.observations.phases,
            &run.observations.late,
            &run.plan.timings,
        ) else {
            return;
        };
        let standing = run.findings.iter().any(|f| f.rule.timing_independent());
        if self.judgement.verdict == Verdict::Fail && standing {
            self.judgement
                .reason
                .push_str(&format!("; found although starved: {starved}"));
        } else if self.judgement.verdict != Verdict::Inconclusive {
            self.doubt(format!(
                "starved: {starved}, past what stale_after {} tolerates",
                run.plan.timings.stale_after
            ));
        }
    }

    /// A ring that stood still a little past its bound while the machine
    /// was squeezed was not judged either way: a pass (or a miss of
    /// ring_stalled) cannot rest on it.
    fn doubt_rings(&mut self) {
        let run = self.run;
        let rests_on_rings = match &run.plan.expect {
            Expectation::Pass => self.judgement.verdict == Verdict::Pass,
            Expectation::Detect(rule) => {
                *rule == FindingRule::RingStalled && self.judgement.verdict == Verdict::Fail
            }
        };
        if rests_on_rings
            && let Some(doubt) = super::liveness::doubted(
                &run.observations,
                super::liveness::stall_after_ms(&run.plan.timings),
            )
        {
            self.doubt(doubt);
        }
    }

    /// Likewise a rate past the loops' budget in a squeezed window; and a
    /// cell that exists to catch a runaway loop misses it only where a
    /// window was judged on a machine that kept up.
    fn doubt_loops(&mut self) {
        let run = self.run;
        let loops_doubt = match &run.plan.expect {
            Expectation::Pass if self.judgement.verdict == Verdict::Pass => {
                super::runaway::doubted(&run.observations, &run.plan.timings)
            }
            Expectation::Detect(FindingRule::RunawayLoop)
                if self.judgement.verdict == Verdict::Fail =>
            {
                super::runaway::doubted(&run.observations, &run.plan.timings)
                    .or_else(|| super::runaway::unseen(&run.observations, &run.plan.timings))
            }
            _ => None,
        };
        if let Some(doubt) = loops_doubt {
            self.doubt(doubt);
        }
    }

    /// And a rule reconciliation could not judge the cell on, for want of
    /// evidence: a pass (or a miss of that rule) cannot rest on it.
    fn doubt_evidence(&mut self) {
        let run = self.run;
        let verdict = self.judgement.verdict;
        let doubt = run.doubts.iter().find(|d| match &run.plan.expect {
            Expectation::Pass => verdict == Verdict::Pass,
            Expectation::Detect(rule) => *rule == d.rule && verdict == Verdict::Fail,
        });
        if let Some(doubt) = doubt {
            self.doubt(&doubt.why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::FindingRule;
    use crate::observe::{Finding, LateSample, Observations, ProvedFacts};
    use crate::report::fixture;
    use crate::stream::CellRun;

    /// The fixture's migrate-first cell (flip at 12.0-12.3 s), with
    /// `findings` and the monitor's `late` ticks.
    fn run(findings: Vec<Finding>, late: Vec<LateSample>) -> RunEvent {
        let cell = fixture::report().cells.remove(0);
        RunEvent::CellFinished(Box::new(CellRun {
            index: 0,
            observations: Observations {
                phases: cell.timeline.clone(),
                late,
                ..Observations::default()
            },
            proved: ProvedFacts::default(),
            findings,
            doubts: Vec::new(),
            harness_error: None,
            elapsed_ms: cell.elapsed_ms,
            reconcile_ms: cell.reconcile_ms,
            plan: cell.plan,
        }))
    }

    fn starved_in_flip() -> Vec<LateSample> {
        vec![LateSample {
            at_ms: 12_100,
            tick_late_ms: 0,
            beat_late_ms: 2_400,
            runtime: Some("previous-worker-2".into()),
        }]
    }

    fn verdict(event: &RunEvent) -> (Verdict, String, Option<String>) {
        match judged(event) {
            Some(RunEvent::CellJudged {
                verdict,
                reason,
                harness_error,
                ..
            }) => (verdict, reason, harness_error),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_verdict_under_starvation_is_inconclusive_naming_the_figure() {
        let breach = Finding::of(FindingRule::FenceBreached);
        let (v, _, _) = verdict(&run(vec![breach.clone()], vec![]));
        assert_eq!(v, Verdict::Fail);
        let (v, _, _) = verdict(&run(vec![], vec![]));
        assert_eq!(v, Verdict::Pass);
        for (findings, read) in [
            (vec![breach], "expected pass, got fence_breached"),
            (vec![], "nothing found"),
        ] {
            let (v, reason, error) = verdict(&run(findings, starved_in_flip()));
            assert_eq!(v, Verdict::Inconclusive, "{reason}");
            let error = error.expect("a harness error");
            assert!(
                error.starts_with(
                    "starved: heartbeats up to 2.4s late (previous-worker-2) during step 5 (flip), past what stale_after"
                ) && error.contains(read),
                "{error}"
            );
        }
    }

    #[test]
    fn a_finding_no_timing_explains_stands_under_starvation() {
        let (v, reason, error) = verdict(&run(
            vec![Finding::of(FindingRule::Lost)],
            starved_in_flip(),
        ));
        assert_eq!((v, error), (Verdict::Fail, None));
        assert!(
            reason.starts_with(
                "expected pass, got lost; found although starved: heartbeats up to 2.4s late"
            ),
            "{reason}"
        );
    }

    /// `event` with the claim ring standing still for a little past its
    /// bound while the harness's pulse ran 1.2 s late.
    fn with_squeezed_stall(mut event: RunEvent) -> RunEvent {
        use crate::observe::{LivenessSample, TickLoad};
        let RunEvent::CellFinished(run) = &mut event else {
            panic!("a finished cell");
        };
        let bound = super::super::liveness::stall_after_ms(&run.plan.timings);
        run.observations.liveness = (0..=bound + 250)
            .step_by(250)
            .map(|at_ms| LivenessSample {
                load: TickLoad {
                    pulse_late_ms: 1_200,
                    ..TickLoad::default()
                },
                ..super::super::liveness::tests::at(at_ms, 3, true, false)
            })
            .collect();
        event
    }

    #[test]
    fn a_pass_cannot_rest_on_a_ring_stall_a_squeezed_machine_may_explain() {
        let (v, reason, error) = verdict(&with_squeezed_stall(run(vec![], vec![])));
        assert_eq!(v, Verdict::Inconclusive, "{reason}");
        let error = error.expect("a harness error");
        assert!(
            error.starts_with("the claim ring stood at generation 3 for ")
                && error.contains(
                    "while the machine was squeezed (the harness's pulse up to 1.2s late)"
                )
                && error.ends_with(
                    "(the run otherwise read: nothing found; every step did what the plan required)"
                ),
            "{error}"
        );
        // A failure found beside it stands.
        let (v, _, error) = verdict(&with_squeezed_stall(run(
            vec![Finding::of(FindingRule::Lost)],
            vec![],
        )));
        assert_eq!((v, error), (Verdict::Fail, None));
        // A cell that exists to catch ring_stalled cannot call it missed.
        let mut event = with_squeezed_stall(run(vec![], vec![]));
        if let RunEvent::CellFinished(run) = &mut event {
            run.plan.expect = Expectation::Detect(FindingRule::RingStalled);
        }
        assert_eq!(verdict(&event).0, Verdict::Inconclusive);
        // The same stall on a machine that kept up is the rule's to find
        // (reconcile's findings), and the judgement does not doubt it.
        let mut event = run(vec![], vec![]);
        if let (RunEvent::CellFinished(quiet), RunEvent::CellFinished(squeezed)) =
            (&mut event, with_squeezed_stall(run(vec![], vec![])))
        {
            quiet.observations.liveness = squeezed
                .observations
                .liveness
                .into_iter()
                .map(|s| crate::observe::LivenessSample {
                    load: crate::observe::TickLoad::default(),
                    ..s
                })
                .collect();
        }
        assert_eq!(verdict(&event).0, Verdict::Pass);
    }

    /// `event` with an idle window whose database ended half as much
    /// again as its loops' budget, the harness's pulse `pulse_late_ms` late.
    fn with_busy_idle_window(mut event: RunEvent, pulse_late_ms: u64) -> RunEvent {
        use super::super::runaway::{Budget, Cadence};
        let RunEvent::CellFinished(run) = &mut event else {
            panic!("a finished cell");
        };
        let budget = Budget::of(&Cadence::of(&run.plan.timings), 2, 0.0).per_s;
        let idle =
            super::super::runaway::tests::cell(2, 4_000, (budget * 1.5) as i64, pulse_late_ms);
        run.observations.census = idle.census;
        run.observations.liveness = idle.liveness;
        run.observations.idle = idle.idle;
        event
    }

    #[test]
    fn a_pass_cannot_rest_on_loops_a_squeezed_machine_may_hide() {
        let (v, reason, error) = verdict(&with_busy_idle_window(run(vec![], vec![]), 600));
        assert_eq!(v, Verdict::Inconclusive, "{reason}");
        let error = error.expect("a harness error");
        assert!(
            error.starts_with("while the fleet stood idle (step 7), the cell's database ended ")
                && error.contains(
                    "while the machine was squeezed (the harness's pulse up to 600ms late)"
                )
                && error.ends_with(
                    "(the run otherwise read: nothing found; every step did what the plan required)"
                ),
            "{error}"
        );
        // A cell that exists to catch runaway_loop cannot call it missed.
        let mut event = with_busy_idle_window(run(vec![], vec![]), 600);
        if let RunEvent::CellFinished(run) = &mut event {
            run.plan.expect = Expectation::Detect(FindingRule::RunawayLoop);
        }
        assert_eq!(verdict(&event).0, Verdict::Inconclusive);
        // On a machine that kept up the rate is the rule's to find, and
        // the judgement does not doubt it.
        let (v, _, error) = verdict(&with_busy_idle_window(run(vec![], vec![]), 0));
        assert_eq!((v, error), (Verdict::Pass, None));
    }

    #[test]
    fn a_runaway_missed_on_a_squeezed_machine_is_not_a_miss() {
        // A cell written to catch runaway_loop, its only idle window
        // under every budget, the harness's pulse `pulse_late_ms` late.
        let quiet_window = |pulse_late_ms| {
            let mut event = run(vec![], vec![]);
            let RunEvent::CellFinished(run) = &mut event else {
                panic!("a finished cell");
            };
            run.plan.expect = Expectation::Detect(FindingRule::RunawayLoop);
            let idle = super::super::runaway::tests::cell(2, 4_000, 100, pulse_late_ms);
            run.observations.census = idle.census;
            run.observations.liveness = idle.liveness;
            run.observations.idle = idle.idle;
            event
        };
        let (v, reason, error) = verdict(&quiet_window(600));
        assert_eq!(v, Verdict::Inconclusive, "{reason}");
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("rules no runaway out")),
            "{error:?}"
        );
        // The machine kept up: a miss.
        assert_eq!(verdict(&quiet_window(0)).0, Verdict::Fail);
    }

    #[test]
    fn a_doubt_leaves_a_pass_or_a_miss_of_its_rule_unjudged_and_nothing_else() {
        let doubted = |expect: Expectation, findings: Vec<Finding>| {
            let mut event = run(findings, vec![]);
            let RunEvent::CellFinished(run) = &mut event else {
                panic!("a finished cell");
            };
            run.plan.expect = expect;
            run.doubts = vec![crate::observe::Doubt {
                rule: FindingRule::UnexplainedInterruption,
                why: "the monitor had no reading".into(),
            }];
            verdict(&event)
        };
        let (v, _, error) = doubted(Expectation::Pass, vec![]);
        assert_eq!(v, Verdict::Inconclusive);
        assert!(
            error.as_deref().is_some_and(
                |e| e.starts_with("the monitor had no reading (the run otherwise read: ")
            ),
            "{error:?}"
        );
        // A cell written to catch the rule that found nothing: not a miss.
        let catch = Expectation::Detect(FindingRule::UnexplainedInterruption);
        assert_eq!(doubted(catch, vec![]).0, Verdict::Inconclusive);
        // A cell written for another rule: the doubt is not its business.
        let other = Expectation::Detect(FindingRule::Stuck);
        assert_eq!(doubted(other, vec![]).0, Verdict::Fail);
        // A failure stands: something else was found.
        let stuck = Finding::of(FindingRule::Stuck);
        assert_eq!(doubted(Expectation::Pass, vec![stuck]).0, Verdict::Fail);
    }

    #[test]
    fn a_cell_whose_rule_fired_caught_its_defect_though_it_missed_its_race() {
        let unreached = |expect: Expectation, findings: Vec<Finding>| {
            let mut event = run(findings, vec![]);
            let RunEvent::CellFinished(run) = &mut event else {
                panic!("a finished cell");
            };
            run.plan.expect = expect;
            run.plan.reach = vec![crate::matrix::Reach::SlotZeroFree];
            verdict(&event)
        };
        let catch = Expectation::Detect(FindingRule::MixedDiscipline);
        let mixed = Finding::of(FindingRule::MixedDiscipline);
        let (v, reason, error) = unreached(catch, vec![mixed]);
        assert_eq!((v, error), (Verdict::Pass, None));
        assert!(
            reason.starts_with("caught by name: mixed_discipline")
                && reason.contains(
                    "; although the cell did not reach what it exists for: slot_zero_free"
                ),
            "{reason}"
        );
        // Found nothing, or only another rule: not a miss, unjudged.
        for findings in [vec![], vec![Finding::of(FindingRule::Stuck)]] {
            let (v, _, error) = unreached(catch, findings);
            assert_eq!(v, Verdict::Inconclusive);
            assert!(
                error
                    .as_deref()
                    .is_some_and(|e| e.contains("slot_zero_free")),
                "{error:?}"
            );
        }
        // A clean cell that failed without reaching its race: unjudged.
        let (v, _, _) = unreached(Expectation::Pass, vec![Finding::of(FindingRule::Stuck)]);
        assert_eq!(v, Verdict::Inconclusive);
    }

    #[test]
    fn lateness_outside_sensitive_steps_leaves_the_verdict_alone() {
        let mut late = starved_in_flip();
        // During the fleet's start (step 1, 0-0.4 s).
        late[0].at_ms = 200;
        let (v, _, error) = verdict(&run(vec![], late));
        assert_eq!((v, error), (Verdict::Pass, None));
    }
}
