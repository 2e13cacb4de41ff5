//! One file per step kind, and the dispatch from a planned step to it.
//! The matrix author's words (matrix.toml, `matrix::Step` docs) are the
//! specification; where they leave room, the choice made is stated on
//! the function. Two files are no step: `check_result` (a check's result,
//! which `assert`, `settle` and `schema_check` give) and `migrate_failure`
//! (whose failure a failed `awa migrate` is, for `setup` and
//! `schema_check`).

mod armed;
mod assert;
mod cancel;
mod check_result;
mod drain;
mod fault_evidence;
mod fence;
mod fleet;
mod flip;
mod gate;
mod hold;
mod kill;
mod load;
mod migrate;
mod migrate_failure;
mod pg_crash;
mod revoke;
mod roll;
mod rollback;
mod schema_check;
mod settle;
mod setup;
mod suspend;

use super::ledger::FleetView;
use super::state::Seat;
use super::step_ctx::StepCtx;
use super::{Abort, Done};
use crate::matrix::Step;
pub(super) use drain::drain;
pub use setup::CRON_NAME;
pub(super) use setup::setup;
pub(super) use suspend::PROOF_SLACK;

/// Executes one planned step.
pub(super) async fn execute(
    cx: &mut StepCtx<'_>,
    step: &crate::plan::PlannedStep,
) -> Result<Done, Abort> {
    match step {
        Step::Fleet(s) => fleet::fleet(cx, s).await,
        Step::Load(s) => {
            if s.on {
                load::load_on(cx).await
            } else {
                load::load_off(cx).await
            }
        }
        Step::Migrate(s) => migrate::migrate(cx, s).await,
        Step::Roll(s) => roll::roll(cx, s).await,
        Step::Rollback(s) => rollback::rollback(cx, s).await,
        Step::Kill(k) => kill::kill(cx, k).await,
        Step::Suspend(s) => suspend::suspend(cx, s).await,
        Step::Resume(s) => suspend::resume(cx, s).await,
        Step::PgCrash(s) => pg_crash::pg_crash(cx, s.when).await,
        Step::Flip(s) => flip::flip(cx, s).await,
        Step::Fence(s) => fence::fence(cx, &s.artifact).await,
        Step::Hold(s) => hold::hold(cx, s).await,
        Step::Drain(s) => drain::drain(cx, s.timeout).await,
        Step::Assert(s) => assert::assert(cx, &s.check).await,
        Step::Cancel(s) => cancel::cancel_jobs(cx, s).await,
        Step::Revoke(s) => revoke::revoke(cx, s).await,
    }
}

/// The names of the processes in `seats` (or last in them).
fn seat_names(cx: &StepCtx<'_>, seats: &[usize]) -> String {
    cx.view(|l| names_of(&cx.state.seats, l, seats))
}

/// The names of the processes in `which` of `seats` (or last in them).
fn names_of(seats: &[Seat], ledger: &FleetView, which: &[usize]) -> String {
    let names: Vec<String> = which
        .iter()
        .filter_map(|&s| seats[s].proc.or(seats[s].last))
        .map(|id| ledger.procs[id].name.clone())
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// How a one-shot command (migrate, flip) ended, read from the ledger.
struct CommandEnd {
    name: String,
    code: Option<i32>,
    /// The reason of its `refused` event, if it printed one.
    refused: Option<String>,
    /// How it ended, in words.
    why: String,
    /// Its JSON-lines events.
    output: Vec<crate::fleet::Event>,
}

impl CommandEnd {
    /// How process `p` ended.
    fn of(p: &super::ledger::Proc) -> CommandEnd {
        CommandEnd {
            name: p.name.clone(),
            code: p.code(),
            refused: p.refused.clone(),
            why: p.why_ended(),
            output: p.json.clone(),
        }
    }

    /// Why it was refused: its `refused` event's reason, else how it ended.
    fn refusal(&self) -> String {
        self.refused.clone().unwrap_or_else(|| self.why.clone())
    }
}

/// A command the plan expects to succeed was refused: a step failure.
fn refused_against_plan(cx: &mut StepCtx<'_>, name: &str, version: &str, reason: String) -> Done {
    cx.state.fail(format!("{name} was refused: {reason}"));
    Done::with(
        crate::observe::StepOutcome::Refused,
        format!("{name} ({version}) refused: {reason}"),
    )
}

/// How process `id` ended.
fn command_end(cx: &StepCtx<'_>, id: crate::fleet::ProcId) -> CommandEnd {
    cx.proc(id, CommandEnd::of)
}

fn with_notes(mut done: Done, notes: Vec<String>) -> Done {
    for note in notes {
        done.detail.push_str("; ");
        done.detail.push_str(&note);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_follow_the_detail() {
        let done = with_notes(Done::ok("a"), vec!["b".into(), "c".into()]);
        assert_eq!(done.detail, "a; b; c");
    }
}
