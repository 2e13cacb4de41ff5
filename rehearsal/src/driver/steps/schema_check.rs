//! The schema side of a cell: `schema_version` after every step that may
//! write it (for the `schema_rewritten` rule), and the
//! `schema_matches_fresh` check.

use std::time::Instant;

use super::super::database::{connect, identifier, with_database};
use super::super::ledger::Role;
use super::super::step_ctx::COMMAND_TIMEOUT;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, EXIT_OK};
use super::check_result::Held;
use super::migrate_failure::{Whose, fresh_install_failure};
use crate::fleet::Event;
use crate::matrix::CURRENT;
use crate::observe::{MigratedRange, SchemaCheck, SchemaRecord};
use crate::schema::{self, Judged};

/// Longest database name PostgreSQL keeps.
const MAX_IDENT: usize = 63;

/// The scratch database of a comparison: the cell's, marked, per step.
fn scratch_name(cell_db: &str, step: usize) -> String {
    let suffix = format!("_fresh{step}");
    format!("{}{suffix}", identifier(cell_db, MAX_IDENT - suffix.len()))
}

/// The versions a migrate's `migrated` event names, if it printed one.
pub(super) fn migrated_range(output: &[Event]) -> Option<MigratedRange> {
    output.iter().find_map(|e| match e {
        Event::Migrated(m) => Some(MigratedRange {
            from: m.from,
            to: m.to,
        }),
        _ => None,
    })
}

/// Records `awa.schema_version` now, after setup or a migrate step by
/// `by`, with what that migrate `reported` it did (None: it printed no
/// `migrated` event, or ran twice); a failed read leaves a note (the
/// rules then have a gap, not a lie).
pub(in crate::driver) async fn record_schema(
    cx: &mut StepCtx<'_>,
    by: &str,
    reported: Option<MigratedRange>,
) {
    match cx.probe.schema_rows().await {
        Ok(rows) => {
            let record = SchemaRecord {
                step: cx.state.step_index,
                by: format!("{by} {}", cx.version_of(by)),
                at_ms: cx.ms(),
                rows,
                reported,
            };
            cx.state.obs.schema_history.push(record);
        }
        Err(e) => cx.state.facts.notes.push(format!(
            "schema_version could not be read after step {}: {e}",
            cx.state.step_index
        )),
    }
}

/// `schema_matches_fresh`: a scratch database on the cell's server gets
/// a fresh install by the current build's `awa migrate`; both schemas
/// are read from the catalogs and compared; the scratch database is
/// dropped (kept with `--keep`). Undeclared differences fail the check
/// and become `schema_drift` findings at reconciliation, one per
/// object; declarations that match nothing fail it too (they are
/// stale: remove them).
pub(super) async fn schema_matches_fresh(cx: &mut StepCtx<'_>) -> Result<Held, Abort> {
    let started = Instant::now();
    let scratch = scratch_name(&cx.db.name, cx.state.step_index);
    let harness =
        |what: &str, e: String| Abort::Harness(format!("schema_matches_fresh: {what}: {e}"));
    let scratch_url =
        with_database(&cx.db.url, &scratch).map_err(|e| harness("the scratch URL", e))?;
    let admin = connect(&cx.db.url)
        .await
        .map_err(|e| harness("connecting", e.to_string()))?;
    // The name is built from [a-z0-9_] only, never from raw input.
    for sql in [
        format!("DROP DATABASE IF EXISTS \"{scratch}\""),
        format!("CREATE DATABASE \"{scratch}\""),
    ] {
        admin
            .batch_execute(&sql)
            .await
            .map_err(|e| harness("creating the scratch database", crate::pg::describe(&e)))?;
    }
    let compared = compare_with_fresh(cx, &scratch_url).await;
    let kept = cx.keep();
    if !kept {
        let drop = format!("DROP DATABASE IF EXISTS \"{scratch}\" WITH (FORCE)");
        if let Err(e) = admin.batch_execute(&drop).await {
            cx.state.facts.notes.push(format!(
                "the scratch database {scratch} could not be dropped: {}",
                crate::pg::describe(&e)
            ));
        }
    }
    let Compared {
        objects,
        judged,
        catalogs_ms,
    } = match compared? {
        Ok(compared) => compared,
        // The build under rehearsal did not install: the check fails.
        Err(failed) => return Ok(Err(failed)),
    };
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let fresh_by = format!("{CURRENT} {}", cx.version_of(CURRENT));
    let summary = summarize(
        &judged,
        objects,
        (elapsed_ms, catalogs_ms),
        &fresh_by,
        kept.then_some(&scratch),
    );
    let stale = judged.stale.clone();
    let drift = !judged.undeclared.is_empty();
    cx.state.obs.schema_checks.push(SchemaCheck {
        step: cx.state.step_index,
        at_ms: cx.ms(),
        fresh_by,
        objects,
        elapsed_ms,
        judged,
    });
    Ok(match (drift, stale.is_empty()) {
        (false, true) => Ok(summary),
        (true, true) => Err(summary),
        (_, false) => Err(format!(
            "{summary}; [schema] declares intended differences that no longer differ (stale: remove them): {}",
            stale.join(", ")
        )),
    })
}

