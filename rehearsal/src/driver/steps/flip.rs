//! `flip`: move ring-cursor authority to the ledgers (manual, forced or auto).

use std::time::{Duration, Instant};

use super::super::ledger::Role;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::super::{EXIT_BLOCKED, EXIT_OK, EXIT_REFUSED};
use super::armed::{ArmedCommand, Detector};
use super::fault_evidence::{Before, runtimes_named_in};
use super::{CommandEnd, command_end, refused_against_plan, with_notes};
use crate::fleet::Event;
use crate::fleet::events::{Blocked, Flipped};
use crate::matrix::{Duration as MatrixDuration, FlipMode, FlipStep, Outcome, When};
use crate::observe::StepOutcome;
use crate::observe::{FlipRecord, HolderAge};

/// A transaction holding `awa.ring_cursor_authority` FOR UPDATE, and
/// its backend pid; `None` before the expand migration.
async fn hold_authority_row(cx: &mut StepCtx<'_>) -> Option<(tokio_postgres::Client, i32)> {
    cx.probe.authority().await.ok().flatten()?;
    let client = super::super::database::connect(&cx.db.url).await.ok()?;
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .ok()?
        .get(0);
    client
        .batch_execute("BEGIN; SELECT authority FROM awa.ring_cursor_authority FOR UPDATE")
        .await
        .ok()?;
    Some((client, pid))
}

/// `flip`: manual or forced runs `awa storage flip-ring-authority` of
/// `by` (0 ok, 2 refused); auto waits for the leader's auto-flip. Faults
/// armed for it fire inside it; after a PostgreSQL crash a manual flip
/// runs once more, and only that run is recorded and judged.
pub(super) async fn flip(cx: &mut StepCtx<'_>, s: &FlipStep) -> Result<Done, Abort> {
    if s.mode == FlipMode::Auto {
        return flip_auto(cx, s).await;
    }
    let args = super::gate::flip_args(s.mode);
    let armed = cx.state.armed.iter().any(|(w, _)| *w == When::DuringFlip);
    // Started by the hold before this step and let go when its condition held.
    let started = cx.state.gated_flip.take().map(|g| (g.id, g.opened_ms));
    // To land a fault inside the flip's transaction, hold the authority
    // row it locks last: the flip then waits, singletons locked, until
    // the fault has fired (a crash ends the wait; after a kill the row
    // is released and the flip goes on).
    let holder = if armed {
        hold_authority_row(cx).await
    } else {
        None
    };
    let since = if armed && holder.is_none() {
        cx.probe.server_epoch().await.ok()
    } else {
        None
    };
    let mut notes = Vec::new();
    let before = if armed {
        cx.probe.authority().await.ok().map(Before::Authority)
    } else {
        None
    };
    let detect = match &holder {
        Some((_, pid)) => Detector::BlockedBy(*pid),
        None => Detector::FlipSql(since.unwrap_or(0.0)),
    };
    let command = ArmedCommand {
        artifact: &s.by,
        role: Role::Flip,
        args,
        env: Vec::new(),
        when: When::DuringFlip,
        detect,
        before,
        holder: holder.map(|(client, _)| client),
        started,
    };
    let judged = super::armed::run_armed(cx, command, &mut notes).await?;
    let end = command_end(cx, judged.id);
    // Exit 0: the flip has committed, so every id drawn after this read
    // was drawn after the flip (`late_enqueues`). Read first: an id drawn
    // between the commit and this read escapes the rule.
    let ids_drawn_before = if end.code == Some(EXIT_OK) {
        cx.probe.job_ids_drawn().await.ok()
    } else {
        None
    };
    let holder_ages = holder_ages(cx, &end.output, judged.at_ms).await;
    cx.state.obs.flips.push(FlipRecord {
        holder_ages,
        ids_drawn_before,
        mode: s.mode,
        expected: s.expect,
        exit_code: end.code,
        at_ms: judged.at_ms,
        output: end.output.clone(),
    });
    let done = judge_flip(cx, s, &end);
    if let Some((outcome, wait_ms)) = expected_refusal(s.expect, &end) {
        notes.extend(cx.time_refusal("flip", judged.id, judged.at_ms, outcome, wait_ms));
    }
    Ok(with_notes(done, notes))
}

