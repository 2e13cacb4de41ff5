//! Proof that a step's action on a process took effect, from evidence
//! that does not come from the process itself.
//!
//! A suspend, resume or kill is an order to a backend; the backend checks
//! what it can see (every thread stopped, the engine reporting the
//! container paused), and the cell then watches the database: a stopped
//! runtime's heartbeat stands still by the server's clock, a resumed one
//! beats again (or prints, or ends), a killed one has ended and its named
//! sessions are gone. Until that is seen the cell does not go on; when it
//! is not seen within the step's bound, the step is a harness failure and
//! the cell is inconclusive: a verdict judged on an action that did not
//! happen would be a guess.
//!
//! The judging is pure ([`judge`]), over the looks taken so far, so each
//! step kind's unproved case has a unit test.

use std::time::{Duration, Instant};

use super::Abort;
use super::probe::{Beat, ProbeError};
use super::step_ctx::StepCtx;
use crate::fleet::ProcId;

/// One look at a process: its heartbeat, and what the ledger has of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    /// Its heartbeat.
    pub beat: Beat,
    /// The backend has reaped it.
    pub ended: bool,
    /// Lines it has printed on stdout so far.
    pub lines: u64,
}

/// What a step needs to have happened to a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// It is stopped (suspend): its heartbeat stands still.
    Stopped,
    /// It runs again (resume): it beats, prints or ends.
    Running,
    /// It is gone (kill): reaped, and no session names it (0.6 names
    /// none, so for it the reaping alone is the evidence).
    Gone,
}

impl Effect {
    /// `stopped`, `running again`, `gone`, for messages.
    pub fn word(self) -> &'static str {
        match self {
            Effect::Stopped => "stopped",
            Effect::Running => "running again",
            Effect::Gone => "gone",
        }
    }
}

/// Where the proof stands after the looks so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proof {
    /// Shown; the evidence in words.
    Proved(String),
    /// Not shown yet; what is missing, in words.
    Pending(String),
    /// Cannot be shown any more (a process to stop has ended).
    Refuted(String),
}

/// How long a stopped runtime's heartbeat must stand still: three of its
/// intervals, so one beat that was already on its way to the server when
/// the process stopped does not count as a live one, and a live runtime
/// beating on time cannot pass for a stopped one.
pub fn still_window(heartbeat: Duration) -> Duration {
    heartbeat * 3 + Duration::from_millis(100)
}

/// Judges `effect` over `looks` (oldest first), the first taken once the
/// backend had applied the action. `before` is the process's heartbeat
/// and line count just before the action, where known.
pub fn judge(effect: Effect, looks: &[Look], before: Option<Look>, still: Duration) -> Proof {
    let Some(last) = looks.last() else {
        return Proof::Pending("nothing seen yet".into());
    };
    let still_ms = still.as_millis() as i64;
    match effect {
        Effect::Stopped => judge_stopped(looks, last, still_ms),
        Effect::Running => judge_running(looks, last, before),
        Effect::Gone => judge_gone(last),
    }
}

/// Stopped: its heartbeat stands still for `still_ms` after its last
/// change (or it has none to watch), and it has not ended.
fn judge_stopped(looks: &[Look], last: &Look, still_ms: i64) -> Proof {
    if last.ended {
        return Proof::Refuted("it ended instead of stopping".into());
    }
    if looks.iter().all(|l| l.beat.beat_ms.is_none()) {
        return Proof::Proved(
            "it has no heartbeat row to watch; the backend saw it stopped".into(),
        );
    }
    // The beat may still change (heartbeats already sent when the
    // process stopped, or waiting on a lock); from its last change
    // on it must stand still.
    let changes = looks
        .windows(2)
        .filter(|w| w[0].beat.beat_ms != w[1].beat.beat_ms)
        .count();
    let since = looks
        .windows(2)
        .rposition(|w| w[0].beat.beat_ms != w[1].beat.beat_ms)
        .map_or(0, |i| i + 1);
    let stood = last.beat.server_ms - looks[since].beat.server_ms;
    let age = last.beat.beat_ms.map_or(String::new(), |b| {
        format!(", last beat {} ms old", last.beat.server_ms - b)
    });
    if stood >= still_ms {
        Proof::Proved(format!(
            "its heartbeat stood still for {stood} ms by the server's clock{age}"
        ))
    } else {
        Proof::Pending(format!(
            "its heartbeat advanced {changes} times after the stop{age}"
        ))
    }
}

