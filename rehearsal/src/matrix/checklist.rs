//! `[[checklist]]`: the items of ADR-041 §9 ("validation precedes
//! release"), each with the cells that cover it. The report opens with
//! this table, so a reader sees in one place that the release is covered.
//!
//! ```toml
//! [[checklist]]
//! item = "live enqueue and a banked backlog throughout migration"
//! cells = ["migrate-first", "binary-first", "overlapping"]
//!
//! [[checklist]]
//! item = "migrate-first, binary-first, and overlapping orderings"
//! cells = ["migrate-first", "binary-first", "overlapping"]
//! all = true   # covered only when every one of them passed
//! ```

use toml::Spanned;

use super::diagnostic::{Problems, did_you_mean};
use super::model::{Cell, ChecklistItem, Expectation};
use super::raw::{RawChecklistItem, table_head};

/// Checks `[[checklist]]` against the declared cells (`cells`, when they
/// validated, for what each expects); `None` when an item is invalid
/// (each problem is reported).
pub(crate) fn validate(
    raw: &Spanned<Vec<Spanned<RawChecklistItem>>>,
    names: &[String],
    cells: Option<&[Cell]>,
    sink: &mut Problems<'_>,
) -> Option<Vec<ChecklistItem>> {
    let mut ok = true;
    let mut items: Vec<ChecklistItem> = Vec::new();
    for (i, entry) in raw.get_ref().iter().enumerate() {
        let context = format!("checklist #{}", i + 1);
        match validate_item(entry, &context, names, cells, sink) {
            Some(item) if items.iter().any(|i| i.item == item.item) => {
                sink.error(
                    Some(entry.span()),
                    &context,
                    format!("\"{}\" is listed twice; list each item once", item.item),
                );
                ok = false;
            }
            Some(item) => items.push(item),
            None => ok = false,
        }
    }
    ok.then_some(items)
}

/// One `[[checklist]]` entry: its item as one line, and the cells that
/// cover it (known, listed once, each expecting to pass).
fn validate_item(
    entry: &Spanned<RawChecklistItem>,
    context: &str,
    names: &[String],
    cells: Option<&[Cell]>,
    sink: &mut Problems<'_>,
) -> Option<ChecklistItem> {
    let raw = entry.get_ref();
    let item = item_line(entry, context, sink);
    let Some(list) = &raw.cells else {
        sink.error(
            table_head(&entry.span()),
            context,
            "missing cells = [...]: the cells that cover the item",
        );
        return None;
    };
    if list.get_ref().is_empty() {
        sink.error(
            Some(list.span()),
            context,
            "cells is empty: an item no cell covers cannot be shown covered; name the cells that cover it",
        );
        return None;
    }
    let covering = covering_cells(list.get_ref(), context, names, cells, sink);
    let (Some(item), Some(covering)) = (item, covering) else {
        return None;
    };
    Some(ChecklistItem {
        item,
        cells: covering,
        all: raw.all.as_ref().is_some_and(|a| *a.get_ref()),
    })
}

/// `item = "..."`: one non-empty line, trimmed.
fn item_line(
    entry: &Spanned<RawChecklistItem>,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<String> {
    match &entry.get_ref().item {
        Some(t) if !t.get_ref().trim().is_empty() && !t.get_ref().contains('\n') => {
            Some(t.get_ref().trim().to_owned())
        }
        Some(t) => {
            sink.error(Some(t.span()), context, "item must be one non-empty line");
            None
        }
        None => {
            sink.error(
                table_head(&entry.span()),
                context,
                "missing item = \"...\": the ADR-041 §9 item, as the ADR words it",
            );
            None
        }
    }
}

/// `cells = [...]`, each a known cell, listed once, that expects to pass
/// (a cell seeded to be caught proves a check, not the release); every
/// problem is recorded, and the list comes back only without one.
fn covering_cells(
    list: &[Spanned<String>],
    context: &str,
    names: &[String],
    cells: Option<&[Cell]>,
    sink: &mut Problems<'_>,
) -> Option<Vec<String>> {
    let mut ok = true;
    let mut covering: Vec<String> = Vec::new();
    for name in list {
        let n = name.get_ref();
        if !names.contains(n) {
            sink.error(
                Some(name.span()),
                context,
                format!(
                    "unknown cell \"{n}\"{}",
                    did_you_mean(n, names.iter().map(String::as_str))
                ),
            );
            ok = false;
        } else if covering.contains(n) {
            sink.error(
                Some(name.span()),
                context,
                format!("cells lists \"{n}\" twice; list it once"),
            );
            ok = false;
        } else if let Some(Expectation::Detect(rule)) = cells
            .and_then(|cells| cells.iter().find(|c| &c.name == n))
            .map(|c| c.expect)
        {
            sink.error(
                Some(name.span()),
                context,
                format!(
                    "cell \"{n}\" expects to detect {}: it proves a check catches a seeded defect, not that the release is covered; name cells that expect to pass",
                    rule.name()
                ),
            );
            ok = false;
        } else {
            covering.push(n.clone());
        }
    }
    ok.then_some(covering)
}
