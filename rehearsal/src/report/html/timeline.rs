//! The SVG timeline of one cell, written by hand: a few lines and labels
//! do not need a plotting crate.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::observe::Phase;

use super::esc;
use super::series::throughput;
use crate::report::model::CellReport;
use crate::report::text::duration;

/// Phases drawn as markers on the timeline, by [`Phase::name`].
pub const MARKED_PHASES: [&str; 7] = [
    "migrate", "roll", "rollback", "kill", "flip", "fence", "pg_crash",
];

/// One colour per version, in version order (then repeating).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// The smallest of 1, 2, 5 times a power of ten that is at least `x` (and at least 1).
fn nice_ceiling(x: f64) -> f64 {
    // Also ends the loop below for NaN and infinity.
    if !(x > 1.0 && x.is_finite()) {
        return 1.0;
    }
    let mut decade = 1.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if decade * m >= x {
                return decade * m;
            }
        }
        decade *= 10.0;
    }
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 270.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 66.0;

/// The inline SVG timeline of one cell.
pub fn timeline_svg(c: &CellReport) -> String {
    let series = throughput(&c.census);
    let t_max = c
        .census
        .iter()
        .map(|s| s.at_ms)
        .chain(c.timeline.iter().map(|p| p.end_ms))
        .chain([c.elapsed_ms, 1])
        .max()
        .unwrap_or(1);
    let peak = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let y_max = nice_ceiling(peak);
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |ms: u64| LEFT + ms as f64 / t_max as f64 * plot_w;
    let y = |rate: f64| TOP + plot_h - rate / y_max * plot_h;
    let bottom = TOP + plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" font-family=\"sans-serif\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"Throughput by version over time for cell {}\">",
        esc(&c.name)
    );
    let _ = writeln!(
        s,
        "<title>Throughput by version over time: {}</title>",
        esc(&c.name)
    );
    let _ = writeln!(
        s,
        "<g font-size=\"11\" fill=\"#444\"><text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">jobs finished/s</text></g>",
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );

    // Axes and grid.
    s.push_str("<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
    for frac in [0.0, 0.5, 1.0] {
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\"/>",
            LEFT + plot_w,
            yy = y(y_max * frac)
        );
    }
    s.push_str("</g>\n<g class=\"axes\" font-size=\"11\" fill=\"#444\">\n");
    for frac in [0.0, 0.5, 1.0] {
        let value = y_max * frac;
        let label = if value >= 10.0 || value.fract() == 0.0 {
            format!("{value:.0}")
        } else {
            format!("{value:.1}")
        };
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            LEFT - 6.0,
            y(value) + 4.0
        );
    }
    let step = nice_ceiling(t_max as f64 / 6.0).max(1.0) as u64;
    let mut tick = 0;
    while tick <= t_max {
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{bottom:.1}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#888\"/><text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 4.0,
            bottom + 16.0,
            duration(tick),
            xx = x(tick)
        );
        tick += step;
    }
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"#888\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{bottom:.1}\" stroke=\"#888\"/>",
        LEFT + plot_w
    );
    s.push_str("</g>\n");

    // Phase markers.
    s.push_str("<g class=\"phases\" font-size=\"10\">\n");
    for p in c
        .timeline
        .iter()
        .filter(|p| MARKED_PHASES.contains(&p.name.as_str()))
    {
        marker(&mut s, p, x(p.start_ms), bottom);
    }
    s.push_str("</g>\n");

    // Throughput lines and legend.
    let colours: BTreeMap<&str, &str> = series
        .iter()
        .enumerate()
        .map(|(i, sr)| (sr.version.as_str(), PALETTE[i % PALETTE.len()]))
        .collect();
    s.push_str("<g class=\"throughput\" fill=\"none\" stroke-width=\"2\">\n");
    for sr in series.iter().filter(|sr| !sr.points.is_empty()) {
        let points: Vec<String> = sr
            .points
            .iter()
            .map(|&(t, r)| format!("{:.1},{:.1}", x(t), y(r)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline data-version=\"{}\" stroke=\"{}\" points=\"{}\"/>",
            esc(&sr.version),
            colours[sr.version.as_str()],
            points.join(" ")
        );
    }
    s.push_str("</g>\n");
    if series.iter().all(|sr| sr.points.is_empty()) {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#888\" text-anchor=\"middle\">no throughput samples</text>",
            LEFT + plot_w / 2.0,
            TOP + plot_h / 2.0
        );
    }
    s.push_str("<g class=\"legend\" font-size=\"11\" fill=\"#333\">\n");
    let legend_y = HEIGHT - 16.0;
    let mut lx = LEFT;
    for sr in &series {
        let _ = writeln!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{legend_y:.1}\">{}</text>",
            legend_y - 5.0,
            colours[sr.version.as_str()],
            lx + 18.0,
            esc(&sr.version)
        );
        lx += 30.0 + 7.0 * sr.version.chars().count() as f64;
    }
    s.push_str("</g>\n</svg>");
    s
}

