//! The SVG timeline of one cell, written by hand: a few lines and labels
//! do not need a plotting crate.
//!
//! Four panels on one time axis: accepted, started and finished jobs per
//! second (one line per version, a version's colour the same in every
//! cell), and the rings' generations (a colour per ring, solid for the
//! columns, dashed for the ledger). Upgrade phases are dashed verticals
//! labelled with their name (labels of phases close together staggered
//! over up to three rows, and elided past that, so none overlap); findings are red pins at the moment they
//! were seen (at the start of the phase they name when their rule knows
//! no moment), labelled with their rule, the message in a tooltip.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::observe::Phase;

use super::esc;
use super::series::{
    BIN_MS, Kind, Representation, RingSeries, Series, per_second, ring_generations,
};
use crate::report::model::{CellReport, RunReport};
use crate::report::text::duration;

mod marks;

pub use marks::pinned_at_ms;
use marks::{excuse_marks, finding_pins, late_marks, phase_markers};

/// Phases drawn as markers on the timeline, by [`Phase::name`].
pub const MARKED_PHASES: [&str; 9] = [
    "migrate", "roll", "rollback", "kill", "suspend", "resume", "flip", "fence", "pg_crash",
];

/// One colour per version, in version order (then repeating).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One colour per ring; the representation is the dash.
const RING_COLOURS: [(&str, &str); 3] = [
    ("queue", "#17becf"),
    ("claim", "#bcbd22"),
    ("lease", "#6a3d9a"),
];

const FINDING: &str = "#b02a37";
/// The colour of lateness marks (amber: the conditions, not a finding).
const LATE: &str = "#c77c02";

const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
/// Height of one row of finding pins above the panels.
const PIN_ROW: f64 = 16.0;
const PANEL: f64 = 78.0;
const GAP: f64 = 18.0;
/// How many rows of phase labels there may be above the panels; a label
/// that fits in none is elided (its marker and tooltip stay).
const LABEL_ROWS: usize = 3;
/// Height of one row of phase labels.
const LABEL_ROW: f64 = 13.0;
/// The advance of one character of an 11 px sans-serif label, a little
/// over the average so estimates err towards room to spare.
const LABEL_CHAR: f64 = 6.6;
/// The least space between two labels of one row.
const LABEL_GAP: f64 = 6.0;

/// A phase label as laid out: where its text starts, and its row (0 the
/// nearest the panels), `None` when no row has room for it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Placed {
    left: f64,
    row: Option<usize>,
}

/// Lays out labels `(centre x, width)` so none overlap: each centred on
/// its marker but kept inside the drawing, in the lowest row where it
/// clears the label before it, in order of x; one that clears no row is
/// elided. Labels far apart all stay in row 0.
fn place_labels(labels: &[(f64, f64)]) -> Vec<Placed> {
    let mut order: Vec<usize> = (0..labels.len()).collect();
    order.sort_by(|&a, &b| labels[a].0.total_cmp(&labels[b].0));
    // Where each row is free from.
    let mut free = [f64::NEG_INFINITY; LABEL_ROWS];
    let mut placed = vec![
        Placed {
            left: 0.0,
            row: None
        };
        labels.len()
    ];
    for i in order {
        let (centre, width) = labels[i];
        let left = (centre - width / 2.0).clamp(0.0, (WIDTH - width).max(0.0));
        let row = free.iter().position(|&from| left >= from);
        if let Some(r) = row {
            free[r] = left + width + LABEL_GAP;
        }
        placed[i] = Placed { left, row };
    }
    placed
}

/// The estimated width of a phase label.
fn label_width(name: &str) -> f64 {
    name.chars().count() as f64 * LABEL_CHAR
}

/// Below the last panel: the time axis, then the legend.
const AXIS: f64 = 30.0;
const LEGEND: f64 = 40.0;

/// The colour of each version of a run, so a version looks the same in every cell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Colours(BTreeMap<String, &'static str>);