/// Running again: a heartbeat begun after it was let go, or a line printed
/// since (or it ran on and ended).
fn judge_running(looks: &[Look], last: &Look, before: Option<Look>) -> Proof {
    if last.ended {
        return Proof::Proved("it ran on and ended".into());
    }
    // A beat begun before the process was let go (one that waited
    // on a lock meanwhile) is no evidence: only one begun after.
    let beat_before = before.and_then(|b| b.beat.beat_ms);
    let let_go = looks[0].beat.server_ms - LOOK_EVERY.as_millis() as i64;
    if let (Some(before), Some(now)) = (beat_before, last.beat.beat_ms)
        && now > before
        && now >= let_go
    {
        return Proof::Proved(format!(
            "its heartbeat advanced {} ms past the one before it was let go",
            now - before
        ));
    }
    let printed = last
        .lines
        .saturating_sub(before.map_or(last.lines, |b| b.lines));
    if printed > 0 {
        return Proof::Proved(format!("it printed {printed} lines since"));
    }
    let age = last
        .beat
        .beat_ms
        .map_or("no heartbeat row".to_owned(), |b| {
            format!("its heartbeat {} ms old", last.beat.server_ms - b)
        });
    Proof::Pending(format!("no beat and no line from it since ({age})"))
}

/// Gone: the backend reaped it and no session names it.
fn judge_gone(last: &Look) -> Proof {
    if !last.ended {
        return Proof::Pending("the backend has not reaped it".into());
    }
    if last.beat.sessions > 0 {
        return Proof::Pending(format!(
            "{} sessions that name it are still open",
            last.beat.sessions
        ));
    }
    // Reaped, it can send nothing more; a heartbeat it had already
    // sent may still commit, so its beat is no evidence either way.
    Proof::Proved("reaped, and no session names it".into())
}

/// How often a proof looks again.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// One look at process `id` (its heartbeat by `instance_id`, where it
/// has one, and the ledger's view of it).
/// `Err` when the database did not answer: no evidence either way.
pub(in crate::driver) async fn look(
    cx: &mut StepCtx<'_>,
    id: ProcId,
    instance_id: Option<&str>,
) -> Result<Look, ProbeError> {
    let (ended, lines) = cx.proc(id, |p| {
        (
            !p.alive(),
            p.contract.events + p.contract.unknown + p.contract.garbled,
        )
    });
    let beat = match instance_id {
        Some(instance) => cx.probe.heartbeat_of(instance).await?,
        // Not registered (never ready): nothing of it to watch.
        None => Beat {
            server_ms: cx.ms() as i64,
            beat_ms: None,
            sessions: 0,
        },
    };
    Ok(Look { beat, ended, lines })
}

