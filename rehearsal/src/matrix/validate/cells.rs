//! The `[[cell]]` checks: names, steps, the upgrade path a cell walks, its
//! time budget and what it expects to find.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use toml::Spanned;

use super::is_identifier;
use super::workload::{duration_key, validate_override};
use crate::matrix::diagnostic::{Problems, did_you_mean};
use crate::matrix::duration::Duration;
use crate::matrix::model::{
    Artifact, Cell, Expectation, FindingRule, PREVIOUS, Reach, Step, WorkloadOverride,
};
use crate::matrix::raw::{RawCell, RawSteps, table_head};
use crate::matrix::roster::Roster;
use crate::matrix::step::{convert, describe, step_context};

/// Validates every cell; returns the cells (if all are valid) and every name seen.
pub(super) fn validate_cells(
    raw: &[Spanned<RawCell>],
    artifacts: &BTreeSet<String>,
    validated: Option<&BTreeMap<String, Artifact>>,
    sink: &mut Problems<'_>,
) -> (Option<Vec<Cell>>, Vec<String>) {
    let mut cells = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    let mut ok = true;
    for (i, cell) in raw.iter().enumerate() {
        let name = cell.get_ref().name.as_ref();
        if let Some(name) = name {
            let line = sink.locate(name.span().start).line;
            if let Some(first) = first_line.get(name.get_ref()) {
                sink.error(
                    Some(name.span()),
                    &format!("cell \"{}\"", name.get_ref()),
                    format!(
                        "cell \"{}\" is defined twice; the first is at line {first}",
                        name.get_ref()
                    ),
                );
                ok = false;
            } else {
                first_line.insert(name.get_ref().clone(), line);
                names.push(name.get_ref().clone());
            }
        }
        match validate_cell(i + 1, cell, artifacts, validated, sink) {
            Some(c) => cells.push(c),
            None => ok = false,
        }
    }
    (ok.then_some(cells), names)
}

pub(super) fn validate_cell(
    position: usize,
    cell: &Spanned<RawCell>,
    artifacts: &BTreeSet<String>,
    validated: Option<&BTreeMap<String, Artifact>>,
    sink: &mut Problems<'_>,
) -> Option<Cell> {
    let span = cell.span();
    let raw = cell.get_ref();
    let label = match &raw.name {
        Some(n) => format!("cell \"{}\"", n.get_ref()),
        None => format!("cell #{position}"),
    };
    let (name, name_ok) = cell_name(raw, &span, &label, sink);
    let (about, about_ok) = cell_about(raw, &span, &label, sink);
    let mut ok = name_ok && about_ok;
    let expect = match &raw.expect {
        None => Some(Expectation::Pass),
        Some(e) => expectation(e, &label, sink),
    };
    let fresh_install = raw.fresh_install.as_ref().is_some_and(|f| *f.get_ref());
    let (path, path_ok) = cell_path(raw, fresh_install, artifacts, validated, &label, sink);
    ok &= path_ok;
    if !fresh_install && raw.path.is_none() && !artifacts.contains(PREVIOUS) {
        sink.error(
            raw.name.as_ref().map_or_else(|| table_head(&span), |n| Some(n.span())),
            &label,
            "the cell starts on the N-1 schema prepared by artifact \"previous\", which is not declared; declare [artifacts.previous] or set fresh_install = true",
        );
        ok = false;
    }
    let (steps, steps_ok) = cell_steps(
        raw,
        &span,
        fresh_install,
        path.as_ref(),
        artifacts,
        &label,
        sink,
    );
    ok &= steps_ok;
    let workload = match &raw.workload {
        Some(w) => validate_override(w, &label, sink),
        None => Some(WorkloadOverride::default()),
    };
    let budget = match &raw.budget {
        None => Some(None),
        Some(_) => duration_key(&raw.budget, "budget", &span, &label, sink).map(Some),
    };
    let steps = steps?;
    if let (Some(Some(b)), Some(raw_budget)) = (budget, &raw.budget)
        && !budget_fits(b, &steps, raw_budget.span(), &label, sink)
    {
        ok = false;
    }
    let reach = cell_reach(raw, &label, sink);
    let cell = Cell {
        name,
        about,
        expect: expect?,
        fresh_install,
        workload: workload?,
        budget: budget?,
        steps,
        path,
        reach: reach?,
    };
    ok.then_some(cell)
}