/// A dashed vertical line at a phase's start, labelled with its name; hover shows the detail.
fn marker(s: &mut String, p: &Phase, xx: f64, bottom: f64) {
    let colour = match p.name.as_str() {
        "kill" | "pg_crash" => "#c0392b",
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
    let _ = writeln!(
        s,
        "<g data-phase=\"{name}\"><title>{}</title><line x1=\"{xx:.1}\" y1=\"{TOP}\" x2=\"{xx:.1}\" y2=\"{bottom:.1}\" stroke=\"{colour}\" stroke-dasharray=\"4 3\"/><text x=\"{lx:.1}\" y=\"{ty:.1}\" fill=\"{colour}\" transform=\"rotate(-90 {lx:.1} {ty:.1})\" text-anchor=\"end\">{name}</text></g>",
        esc(&title),
        name = esc(&p.name),
        lx = xx - 3.0,
        ty = TOP + 2.0,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn the_timeline_draws_rates_by_version_and_marks_upgrade_phases() {
        let report = fixture::report();
        let svg = timeline_svg(&report.cells[0]);
        assert_eq!(svg.matches("<polyline ").count(), 2, "{svg}");
        assert!(
            svg.contains("<polyline data-version=\"0.6.2\" stroke=\"#1f77b4\""),
            "{svg}"
        );
        assert!(
            svg.contains("<polyline data-version=\"0.7.0\" stroke=\"#ff7f0e\""),
            "{svg}"
        );
        let marked: Vec<&str> = svg
            .split("<g data-phase=\"")
            .skip(1)
            .map(|rest| &rest[..rest.find('"').unwrap()])
            .collect();
        assert_eq!(marked, ["migrate", "kill", "roll", "flip", "fence"]);
        assert!(svg.contains("<title>step 3 kill at 4.0s: SIGKILL previous-worker-2 with 3 jobs in flight (ok)</title>"), "{svg}");
        // Legend: one entry per version.
        let legend = &svg[svg.find("<g class=\"legend\"").unwrap()..];
        assert!(
            legend.contains(">0.6.2</text>") && legend.contains(">0.7.0</text>"),
            "{legend}"
        );
        // Peak is 120 jobs/s, so the axis tops out at 200.
        assert!(svg.contains("text-anchor=\"end\">200</text>"), "{svg}");
        // A cell without samples says so instead of drawing nothing.
        let empty = timeline_svg(&report.cells[2]);
        assert!(empty.contains(">no throughput samples</text>"));
        assert_eq!(empty.matches("<polyline ").count(), 0);
    }

    #[test]
    fn axis_ceilings_are_round() {
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(f64::INFINITY), 1.0);
        for (x, nice) in [
            (0.0, 1.0),
            (0.3, 1.0),
            (1.0, 1.0),
            (1.1, 2.0),
            (3.0, 5.0),
            (7.0, 10.0),
            (120.0, 200.0),
            (500.0, 500.0),
            (501.0, 1000.0),
        ] {
            assert_eq!(nice_ceiling(x), nice, "{x}");
        }
    }
}
