//! `[schema]`: the differences between an upgraded database and a fresh
//! install that `schema_matches_fresh` accepts, each with its reason.
//!
//! ```toml
//! [schema]
//! intended = [
//!   { object = "column awa.*_ring_state.current_slot", reason = "kept for 0.6.2 until the 0.8 contract" },
//! ]
//! ```

use toml::Spanned;

use super::diagnostic::{Problems, did_you_mean};
use super::model::{IntendedDifference, SchemaPolicy};
use super::raw::{RawSchema, table_head};
use crate::vocab::schema::ObjectKind;

/// Checks `[schema]`; `None` when an entry is invalid (each is reported).
pub(crate) fn validate(raw: &Spanned<RawSchema>, sink: &mut Problems<'_>) -> Option<SchemaPolicy> {
    let Some(entries) = &raw.get_ref().intended else {
        return Some(SchemaPolicy::default());
    };
    let mut ok = true;
    let mut intended = Vec::new();
    for (i, entry) in entries.get_ref().iter().enumerate() {
        let context = format!("schema.intended #{}", i + 1);
        match validate_entry(entry, &context, sink) {
            Some(d) if intended.contains(&d) => {
                sink.error(
                    Some(entry.span()),
                    &context,
                    format!("{d} is declared twice"),
                );
                ok = false;
            }
            Some(d) => intended.push(d),
            None => ok = false,
        }
    }
    ok.then_some(SchemaPolicy { intended })
}

fn validate_entry(
    entry: &Spanned<super::raw::RawIntended>,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<IntendedDifference> {
    let span = entry.span();
    let raw = entry.get_ref();
    let kinds: Vec<&str> = ObjectKind::ALL.iter().map(|k| k.name()).collect();
    let usage = format!(
        "object = \"KIND NAME\" with KIND one of {} and NAME qualified (awa.jobs.state; * matches any run of characters)",
        kinds.join(", ")
    );
    let reason = match &raw.reason {
        Some(r) if !r.get_ref().trim().is_empty() && !r.get_ref().contains('\n') => {
            Some(r.get_ref().clone())
        }
        Some(r) => {
            sink.error(Some(r.span()), context, "reason must be one non-empty line");
            None
        }
        None => {
            sink.error(
                table_head(&span),
                context,
                "missing reason = \"...\": say why the difference is intended and until when",
            );
            None
        }
    };
    let Some(object) = &raw.object else {
        sink.error(table_head(&span), context, format!("missing {usage}"));
        return None;
    };
    let text = object.get_ref().trim();
    let (kind, name) = text.split_once(' ').unwrap_or((text, ""));
    let name = name.trim();
    let Ok(kind) = kind.parse::<ObjectKind>() else {
        sink.error(
            Some(object.span()),
            context,
            format!(
                "unknown object kind \"{kind}\"{}; expected {usage}",
                did_you_mean(kind, kinds.iter().copied())
            ),
        );
        return None;
    };
    if name.is_empty() || name.contains(char::is_whitespace) || !name.contains('.') {
        sink.error(
            Some(object.span()),
            context,
            format!("\"{text}\" names no qualified object; expected {usage}"),
        );
        return None;
    }
    Some(IntendedDifference {
        kind,
        name: name.to_owned(),
        reason: reason?,
    })
}
