//! `report.md`: the summary a release engineer attaches to a release.
//!
//! It answers, in order: did the rehearsal pass, can I reproduce it, what
//! ran (commit, PostgreSQL, artifacts with digests), and per cell what it
//! proved or what it found. Text that came from the run (messages,
//! errors, descriptions) is escaped, so it renders as written and cannot
//! break a table or inject markup.

use std::fmt::Write as _;

use crate::observe::{Verdict, thousands};

use super::model::{CellReport, RunReport, verdict_name};
use super::text::{
    anchor, cell_counts, duration, findings_summary, first_ids, found_in, run_rows, short_digest,
    tally_line,
};

/// Renders `report.md`.
pub fn render_markdown(r: &RunReport) -> String {
    let mut md = String::new();
    header(&mut md, r);
    if let Some(score) = &r.selftest {
        selftest_score(&mut md, score);
    }
    cells_table(&mut md, r);
    for cell in &r.cells {
        cell_section(&mut md, cell);
    }
    artifacts(&mut md, r);
    images(&mut md, r);
    checksums(&mut md, r);
    md
}

fn header(md: &mut String, r: &RunReport) {
    let run = &r.run;
    let verdict = match r.outcome() {
        crate::vocab::RunOutcome::AllMet => "PASS: every cell met its expectation",
        crate::vocab::RunOutcome::CellFailed => {
            "FAIL: at least one cell did not meet its expectation"
        }
        crate::vocab::RunOutcome::Inconclusive => {
            "INCONCLUSIVE: the harness could not judge every cell"
        }
    };
    let _ = writeln!(
        md,
        "# Rolling-upgrade rehearsal {}{}\n",
        // Versions are semver words (`awa --version`), nothing to escape.
        versions(r).map_or_else(String::new, |v| format!("{v} ")),
        text(&run.header.run_id)
    );
    let _ = writeln!(md, "**{verdict}** ({})\n", text(&tally_line(r)));
    if let Some(line) = super::checklist::uncovered_line(r) {
        let _ = writeln!(md, "> **{}**\n", text(&line));
    }
    checklist(md, r);
    let mut rows: Vec<(&str, String)> = vec![("run", code(&run.header.run_id))];
    rows.extend(run_rows(r, text, code));
    md.push_str("| | |\n|---|---|\n");
    for (key, value) in rows {
        let _ = writeln!(md, "| {key} | {} |", cell_text(&value));
    }
    if run.end.interrupted {
        md.push_str("\n> **Interrupted:** the run was cut short; cells not listed did not run.\n");
    }
    md.push('\n');
}

/// ADR-041 §9: each item, the cells of this run that cover it, and whether one passed.
fn checklist(md: &mut String, r: &RunReport) {
    let rows = super::checklist::rows(r);
    if rows.is_empty() {
        return;
    }
    md.push_str("## ADR-041 §9 checklist\n\n");
    md.push_str("| item | cells of this run that cover it | covered |\n|---|---|---|\n");
    for row in rows {
        let cells: Vec<String> = row
            .ran
            .iter()
            .map(|(id, verdict)| format!("{} ({})", text(id), verdict_name(*verdict)))
            .collect();
        let status = match row.status {
            super::checklist::Status::Covered => row.status.word().to_owned(),
            _ => format!("**{}**", row.status.word()),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {status} |",
            cell_text(&text(row.item)),
            if cells.is_empty() {
                "-".to_owned()
            } else {
                cell_text(&cells.join(", "))
            }
        );
    }
    md.push('\n');
}

