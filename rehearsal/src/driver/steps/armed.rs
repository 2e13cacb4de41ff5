//! Faults armed for the next migrate or flip, fired once it is in flight.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::cell::{ArmedFault, Cell};
use super::evidence::{Before, Inside};
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

impl Cell<'_> {
    /// Fires the faults armed for `when`, inside `trigger` (a migrate or
    /// flip process) once the database shows it in flight (or after 5 s, or
    /// when it already ended), and records each one's evidence; a crash's
    /// is that the state `before` the command is unchanged right after
    /// the restart. Returns whether PostgreSQL was crashed.
    pub(super) async fn fire_armed(
        &mut self,
        when: When,
        trigger: Option<(ProcId, Detector)>,
        before: Option<Before>,
        notes: &mut Vec<String>,
    ) -> Result<bool, Abort> {
        let (firing, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.armed)
            .into_iter()
            .partition(|(w, _)| *w == when);
        self.armed = waiting;
        if firing.is_empty() {
            return Ok(false);
        }
        let what = if when == When::DuringMigrate {
            "migration"
        } else {
            "flip"
        };
        let mut inside = Inside {
            what,
            seen: trigger.is_none(),
            note: format!("the {what} step was running (an auto-flip is not visible from outside)"),
        };
        if let Some((id, detect)) = trigger {
            let deadline = Instant::now() + IN_FLIGHT_TIMEOUT;
            loop {
                if self.shared.lock().procs[id].exit.is_some() {
                    inside.note =
                        format!("the {what} ended before the armed fault could fire inside it");
                    notes.push(inside.note.clone());
                    break;
                }
                let seen = match detect {
                    Detector::Migration => self.probe.migration_in_flight().await,
                    Detector::FlipSql(since) => self.probe.flip_in_flight(since).await,
                    Detector::BlockedBy(pid) => self.probe.blocked_by(pid).await,
                };
                if seen == Ok(true) {
                    inside.seen = true;
                    inside.note = match detect {
                        Detector::BlockedBy(_) => format!(
                            "the {what} was held inside its transaction at the authority lock"
                        ),
                        _ => format!("the {what} was seen in flight"),
                    };
                    notes.push(inside.note.clone());
                    break;
                }
                if Instant::now() >= deadline {
                    inside.note =
                        format!("the {what} was not seen in flight within 5s; firing anyway");
                    notes.push(inside.note.clone());
                    break;
                }
                self.cancel().sleep(Duration::from_millis(5)).await?;
            }
        }
        let trigger_id = trigger.map(|(id, _)| id);
        let mut crashed = false;
        for (_, fault) in firing {
            match fault {
                ArmedFault::Kill(k) => {
                    let text = self.fire_kill(&k, Some(&inside)).await?;
                    notes.push(text);
                }
                ArmedFault::Crash => {
                    let text = self.crash(&format!(" during the {what}")).await?;
                    notes.push(text);
                    crashed = true;
                    let fault = format!("pg_crash during the {what}");
                    let (fired, evidence) = match &before {
                        Some(before) if inside.seen => self.crash_evidence(before).await,
                        Some(_) => (false, inside.note.clone()),
                        None => (inside.seen, inside.note.clone()),
                    };
                    notes.push(evidence.clone());
                    self.record_fault(fault, fired, evidence);
                }
                ArmedFault::Fleet(f) => {
                    let text = self.fleet_inside_migration(&f, trigger_id).await?;
                    notes.push(text);
                }
            }
        }
        Ok(crashed)
    }
}
