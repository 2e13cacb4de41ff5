//! Starting a flip ahead of its moment (the runtime's start gate).
//!
//! A `hold` with `until` followed by a manual or forced flip wants the
//! flip the instant the condition holds: `defect-authority-before-lock`
//! needs it while every ring's slot 0 is free, and a ring can enter slot
//! 0 again within the second. A container takes most of a second to
//! start (a process, a few dozen ms; more on a busy machine), so the flip
//! is started when the hold begins, with `AWA_START_GATE_KEY`: it
//! connects, shows it has arrived (the arrival key) and waits until it can
//! share an advisory lock the hold keeps, and the hold lets go of the lock
//! when the condition holds. The flip step then
//! judges that process instead of starting one.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::ledger::Role;
use super::super::step_ctx::StepCtx;
use crate::fleet::ProcId;
use crate::matrix::{FlipMode, Step, When};

/// The key the gate holds (the runtime's).
const KEY: i64 = awa_runtime::gate::START_GATE_KEY;
const CLOSE: &str = "SELECT pg_advisory_lock($1)";
const OPEN: &str = "SELECT pg_advisory_unlock($1)";
/// The key a command holds while it waits at the gate (the runtime's).
const ARRIVED: i64 = awa_runtime::gate::arrival_key(KEY);
/// Whether a session holds the arrival key (a gated command waits at the gate).
const WAITING: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND granted AND objsubid = 1 AND classid = ($1::bigint >> 32)::oid \
     AND objid = ($1::bigint & 4294967295)::oid)";
/// How long a gated command may take to reach the gate before the gate
/// opens without it (a binary that does not know the gate goes straight on).
const REACH: Duration = Duration::from_secs(5);

/// A flip started ahead, waiting at the gate.
pub(super) struct StartGate {
    /// Its process.
    pub id: ProcId,
    holder: tokio_postgres::Client,
    spawned: Instant,
}

impl StartGate {
    /// Whether the command waits at the gate now (or, past [`REACH`],
    /// whether the gate should open anyway).
    pub async fn ready(&self) -> bool {
        let waiting = self
            .holder
            .query_one(WAITING, &[&ARRIVED])
            .await
            .is_ok_and(|row| row.get::<_, bool>(0));
        waiting || self.spawned.elapsed() >= REACH
    }

    /// Lets the command go on.
    pub async fn open(&self) {
        let _ = self.holder.query_one(OPEN, &[&KEY]).await;
    }
}

/// The arguments of a manual or forced flip.
pub(super) fn flip_args(mode: FlipMode) -> Vec<String> {
    let mut args = vec!["storage".to_owned(), "flip-ring-authority".to_owned()];
    if mode == FlipMode::Force {
        args.push("--force".into());
    }
    args
}

/// When the step after this one is a manual or forced flip with no
/// fault armed inside it, starts it now behind a closed gate.
/// `None` (and the flip starts in its own step) when there is no such
/// flip or the gate cannot be set up.
pub(super) async fn start_next_flip_gated(
    cx: &mut StepCtx<'_>,
) -> Result<Option<StartGate>, Abort> {
    let Some(Step::Flip(flip)) = cx.plan.steps.get(cx.state.step_index) else {
        return Ok(None);
    };
    if flip.mode == FlipMode::Auto || cx.state.armed.iter().any(|(w, _)| *w == When::DuringFlip) {
        return Ok(None);
    }
    let (artifact, args) = (flip.by.clone(), flip_args(flip.mode));
    // Only a binary that knows the gate (0.7 on) waits at it.
    if !knows_the_gate(&cx.version_of(&artifact)) {
        return Ok(None);
    }
    let Ok(holder) = super::super::database::connect(&cx.db.url).await else {
        return Ok(None);
    };
    if holder.query_one(CLOSE, &[&KEY]).await.is_err() {
        return Ok(None);
    }
    let env = vec![("AWA_START_GATE_KEY".to_owned(), KEY.to_string())];
    let id = cx.spawn(&artifact, Role::Flip, args.clone(), env).await?;
    Ok(Some(StartGate {
        id,
        holder,
        spawned: Instant::now(),
    }))
}

/// Whether `awa` of this version waits at `AWA_START_GATE_KEY` (0.7.0 on;
/// the frozen 0.6 releases have no flip either).
fn knows_the_gate(version: &str) -> bool {
    crate::vocab::release::from_flip_release(version) == Some(true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_binaries_from_0_7_wait_at_the_gate() {
        for (version, knows) in [
            ("0.7.0", true),
            ("0.8.1", true),
            ("0.6.2", false),
            ("0.6.1", false),
            ("0.7.0-rc.1", false),
            ("unknown", false),
        ] {
            assert_eq!(super::knows_the_gate(version), knows, "{version}");
        }
    }
}