/// `rehearse selftest`: the seeded-defect score, then the clean cells.
fn selftest_score(md: &mut String, score: &crate::selftest::Score) {
    md.push_str("## Seeded-defect score\n\n");
    let _ = writeln!(md, "**{}**\n", text(&score.headline()));
    md.push_str(
        "| seeded defect | cell | expected | caught by name | rule and phase, or why not |\n",
    );
    md.push_str("|---|---|---|---|---|\n");
    for d in &score.defects {
        let how = match (&d.expected, &d.phase) {
            (Some(rule), Some(phase)) if d.caught() => format!("{rule} in {phase}"),
            _ => d.reason.clone(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            cell_text(&code(&d.failpoint)),
            cell_text(&text(&d.cell)),
            cell_text(&text(d.expected.as_deref().unwrap_or("-"))),
            if d.caught() { "yes" } else { "**no**" },
            cell_text(&text(&how))
        );
    }
    md.push('\n');
    for (cell, reason) in &score.clean_failures {
        let _ = writeln!(
            md,
            "- clean cell {} did not pass: {}",
            text(cell),
            text(reason)
        );
    }
    if !score.clean_failures.is_empty() {
        md.push('\n');
    }
}

fn cells_table(md: &mut String, r: &RunReport) {
    md.push_str("## Cells\n\n");
    md.push_str("| cell | expectation | verdict | findings | jobs | elapsed |\n");
    md.push_str("|---|---|---|---|--:|--:|\n");
    for c in &r.cells {
        let _ = writeln!(
            md,
            "| [{}](#cell-{}) | {} | {} | {} | {} | {} |",
            cell_text(&text(&c.name)),
            anchor(&c.name),
            cell_text(&text(&c.expect.to_string())),
            verdict_cell(c.verdict),
            cell_text(&text(&findings_summary(c))),
            thousands(c.accepted),
            duration(c.elapsed_ms)
        );
    }
    if r.cells.is_empty() {
        md.push_str("| (no cells ran) | | | | | |\n");
    }
    md.push('\n');
    if let Some(rows) = super::text::by_server(r) {
        md.push_str("By PostgreSQL server:\n\n");
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<String> = row.iter().map(|t| cell_text(&text(t))).collect();
            let _ = writeln!(md, "| {} |", cells.join(" | "));
            if i == 0 {
                let _ = writeln!(md, "|{}", "---|".repeat(row.len()));
            }
        }
        md.push('\n');
    }
}

fn verdict_cell(verdict: Verdict) -> String {
    match verdict {
        Verdict::Pass => "pass".to_owned(),
        other => format!("**{}**", verdict_name(other)),
    }
}

fn cell_section(md: &mut String, c: &CellReport) {
    let _ = writeln!(
        md,
        "<a id=\"cell-{}\"></a>\n### {}: {}\n",
        anchor(&c.name),
        text(&c.name),
        verdict_name(c.verdict)
    );
    if !c.about.is_empty() {
        let _ = writeln!(md, "{}\n", text(&c.about));
    }
    let _ = writeln!(
        md,
        "Expected: {}. {}.\n",
        text(&c.expect.to_string()),
        text(&cell_counts(c))
    );
    if let Some(path) = &c.plan.path {
        let _ = writeln!(md, "Path: {}.\n", text(&path.to_string()));
    }
    if !c.verdict_reason.is_empty() && c.harness_error.is_none() {
        let _ = writeln!(md, "Verdict: {}.\n", text(&c.verdict_reason));
    }
    if let Some(error) = &c.harness_error {
        let _ = writeln!(md, "Harness error: {}\n", code(error));
    }
    bullets(md, "Earlier tries", &super::text::tries_lines(c));
    if let Some(late) = super::text::lateness_line(c) {
        let _ = writeln!(md, "Lateness: {}.\n", text(&late));
    }
    bullets(
        md,
        "Seen by the monitor (what can excuse a rescue)",
        &super::text::excuse_lines(c),
    );
    bullets(md, "Step failures", &c.step_failures);
    bullets(md, "Proved", &c.proved);
    off_contract(md, c);
    containers(md, c);
    findings(md, c);
}

/// `heading:` and one bullet per line, when there are any.
fn bullets(md: &mut String, heading: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let _ = write!(md, "{heading}:\n\n");
    for line in lines {
        let _ = writeln!(md, "- {}", text(line));
    }
    md.push('\n');
}