impl Colours {
    /// Every version of the run's artifacts and census samples, in order.
    pub fn of_run(r: &RunReport) -> Colours {
        let versions: BTreeSet<&str> = r
            .artifacts
            .iter()
            .map(|a| a.version.as_str())
            .chain(
                r.cells
                    .iter()
                    .flat_map(|c| &c.census)
                    .flat_map(|s| s.by_version.keys().map(String::as_str)),
            )
            .collect();
        Colours(
            versions
                .into_iter()
                .enumerate()
                .map(|(i, v)| (v.to_owned(), PALETTE[i % PALETTE.len()]))
                .collect(),
        )
    }

    /// The version's colour (grey for one the run did not list).
    pub fn of(&self, version: &str) -> &'static str {
        self.0.get(version).copied().unwrap_or("#999999")
    }
}

/// The horizontal scale, shared by every panel.
struct Frame {
    t_max: u64,
    pins: usize,
    /// Rows of phase labels (at least one).
    label_rows: usize,
}

impl Frame {
    fn x(&self, ms: u64) -> f64 {
        LEFT + ms.min(self.t_max) as f64 / self.t_max as f64 * (WIDTH - LEFT - RIGHT)
    }

    /// Top of panel `i` (0: accepted, 1: started, 2: finished, 3: rings).
    fn panel_top(&self, i: usize) -> f64 {
        PIN_ROW * self.pins.max(1) as f64
            + 34.0
            + LABEL_ROW * self.label_rows.saturating_sub(1) as f64
            + i as f64 * (PANEL + GAP)
    }

    fn bottom(&self) -> f64 {
        self.panel_top(3) + PANEL
    }

    fn height(&self) -> f64 {
        self.bottom() + AXIS + LEGEND
    }
}

/// The inline SVG timeline of one cell.
pub fn timeline_svg(c: &CellReport, colours: &Colours) -> String {
    let series = per_second(&c.census);
    let rings = ring_generations(&c.rings);
    let t_max = c
        .census
        .iter()
        .map(|s| s.at_ms)
        .chain(c.timeline.iter().map(|p| p.end_ms))
        .chain([c.elapsed_ms, 1])
        .max()
        .unwrap_or(1);
    let mut f = Frame {
        t_max,
        pins: c.findings.len(),
        label_rows: 1,
    };
    let marked: Vec<&Phase> = c
        .timeline
        .iter()
        .filter(|p| MARKED_PHASES.contains(&p.name.as_str()))
        .collect();
    let labels = place_labels(
        &marked
            .iter()
            .map(|p| (f.x(p.start_ms), label_width(&p.name)))
            .collect::<Vec<_>>(),
    );
    f.label_rows = labels
        .iter()
        .filter_map(|l| l.row)
        .max()
        .map_or(1, |r| r + 1);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" font-family=\"sans-serif\" viewBox=\"0 0 {WIDTH} {h}\" width=\"100%\" preserveAspectRatio=\"xMinYMin meet\" role=\"img\" aria-label=\"Jobs per second by version, ring generations and phases over time for cell {name}\">\n<title>Timeline of cell {name}</title>",
        h = f.height(),
        name = esc(&c.name)
    );
    for (i, kind) in Kind::ALL.into_iter().enumerate() {
        let of_kind: Vec<&Series> = series.iter().filter(|sr| sr.kind == kind).collect();
        job_panel(&mut s, &f, f.panel_top(i), kind, &of_kind, colours);
    }
    ring_panel(&mut s, &f, f.panel_top(3), &rings);
    time_axis(&mut s, &f);
    phase_markers(&mut s, &f, &marked, &labels);
    finding_pins(&mut s, &f, c);
    late_marks(&mut s, &f, c);
    excuse_marks(&mut s, &f, c);
    legend(&mut s, &f, &series, &rings, colours);
    s.push_str("</svg>");
    s
}

