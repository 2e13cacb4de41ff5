//! `report.html`: one self-contained page (no scripts, no external
//! files) with the summary, and per cell an SVG timeline: throughput by
//! version over time, with the phases that matter to an upgrade (migrate,
//! roll, kill, flip, fence, PostgreSQL crash) marked where they started.
//! The SVG is written by hand: a few lines and labels do not need a
//! plotting crate. Every piece of text from the run is escaped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::exit::RunOutcome;
use crate::observe::{CensusSample, Phase, Verdict, thousands};

use super::model::{CellReport, RunReport, verdict_name};
use super::text::{
    anchor, cell_counts, duration, findings_summary, first_ids, run_rows, short_digest, tally_line,
};

/// Phases drawn as markers on the timeline, by [`Phase::name`].
pub const MARKED_PHASES: [&str; 7] = [
    "migrate", "roll", "rollback", "kill", "flip", "fence", "pg_crash",
];

/// One colour per version, in version order (then repeating).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:62rem;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}
code{font-size:90%}
.outcome{font-weight:bold;padding:.5rem;border-radius:4px}
.v-pass{color:#1e7e34}.v-fail{color:#b02a37}.v-inconclusive{color:#9a6700}
.outcome.v-pass{background:#e6f4ea}.outcome.v-fail{background:#fbe9eb}.outcome.v-inconclusive{background:#fff4d6}
section.cell{border-top:2px solid #ddd;margin-top:2rem}
svg{max-width:100%;height:auto;background:#fff}
pre{background:#f6f6f6;padding:.5rem;white-space:pre-wrap}
";

/// Renders `report.html`.
pub fn render_html(r: &RunReport) -> String {
    let mut h = String::new();
    let run = &r.run;
    // "0.6.2 -> 0.7.0: ", as report.md's title has it.
    let rehearsed = super::markdown::versions(r).map_or_else(String::new, |v| format!("{v} "));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Rehearsal {}{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        esc(&rehearsed),
        esc(&run.run_id)
    );
    let _ = writeln!(
        h,
        "<h1>Rolling-upgrade rehearsal {}{}</h1>",
        esc(&rehearsed),
        esc(&run.run_id)
    );
    let (class, verdict) = match r.outcome() {
        RunOutcome::AllMet => ("v-pass", "PASS: every cell met its expectation"),
        RunOutcome::CellFailed => (
            "v-fail",
            "FAIL: at least one cell did not meet its expectation",
        ),
        RunOutcome::Inconclusive => (
            "v-inconclusive",
            "INCONCLUSIVE: the harness could not judge every cell",
        ),
    };
    let _ = writeln!(
        h,
        "<p class=\"outcome {class}\">{verdict} ({})</p>",
        esc(&tally_line(r))
    );
    if run.interrupted {
        h.push_str("<p><strong>Interrupted:</strong> the run was cut short; cells not listed did not run.</p>\n");
    }
    let rows = run_rows(r, esc, |s: &str| format!("<code>{}</code>", esc(s)));
    h.push_str("<table class=\"info\">\n");
    for (key, value) in rows {
        let _ = writeln!(h, "<tr><th>{key}</th><td>{value}</td></tr>");
    }
    h.push_str("</table>\n");

    h.push_str("<h2>Cells</h2>\n<table class=\"cells\">\n<tr><th>cell</th><th>expectation</th><th>verdict</th><th>findings</th><th>elapsed</th></tr>\n");
    for c in &r.cells {
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#cell-{}\">{}</a></td><td>{}</td><td class=\"v-{v}\">{v}</td><td>{}</td><td>{}</td></tr>",
            esc(&anchor(&c.name)),
            esc(&c.name),
            esc(&c.expect.to_string()),
            esc(&findings_summary(c)),
            duration(c.elapsed_ms),
            v = verdict_name(c.verdict),
        );
    }
    h.push_str("</table>\n");

    for c in &r.cells {
        cell_section(&mut h, c);
    }

    h.push_str("<h2>Artifacts</h2>\n<table>\n<tr><th>name</th><th>version</th><th>source</th><th>digest</th><th>obtained</th><th>binary</th></tr>\n");
    for a in &r.artifacts {
        let failpoint = a.failpoint.as_ref().map_or(String::new(), |f| {
            format!(", failpoint <code>{}</code>", esc(f))
        });
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}{failpoint}</td><td><code title=\"{}\">{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&a.name),
            esc(&a.version),
            esc(&a.source),
            esc(&a.digest),
            esc(short_digest(&a.digest)),
            esc(&a.obtained),
            esc(&a.binary)
        );
    }
    h.push_str("</table>\n<h2>Migration checksums</h2>\n");
    if run.migration_checksums.is_empty() {
        h.push_str("<p>(none recorded)</p>\n");
    } else {
        h.push_str("<table>\n<tr><th>migration</th><th>sha256</th></tr>\n");
        for (name, sum) in &run.migration_checksums {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>",
                esc(name),
                esc(sum)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn cell_section(h: &mut String, c: &CellReport) {
    let v = verdict_name(c.verdict);
    let _ = writeln!(
        h,
        "<section class=\"cell\" id=\"cell-{}\">\n<h3>{} <span class=\"v-{v}\">{v}</span></h3>",
        esc(&anchor(&c.name)),
        esc(&c.name)
    );
    if !c.about.is_empty() {
        let _ = writeln!(h, "<p>{}</p>", esc(&c.about));
    }
    let _ = writeln!(
        h,
        "<p>Expected: {}. {}.</p>",
        esc(&c.expect.to_string()),
        esc(&cell_counts(c))
    );
    if let Some(error) = &c.harness_error {
        let _ = writeln!(h, "<p>Harness error:</p>\n<pre>{}</pre>", esc(error));
    }
    h.push_str(&timeline_svg(c));
    h.push('\n');
    if !c.proved.is_empty() {
        h.push_str("<p>Proved:</p>\n<ul>\n");
        for line in &c.proved {
            let _ = writeln!(h, "<li>{}</li>", esc(line));
        }
        h.push_str("</ul>\n");
    }
    if c.findings.is_empty() {
        if c.verdict != Verdict::Inconclusive {
            h.push_str("<p>Findings: none.</p>\n");
        }
    } else {
        h.push_str("<table class=\"findings\">\n<tr><th>rule</th><th>phase</th><th>message</th><th>first ids</th><th>count</th></tr>\n");
        for f in &c.findings {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.rule.name(),
                esc(&f.phase),
                esc(&f.message),
                esc(&first_ids(f)),
                thousands(f.count)
            );
        }
        h.push_str("</table>\n");
    }
    if !c.timeline.is_empty() {
        let _ = writeln!(
            h,
            "<details>\n<summary>Phases ({})</summary>\n<table>\n<tr><th>step</th><th>phase</th><th>detail</th><th>start</th><th>end</th><th>outcome</th></tr>",
            c.timeline.len()
        );
        for p in &c.timeline {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                p.step,
                esc(&p.name),
                esc(&p.detail),
                duration(p.start_ms),
                duration(p.end_ms),
                esc(p.outcome.word())
            );
        }
        h.push_str("</table>\n</details>\n");
    }
    h.push_str("</section>\n");
}

/// Throughput of one version: (ms since the cell started, jobs finished per second).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The version, as the census counts it.
    pub version: String,
    /// One point per census interval, at the interval's end.
    pub points: Vec<(u64, f64)>,
}

/// Rates from cumulative `finished` counts: the difference between
/// consecutive samples over the time between them. A version absent from
/// a sample counts 0 there; a count that goes down (a restarted counter)
/// gives rate 0 rather than a negative one.
pub fn throughput(census: &[CensusSample]) -> Vec<Series> {
    let versions: BTreeSet<&str> = census
        .iter()
        .flat_map(|s| s.by_version.iter())
        .filter(|(_, kinds)| kinds.contains_key("finished"))
        .map(|(v, _)| v.as_str())
        .collect();
    let finished = |s: &CensusSample, v: &str| {
        s.by_version
            .get(v)
            .and_then(|k| k.get("finished"))
            .copied()
            .unwrap_or(0)
    };
    versions
        .into_iter()
        .map(|v| Series {
            version: v.to_owned(),
            points: census
                .windows(2)
                .filter(|w| w[1].at_ms > w[0].at_ms)
                .map(|w| {
                    let done = finished(&w[1], v).saturating_sub(finished(&w[0], v));
                    let secs = (w[1].at_ms - w[0].at_ms) as f64 / 1_000.0;
                    (w[1].at_ms, done as f64 / secs)
                })
                .collect(),
        })
        .collect()
}

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

/// Escapes text for HTML element content and attribute values alike.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn text_from_the_run_is_escaped() {
        let mut report = fixture::report();
        report.run.run_id = "<script>alert('id')</script>".into();
        report.cells[0].name = "a\"b<c>".into();
        report.artifacts[0].source = "<img src=x onerror=alert(1)>".into();
        let html = render_html(&report);
        assert!(!html.contains("<script"), "a script tag got through");
        assert!(!html.contains("<img"), "an img tag got through");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "the finding message is missing"
        );
        assert!(
            html.contains(
                "<title>Rehearsal 0.6.2 -&gt; 0.7.0: &lt;script&gt;alert(&#39;id&#39;)&lt;/script&gt;</title>"
            )
        );
        assert!(
            html.contains(
                "aria-label=\"Throughput by version over time for cell a&quot;b&lt;c&gt;\""
            )
        );
        assert_eq!(esc("a&b<c>\"d'"), "a&amp;b&lt;c&gt;&quot;d&#39;");
    }

    #[test]
    fn the_page_has_a_summary_and_a_timeline_per_cell() {
        let html = render_html(&fixture::report());
        assert!(html.starts_with("<!DOCTYPE html>\n"));
        assert!(html.ends_with("</html>\n"));
        // The versions rehearsed head the page, as in report.md.
        assert!(
            html.contains("<title>Rehearsal 0.6.2 -&gt; 0.7.0: 20261130T014512Z-3f2a9c1</title>")
        );
        assert!(html.contains(
            "<h1>Rolling-upgrade rehearsal 0.6.2 -&gt; 0.7.0: 20261130T014512Z-3f2a9c1</h1>"
        ));
        assert!(html.contains("<p class=\"outcome v-fail\">FAIL: at least one cell did not meet its expectation (3 cells: 1 pass, 1 fail, 1 inconclusive)</p>"));
        assert_eq!(html.matches("<svg ").count(), 3);
        assert_eq!(html.matches("</svg>").count(), 3);
        assert_eq!(html.matches("<section class=\"cell\"").count(), 3);
        assert!(html.contains("<td class=\"v-fail\">fail</td>"));
        assert!(html.contains("<code title=\"00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff\">00ff00ff00ff</code>"));
        // No external resources: the page works as an attachment.
        for outside in ["src=\"http", "href=\"http", "<link", "<script"] {
            assert!(!html.contains(outside), "{outside}");
        }
    }

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
    fn throughput_differentiates_cumulative_counts() {
        let sample = |at_ms: u64, counts: &[(&str, u64)]| CensusSample {
            at_ms,
            by_version: counts
                .iter()
                .map(|&(v, n)| (v.to_owned(), BTreeMap::from([("finished".to_owned(), n)])))
                .collect(),
            fresh_runtimes: BTreeMap::new(),
            delta_rows: 0,
            lock_waits: 0,
        };
        let census = [
            sample(0, &[("0.6.2", 0)]),
            sample(500, &[("0.6.2", 50)]),
            sample(500, &[("0.6.2", 50)]), // same instant: skipped, no division by zero
            sample(1_500, &[("0.6.2", 150), ("0.7.0", 20)]),
            sample(2_500, &[("0.6.2", 140), ("0.7.0", 220)]), // a counter that went down
        ];
        let series = throughput(&census);
        assert_eq!(
            series,
            [
                Series {
                    version: "0.6.2".into(),
                    points: vec![(500, 100.0), (1_500, 100.0), (2_500, 0.0)]
                },
                Series {
                    version: "0.7.0".into(),
                    points: vec![(500, 0.0), (1_500, 20.0), (2_500, 200.0)]
                },
            ]
        );
        assert!(throughput(&[]).is_empty());
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
