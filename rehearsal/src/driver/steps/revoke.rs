//! `revoke`: runtimes whose database privileges are revoked while they
//! run must surface the permanent error at once.
//!
//! The runtime retries what a reconnect may cure (a dropped connection,
//! a server restart, a serialization failure) for its patience
//! (`AWA_DB_PATIENCE`) and stops on anything else with a `fatal` event
//! and exit 1 (awa-runtime's error.rs and worker.rs). A privilege revoked
//! under a running process is the permanent error it meets in real life:
//! no reconnect changes the answer. The step starts its own workers and
//! producers connected as a role of their own (so nothing else of the
//! cell loses anything), lets them work, revokes the role's privileges on
//! the `awa` schema, and waits long enough to see one that retries for
//! its whole patience end. Each must end with exit 1 naming SQLSTATE
//! 42501; how long it took is timed from the revoke (`slow_refusal`
//! judges it, as it judges a refusal); what its workers held is left to
//! the rest of the fleet's rescue, and reconciliation holds every job to
//! exactly once.

use std::time::{Duration, Instant};

use super::super::database::{connect, identifier, with_user};
use super::super::env::{DB_PATIENCE, mix_string, producer_env};
use super::super::ledger::{Cancel, Role};
use super::super::procs::Start;
use super::super::step_ctx::{STOP_TIMEOUT, STOP_TIMEOUT_INTERRUPTED, StepCtx};
use super::super::{Abort, Done, EXIT_ERROR};
use crate::fleet::ProcId;
use crate::matrix::RevokeStep;
use crate::observe::StepOutcome;

/// The SQLSTATE of a privilege the session lacks.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// How long the role's processes get to start work before the revoke.
const WORK_TIMEOUT: Duration = Duration::from_secs(15);

/// How long after the revoke a process may take to end before it is
/// killed: past the patience a process retrying the error as transient
/// takes, so that one is timed (and found slow) rather than killed.
const SURFACE_TIMEOUT: Duration = Duration::from_secs(DB_PATIENCE.as_secs() + 15);

/// Longest role name PostgreSQL keeps.
const MAX_IDENT: usize = 63;

/// The role of step `step` of the cell database `db`.
fn role_name(db: &str, step: usize) -> String {
    let prefix = format!("rehearse_s{step}_");
    format!("{prefix}{}", identifier(db, MAX_IDENT - prefix.len()))
}

/// A login role with every privilege the runtime uses on the `awa`
/// schema (functions are executable by everyone already). The name is
/// built from [a-z0-9_] only, never from raw input.
fn grant(role: &str) -> String {
    format!(
        "CREATE ROLE \"{role}\" LOGIN;
         GRANT USAGE ON SCHEMA awa TO \"{role}\";
         GRANT ALL ON ALL TABLES IN SCHEMA awa TO \"{role}\";
         GRANT ALL ON ALL SEQUENCES IN SCHEMA awa TO \"{role}\";"
    )
}

/// Every privilege of the role on the `awa` schema taken away: each
/// statement its sessions run next fails with SQLSTATE 42501.
fn revoke_all(role: &str) -> String {
    format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA awa FROM \"{role}\";
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA awa FROM \"{role}\";
         REVOKE USAGE ON SCHEMA awa FROM \"{role}\";"
    )
}

/// The role gone (run once its sessions are: see [`revoke`]).
fn drop_role(role: &str) -> String {
    format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\";")
}

/// Sessions connected as the role `$1`.
const ROLE_SESSIONS: &str = "SELECT count(*) FROM pg_stat_activity WHERE usename::text = $1";

/// How long the role's sessions may take to go once its processes ended
/// (a backend outlives its client by a moment).
const SESSIONS_GONE: Duration = Duration::from_secs(5);