/// Each holder the flip's `blocked` event named whose transaction is
/// still open, read now (the flip has ended) by the server's clock: the
/// age the flip printed is judged against it (`holder_misreported`). A
/// holder that is gone, or a failed read, is left out: unverified, not
/// wrong.
async fn holder_ages(cx: &mut StepCtx<'_>, output: &[Event], requested_ms: u64) -> Vec<HolderAge> {
    let Some(blocked) = output.iter().rev().find_map(|e| match e {
        Event::Blocked(b) => Some(b),
        _ => None,
    }) else {
        return Vec::new();
    };
    let mut ages = Vec::new();
    for h in &blocked.holders {
        if let Ok(Some(read_ms)) = cx.probe.transaction_age_ms(h.pid).await {
            ages.push(HolderAge {
                pid: h.pid,
                named_ms: h.transaction_age_ms,
                read_ms,
                window_ms: cx.ms().saturating_sub(requested_ms),
            });
        }
    }
    ages
}

/// The refusal a flip ended in, when the step expects it, and the wait
/// it declares before giving up (a blocked flip's lock timeout): what
/// its promptness is judged by.
fn expected_refusal(expect: Outcome, end: &CommandEnd) -> Option<(StepOutcome, u64)> {
    match (expect, end.code) {
        (Outcome::Refused, Some(EXIT_REFUSED)) => Some((StepOutcome::Refused, 0)),
        (Outcome::Blocked, Some(EXIT_BLOCKED)) => {
            let wait = end.output.iter().find_map(|e| match e {
                Event::Blocked(b) => Some(b.lock_timeout_ms),
                _ => None,
            });
            Some((StepOutcome::Blocked, wait.unwrap_or(0)))
        }
        _ => None,
    }
}

/// A manual or forced flip's outcome against the step's `expect`.
fn judge_flip(cx: &mut StepCtx<'_>, s: &FlipStep, end: &CommandEnd) -> Done {
    let (name, why, output) = (&end.name, &end.why, &end.output);
    let version = cx.version_of(&s.by);
    let summary = flip_summary(output);
    match (s.expect, end.code) {
        (Outcome::Ok, Some(EXIT_OK)) => Done::ok(format!("{name} ({version}): {summary}")),
        (Outcome::Refused, Some(EXIT_REFUSED)) => {
            let (fired, evidence) = flip_refusal_evidence(cx, output);
            cx.state
                .record_fault("flip expected refused", fired, evidence.clone());
            Done::with(
                StepOutcome::Refused,
                format!(
                    "{name} ({version}) refused as required: {}; {evidence}",
                    end.refusal()
                ),
            )
        }
        (Outcome::Ok, Some(EXIT_REFUSED)) => {
            refused_against_plan(cx, name, &version, end.refusal())
        }
        (Outcome::Refused, Some(EXIT_OK)) => {
            cx.state
                .fail(format!("{name} flipped, but the plan requires a refusal"));
            Done::ok(format!("{name} ({version}): {summary}"))
        }
        (Outcome::Blocked, Some(EXIT_BLOCKED)) => Done::with(
            StepOutcome::Blocked,
            format!(
                "{name} ({version}) gave up on a held lock, as required: {}",
                blocked_summary(output)
            ),
        ),
        (_, Some(EXIT_BLOCKED)) => {
            let holders = blocked_summary(output);
            cx.state
                .fail(format!("{name} gave up on a held lock: {holders}"));
            Done::with(
                StepOutcome::Blocked,
                format!("{name} ({version}) gave up on a held lock: {holders}"),
            )
        }
        (Outcome::Blocked, Some(EXIT_OK)) => {
            cx.state.fail(format!(
                "{name} flipped, but the plan requires it to be blocked by a held lock"
            ));
            Done::ok(format!("{name} ({version}): {summary}"))
        }
        _ => {
            cx.state.fail(format!("{name} failed ({why})"));
            Done::with(StepOutcome::Failed, format!("{name} ({version}) {why}"))
        }
    }
}