/// Looks at process `id` until `effect` is proved, for up to `bound`;
/// the proof in words, or the harness failure (naming the process,
/// what was wanted and what was seen) that makes the cell
/// inconclusive.
pub(in crate::driver) async fn prove(
    cx: &mut StepCtx<'_>,
    id: ProcId,
    effect: Effect,
    before: Option<Look>,
    bound: Duration,
) -> Result<String, Abort> {
    let (name, instance_id) = cx.proc(id, |p| (p.name.clone(), p.instance_id.clone()));
    let still = still_window(cx.plan.timings.heartbeat.to_std());
    let start = Instant::now();
    let mut looks = Vec::new();
    loop {
        let judged = match look(cx, id, instance_id.as_deref()).await {
            Ok(look) => {
                looks.push(look);
                judge(effect, &looks, before, still)
            }
            Err(e) => Proof::Pending(format!("the database did not answer: {e}")),
        };
        let why = match judged {
            Proof::Proved(how) => return Ok(how),
            Proof::Refuted(why) => why,
            Proof::Pending(why) if start.elapsed() >= bound => why,
            Proof::Pending(_) => {
                cx.cancel().sleep(LOOK_EVERY).await?;
                continue;
            }
        };
        return Err(Abort::Harness(format!(
            "could not prove {name} {} within {} ms: {why}",
            effect.word(),
            start.elapsed().as_millis()
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STILL: Duration = Duration::from_millis(700);

    fn look(server_ms: i64, beat_ms: Option<i64>) -> Look {
        Look {
            beat: Beat {
                server_ms,
                beat_ms,
                sessions: 0,
            },
            ended: false,
            lines: 0,
        }
    }

    fn proved(p: &Proof) -> bool {
        matches!(p, Proof::Proved(_))
    }

    #[test]
    fn a_suspend_is_proved_only_by_a_heartbeat_that_stands_still_long_enough() {
        // Standing still for the window: proved.
        let still: Vec<Look> = (0..9).map(|i| look(1_000 + i * 100, Some(900))).collect();
        assert!(proved(&judge(Effect::Stopped, &still, None, STILL)));
        // One beat already on its way when it stopped, then still: proved
        // once the window has passed since that beat.
        let mut late = vec![look(1_000, Some(900)), look(1_100, Some(1_050))];
        late.extend((2..10).map(|i| look(1_000 + i * 100, Some(1_050))));
        assert!(proved(&judge(Effect::Stopped, &late, None, STILL)));
        assert!(!proved(&judge(Effect::Stopped, &late[..8], None, STILL)));
        // A process that was never stopped beats every 200 ms: the step
        // never proves it, whatever the backend said, and says why.
        let live: Vec<Look> = (0..30)
            .map(|i| look(1_000 + i * 100, Some(1_000 + i / 2 * 200)))
            .collect();
        match judge(Effect::Stopped, &live, None, STILL) {
            Proof::Pending(why) => assert!(why.contains("advanced 14 times"), "{why}"),
            other => panic!("{other:?}"),
        }
        // One that ended cannot be proved stopped.
        let mut ended = still.clone();
        ended.last_mut().unwrap().ended = true;
        assert!(matches!(
            judge(Effect::Stopped, &ended, None, STILL),
            Proof::Refuted(_)
        ));
    }

    #[test]
    fn a_resume_is_proved_by_a_beat_a_line_or_an_end() {
        let before = look(1_000, Some(900));
        let silent: Vec<Look> = (1..20).map(|i| look(1_000 + i * 100, Some(900))).collect();
        match judge(Effect::Running, &silent, Some(before), STILL) {
            Proof::Pending(why) => assert!(why.contains("no beat and no line"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut beat = silent.clone();
        beat.push(look(3_100, Some(3_050)));
        assert!(proved(&judge(Effect::Running, &beat, Some(before), STILL)));
        // A beat begun before the let-go (it waited on a lock) is not one.
        let mut old_beat = silent.clone();
        old_beat.push(look(3_100, Some(950)));
        assert!(!proved(&judge(
            Effect::Running,
            &old_beat,
            Some(before),
            STILL
        )));
        let mut printed = silent.clone();
        printed.last_mut().unwrap().lines = 3;
        assert!(proved(&judge(
            Effect::Running,
            &printed,
            Some(before),
            STILL
        )));
        let mut ended = silent;
        ended.last_mut().unwrap().ended = true;
        assert!(proved(&judge(Effect::Running, &ended, Some(before), STILL)));
    }

    #[test]
    fn a_kill_is_proved_by_the_end_and_no_session_left() {
        let before = look(1_000, Some(900));
        let running = [look(1_100, Some(900))];
        assert!(!proved(&judge(Effect::Gone, &running, Some(before), STILL)));
        let mut sessions = look(1_200, Some(900));
        sessions.ended = true;
        sessions.beat.sessions = 2;
        match judge(Effect::Gone, &[sessions], Some(before), STILL) {
            Proof::Pending(why) => assert!(why.contains("2 sessions"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut gone = look(1_300, Some(900));
        gone.ended = true;
        assert!(proved(&judge(Effect::Gone, &[gone], Some(before), STILL)));
    }

    #[test]
    fn nothing_seen_proves_nothing() {
        for effect in [Effect::Stopped, Effect::Running, Effect::Gone] {
            assert!(!proved(&judge(effect, &[], None, STILL)), "{effect:?}");
        }
    }
}