/// `revoke`: see the module's documentation.
pub(super) async fn revoke(cx: &mut StepCtx<'_>, s: &RevokeStep) -> Result<Done, Abort> {
    let harness = |what: &str, e: String| Abort::Harness(format!("revoke: {what}: {e}"));
    let role = role_name(&cx.db.name, cx.state.step_index);
    let url = with_user(&cx.db.url, &role).map_err(|e| harness("the role's URL", e))?;
    let admin = connect(&cx.db.url)
        .await
        .map_err(|e| harness("connecting", e.to_string()))?;
    admin
        .batch_execute(&grant(&role))
        .await
        .map_err(|e| harness("creating the role", crate::pg::describe(&e)))?;
    let mut ids = Vec::new();
    let outcome = match start(cx, s, &url, &mut ids).await {
        Ok(()) => revoke_and_judge(cx, &admin, &role, &ids).await,
        Err(e) => Err(e),
    };
    // However the step ended, nothing of it runs on as the role: a start
    // that failed part way (a process refused, one never worked, Ctrl-C)
    // leaves the ones already started working, and the role is dropped
    // only once their sessions are gone, as after a revoke they are.
    stop_started(cx, &ids).await;
    if let Some(left) = sessions_left(&admin, &role).await {
        cx.state.facts.notes.push(format!(
            "{} as the role {role} still connected when it was dropped",
            crate::observe::count(left, "session")
        ));
    }
    if let Err(e) = admin.batch_execute(&drop_role(&role)).await {
        cx.state.facts.notes.push(format!(
            "the role {role} could not be dropped: {}",
            crate::pg::describe(&e)
        ));
    }
    outcome
}