/// A cell's `reach`: names of interleavings, each known and listed once.
pub(super) fn cell_reach(
    raw: &RawCell,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<Vec<Reach>> {
    let Some(list) = &raw.reach else {
        return Some(Vec::new());
    };
    let names: Vec<&str> = Reach::ALL.iter().map(|r| r.name()).collect();
    let mut reach = Vec::new();
    let mut ok = true;
    for item in list.get_ref() {
        match Reach::from_name(item.get_ref()) {
            Some(r) if reach.contains(&r) => {
                sink.error(
                    Some(item.span()),
                    context,
                    format!("reach lists \"{}\" twice; list it once", r.name()),
                );
                ok = false;
            }
            Some(r) => reach.push(r),
            None => {
                sink.error(
                    Some(item.span()),
                    context,
                    format!(
                        "unknown interleaving \"{}\"{} in reach; expected one of {}",
                        item.get_ref(),
                        did_you_mean(item.get_ref(), names.iter().copied()),
                        names.join(", ")
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(reach)
}

/// A cell's `name`, and whether it is valid.
pub(super) fn cell_name(
    raw: &RawCell,
    span: &std::ops::Range<usize>,
    label: &str,
    sink: &mut Problems<'_>,
) -> (String, bool) {
    match &raw.name {
        None => {
            sink.error(table_head(span), label, "missing name = \"...\"");
            (String::new(), false)
        }
        Some(n) => {
            let ok = is_identifier(n.get_ref(), '-');
            if !ok {
                sink.error(
                    Some(n.span()),
                    label,
                    "a cell name uses lowercase letters, digits and dashes, like migrate-first",
                );
            }
            (n.get_ref().clone(), ok)
        }
    }
}

/// A cell's `about`, and whether it is valid.
pub(super) fn cell_about(
    raw: &RawCell,
    span: &std::ops::Range<usize>,
    label: &str,
    sink: &mut Problems<'_>,
) -> (String, bool) {
    match &raw.about {
        None => {
            sink.error(
                table_head(span),
                label,
                "missing about = \"...\" (a one-line description)",
            );
            (String::new(), false)
        }
        Some(a) if a.get_ref().trim().is_empty() || a.get_ref().contains('\n') => {
            sink.error(Some(a.span()), label, "about must be one non-empty line");
            (String::new(), false)
        }
        Some(a) => (a.get_ref().clone(), true),
    }
}

/// A cell's steps, each converted, then walked as a whole (the roster's
/// and the upgrade path's problems located at their steps); `None` when
/// a step does not convert, `false` when the walk found problems.
pub(super) fn cell_steps(
    raw: &RawCell,
    span: &std::ops::Range<usize>,
    fresh_install: bool,
    path: Option<&crate::matrix::model::UpgradePath>,
    artifacts: &BTreeSet<String>,
    label: &str,
    sink: &mut Problems<'_>,
) -> (Option<Vec<Step>>, bool) {
    match &raw.steps {
        RawSteps::List(steps) if !steps.get_ref().is_empty() => {
            let converted: Vec<Option<Step>> = steps
                .get_ref()
                .iter()
                .enumerate()
                .map(|(i, s)| convert(s, label, i + 1, artifacts, sink))
                .collect();
            let Some(valid) = converted.into_iter().collect::<Option<Vec<Step>>>() else {
                return (None, true);
            };
            let model = Roster::walk(fresh_install, &valid);
            let walked = path.map_or_else(Vec::new, |p| crate::matrix::path::walk(p, &valid));
            for problem in model.problems.iter().chain(&walked) {
                if problem.step == 0 {
                    let at = raw.path.as_ref().map(|p| p.span());
                    sink.error(at, label, problem.message.clone());
                    continue;
                }
                let at = problem.step;
                let step_span = steps.get_ref()[at - 1].span();
                let context = step_context(label, at, Some(valid[at - 1].name()));
                sink.error(Some(step_span), &context, problem.message.clone());
            }
            let ok = model.problems.is_empty() && walked.is_empty();
            (Some(valid), ok)
        }
        RawSteps::List(steps) => {
            sink.error(Some(steps.span()), label, "the cell has no steps; add at least one, e.g. { fleet = \"previous\", workers = 2 }");
            (None, true)
        }
        RawSteps::Invalid => (None, true),
        RawSteps::Missing => {
            sink.error(
                table_head(span),
                label,
                "missing steps = [ ... ]; add at least one step",
            );
            (None, true)
        }
    }
}

/// A cell's `path` and `downgrade`: the path, and whether they are valid.
pub(super) fn cell_path(
    raw: &RawCell,
    fresh_install: bool,
    artifacts: &BTreeSet<String>,
    validated: Option<&BTreeMap<String, Artifact>>,
    label: &str,
    sink: &mut Problems<'_>,
) -> (Option<crate::matrix::model::UpgradePath>, bool) {
    let downgrade = raw.downgrade.as_ref();
    let Some(path) = &raw.path else {
        if let Some(d) = downgrade {
            sink.error(
                Some(d.span()),
                label,
                "downgrade = true declares the direction of a path; add path = [\"...\", \"...\"] or drop it",
            );
            return (None, false);
        }
        return (None, true);
    };
    if fresh_install {
        sink.error(
            Some(path.span()),
            label,
            "a path starts on a database its first release creates; drop fresh_install = true (or the path)",
        );
        return (None, false);
    }
    let downgrade = downgrade.is_some_and(|d| *d.get_ref());
    match crate::matrix::path::check(path, downgrade, artifacts, validated, label, sink) {
        Some(p) => (Some(p), true),
        None => (None, false),
    }
}

/// A budget shorter than the cell's holds can never be met: refused,
/// naming both.
pub(super) fn budget_fits(
    budget: Duration,
    steps: &[Step],
    span: Range<usize>,
    label: &str,
    sink: &mut Problems<'_>,
) -> bool {
    let held: u64 = steps
        .iter()
        .map(|s| match s {
            Step::Hold(h) => h.duration.as_millis(),
            _ => 0,
        })
        .sum();
    if budget.as_millis() > held {
        return true;
    }
    sink.error(
        Some(span),
        label,
        format!(
            "budget {budget} is not longer than the cell's holds alone ({}); raise the budget or shorten the holds",
            Duration::from_millis(held)
        ),
    );
    false
}

pub(super) fn expectation(
    value: &Spanned<toml::Value>,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<Expectation> {
    let rules: Vec<&str> = FindingRule::ALL.iter().map(|r| r.name()).collect();
    let usage = "expected \"pass\" or { detect = \"RULE\" }";
    match value.get_ref() {
        toml::Value::String(s) if s == "pass" => Some(Expectation::Pass),
        toml::Value::Table(t) => {
            let Some((key, rule)) = t.iter().next().filter(|_| t.len() == 1) else {
                let keys: Vec<&str> = t.keys().map(String::as_str).collect();
                sink.error(
                    Some(value.span()),
                    context,
                    format!("invalid expect with keys ({}); {usage}", keys.join(", ")),
                );
                return None;
            };
            if key != "detect" {
                sink.error(
                    Some(value.span()),
                    context,
                    format!(
                        "invalid expect key \"{key}\"{}; {usage}",
                        did_you_mean(key, ["detect"])
                    ),
                );
                return None;
            }
            let Some(rule) = rule.as_str() else {
                sink.error(
                    Some(value.span()),
                    context,
                    format!("detect must name a finding rule, found {}", describe(rule)),
                );
                return None;
            };
            match FindingRule::from_name(rule) {
                Some(r) => Some(Expectation::Detect(r)),
                None => {
                    sink.error(
                        Some(value.span()),
                        context,
                        format!(
                            "unknown finding rule \"{rule}\"{}; expected one of {}",
                            did_you_mean(rule, rules.iter().copied()),
                            rules.join(", ")
                        ),
                    );
                    None
                }
            }
        }
        other => {
            sink.error(
                Some(value.span()),
                context,
                format!("invalid expect {}; {usage}", describe(other)),
            );
            None
        }
    }
}
