//! Faults armed for the next migrate or flip, fired once it is in flight.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::ledger::Role;
use super::super::state::ArmedFault;
use super::super::step_ctx::COMMAND_TIMEOUT;
use super::super::step_ctx::StepCtx;
use super::fault_evidence::{Before, Inside};
use crate::fleet::ProcId;
use crate::matrix::When;

/// How long an armed fault waits to see its migrate or flip in flight.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// How an armed fault detects that its migrate or flip is in flight.
#[derive(Clone, Copy, Debug)]
pub(super) enum Detector {
    /// The migration holds its advisory lock (`AWA_MIGRATE_PAUSE` keeps it there).
    Migration,
    /// A session opened after this server time runs the flip's statements.
    FlipSql(f64),
    /// Some session waits on the authority row this backend holds.
    BlockedBy(i32),
}

/// A migrate or flip command that faults may be armed for.
pub(super) struct ArmedCommand<'s> {
    pub artifact: &'s str,
    pub role: Role,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `DuringMigrate` or `DuringFlip`: which armed faults fire inside it.
    pub when: When,
    pub detect: Detector,
    /// What a crash inside it must leave unchanged.
    pub before: Option<Before>,
    /// A transaction the command waits on so that the faults land inside
    /// it; rolled back once they have fired.
    pub holder: Option<tokio_postgres::Client>,
    /// The command already started (a flip let go at the start gate), and
    /// when: judged instead of starting one.
    pub started: Option<(ProcId, u64)>,
}

/// The run of an armed command that is judged: after a PostgreSQL crash
/// the command's second run, else its only one.
pub(super) struct Judged {
    pub id: ProcId,
    /// When it started (ms since the cell started).
    pub at_ms: u64,
    /// It is the second run, after a PostgreSQL crash ended the first.
    pub reran: bool,
}

/// Runs `cmd`, fires the faults armed for it once it is in flight,
/// waits for it to end, and after a PostgreSQL crash runs it once more
/// (without the armed environment): the run whose outcome the step's
/// `expect` applies to.
pub(super) async fn run_armed(
    cx: &mut StepCtx<'_>,
    cmd: ArmedCommand<'_>,
    notes: &mut Vec<String>,
) -> Result<Judged, Abort> {
    let (id, at_ms) = match cmd.started {
        Some(started) => started,
        None => {
            let at_ms = cx.ms();
            match cx
                .spawn(cmd.artifact, cmd.role, cmd.args.clone(), cmd.env)
                .await
            {
                Ok(id) => (id, at_ms),
                Err(e) => {
                    cx.state.migration_hold = None;
                    return Err(e);
                }
            }
        }
    };
    let fired = fire_armed(cx, cmd.when, Some((id, cmd.detect)), cmd.before, notes).await;
    // Whatever happened to the armed faults, the command goes on.
    cx.state.migration_hold = None;
    if let Some(client) = cmd.holder {
        // Gone already when PostgreSQL was crashed; else this lets the command go on.
        let _ = client.batch_execute("ROLLBACK").await;
    }
    let crashed = fired?;
    cx.finish_command(id, COMMAND_TIMEOUT).await?;
    if !crashed {
        return Ok(Judged {
            id,
            at_ms,
            reran: false,
        });
    }
    let why = cx.proc(id, |p| p.why_ended());
    notes.push(format!(
        "the interrupted {}: {why}; run once more after the restart",
        command_word(cmd.when)
    ));
    let at_ms = cx.ms();
    let id = cx
        .run_command(
            cmd.artifact,
            cmd.role,
            cmd.args,
            Vec::new(),
            COMMAND_TIMEOUT,
        )
        .await?;
    Ok(Judged {
        id,
        at_ms,
        reran: true,
    })
}

/// Fires the faults armed for `when`, inside `trigger` (a migrate or
/// flip process) once the database shows it in flight (or after 5 s, or
/// when it already ended), and records each one's evidence; a crash's
/// is that the state `before` the command is unchanged right after
/// the restart. Returns whether PostgreSQL was crashed.
pub(super) async fn fire_armed(
    cx: &mut StepCtx<'_>,
    when: When,
    trigger: Option<(ProcId, Detector)>,
    before: Option<Before>,
    notes: &mut Vec<String>,
) -> Result<bool, Abort> {
    let (firing, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut cx.state.armed)
        .into_iter()
        .partition(|(w, _)| *w == when);
    cx.state.armed = waiting;
    if firing.is_empty() {
        return Ok(false);
    }
    let what = command_word(when);
    let inside = match trigger {
        Some((id, detect)) => {
            let inside = until_in_flight(cx, what, id, detect).await?;
            notes.push(inside.note.clone());
            inside
        }
        None => Inside {
            what,
            seen: true,
            note: format!("the {what} step was running (an auto-flip is not visible from outside)"),
        },
    };
    let trigger_id = trigger.map(|(id, _)| id);
    let mut crashed = false;
    for (_, fault) in firing {
        match fault {
            ArmedFault::Kill(k) => {
                let text = super::kill::fire_kill(cx, &k, Some(&inside)).await?;
                notes.push(text);
            }
            ArmedFault::Crash => {
                let text = super::pg_crash::crash(cx, &format!(" during the {what}")).await?;
                notes.push(text);
                crashed = true;
                let fault = format!("pg_crash during the {what}");
                let (fired, evidence) = match &before {
                    Some(before) if inside.seen => {
                        super::fault_evidence::crash_evidence(cx, before).await
                    }
                    Some(_) => (false, inside.note.clone()),
                    None => (inside.seen, inside.note.clone()),
                };
                notes.push(evidence.clone());
                cx.state.record_fault(fault, fired, evidence);
            }
            ArmedFault::Fleet(f) => {
                let text = super::fleet::fleet_inside_migration(cx, &f, trigger_id).await?;
                notes.push(text);
            }
        }
    }
    Ok(crashed)
}

/// Waits (up to 5 s) for the database to show process `id`, the
/// migration or flip, in flight; says whether it did and how.
async fn until_in_flight(
    cx: &mut StepCtx<'_>,
    what: &'static str,
    id: ProcId,
    detect: Detector,
) -> Result<Inside, Abort> {
    let deadline = Instant::now() + IN_FLIGHT_TIMEOUT;
    loop {
        if cx.proc(id, |p| p.exit.is_some()) {
            let note = format!("the {what} ended before the armed fault could fire inside it");
            return Ok(Inside {
                what,
                seen: false,
                note,
            });
        }
        let seen = match detect {
            Detector::Migration => cx.probe.migration_in_flight().await,
            Detector::FlipSql(since) => cx.probe.flip_in_flight(since).await,
            Detector::BlockedBy(pid) => cx.probe.blocked_by(pid).await,
        };
        if matches!(seen, Ok(true)) {
            let note = match detect {
                Detector::BlockedBy(_) => {
                    format!("the {what} was held inside its transaction at the authority lock")
                }
                _ => format!("the {what} was seen in flight"),
            };
            return Ok(Inside {
                what,
                seen: true,
                note,
            });
        }
        if Instant::now() >= deadline {
            let note = format!("the {what} was not seen in flight within 5s; firing anyway");
            return Ok(Inside {
                what,
                seen: false,
                note,
            });
        }
        cx.cancel().sleep(Duration::from_millis(5)).await?;
    }
}

/// The command a fault armed for `when` fires inside, in a word.
fn command_word(when: When) -> &'static str {
    if when == When::DuringMigrate {
        "migration"
    } else {
        "flip"
    }
}
