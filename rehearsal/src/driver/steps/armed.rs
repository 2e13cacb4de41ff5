//! Faults armed for the next migrate or flip, fired once it is in flight.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::cell::{Cell, Fault};
use crate::fleet::ProcId;
use crate::matrix::When;

/// How long an armed fault waits to see its migrate or flip in flight.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// How an armed fault recognises that its migrate or flip is in flight.
#[derive(Clone, Copy, Debug)]
pub(super) enum InFlight {
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
    /// when it already ended). Returns whether PostgreSQL was crashed.
    pub(super) async fn fire_armed(
        &mut self,
        when: When,
        trigger: Option<(ProcId, InFlight)>,
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
        if let Some((id, detect)) = trigger {
            let deadline = Instant::now() + IN_FLIGHT_TIMEOUT;
            loop {
                if self.shared.lock().procs[id].exit.is_some() {
                    notes.push(format!(
                        "the {what} ended before the armed fault could fire inside it"
                    ));
                    break;
                }
                let seen = match detect {
                    InFlight::Migration => self.probe.migration_in_flight().await,
                    InFlight::FlipSql(since) => self.probe.flip_in_flight(since).await,
                    InFlight::BlockedBy(pid) => self.probe.blocked_by(pid).await,
                };
                if seen == Ok(true) {
                    notes.push(match detect {
                        InFlight::BlockedBy(_) => format!(
                            "the {what} was held inside its transaction at the authority lock"
                        ),
                        _ => format!("the {what} was seen in flight"),
                    });
                    break;
                }
                if Instant::now() >= deadline {
                    notes.push(format!(
                        "the {what} was not seen in flight within 5s; firing anyway"
                    ));
                    break;
                }
                self.cancel().sleep(Duration::from_millis(5)).await?;
            }
        }
        let trigger_id = trigger.map(|(id, _)| id);
        let mut crashed = false;
        for (_, fault) in firing {
            match fault {
                Fault::Kill(k) => {
                    let text = self.fire_kill(&k).await?;
                    notes.push(text);
                }
                Fault::Crash => {
                    let text = self.crash(&format!(" during the {what}")).await?;
                    notes.push(text);
                    crashed = true;
                }
                Fault::Fleet(f) => {
                    let text = self.fleet_inside_migration(&f, trigger_id).await?;
                    notes.push(text);
                }
            }
        }
        Ok(crashed)
    }
}