/// A panel's frame: its title, gridlines and y labels at 0, half and `y_max`.
fn panel_frame(s: &mut String, top: f64, title: &str, labels: [String; 3]) {
    let right = WIDTH - RIGHT;
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"12\" font-weight=\"bold\" fill=\"#333\">{title}</text>",
        top - 5.0
    );
    s.push_str("<g stroke=\"#e3e3e3\">");
    for frac in [0.0, 0.5, 1.0] {
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{right}\" y2=\"{yy:.1}\"/>",
            yy = top + PANEL * frac
        );
    }
    s.push_str("</g>\n<g font-size=\"11\" fill=\"#444\" text-anchor=\"end\">");
    for (label, frac) in labels.iter().zip([0.0, 0.5, 1.0]) {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
            LEFT - 6.0,
            top + PANEL * frac + 4.0
        );
    }
    let _ = writeln!(
        s,
        "</g>\n<line x1=\"{LEFT}\" y1=\"{top:.1}\" x2=\"{LEFT}\" y2=\"{:.1}\" stroke=\"#888\"/>",
        top + PANEL
    );
}

/// A note in the middle of an empty panel.
fn empty_note(s: &mut String, top: f64, text: &str) {
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#888\" text-anchor=\"middle\">{text}</text>",
        (LEFT + WIDTH - RIGHT) / 2.0,
        top + PANEL / 2.0
    );
}

/// One kind of job event per second, a line per version.
fn job_panel(
    s: &mut String,
    f: &Frame,
    top: f64,
    kind: Kind,
    series: &[&Series],
    colours: &Colours,
) {
    let peak = series
        .iter()
        .flat_map(|sr| sr.per_second.iter().copied())
        .max()
        .unwrap_or(0);
    let y_max = nice_ceiling(peak as f64);
    panel_frame(
        s,
        top,
        &format!("{} jobs/s", kind.event()),
        [axis_number(y_max), axis_number(y_max / 2.0), "0".into()],
    );
    if series.is_empty() {
        return empty_note(s, top, &format!("no {} events sampled", kind.event()));
    }
    let y = |n: u64| top + PANEL - n as f64 / y_max * PANEL;
    let _ = writeln!(
        s,
        "<g fill=\"none\" stroke-width=\"2\" stroke-linejoin=\"round\">"
    );
    for sr in series {
        let points: Vec<String> = (0u64..)
            .zip(&sr.per_second)
            .map(|(k, &n)| format!("{:.1},{:.1}", f.x(k * BIN_MS + BIN_MS / 2), y(n)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline class=\"series\" data-kind=\"{}\" data-version=\"{}\" stroke=\"{}\" points=\"{}\"/>",
            kind.event(),
            esc(&sr.version),
            colours.of(&sr.version),
            points.join(" ")
        );
    }
    s.push_str("</g>\n");
}

/// Each ring's generation over time as a step line: solid columns, dashed ledger.
fn ring_panel(s: &mut String, f: &Frame, top: f64, rings: &[RingSeries]) {
    let values = || rings.iter().flat_map(|r| r.points.iter().map(|p| p.1));
    let (lo, hi) = (values().min().unwrap_or(0), values().max().unwrap_or(0));
    let hi = hi.max(lo + 1);
    // The middle gridline is labelled only when it falls on a whole generation.
    let mid = if (hi - lo) % 2 == 0 {
        (lo + (hi - lo) / 2).to_string()
    } else {
        String::new()
    };
    panel_frame(
        s,
        top,
        "ring generation",
        [hi.to_string(), mid, lo.to_string()],
    );
    if rings.is_empty() {
        return empty_note(s, top, "no ring samples");
    }
    let y = |g: i64| top + PANEL - (g - lo) as f64 / (hi - lo) as f64 * PANEL;
    s.push_str("<g fill=\"none\" stroke-width=\"2\">\n");
    for r in rings {
        let mut points = Vec::new();
        for (i, &(t, g)) in r.points.iter().enumerate() {
            if let Some(&(_, before)) = i.checked_sub(1).and_then(|j| r.points.get(j)) {
                points.push(format!("{:.1},{:.1}", f.x(t), y(before)));
            }
            points.push(format!("{:.1},{:.1}", f.x(t), y(g)));
        }
        // A ring is sampled when it changes: its last generation holds to the end.
        if let Some(&(_, g)) = r.points.last() {
            points.push(format!("{:.1},{:.1}", f.x(f.t_max), y(g)));
        }
        let dash = match r.representation {
            Representation::Columns => "",
            Representation::Ledger => " stroke-dasharray=\"7 4\"",
        };
        let _ = writeln!(
            s,
            "<polyline class=\"series\" data-ring=\"{ring}\" data-representation=\"{rep}\" stroke=\"{}\"{dash} points=\"{}\"><title>{ring} ring, {rep}</title></polyline>",
            ring_colour(&r.ring),
            points.join(" "),
            ring = esc(&r.ring),
            rep = r.representation.word(),
        );
    }
    s.push_str("</g>\n");
}

fn ring_colour(ring: &str) -> &'static str {
    RING_COLOURS
        .iter()
        .find(|(name, _)| *name == ring)
        .map_or("#555555", |(_, colour)| colour)
}