/// The sessions of `role` still connected after [`SESSIONS_GONE`], if
/// any (if they cannot be counted, none: the drop says what it meets).
async fn sessions_left(admin: &tokio_postgres::Client, role: &str) -> Option<u64> {
    let since = Instant::now();
    loop {
        let left: i64 = admin.query_one(ROLE_SESSIONS, &[&role]).await.ok()?.get(0);
        if left == 0 {
            return None;
        }
        if since.elapsed() >= SESSIONS_GONE {
            return Some(left as u64);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops what of `ids` still runs (SIGTERM, then SIGKILL after the
/// grace); a process that needed SIGKILL is noted.
async fn stop_started(cx: &mut StepCtx<'_>, ids: &[ProcId]) {
    let running: Vec<ProcId> = ids
        .iter()
        .copied()
        .filter(|&id| cx.proc(id, |p| p.alive()))
        .collect();
    if running.is_empty() {
        return;
    }
    let grace = if cx.cancel().is_set() {
        STOP_TIMEOUT_INTERRUPTED
    } else {
        STOP_TIMEOUT
    };
    if let Ok(notes) = cx.stop(&running, grace, &Cancel::never()).await {
        cx.state.facts.notes.extend(notes);
    }
}

/// Starts the step's processes as the role, each added to `ids` as it
/// starts, and waits until each works: ready, and a worker has started
/// an attempt.
async fn start(
    cx: &mut StepCtx<'_>,
    s: &RevokeStep,
    url: &str,
    ids: &mut Vec<ProcId>,
) -> Result<(), Abort> {
    let as_role = ("AWA_DATABASE_URL".to_owned(), url.to_owned());
    for _ in 0..s.workers {
        let env = vec![
            as_role.clone(),
            // Leadership is not the role's to take: rotation and prune
            // run DDL only the owner may.
            ("AWA_NO_MAINTENANCE".to_owned(), "true".to_owned()),
        ];
        ids.push(
            cx.spawn(&s.artifact, Role::Worker, vec!["worker".into()], env)
                .await?,
        );
    }
    for _ in 0..s.producers {
        let w = &cx.plan.workload;
        let mut env = producer_env(f64::from(w.rate_per_s), 0, &mix_string(&w.mix), w.sleep);
        env.push(as_role.clone());
        ids.push(
            cx.spawn(&s.artifact, Role::Producer, vec!["produce".into()], env)
                .await?,
        );
    }
    for &id in ids.iter() {
        match cx.await_start(id).await? {
            Start::Ready => {}
            Start::Refused(why) | Start::Exited(why) => {
                let name = cx.proc(id, |p| p.name.clone());
                return Err(Abort::Failed(format!(
                    "{name} did not start as a role with every privilege: {why}"
                )));
            }
            Start::TimedOut => {
                let name = cx.proc(id, |p| p.name.clone());
                return Err(Abort::Harness(format!("{name} did not print ready")));
            }
        }
    }
    let workers: Vec<ProcId> = ids
        .iter()
        .copied()
        .filter(|&id| cx.proc(id, |p| p.role == Role::Worker))
        .collect();
    let working = cx
        .ledger()
        .wait_for(WORK_TIMEOUT, &cx.cancel(), |l| {
            workers
                .iter()
                .all(|&id| l.procs[id].started > 0 || !l.procs[id].alive())
                .then_some(())
        })
        .await?;
    if working.is_none() {
        return Err(Abort::Harness(format!(
            "revoke: the role's workers started no attempt within {}s (is the load on?)",
            WORK_TIMEOUT.as_secs()
        )));
    }
    Ok(())
}

/// Revokes the role's privileges, waits for each process to end, and
/// judges how each ended.
async fn revoke_and_judge(
    cx: &mut StepCtx<'_>,
    admin: &tokio_postgres::Client,
    role: &str,
    ids: &[ProcId],
) -> Result<Done, Abort> {
    admin
        .batch_execute(&revoke_all(role))
        .await
        .map_err(|e| Abort::Harness(format!("revoke: {}", crate::pg::describe(&e))))?;
    let revoked_ms = cx.ms();
    let since = Instant::now();
    let mut parts = Vec::new();
    let mut failed = false;
    for &id in ids {
        let left = SURFACE_TIMEOUT.saturating_sub(since.elapsed());
        let ended = cx.await_done(id, left, &cx.cancel()).await?;
        let name = cx.proc(id, |p| p.name.clone());
        if !ended {
            cx.kill_proc(id, "revoke").await?;
            cx.state.fail(format!(
                "{name} kept running {}s after its privileges were revoked: the permanent error never surfaced",
                SURFACE_TIMEOUT.as_secs()
            ));
            parts.push(format!("{name} still running, killed"));
            failed = true;
            continue;
        }
        let (code, error) = cx.proc(id, |p| {
            (
                p.code(),
                p.fatal.clone().unwrap_or_else(|| p.stderr_tail(1)),
            )
        });
        if code != Some(EXIT_ERROR) || !error.contains(INSUFFICIENT_PRIVILEGE) {
            let why = cx.proc(id, |p| p.why_ended());
            cx.state.fail(format!(
                "{name} did not surface the revoked privilege (exit {EXIT_ERROR} naming SQLSTATE {INSUFFICIENT_PRIVILEGE}): it {why}"
            ));
            parts.push(format!("{name} {why}"));
            failed = true;
            continue;
        }
        let took = cx
            .time_refusal("revoke", id, revoked_ms, StepOutcome::Failed, 0)
            .map_or(String::new(), |t| format!(" ({t})"));
        parts.push(format!(
            "{name} stopped on the permanent error{took}: {error}"
        ));
    }
    let summary = format!(
        "privileges of role {role} revoked under {}: {}",
        crate::observe::count(ids.len() as u64, "process"),
        parts.join("; ")
    );
    Ok(if failed {
        Done::with(StepOutcome::Failed, summary)
    } else {
        Done::ok(summary)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_fit_and_name_the_step_and_cell() {
        assert_eq!(role_name("rh_fence_1", 4), "rehearse_s4_rh_fence_1");
        let long = "d".repeat(80);
        assert_eq!(role_name(&long, 12).len(), MAX_IDENT);
    }

    #[test]
    fn the_surface_timeout_outlasts_the_patience() {
        assert!(SURFACE_TIMEOUT > DB_PATIENCE);
    }
}