/// A cell's findings as a table (`none` for a judged cell without any).
fn findings(md: &mut String, c: &CellReport) {
    if c.findings.is_empty() {
        if c.verdict != Verdict::Inconclusive {
            md.push_str("Findings: none.\n\n");
        }
        return;
    }
    md.push_str(
        "Findings:\n\n| rule | phase | message | first ids | count |\n|---|---|---|---|--:|\n",
    );
    for f in &c.findings {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            cell_text(&code(f.rule.name())),
            cell_text(&text(&found_in(f))),
            cell_text(&text(&f.message)),
            cell_text(&text(&first_ids(f))),
            thousands(f.count)
        );
    }
    md.push('\n');
}

fn artifacts(md: &mut String, r: &RunReport) {
    md.push_str(
        "## Artifacts\n\n| name | version | source | digest | obtained |\n|---|---|---|---|---|\n",
    );
    for a in &r.artifacts {
        let mut source = text(&a.source);
        if let Some(fp) = &a.failpoint {
            let _ = write!(source, ", failpoint {}", code(fp));
        }
        let digest = if a.digest.is_empty() {
            "(none)".to_owned()
        } else {
            code(short_digest(&a.digest))
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            cell_text(&code(&a.name)),
            cell_text(&text(&a.version)),
            cell_text(&source),
            cell_text(&digest),
            cell_text(&text(&a.obtained))
        );
    }
    md.push('\n');
}

/// The processes that printed stdout lines outside the event contract
/// (nothing is written when every line was an event).
fn off_contract(md: &mut String, c: &CellReport) {
    let off: Vec<String> = c
        .processes
        .iter()
        .filter(|p| p.contract.off_contract())
        .map(|p| {
            format!(
                "{} ({}): {} unknown, {} garbled of {} lines, kept in {}",
                code(&p.name),
                text(&p.version),
                thousands(p.contract.unknown),
                thousands(p.contract.garbled),
                thousands(p.contract.events + p.contract.unknown + p.contract.garbled),
                code(&p.log)
            )
        })
        .collect();
    if !off.is_empty() {
        let _ = writeln!(md, "Event contract: {}.\n", off.join("; "));
    }
}

/// On the docker backend: each process's container, exit and log.
fn containers(md: &mut String, c: &CellReport) {
    if !c.processes.iter().any(|p| p.container.is_some()) {
        return;
    }
    md.push_str("Containers:\n\n| process | container | exit | log |\n|---|---|---|---|\n");
    for p in &c.processes {
        let exit = match (p.exit_code, p.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(9)) => "SIGKILL".to_owned(),
            (None, Some(15)) => "SIGTERM".to_owned(),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "(none)".to_owned(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            cell_text(&code(&p.name)),
            cell_text(&code(short_digest(p.container.as_deref().unwrap_or("")))),
            cell_text(&text(&exit)),
            cell_text(&code(&p.log))
        );
    }
    md.push('\n');
}

/// On the docker backend: how each artifact's image was obtained.
fn images(md: &mut String, r: &RunReport) {
    if !r.artifacts.iter().any(|a| a.image.is_some()) {
        return;
    }
    md.push_str("Images:\n\n| name | reference | image id | digest | tag | obtained |\n|---|---|---|---|---|---|\n");
    for a in &r.artifacts {
        let Some(i) = &a.image else { continue };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            cell_text(&code(&a.name)),
            cell_text(&code(&i.reference)),
            cell_text(&code(short_digest(i.id.trim_start_matches("sha256:")))),
            cell_text(&i.digest.as_deref().map_or("(none)".to_owned(), code)),
            cell_text(&i.tag.as_deref().map_or("(none)".to_owned(), code)),
            cell_text(&text(&i.obtained.to_string()))
        );
    }
    md.push('\n');
}

