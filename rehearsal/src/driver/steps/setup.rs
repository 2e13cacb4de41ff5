//! Step 0, `setup`: the cell's database prepared before its first step
//! (the N-1 or fresh schema, the `[workload] cron` schedule, the banked
//! backlog), by the artifact the plan names.

use super::super::ledger::Role;
use super::super::step_ctx::StepCtx;
use super::super::step_ctx::{BACKLOG_TIMEOUT, COMMAND_TIMEOUT};
use super::super::{Abort, Done, EXIT_OK};
use super::migrate_failure::{Whose, fresh_install_failure};

/// Name of the cron schedule every cell with a `[workload] cron` upserts.
pub const CRON_NAME: &str = "rehearse";

/// Step 0: the N-1 (or fresh) schema, the cron schedule, the banked backlog.
pub(in crate::driver) async fn setup(cx: &mut StepCtx<'_>) -> Result<Done, Abort> {
    let by = cx.plan.database.migrated_by.clone();
    let mut detail = Vec::new();
    if let Some(after) = super::hold::deadlock_timeout(cx.plan) {
        detail.push(super::hold::detect_deadlocks_within(cx, after).await?);
    }
    detail.push(prepare_schema(cx, &by).await?);
    if let Some(cron) = cx.plan.workload.cron {
        detail.push(upsert_cron(cx, &by, cron.every).await?);
    }
    if cx.plan.workload.backlog > 0 {
        detail.push(bank_backlog(cx, &by).await?);
    }
    Ok(Done::ok(detail.join("; ")))
}

/// The cell's starting schema: `awa migrate` of `by`.
async fn prepare_schema(cx: &mut StepCtx<'_>, by: &str) -> Result<String, Abort> {
    let version = cx.version_of(by);
    let id = cx
        .run_command(
            by,
            Role::Migrate,
            vec!["migrate".into()],
            Vec::new(),
            COMMAND_TIMEOUT,
        )
        .await?;
    let code = cx.proc(id, |p| p.code());
    if code != Some(EXIT_OK) {
        let why = cx.proc(id, |p| p.why_ended());
        let failed =
            format!("preparing the database with {by} ({version}) failed: awa migrate {why}");
        let answers = cx.probe.server_epoch().await.is_ok();
        return Err(
            match fresh_install_failure(cx.plan.database.fresh_install, code, answers) {
                Whose::Product => {
                    cx.state.fail(format!(
                        "the fresh install failed: {by} ({version}) awa migrate {why} on an empty database that answers"
                    ));
                    Abort::Failed(failed)
                }
                Whose::Harness => Abort::Harness(failed),
            },
        );
    }
    let reported = cx.proc(id, |p| super::schema_check::migrated_range(&p.json));
    super::schema_check::record_schema(cx, by, reported).await;
    let schema = cx.probe.schema_version().await.unwrap_or(0);
    Ok(format!(
        "{} schema v{schema} by {by} ({version})",
        if cx.plan.database.fresh_install {
            "fresh"
        } else {
            "N-1"
        }
    ))
}

/// The `[workload] cron` schedule, upserted by `by`.
async fn upsert_cron(
    cx: &mut StepCtx<'_>,
    by: &str,
    every: crate::matrix::Duration,
) -> Result<String, Abort> {
    let interval = super::super::env::awa_duration(every);
    let args = [
        "cron",
        "upsert",
        "--name",
        CRON_NAME,
        "--every",
        interval.as_str(),
    ]
    .map(str::to_owned)
    .to_vec();
    let id = cx
        .run_command(by, Role::Cron, args, Vec::new(), COMMAND_TIMEOUT)
        .await?;
    let ended = cx.proc(id, |p| p.code());
    if ended != Some(EXIT_OK) {
        let why = cx.proc(id, |p| p.why_ended());
        return Err(Abort::Harness(format!(
            "awa cron upsert by {by} failed: {why}"
        )));
    }
    Ok(format!("cron {CRON_NAME} every {every}"))
}

/// The `[workload] backlog`, enqueued by `by` before the first step.
async fn bank_backlog(cx: &mut StepCtx<'_>, by: &str) -> Result<String, Abort> {
    let workload = &cx.plan.workload;
    let mix = super::super::env::mix_string(&workload.mix);
    let env = super::super::env::producer_env(0.0, workload.backlog, &mix, workload.sleep);
    let id = cx
        .run_command(
            by,
            Role::Backlog,
            vec!["produce".into()],
            env,
            BACKLOG_TIMEOUT,
        )
        .await?;
    let (code, why) = cx.proc(id, |p| (p.code(), p.why_ended()));
    let accepted = cx.view(|l| l.accepted.len());
    if code != Some(EXIT_OK) {
        return Err(Abort::Harness(format!(
            "banking the backlog with {by} failed: {why}"
        )));
    }
    Ok(format!("backlog of {accepted} jobs banked by {by}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_install_that_exits_failed_on_a_database_that_answers_is_the_products_failure() {
        for (fresh, code, answers, whose) in [
            (true, Some(1), true, Whose::Product),
            (true, Some(2), true, Whose::Product),
            // Killed after the command timeout: no exit code of its own.
            (true, None, true, Whose::Harness),
            // The server is gone: nobody can tell.
            (true, Some(1), false, Whose::Harness),
            // The N-1 schema by an older release.
            (false, Some(1), true, Whose::Harness),
        ] {
            assert_eq!(
                fresh_install_failure(fresh, code, answers),
                whose,
                "{fresh} {code:?} {answers}"
            );
        }
    }
}
