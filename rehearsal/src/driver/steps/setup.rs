//! Step 0, `setup`: the cell's database prepared before its first step
//! (the N-1 or fresh schema, the `[workload] cron` schedule, the banked
//! backlog), by the artifact the plan names.

use super::super::ledger::Role;
use super::super::step_ctx::StepCtx;
use super::super::step_ctx::{BACKLOG_TIMEOUT, COMMAND_TIMEOUT};
use super::super::{Abort, Done, EXIT_OK};

/// Name of the cron schedule every cell with a `[workload] cron` upserts.
pub const CRON_NAME: &str = "rehearse";

/// Step 0: the N-1 (or fresh) schema, the cron schedule, the banked backlog.
pub(in crate::driver) async fn setup(cx: &mut StepCtx<'_>) -> Result<Done, Abort> {
    let by = cx.plan.database.migrated_by.clone();
    let mut detail = vec![prepare_schema(cx, &by).await?];
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
        return Err(Abort::Harness(format!(
            "preparing the database with {by} ({version}) failed: awa migrate {why}"
        )));
    }
    super::schema::record_schema(cx, by).await;
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