fn checksums(md: &mut String, r: &RunReport) {
    md.push_str("## Migration checksums\n\n");
    if r.run.header.migration_checksums.is_empty() {
        md.push_str("(none recorded)\n");
        return;
    }
    md.push_str("| migration | sha256 |\n|---|---|\n");
    for (name, sum) in &r.run.header.migration_checksums {
        let _ = writeln!(
            md,
            "| {} | {} |",
            cell_text(&code(name)),
            cell_text(&code(sum))
        );
    }
}

/// Plain text from the run, escaped so Markdown shows it as written:
/// no emphasis, links, code or raw HTML, one line.
pub(crate) fn text(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '\\' | '`' | '*' | '<' | '>' | '[' | ']' | '#' | '~' | '&' => {
                out.push('\\');
                out.push(c);
            }
            // `_` only emphasises at a word edge: keep `wrong_state` readable.
            '_' => {
                let word = |j: Option<&char>| j.is_some_and(|c| c.is_alphanumeric());
                let inside = i > 0 && word(chars.get(i - 1)) && word(chars.get(i + 1));
                if !inside {
                    out.push('\\');
                }
                out.push('_');
            }
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// Verbatim text as an inline code span, fenced with more backticks than it contains.
pub(crate) fn code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// Escapes the one character a table cell cannot hold (GFM honours `\|` even inside code spans).
fn cell_text(s: &str) -> String {
    s.replace('|', "\\|")
}

/// "0.6.2 -> 0.7.0": the versions of `previous` and `current`, when the
/// run used both.
pub(crate) fn versions(r: &RunReport) -> Option<String> {
    let version = |name: &str| {
        r.artifacts
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.version.clone())
    };
    match (
        version(crate::matrix::PREVIOUS),
        version(crate::matrix::CURRENT),
    ) {
        (Some(from), Some(to)) => Some(format!("{from} -> {to}:")),
        (None, Some(to)) => Some(format!("{to}:")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;
    use crate::report::text::redact_durations;

    #[test]
    fn a_path_cell_names_the_releases_it_walked() {
        let mut r = fixture::report();
        r.cells[0].plan.path = Some(crate::matrix::UpgradePath {
            releases: [
                ("pre_guard", "0.6.1"),
                ("previous", "0.6.2"),
                ("current", "0.7.0"),
            ]
            .map(|(artifact, version)| crate::matrix::PathStop {
                artifact: artifact.into(),
                version: version.into(),
            })
            .to_vec(),
            downgrade: false,
        });
        let md = render_markdown(&r);
        assert!(
            // `>` escaped, as everywhere in the text.
            md.contains(r"Path: pre_guard 0.6.1 -\> previous 0.6.2 -\> current 0.7.0."),
            "{md}"
        );
        assert_eq!(md.matches("\nPath: ").count(), 1, "{md}");
    }

    #[test]
    fn a_selftest_run_leads_with_its_score() {
        let mut r = fixture::report();
        r.selftest = Some(crate::selftest::Score::of(
            &["fence_current_slot_only", "fold_any_xmin"],
            &r.cells,
        ));
        let md = render_markdown(&r);
        let score = md.find("## Seeded-defect score").expect("a score section");
        assert!(score < md.find("## Cells").unwrap());
        assert!(
            md.contains("**seeded defects caught by name: 0/2; clean cells passed: 1/2**"),
            "{md}"
        );
        assert!(md.contains(
            "| `fold_any_xmin` | defect-fold-any-xmin | - | **no** | no cell defect-fold-any-xmin ran: a seeded defect without a cell is not caught |"
        ), "{md}");
        assert!(md.contains("- clean cell fence did not pass: expected pass, got lost, fence_breached and 1 step failure"), "{md}");
    }

    #[test]
    fn the_fixture_renders_to_the_expected_text() {
        let mut report = fixture::report();
        // A finding whose rule knows when it was seen says so beside its phase.
        report.cells[1].findings[1].at_ms = Some(1_100);
        let md = redact_durations(&render_markdown(&report));
        let expected = r#"# Rolling-upgrade rehearsal 0.6.2 -> 0.7.0: 20261130T014512Z-3f2a9c1

**FAIL: at least one cell did not meet its expectation** (3 cells: 1 pass, 1 fail, 1 inconclusive)

> **ADR-041 §9: 1 of 2 items not covered by a passing cell of this run: hard kills with crash and heartbeat rescue asserted**

## ADR-041 §9 checklist

| item | cells of this run that cover it | covered |
|---|---|---|
| the flip, old-binary fence, and supported rollback boundary | migrate-first (pass), fence (fail) | covered |
| hard kills with crash and heartbeat rescue asserted | - | **not covered: its cells did not run here** |

| | |
|---|---|
| run | `20261130T014512Z-3f2a9c1` |
| started | 2026-11-30T01:45:12Z |
| finished | 2026-11-30T01:47:40Z |
| wall time | [duration] (harness CPU [duration], children CPU [duration]) |
| floor | [duration] = max(longest cell [duration], CPU [duration] / 2 cores); wall time 3.01x the floor |
| schedule | jobs 2; longest first, estimated from the plan (no earlier report of these cells) |
| seed | `42` (reproduces the plan: every step, target and random choice; not the timing) |
| replay | `rehearse --matrix smoke --seed 42` |
| command line | `rehearse --matrix smoke --seed 42` |
| matrix | smoke |
| backend | process |
| git commit | `3f2a9c1d0e4b5a69788f00112233445566778899` (dirty: uncommitted changes) |
| PostgreSQL | 15.18 |
| format | `[format]` |

## Cells

| cell | expectation | verdict | findings | jobs | elapsed |
|---|---|---|---|--:|--:|
| [migrate-first](#cell-migrate-first) | pass | pass | none | 2,340 | [duration] |
| [fence](#cell-fence) | pass | **fail** | 2 (lost, fence_breached) | 410 | [duration] |
| [defect-fence](#cell-defect-fence) | detect fence_breached | **inconclusive** | none | 0 | [duration] |

<a id="cell-migrate-first"></a>
### migrate-first: pass

N-1 fleet under load, migrate, roll to N, flip, fence

Expected: pass. 2,340 jobs accepted, 1 uncertain, 1 kill, 1 flip, 1 fence, 1 process; elapsed [duration] (reconcile [duration]).

Proved:

- reconcile: every accepted job (2,340) ended exactly once, in the terminal state its mode was designed for
- step 3 (kill): crash rescue proven on 1 in-flight job of killed previous-worker-2
- step 6 (fence): previous (0.6.2) refused after the flip and changed nothing

Findings: none.

<a id="cell-fence"></a>
### fence: fail

after the flip an N-1 binary refuses before any write

Expected: pass. 410 jobs accepted; elapsed [duration] (reconcile [duration]).

Verdict: expected pass, got lost, fence_breached and 1 step failure.

Step failures:

- step 12 (fence): previous-fence-1 exited 0; an N-1 binary must refuse after the flip

Findings:

| rule | phase | message | first ids | count |
|---|---|---|---|--:|
| `lost` | reconcile | 3 accepted jobs have no terminal record | 101, 102, 103 | 3 |
| `fence_breached` | fence at [duration] | N-1 binary wrote \<script\>alert(1)\</script\> \| a ring row | 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, ... | 57 |

<a id="cell-defect-fence"></a>
### defect-fence: inconclusive

a fence that poisons only current_slot must be caught

Expected: detect fence_breached. 0 jobs accepted; elapsed [duration] (reconcile [duration]).

Harness error: `failed to start worker 1 of cell defect-fence: awa exited with code 127`

## Artifacts

| name | version | source | digest | obtained |
|---|---|---|---|---|
| `previous` | 0.6.2 | release 0.6.2 (artifacts/awa-runtime-0.6.2.crate) | `0123456789ab` | cached |
| `current` | 0.7.0 | workspace build | `fedcba987654` | built |
| `defective_fence` | 0.7.0 | workspace build, failpoint `fence_current_slot_only` | `00ff00ff00ff` | built |

## Migration checksums

| migration | sha256 |
|---|---|
| `v1` | `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa` |
| `v2` | `bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb` |
"#
        .replace("[format]", crate::report::model::FORMAT_VERSION);
        assert_eq!(md, expected, "\n--- got ---\n{md}");
    }

    #[test]
    fn a_passing_run_says_pass_and_an_interrupted_one_says_so() {
        let mut report = fixture::report();
        report.cells.truncate(1);
        let md = render_markdown(&report);
        assert!(md.contains("\n**PASS: every cell met its expectation** (1 cell: 1 pass, 0 fail, 0 inconclusive)\n"), "{md}");
        report.run.end.interrupted = true;
        report.run.header.git_dirty = false;
        let md = render_markdown(&report);
        assert!(md.contains("\n**INCONCLUSIVE: "), "{md}");
        assert!(
            md.contains("> **Interrupted:** the run was cut short"),
            "{md}"
        );
        assert!(
            md.contains("| git commit | `3f2a9c1d0e4b5a69788f00112233445566778899` |\n"),
            "{md}"
        );
    }

    #[test]
    fn a_stressed_run_says_its_load_in_the_run_table_and_report_json() {
        let mut r = fixture::report();
        assert!(!render_markdown(&r).contains("| stress |"));
        r.run.header.stress = Some(crate::stress::Stress::PerCore(2).info(2));
        let md = render_markdown(&r);
        assert!(
            md.contains("jobs 2; longest first, estimated from the plan (no earlier report of these cells) |\n| stress | 4 busy processes (2x the 2 cores) |\n"),
            "{md}"
        );
        let html = crate::report::html::render_html(&r, None);
        assert!(html.contains("4 busy processes (2x the 2 cores)"), "{html}");
        let json = crate::report::to_json(&r).unwrap();
        assert!(
            json.contains(
                r#""stress": {
      "spec": "cpu=2x",
      "processes": 4,
      "cores": 2
    }"#
            ),
            "{json}"
        );
        let path = std::path::Path::new("report.json");
        assert_eq!(crate::report::from_json(path, &json).unwrap(), r);
        // A report from before 1.15 has no stress: it ran beside none.
        let before = json.replace("\"stress\"", "\"unknown_to_1_14\"");
        let read = crate::report::from_json(path, &before).unwrap();
        assert_eq!(read.run.header.stress, None);
    }

    #[test]
    fn a_process_off_the_event_contract_gets_a_line_and_one_on_it_none() {
        let mut r = fixture::report();
        let clean = render_markdown(&r);
        assert!(!clean.contains("Event contract"), "{clean}");
        r.cells[0].processes[0].contract = crate::observe::ContractCount {
            events: 1_200,
            unknown: 3,
            garbled: 1,
        };
        let md = render_markdown(&r);
        assert!(
            md.contains("Event contract: `previous-worker-1` (0.6.2): 3 unknown, 1 garbled of 1,204 lines, kept in `logs/migrate-first/previous-worker-1.log`.\n"),
            "{md}"
        );
    }

    #[test]
    fn escaping_keeps_text_literal() {
        for (raw, escaped) in [
            ("wrong_state", "wrong_state"),
            ("_lead and trail_", "\\_lead and trail\\_"),
            (
                "a *b* [c](d) <e> `f` #g",
                "a \\*b\\* \\[c\\](d) \\<e\\> \\`f\\` \\#g",
            ),
            ("two\nlines", "two lines"),
            ("AT&T", "AT\\&T"),
        ] {
            assert_eq!(text(raw), escaped, "{raw:?}");
        }
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x`"), "`` `x` ``");
        assert_eq!(cell_text("a|b"), "a\\|b");
        assert_eq!(anchor("Defect_Fence 2"), "defect-fence-2");
    }
}