/// A refused flip's evidence: it names fresh runtimes of this cell that
/// are not flip-aware (the one reason a flip may be refused).
fn flip_refusal_evidence(cx: &StepCtx<'_>, output: &[Event]) -> (bool, String) {
    let blockers: Vec<String> = output
        .iter()
        .filter_map(|e| match e {
            Event::FlipCheck(c) if !c.ready => Some(&c.blocking),
            _ => None,
        })
        .flatten()
        .map(|b| b.name.clone())
        .collect();
    let ours = cx.view(|l| runtimes_named_in(l, &blockers.join(" ")));
    if ours.is_empty() {
        let what = if blockers.is_empty() {
            "it named no blocking runtime".to_owned()
        } else {
            format!(
                "its blockers ({}) are not runtimes of this cell",
                blockers.join(", ")
            )
        };
        (
            false,
            format!(
                "the flip was refused, but not for the declared reason (a fresh runtime that is not flip-aware): {what}"
            ),
        )
    } else {
        (
            true,
            format!(
                "refused for the declared reason: {} not flip-aware ({})",
                crate::observe::count(ours.len() as u64, "fresh runtime"),
                ours.join(", ")
            ),
        )
    }
}

/// `flip = "auto"`: polls the authority every 100 ms for `timeout`.
/// The flipping artifact's workers were started with `AWA_AUTO_FLIP`.
async fn flip_auto(cx: &mut StepCtx<'_>, s: &FlipStep) -> Result<Done, Abort> {
    let start_ms = cx.ms();
    let mut notes = Vec::new();
    super::armed::fire_armed(cx, When::DuringFlip, None, None, &mut notes).await?;
    let timeout = s.timeout.unwrap_or(MatrixDuration::from_secs(30));
    let deadline = Instant::now() + timeout.to_std();
    let mut flipped_at = None;
    let mut ids_drawn_before = None;
    let mut last = None;
    loop {
        last = cx.probe.authority().await.ok().flatten().or(last);
        if last.as_deref() == Some("ledger") {
            flipped_at = Some(cx.ms());
            // Read after the authority read `ledger`: after the commit.
            ids_drawn_before = cx.probe.job_ids_drawn().await.ok();
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        cx.cancel().sleep(Duration::from_millis(100)).await?;
    }
    let (output, by) = cx.view(|l| {
        let output: Vec<Event> = l
            .flipped
            .iter()
            .map(|(_, f)| Event::Flipped(f.clone()))
            .collect();
        let by = l.flipped.last().map(|(id, _)| l.procs[*id].name.clone());
        (output, by)
    });
    cx.state.obs.flips.push(FlipRecord {
        holder_ages: Vec::new(),
        ids_drawn_before,
        mode: FlipMode::Auto,
        expected: s.expect,
        exit_code: None,
        at_ms: flipped_at.unwrap_or(start_ms),
        output,
    });
    let authority = last.unwrap_or_else(|| "unknown".into());
    let done = match (s.expect, flipped_at) {
        (Outcome::Ok, Some(at)) => Done::ok(format!(
            "authority is ledger after {} ms{}",
            at - start_ms,
            by.map_or(String::new(), |b| format!(" (flipped by {b})"))
        )),
        (Outcome::Ok, None) => {
            cx.state.fail(format!(
                "authority still {authority} after {timeout}: no auto-flip"
            ));
            Done::with(
                StepOutcome::TimedOut,
                format!("authority still {authority} after {timeout}"),
            )
        }
        (Outcome::Refused, None) => Done::with(
            StepOutcome::Refused,
            format!("authority stayed {authority} for {timeout}, as required"),
        ),
        (Outcome::Refused, Some(_)) => {
            cx.state
                .fail("the leader auto-flipped, but the plan requires it not to");
            Done::ok("authority is ledger")
        }
        (Outcome::Blocked, _) => {
            // Refused by validation; kept total for the type.
            cx.state
                .fail("expect = \"blocked\" does not apply to an auto-flip");
            Done::with(StepOutcome::Failed, format!("authority is {authority}"))
        }
    };
    Ok(with_notes(done, notes))
}

/// Who a `blocked` event names, in a few words: `old-worker-1 (0.6.2,
/// leader, pid 123, AccessExclusiveLock on awa.claim_receipts_3, ...)`.
fn blocked_summary(output: &[Event]) -> String {
    let Some(blocked) = output.iter().rev().find_map(|e| match e {
        Event::Blocked(b) => Some(b),
        _ => None,
    }) else {
        return "printed no blocked event".into();
    };
    let holders: Vec<String> = holder_lines(blocked);
    if holders.is_empty() {
        "no holder named (it had gone)".into()
    } else {
        holders.join("; ")
    }
}

/// Each holder of a `blocked` event in a few words.
fn holder_lines(blocked: &Blocked) -> Vec<String> {
    blocked
        .holders
        .iter()
        .map(|h| {
            let who = match &h.runtime {
                Some(r) => format!(
                    "{} ({}{})",
                    r.name,
                    r.version,
                    if r.leader { ", leader" } else { "" }
                ),
                None => "a session of no known runtime".to_owned(),
            };
            format!(
                "{who}: pid {}, {} held {}",
                h.pid,
                h.state,
                h.locks.join(", ")
            )
        })
        .collect()
}

/// What a flip command printed, in a few words.
fn flip_summary(output: &[Event]) -> String {
    let Some(flipped): Option<&Flipped> = output.iter().rev().find_map(|e| match e {
        Event::Flipped(f) => Some(f),
        _ => None,
    }) else {
        return "printed no flipped event".into();
    };
    if flipped.already {
        return "authority was already ledger".into();
    }
    let rings: Vec<String> = flipped
        .rings
        .iter()
        .map(|r| format!("{} at generation {}", r.ring, r.ledger_generation))
        .collect();
    let forced = if flipped.forced == Some(true) {
        " (forced)"
    } else {
        ""
    };
    format!("flipped to ledger{forced}: {}", rings.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Parsed, events};

    fn event(line: &str) -> Event {
        match events::parse(line) {
            Parsed::Event(e) => e,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn a_blocked_flip_names_the_holder_and_its_locks() {
        let out = [event(
            r#"{"event":"blocked","operation":"the flip","lock_timeout_ms":5000,"holders":[
            {"pid":42,"application_name":"","state":"idle in transaction","transaction_age_ms":9000,
             "locks":["AccessExclusiveLock on awa.claim_receipts_3","RowShareLock on awa.claim_ring_state"],
             "runtime":{"instance_id":"w-1","name":"previous-worker-1","version":"0.6.2","binary_version":null,
                        "role":"worker","leader":true,"heartbeat_age_ms":8000,"matched_by":"leader_lock"}}]}"#,
        )];
        assert_eq!(
            blocked_summary(&out),
            "previous-worker-1 (0.6.2, leader): pid 42, idle in transaction held AccessExclusiveLock on awa.claim_receipts_3, RowShareLock on awa.claim_ring_state"
        );
        assert_eq!(blocked_summary(&[]), "printed no blocked event");
    }

    #[test]
    fn flip_output_in_a_few_words() {
        let out = [event(
            r#"{"event":"flipped","rings":[
            {"ring":"queue","columns_slot":1,"columns_generation":7,"ledger_slot":1,"ledger_generation":7,"backfilled":0},
            {"ring":"claim","columns_slot":3,"columns_generation":3,"ledger_slot":3,"ledger_generation":3,"backfilled":1}],
            "forced":false,"version":"0.7.0"}"#,
        )];
        assert_eq!(
            flip_summary(&out),
            "flipped to ledger: queue at generation 7, claim at generation 3"
        );
        assert_eq!(
            flip_summary(&[event(
                r#"{"event":"flipped","already":true,"version":"0.7.0"}"#
            )]),
            "authority was already ledger"
        );
        assert_eq!(
            flip_summary(&[event(
                r#"{"event":"flip_check","ready":false,"blocking":[]}"#
            )]),
            "printed no flipped event"
        );
    }
}