/// Ticks every 1, 2 or 5 times a power of ten ms, about six in all.
fn time_axis(s: &mut String, f: &Frame) {
    let bottom = f.bottom();
    let step = nice_ceiling(f.t_max as f64 / 6.0).max(1.0) as u64;
    let _ = writeln!(
        s,
        "<g class=\"axis\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\"><line x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"#888\"/>",
        WIDTH - RIGHT
    );
    let mut tick = 0;
    while tick <= f.t_max {
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{bottom:.1}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#888\"/><text x=\"{xx:.1}\" y=\"{:.1}\">{}</text>",
            bottom + 4.0,
            bottom + 16.0,
            duration(tick),
            xx = f.x(tick)
        );
        tick += step;
    }
    s.push_str("</g>\n");
}

/// Swatches for the versions drawn, then for each ring and representation drawn.
fn legend(s: &mut String, f: &Frame, series: &[Series], rings: &[RingSeries], colours: &Colours) {
    let versions: BTreeSet<&str> = series.iter().map(|sr| sr.version.as_str()).collect();
    let y = f.bottom() + AXIS + 14.0;
    let mut lx = LEFT;
    s.push_str("<g class=\"legend\" font-size=\"11\" fill=\"#333\">\n");
    for v in versions {
        let _ = writeln!(
            s,
            "<line x1=\"{lx:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            y - 4.0,
            lx + 18.0,
            y - 4.0,
            colours.of(v),
            lx + 22.0,
            esc(v)
        );
        lx += 36.0 + 7.0 * v.chars().count() as f64;
    }
    let (mut lx, y) = (LEFT, y + 18.0);
    for r in rings {
        let label = format!("{} {}", r.ring, r.representation.word());
        let dash = match r.representation {
            Representation::Columns => "",
            Representation::Ledger => " stroke-dasharray=\"7 4\"",
        };
        let _ = writeln!(
            s,
            "<line x1=\"{lx:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            y - 4.0,
            lx + 22.0,
            y - 4.0,
            ring_colour(&r.ring),
            lx + 26.0,
            esc(&label)
        );
        lx += 40.0 + 7.0 * label.chars().count() as f64;
    }
    s.push_str("</g>\n");
}

