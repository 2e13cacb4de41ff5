//! What the timeline marks over its panels: the upgrade phases, the
//! findings pinned where they were seen, and where the cell ran late or
//! was excused.

use std::fmt::Write as _;

use super::super::esc;
use super::{FINDING, Frame, LABEL_ROW, LATE, PIN_ROW, Placed, WIDTH};
use crate::observe::{Finding, Phase, StepOutcome};
use crate::report::model::CellReport;
use crate::report::text::duration;

/// A dashed vertical through every panel at each upgrade phase's start,
/// labelled with its name where [`place_labels`] found room (up from the
/// panels, a row per stagger); hovering shows the step and its detail.
pub(super) fn phase_markers(s: &mut String, f: &Frame, marked: &[&Phase], labels: &[Placed]) {
    let (top, bottom) = (f.panel_top(0), f.bottom());
    s.push_str("<g class=\"phases\" font-size=\"11\">\n");
    for (p, label) in marked.iter().zip(labels) {
        let colour = match p.name.as_str() {
            "kill" | "pg_crash" | "suspend" | "resume" => "#c0392b",
            "flip" | "fence" => "#8e44ad",
            _ => "#34495e",
        };
        let title = format!(
            "step {} {} at {}: {} ({})",
            p.step,
            p.name,
            duration(p.start_ms),
            p.detail,
            p.outcome
        );
        let xx = f.x(p.start_ms);
        let row = label.row.unwrap_or(0) as f64;
        let text = match label.row {
            Some(_) => format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{}</text>",
                label.left,
                top - 22.0 - row * LABEL_ROW,
                esc(&p.name)
            ),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "<g data-phase=\"{name}\"><title>{}</title><line x1=\"{xx:.1}\" y1=\"{:.1}\" x2=\"{xx:.1}\" y2=\"{bottom:.1}\" stroke=\"{colour}\" stroke-dasharray=\"4 3\"/>{text}</g>",
            esc(&title),
            top - 20.0 - row * LABEL_ROW,
            name = esc(&p.name),
        );
    }
    s.push_str("</g>\n");
}

/// Where a finding is pinned: when it was seen, if its rule recorded
/// that; else the start of the phase it names (the first that did not
/// end ok, else the first), or the cell's end when no phase of the
/// timeline has that name.
pub fn pinned_at_ms(c: &CellReport, finding: &Finding) -> u64 {
    if let Some(at_ms) = finding.at_ms {
        return at_ms;
    }
    let named = || c.timeline.iter().filter(|p| p.name == finding.phase);
    named()
        .find(|p| p.outcome != StepOutcome::Ok)
        .or_else(|| named().next())
        .map_or(c.elapsed_ms, |p| p.start_ms)
}

/// A red line through the panels and a diamond in the pin rows above them,
/// labelled with the rule; the tooltip has the phase and the message.
pub(super) fn finding_pins(s: &mut String, f: &Frame, c: &CellReport) {
    s.push_str("<g class=\"findings\" font-size=\"11\">\n");
    for (row, finding) in c.findings.iter().enumerate() {
        let xx = f.x(pinned_at_ms(c, finding));
        let yy = 8.0 + row as f64 * PIN_ROW;
        let (anchor, dx) = if xx > WIDTH * 0.75 {
            ("end", -8.0)
        } else {
            ("start", 8.0)
        };
        let seen = finding
            .at_ms
            .map(|t| format!(" at {}", duration(t)))
            .unwrap_or_default();
        let title = format!(
            "{} in {}{seen}: {}",
            finding.rule.name(),
            finding.phase,
            finding.message
        );
        let _ = writeln!(
            s,
            "<g class=\"finding\" data-rule=\"{rule}\"><title>{}</title><line x1=\"{xx:.1}\" y1=\"{yy:.1}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"{FINDING}\" stroke-width=\"1.5\"/><path d=\"M{xx:.1} {:.1}l5 5l-5 5l-5 -5z\" fill=\"{FINDING}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{FINDING}\" text-anchor=\"{anchor}\">{rule}</text></g>",
            esc(&title),
            f.bottom(),
            yy - 5.0,
            xx + dx,
            yy + 4.0,
            rule = finding.rule.name(),
        );
    }
    s.push_str("</g>\n");
}

/// The monitor's late ticks as a strip along the bottom of the rings
/// panel, darker the later: where the cell's timings were not what it
/// planned, each with a tooltip of how late and whose.
pub(super) fn late_marks(s: &mut String, f: &Frame, c: &CellReport) {
    if c.late.is_empty() {
        return;
    }
    s.push_str("<g class=\"late\">\n");
    let tick = crate::monitor::INTERVAL.as_millis() as u64;
    for l in &c.late {
        let worst = l.beat_late_ms.max(l.tick_late_ms);
        // Opaque from 1.5 s on, a stale heartbeat's age on the shipped timings.
        let opacity = (worst as f64 / 1_500.0).clamp(0.15, 1.0);
        let (x0, x1) = (f.x(l.at_ms.saturating_sub(tick)), f.x(l.at_ms));
        let mut title = format!("at {}:", duration(l.at_ms));
        if l.beat_late_ms > 0 {
            let whose = l.runtime.as_deref().unwrap_or("a runtime");
            title.push_str(&format!(
                " heartbeat {} late ({whose})",
                duration(l.beat_late_ms)
            ));
        }
        if l.tick_late_ms > 0 {
            title.push_str(&format!(" monitor tick {} late", duration(l.tick_late_ms)));
        }
        let _ = writeln!(
            s,
            "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"6\" fill=\"{LATE}\" fill-opacity=\"{opacity:.2}\"><title>{}</title></rect>",
            f.bottom() - 6.0,
            (x1 - x0).max(1.5),
            esc(&title)
        );
    }
    s.push_str("</g>\n");
}

/// A tick above the lateness strip where the monitor first saw what can
/// excuse a rescue (a runtime gone stale, one queued behind a lock
/// request), titled as report.md's line for it.
pub(super) fn excuse_marks(s: &mut String, f: &Frame, c: &CellReport) {
    let excuses = crate::report::text::excuses(c);
    if excuses.is_empty() {
        return;
    }
    s.push_str("<g class=\"excuse\">\n");
    for (at_ms, line) in &excuses {
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"2\" height=\"10\" fill=\"{LATE}\"><title>{}</title></rect>",
            f.x(*at_ms) - 1.0,
            f.bottom() - 16.0,
            esc(line)
        );
    }
    s.push_str("</g>\n");
}
