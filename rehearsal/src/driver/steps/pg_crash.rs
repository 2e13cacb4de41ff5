//! `pg_crash`: crash PostgreSQL and let it recover, now or armed.

use super::super::cell::Cell;
use super::super::state::ArmedFault;
use super::super::{Abort, Done};
use crate::matrix::When;
use crate::observe::StepOutcome;
use crate::stream::{Fault, RunEvent};

impl Cell<'_> {
    /// `pg_crash`: now, or armed for the next migrate or flip.
    pub(super) async fn pg_crash(&mut self, when: When) -> Result<Done, Abort> {
        if when != When::Now {
            self.state.armed.push((when, ArmedFault::Crash));
            let next = if when == When::DuringMigrate {
                "migrate"
            } else {
                "flip"
            };
            return Ok(Done::with(
                StepOutcome::Armed,
                format!("PostgreSQL crash armed for the next {next}"),
            ));
        }
        let text = self.crash("").await?;
        self.record_fault("pg_crash now", true, text.clone());
        Ok(Done::ok(text))
    }

    pub(super) async fn crash(&mut self, during: &str) -> Result<String, Abort> {
        let ms = self.db.crash_and_restart().await.map_err(Abort::Harness)?;
        self.emit(RunEvent::FaultInjected {
            cell: self.plan.name.clone(),
            fault: Fault::PgCrash {
                at_ms: self.ms(),
                recovery_ms: ms,
            },
        });
        self.state.facts.crashes.push(format!(
            "step {} ({}): the fleet survived a PostgreSQL crash{during}",
            self.state.step_index, self.state.step_name
        ));
        Ok(format!(
            "PostgreSQL crashed (SIGKILL to every server process){during} and was back after crash recovery in {ms} ms"
        ))
    }
}
