//! Evidence that a fault step did what it declares, recorded as a
//! [`FaultRecord`] for reconciliation (`reconcile::unfired_faults`): a
//! fault without it makes the cell inconclusive.

use super::super::ledger::FleetView;
use super::super::step_ctx::StepCtx;

/// Where an armed fault fired: inside the migrate or flip it was armed
/// for, or not (it ended first, or was never seen in flight).
#[derive(Clone, Debug)]
pub(super) struct Inside {
    /// `migration` or `flip`.
    pub what: &'static str,
    /// The command was seen in flight (its transaction open) when the fault fired.
    pub seen: bool,
    /// What was seen, in words.
    pub note: String,
}

/// What an armed crash must leave unchanged to prove it landed inside the
/// command's transaction: the state before the command ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Before {
    /// The schema version before the migration.
    Schema(i32),
    /// The ring-cursor authority before the flip.
    Authority(Option<String>),
}

/// After a crash armed for a migrate or flip: whether the command's
/// effect is absent right after the restart (its transaction was open
/// when the server died, and rolled back). `(fired, evidence)`.
pub(super) async fn crash_evidence(cx: &mut StepCtx<'_>, before: &Before) -> (bool, String) {
    match before {
        Before::Schema(v) if *v >= cx.expand_version() => (
            false,
            format!(
                "the schema was already at v{v} before the migration: with nothing to migrate, no migration transaction was open when the server died"
            ),
        ),
        Before::Schema(v) => match cx.probe.schema_version().await {
            Ok(now) if now == *v => (
                true,
                format!(
                    "right after the restart the schema is still v{v}: the migration's transaction was open when the server died"
                ),
            ),
            Ok(now) => (
                false,
                format!(
                    "the schema is at v{now} right after the restart (v{v} before): the migration had committed before the crash"
                ),
            ),
            Err(e) => (
                false,
                format!("the schema version could not be read after the restart: {e}"),
            ),
        },
        Before::Authority(a) => {
            let show = |a: &Option<String>| a.clone().unwrap_or_else(|| "absent".into());
            match cx.probe.authority().await {
                Ok(now) if now == *a => (
                    true,
                    format!(
                        "right after the restart the authority is still {}: the flip's transaction was open when the server died",
                        show(a)
                    ),
                ),
                Ok(now) => (
                    false,
                    format!(
                        "the authority is {} right after the restart ({} before): the flip had committed before the crash",
                        show(&now),
                        show(a)
                    ),
                ),
                Err(e) => (
                    false,
                    format!("the authority could not be read after the restart: {e}"),
                ),
            }
        }
    }
}

/// The cell's runtimes (workers and producers) that `text` names.
pub(super) fn runtimes_named_in(ledger: &FleetView, text: &str) -> Vec<String> {
    ledger
        .procs
        .iter()
        .filter(|p| matches!(p.role.name(), "worker" | "producer"))
        .map(|p| p.name.clone())
        .filter(|name| mentions(text, name))
        .collect()
}

/// Whether `text` names `name` as a whole word (`worker-1` is not named
/// by `worker-12`).
pub(super) fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn names_are_matched_as_whole_words() {
        let text = "blocked: previous-worker-1 (abc, version 0.6.2), previous-worker-12 (def)";
        assert!(mentions(text, "previous-worker-1"));
        assert!(mentions(text, "previous-worker-12"));
        assert!(!mentions(text, "previous-worker-2"));
        assert!(!mentions("current-worker-10", "current-worker-1"));
        assert!(!mentions("xprevious-worker-1", "previous-worker-1"));
    }
}
