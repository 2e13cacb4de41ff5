//! The plan for humans (`rehearse plan`): the seed and the replay line,
//! the workload and timings once when every cell shares them, then each
//! cell with its numbered steps.

use crate::matrix::{Timings, Workload};

use super::Plan;

/// The plan for humans: seed and replay first, then each cell with numbered steps.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    let cells = plan.cells.len();
    out.push_str(&format!(
        "plan: {} {}, seed {}\n",
        cells,
        if cells == 1 { "cell" } else { "cells" },
        plan.seed
    ));
    out.push_str(&format!("replay: {}\n", plan.replay));
    if let Some(p) = &plan.partition {
        out.push_str(&format!(
            "partition {}: {} of the {} selected\n",
            p.spec(),
            cells,
            p.cells.len()
        ));
    }
    if let Some(first) = plan.cells.first()
        && plan
            .cells
            .iter()
            .all(|c| c.workload == first.workload && c.timings == first.timings)
    {
        out.push_str(&format!(
            "workload: {}\n",
            describe_workload(&first.workload)
        ));
        out.push_str(&format!("timings: {}\n", describe_timings(&first.timings)));
    }
    for cell in &plan.cells {
        out.push('\n');
        out.push_str(&format!("cell {}: {}\n", cell.name, cell.about));
        out.push_str(&format!("  expect: {}\n", cell.expect));
        let db = &cell.database;
        if let Some(path) = &cell.path {
            out.push_str(&format!("  path: {path}\n"));
            out.push_str(&format!(
                "  database: created by {}, the path's first release\n",
                db.migrated_by
            ));
        } else if db.fresh_install {
            out.push_str(&format!(
                "  database: fresh install, migrated by {}\n",
                db.migrated_by
            ));
        } else {
            out.push_str(&format!(
                "  database: N-1 schema, migrated by {}\n",
                db.migrated_by
            ));
        }
        let artifacts: Vec<String> = cell
            .artifacts
            .iter()
            .map(|(n, a)| format!("{n} = {a}"))
            .collect();
        out.push_str(&format!("  artifacts: {}\n", artifacts.join("; ")));
        let first = plan.cells.first();
        if first.is_some_and(|f| f.workload != cell.workload || f.timings != cell.timings) {
            out.push_str(&format!(
                "  workload: {}\n",
                describe_workload(&cell.workload)
            ));
            out.push_str(&format!("  timings: {}\n", describe_timings(&cell.timings)));
        }
        let width = cell.steps.len().to_string().len();
        for (i, step) in cell.steps.iter().enumerate() {
            out.push_str(&format!("  {:>width$}. {step}\n", i + 1));
        }
    }
    out
}

fn describe_workload(w: &Workload) -> String {
    let mix: Vec<String> = w
        .mix
        .iter()
        .map(|(mode, weight)| format!("{} {weight}", mode.name()))
        .collect();
    let mut text = format!(
        "{} jobs/s live, backlog {}, mix {}",
        w.rate_per_s,
        w.backlog,
        mix.join(", ")
    );
    if let Some(cron) = &w.cron {
        text.push_str(&format!(", cron every {}", cron.every));
    }
    if w.sleep != crate::matrix::DEFAULT_SLEEP {
        text.push_str(&format!(", sleep jobs {}", w.sleep));
    }
    text
}

fn describe_timings(t: &Timings) -> String {
    format!(
        "heartbeat {}, stale_after {}, rescue_every {}, rotate_every {}, deadline {}, drain_timeout {}, budget {}",
        t.heartbeat,
        t.stale_after,
        t.rescue_every,
        t.rotate_every,
        t.deadline,
        t.drain_timeout,
        t.budget
    )
}