/// Installs the current build on `scratch_url` and compares it with the
/// cell's database: the upgraded schema's object count and the judgement,
/// or (inner `Err`) why the fresh install failed when that is the
/// product's failure (see [`fresh_install_failure`]).
async fn compare_with_fresh(
    cx: &mut StepCtx<'_>,
    scratch_url: &str,
) -> Result<Result<Compared, String>, Abort> {
    let harness =
        |what: &str, e: String| Abort::Harness(format!("schema_matches_fresh: {what}: {e}"));
    let env = vec![("AWA_DATABASE_URL".to_owned(), scratch_url.to_owned())];
    let id = cx
        .run_command(
            CURRENT,
            Role::Migrate,
            vec!["migrate".into()],
            env,
            COMMAND_TIMEOUT,
        )
        .await?;
    let (code, why) = cx.proc(id, |p| (p.code(), p.why_ended()));
    if code != Some(EXIT_OK) {
        let answers = connect(scratch_url).await.is_ok();
        return match fresh_install_failure(true, code, answers) {
            Whose::Product => Ok(Err(format!(
                "the fresh install by {CURRENT} ({}) failed on an empty database that answers: awa migrate {why}",
                cx.version_of(CURRENT)
            ))),
            Whose::Harness => Err(harness("the fresh install by current failed", why)),
        };
    }
    let installed = Instant::now();
    let fresh = connect(scratch_url)
        .await
        .map_err(|e| harness("connecting to the fresh install", e.to_string()))?;
    let upgraded = connect(&cx.db.url)
        .await
        .map_err(|e| harness("connecting", e.to_string()))?;
    let (a, b) = tokio::join!(schema::introspect(&upgraded), schema::introspect(&fresh));
    let (upgraded, fresh) = (
        a.map_err(|e| harness("the upgraded database", e))?,
        b.map_err(|e| harness("the fresh install", e))?,
    );
    let judged = schema::judge(schema::diff(&upgraded, &fresh), &cx.plan.schema_intended);
    Ok(Ok(Compared {
        objects: upgraded.len(),
        judged,
        catalogs_ms: installed.elapsed().as_millis() as u64,
    }))
}

/// What a comparison found.
struct Compared {
    /// Objects the upgraded schema has.
    objects: usize,
    judged: Judged,
    /// Of the comparison's time, reading both catalogs and the diff.
    catalogs_ms: u64,
}

/// The check's line for the timeline.
fn summarize(
    judged: &Judged,
    objects: usize,
    (elapsed_ms, catalogs_ms): (u64, u64),
    fresh_by: &str,
    kept: Option<&String>,
) -> String {
    let mut text = format!(
        "{objects} schema objects compared with a fresh install of {fresh_by} in {elapsed_ms} ms \
         (catalogs read and compared in {catalogs_ms} ms, the rest is the scratch database and the install): "
    );
    if judged.undeclared.is_empty() && judged.intended.is_empty() {
        text.push_str("identical");
    } else {
        text.push_str(&format!(
            "{} (schema_drift), {} intended",
            crate::observe::count(judged.undeclared.len() as u64, "undeclared difference"),
            judged.intended.len()
        ));
        if let Some(first) = judged.undeclared.first() {
            text.push_str(&format!("; first: {first}"));
        }
    }
    if let Some(name) = kept {
        text.push_str(&format!("; the fresh install is kept as database {name}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_names_fit_and_differ_from_the_cell_database() {
        assert_eq!(scratch_name("migrate_first", 14), "migrate_first_fresh14");
        let long = "x".repeat(63);
        let name = scratch_name(&long, 7);
        assert_eq!(name.len(), 63);
        assert_ne!(name, long);
        assert!(name.ends_with("_fresh7"));
    }
}