/// `value` as an axis label: whole above 10, one decimal below.
fn axis_number(value: f64) -> String {
    if value >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::StepOutcome;
    use crate::report::fixture;

    /// The value of attribute `name` in the first element of `svg` that holds `marker`.
    fn attr<'a>(svg: &'a str, marker: &str, name: &str) -> &'a str {
        let at = svg
            .find(marker)
            .unwrap_or_else(|| panic!("no {marker} in {svg}"));
        let rest = &svg[at..];
        let start = rest.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        &rest[start..start + rest[start..].find('"').unwrap()]
    }

    #[test]
    fn late_ticks_are_marked_with_how_late_and_whose() {
        let mut report = fixture::report();
        let colours = Colours::of_run(&report);
        assert!(!timeline_svg(&report.cells[0], &colours).contains("class=\"late\""));
        report.cells[0].late = vec![crate::observe::LateSample {
            at_ms: 12_100,
            tick_late_ms: 0,
            beat_late_ms: 2_400,
            runtime: Some("previous-worker-2".into()),
        }];
        let svg = timeline_svg(&report.cells[0], &colours);
        assert!(svg.contains("<g class=\"late\">"), "{svg}");
        assert!(
            svg.contains("<title>at 12.1s: heartbeat 2.4s late (previous-worker-2)</title>"),
            "{svg}"
        );
        assert!(svg.contains("fill-opacity=\"1.00\""), "{svg}");
    }

    #[test]
    fn what_excused_a_rescue_is_marked_where_the_monitor_first_saw_it() {
        let mut report = fixture::report();
        let colours = Colours::of_run(&report);
        assert!(!timeline_svg(&report.cells[0], &colours).contains("class=\"excuse\""));
        report.cells[0].late_runtimes = vec![crate::observe::LateRuntime {
            instance_id: "previous-worker-1-2-b".into(),
            first_ms: 4_000,
            age_ms: 1_900,
        }];
        let svg = timeline_svg(&report.cells[0], &colours);
        assert!(
            svg.contains("<title>runtime previous-worker-1-2-b went stale: heartbeat 1.9s old, first seen at 4.0s</title>"),
            "{svg}"
        );
    }

    #[test]
    fn the_timeline_draws_each_kind_by_version_and_marks_upgrade_phases() {
        let report = fixture::report();
        let colours = Colours::of_run(&report);
        let svg = timeline_svg(&report.cells[0], &colours);
        // Accepted (0.6.2) and finished (0.6.2, 0.7.0), each with a point per second.
        assert_eq!(
            svg.matches("<polyline class=\"series\" data-kind=").count(),
            3,
            "{svg}"
        );
        for (kind, version) in [
            ("accepted", "0.6.2"),
            ("finished", "0.6.2"),
            ("finished", "0.7.0"),
        ] {
            let marker = format!("data-kind=\"{kind}\" data-version=\"{version}\"");
            let points = attr(&svg, &marker, "points");
            assert_eq!(points.split(' ').count(), 20, "{kind} {version}: {points}");
            assert_eq!(attr(&svg, &marker, "stroke"), colours.of(version));
        }
        assert!(svg.contains(">no started events sampled</text>"), "{svg}");
        let marked: Vec<&str> = svg
            .split("<g data-phase=\"")
            .skip(1)
            .map(|rest| &rest[..rest.find('"').unwrap()])
            .collect();
        assert_eq!(marked, ["migrate", "kill", "roll", "flip", "fence"]);
        assert!(svg.contains("<title>step 3 kill at 4.0s: SIGKILL previous-worker-2 with 3 jobs in flight (ok)</title>"), "{svg}");
        // The ring panel: the queue ring's columns.
        assert!(
            svg.contains("data-ring=\"queue\" data-representation=\"columns\" stroke=\"#17becf\""),
            "{svg}"
        );
        // Legend: one entry per version drawn, one per ring line.
        let legend = &svg[svg.find("<g class=\"legend\"").unwrap()..];
        for entry in [">0.6.2</text>", ">0.7.0</text>", ">queue columns</text>"] {
            assert!(legend.contains(entry), "{entry}: {legend}");
        }
        // Finished peaks at 120 jobs/s, so its axis tops out at 200.
        assert!(svg.contains(">200</text>"), "{svg}");
        // Scales with the page: a viewBox and no fixed width.
        assert!(svg.contains("viewBox=\"0 0 960 ") && svg.contains("width=\"100%\""));
        // A cell without samples says so instead of drawing nothing.
        let empty = timeline_svg(&report.cells[2], &colours);
        assert!(empty.contains(">no finished events sampled</text>"));
        assert!(empty.contains(">no ring samples</text>"));
        assert_eq!(empty.matches("<polyline ").count(), 0);
    }

    #[test]
    fn a_version_has_one_colour_in_every_cell_and_versions_have_distinct_ones() {
        let mut report = fixture::report();
        // The second cell ran 0.7.0 only: still 0.7.0's colour, not the first.
        report.cells[1].census = report.cells[0].census.clone();
        for s in &mut report.cells[1].census {
            s.by_version.remove("0.6.2");
        }
        let colours = Colours::of_run(&report);
        assert_ne!(colours.of("0.6.2"), colours.of("0.7.0"));
        let first = timeline_svg(&report.cells[0], &colours);
        let second = timeline_svg(&report.cells[1], &colours);
        let marker = "data-kind=\"finished\" data-version=\"0.7.0\"";
        assert_eq!(
            attr(&first, marker, "stroke"),
            attr(&second, marker, "stroke")
        );
        assert_eq!(attr(&second, marker, "stroke"), colours.of("0.7.0"));
        let ring_colours: BTreeSet<&str> = RING_COLOURS.iter().map(|r| r.1).collect();
        assert_eq!(ring_colours.len(), RING_COLOURS.len());
    }

    #[test]
    fn findings_are_pinned_at_the_start_of_the_phase_they_name() {
        let report = fixture::report();
        let cell = &report.cells[1];
        let svg = timeline_svg(cell, &Colours::of_run(&report));
        let f = Frame {
            t_max: cell.elapsed_ms,
            pins: cell.findings.len(),
            label_rows: 1,
        };
        // fence_breached: the fence phase at 2.0s; lost: reconcile at 6.0s.
        for (rule, at_ms) in [("fence_breached", 2_000), ("lost", 6_000)] {
            let marker = format!("<g class=\"finding\" data-rule=\"{rule}\">");
            assert_eq!(
                attr(&svg, &marker, "x1"),
                format!("{:.1}", f.x(at_ms)),
                "{rule}"
            );
            let pin = &svg[svg.find(&marker).unwrap()..];
            assert!(pin[..pin.find("</g>").unwrap()].contains(&format!(">{rule}</text>")));
        }
        assert!(
            svg.contains("<title>fence_breached in fence: N-1 binary wrote &lt;script&gt;"),
            "{svg}"
        );
        // A phase the timeline lacks pins at the cell's end.
        let mut finding = cell.findings[0].clone();
        finding.phase = "nowhere".into();
        assert_eq!(pinned_at_ms(cell, &finding), cell.elapsed_ms);
        // Of two phases with the name, the one that did not end ok.
        let mut two = cell.clone();
        let mut again = two.timeline[2].clone();
        again.start_ms = 5_000;
        again.outcome = StepOutcome::Breached;
        two.timeline.push(again);
        finding.phase = "fence".into();
        assert_eq!(pinned_at_ms(&two, &finding), 5_000);
    }

    #[test]
    fn a_finding_that_knows_when_it_was_seen_is_pinned_there() {
        let report = fixture::report();
        let mut cell = report.cells[1].clone();
        // fence_breached names the fence phase (2.0s) but was seen at 3.3s.
        cell.findings[1].at_ms = Some(3_300);
        let svg = timeline_svg(&cell, &Colours::of_run(&report));
        let f = Frame {
            t_max: cell.elapsed_ms,
            pins: cell.findings.len(),
            label_rows: 1,
        };
        let marker = "<g class=\"finding\" data-rule=\"fence_breached\">";
        assert_eq!(attr(&svg, marker, "x1"), format!("{:.1}", f.x(3_300)));
        assert_ne!(f.x(3_300), f.x(2_000));
        assert!(
            svg.contains("<title>fence_breached in fence at 3.3s: N-1 binary"),
            "{svg}"
        );
        // The one without a time keeps its phase: lost, reconcile at 6.0s.
        assert_eq!(pinned_at_ms(&cell, &cell.findings[0]), 6_000);
    }

    /// Whether two placed labels of widths `wa` and `wb` share a row and overlap.
    fn overlap(a: &Placed, wa: f64, b: &Placed, wb: f64) -> bool {
        a.row.is_some() && a.row == b.row && a.left < b.left + wb && b.left < a.left + wa
    }

    #[test]
    fn phase_labels_are_staggered_then_elided_and_never_overlap() {
        let rows = |labels: &[(f64, f64)]| -> Vec<Option<usize>> {
            place_labels(labels).iter().map(|p| p.row).collect()
        };
        // Far apart: one row, each centred on its marker.
        let far = [(100.0, 40.0), (300.0, 40.0), (500.0, 40.0)];
        assert_eq!(rows(&far), [Some(0); 3]);
        assert_eq!(place_labels(&far)[1].left, 280.0);
        // Close together: a row each, whatever order they come in.
        assert_eq!(
            rows(&[(420.0, 50.0), (400.0, 50.0), (410.0, 30.0)]),
            [Some(2), Some(0), Some(1)]
        );
        // A fourth clears row 0 again once past the first.
        assert_eq!(
            rows(&[(400.0, 50.0), (410.0, 30.0), (420.0, 50.0), (460.0, 20.0)]),
            [Some(0), Some(1), Some(2), Some(0)]
        );
        // More in one place than there are rows: the rest are elided.
        let crowd: Vec<(f64, f64)> = (0..5).map(|i| (600.0 + f64::from(i), 40.0)).collect();
        assert_eq!(rows(&crowd), [Some(0), Some(1), Some(2), None, None]);
        // Kept inside the drawing at both edges.
        let edges = place_labels(&[(WIDTH - 2.0, 60.0), (3.0, 60.0)]);
        assert_eq!((edges[0].left, edges[1].left), (WIDTH - 60.0, 0.0));
        // Many labels at every spacing: no two that are drawn overlap.
        let many: Vec<(f64, f64)> = (0..60)
            .map(|i| {
                (
                    80.0 + f64::from(i * 37 % 800),
                    20.0 + f64::from(i % 5) * 12.0,
                )
            })
            .collect();
        let placed = place_labels(&many);
        for (i, a) in placed.iter().enumerate() {
            for (j, b) in placed.iter().enumerate().skip(i + 1) {
                assert!(
                    !overlap(a, many[i].1, b, many[j].1),
                    "labels {i} {a:?} and {j} {b:?} overlap"
                );
            }
        }
    }

    #[test]
    fn close_phases_get_rows_of_their_own_and_the_panels_make_room() {
        let report = fixture::report();
        let cell = &report.cells[0];
        let colours = Colours::of_run(&report);
        let y_of = |svg: &str, name: &str| -> String {
            let at = svg.find(&format!("<g data-phase=\"{name}\">")).unwrap();
            attr(&svg[at..], "<text ", "y").to_owned()
        };
        let apart = timeline_svg(cell, &colours);
        let mut close = cell.clone();
        // Move the roll onto the kill, 10 ms later.
        let kill = close
            .timeline
            .iter()
            .find(|p| p.name == "kill")
            .unwrap()
            .start_ms;
        for p in close.timeline.iter_mut().filter(|p| p.name == "roll") {
            p.start_ms = kill + 10;
        }
        let svg = timeline_svg(&close, &colours);
        assert_ne!(y_of(&svg, "kill"), y_of(&svg, "roll"), "{svg}");
        assert_eq!(y_of(&apart, "kill"), y_of(&apart, "roll"), "{apart}");
        // The panels moved down a row to make room: the drawing is taller.
        let height = |svg: &str| -> f64 {
            let view = attr(svg, "<svg ", "viewBox");
            view.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(height(&svg), height(&apart) + LABEL_ROW);
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
