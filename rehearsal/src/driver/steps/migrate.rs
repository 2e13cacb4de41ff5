//! `migrate`: an artifact's `awa migrate`, judged by its exit code.

use super::super::ledger::Role;
use super::super::migration_hold::MigrationHold;
use super::super::state::ArmedFault;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use super::super::{EXIT_OK, EXIT_REFUSED};
use super::armed::{ArmedCommand, Detector};
use super::fault_evidence::{Before, runtimes_named_in};
use super::{CommandEnd, with_notes};
use crate::fleet::Event;
use crate::matrix::{MigrateStep, Outcome, When};
use crate::observe::StepOutcome;

/// `AWA_MIGRATE_PAUSE` of a migration a fault is armed for: the 0.7
/// migration holds its transaction open this long after the preflight, so
/// the fault lands inside it. Shorter than the stale threshold, because the
/// preflight's lock on runtime_instances holds heartbeats back meanwhile.
const MIGRATE_PAUSE: &str = "750ms";
/// The longest a migration is held open for runtimes armed to start inside
/// it ([`MigrationHold`]); it is let go as soon as they are up.
const HELD_PAUSE: &str = "20s";

/// `migrate`: `awa migrate` of the artifact, judged by its exit code
/// (0 ok, 2 refused). Faults armed for it fire once the migration holds
/// its lock; after a PostgreSQL crash the command runs once more and the
/// step's `expect` applies to that run. A successful migration
/// re-launches the processes parked by a binary-first refusal.
pub(super) async fn migrate(cx: &mut StepCtx<'_>, s: &MigrateStep) -> Result<Done, Abort> {
    let mut args = vec!["migrate".to_owned()];
    if s.allow_live_runtimes {
        args.push("--allow-live-runtimes".into());
    }
    let armed = cx
        .state
        .armed
        .iter()
        .any(|(w, _)| *w == When::DuringMigrate);
    let fleet_armed = cx
        .state
        .armed
        .iter()
        .any(|(w, f)| *w == When::DuringMigrate && matches!(f, ArmedFault::Fleet(_)));
    let mut env = Vec::new();
    if fleet_armed {
        let hold = MigrationHold::take(&cx.db.url)
            .await
            .map_err(|e| Abort::Harness(e.to_string()))?;
        cx.state.migration_hold = Some(hold);
        env.push(("AWA_MIGRATE_PAUSE".to_owned(), HELD_PAUSE.to_owned()));
        env.push((
            "AWA_MIGRATE_HOLD_KEY".to_owned(),
            MigrationHold::KEY.to_string(),
        ));
    } else if armed {
        env.push(("AWA_MIGRATE_PAUSE".to_owned(), MIGRATE_PAUSE.to_owned()));
    }
    let before = if armed {
        cx.probe.schema_version().await.ok().map(Before::Schema)
    } else {
        None
    };
    let mut notes = Vec::new();
    let command = ArmedCommand {
        artifact: &s.artifact,
        role: Role::Migrate,
        args,
        env,
        when: When::DuringMigrate,
        detect: Detector::Migration,
        before,
        holder: None,
        started: None,
    };
    let judged = super::armed::run_armed(cx, command, &mut notes).await?;
    let end = super::command_end(cx, judged.id);
    if s.expect == Outcome::Refused && end.code == Some(EXIT_REFUSED) {
        notes.extend(cx.time_refusal("migrate", judged.id, judged.at_ms, StepOutcome::Refused, 0));
    }
    let reported = (!judged.reran)
        .then(|| super::schema_check::migrated_range(&end.output))
        .flatten();
    super::schema_check::record_schema(cx, &s.artifact, reported).await;
    let done = judge_migrate(cx, s, end, &mut notes).await?;
    Ok(with_notes(done, notes))
}

/// The migration's outcome against the step's `expect`.
async fn judge_migrate(
    cx: &mut StepCtx<'_>,
    s: &MigrateStep,
    end: CommandEnd,
    notes: &mut Vec<String>,
) -> Result<Done, Abort> {
    let (name, why) = (&end.name, &end.why);
    let migrated = end.output.iter().find_map(|e| match e {
        Event::Migrated(m) => Some(format!("schema v{} -> v{}", m.from, m.to)),
        _ => None,
    });
    let version = cx.version_of(&s.artifact);
    Ok(match (s.expect, end.code) {
        (Outcome::Ok, Some(EXIT_OK)) => {
            cx.relaunch_parked(notes).await?;
            Done::ok(format!(
                "{name} ({version}): {}",
                migrated.unwrap_or_else(|| "migrated".into())
            ))
        }
        (Outcome::Ok, Some(EXIT_REFUSED)) => {
            super::refused_against_plan(cx, name, &version, end.refusal())
        }
        (Outcome::Ok, _) => {
            cx.state.fail(format!("{name} failed ({why})"));
            Done::with(StepOutcome::Failed, format!("{name} ({version}) {why}"))
        }
        (Outcome::Refused, Some(EXIT_REFUSED)) => {
            let reason = end.refusal();
            required_refusal(cx, &s.artifact, &version, &reason);
            Done::with(
                StepOutcome::Refused,
                format!("{name} ({version}) refused as required: {reason}"),
            )
        }
        (Outcome::Refused, Some(EXIT_OK)) => {
            cx.state
                .fail(format!("{name} succeeded, but the plan requires a refusal"));
            Done::with(
                StepOutcome::Ok,
                format!("{name} ({version}): {}", migrated.unwrap_or_default()),
            )
        }
        (Outcome::Blocked, _) => {
            cx.state.fail(format!(
                "{name}: expect = \"blocked\" is not a migrate outcome ({why})"
            ));
            Done::with(StepOutcome::Failed, format!("{name} ({version}) {why}"))
        }
        (Outcome::Refused, _) => {
            cx.state
                .fail(format!("{name} failed ({why}) instead of refusing"));
            Done::with(StepOutcome::Failed, format!("{name} ({version}) {why}"))
        }
    })
}

/// A migration refused as the plan requires: its evidence is a reason
/// naming live runtimes of this cell (below the floor, or in the
/// exclusive window), recorded with the refusal.
fn required_refusal(cx: &mut StepCtx<'_>, artifact: &str, version: &str, reason: &str) {
    let named = cx.view(|l| runtimes_named_in(l, reason));
    if named.is_empty() {
        cx.state.record_fault(
            "migrate expected refused",
            false,
            format!(
                "the migration was refused, but its reason names no runtime of this cell: {reason}"
            ),
        );
    } else {
        cx.state.record_fault(
            "migrate expected refused",
            true,
            format!(
                "refused for the declared reason, naming {}",
                named.join(", ")
            ),
        );
    }
    cx.state.facts.refusals_required.push(format!(
        "step {} ({}): migrate by {artifact} ({version}) was refused as required: {reason}",
        cx.state.step_index, cx.state.step_name
    ));
}
