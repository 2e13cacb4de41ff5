//! `report.html`: one self-contained page (no scripts, no external
//! files) with the summary, and per cell an SVG timeline: throughput by
//! version over time, with the phases that matter to an upgrade (migrate,
//! roll, kill, flip, fence, PostgreSQL crash) marked where they started.
//! Every piece of text from the run is escaped.
//!
//! `series` turns a cell's census samples into per-version rates;
//! `timeline` draws them, with the phases, as the cell's SVG.

use std::fmt::Write as _;

use crate::exit::RunOutcome;
use crate::observe::{Verdict, thousands};

mod series;
mod timeline;

pub use series::{Series, throughput};
pub use timeline::{MARKED_PHASES, timeline_svg};

use super::model::{CellReport, RunReport, verdict_name};
use super::text::{
    anchor, cell_counts, duration, findings_summary, first_ids, run_rows, short_digest, tally_line,
};

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
}
