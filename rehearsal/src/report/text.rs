//! Small text pieces every renderer shares, so a duration or a digest
//! reads the same in the terminal, in Markdown and in HTML.
//!
//! Every duration in every report goes through [`duration`]; its few
//! shapes (`850ms`, `12.3s`, `4m05s`, `1h02m`) are what the tests'
//! redaction recognises, so snapshots stay stable across machines.

use crate::matrix::Expectation;
use crate::observe::{Finding, Verdict, thousands};

use super::model::CellReport;

/// A duration for humans: `850ms`, `12.3s` (tenths, truncated), `4m05s`, `1h02m`
/// ([`crate::observe::duration`], which the driver's and reconciliation's messages use too).
pub fn duration(ms: u64) -> String {
    crate::observe::duration(ms)
}

/// Where a finding was seen: its phase, and the time into the cell when
/// its rule knows it (`flip at 12.3s`).
pub fn found_in(finding: &Finding) -> String {
    match finding.at_ms {
        Some(ms) => format!("{} at {}", finding.phase, duration(ms)),
        None => finding.phase.clone(),
    }
}

/// The first 12 hex digits of a digest: enough to compare by eye, short enough for a table.
pub fn short_digest(digest: &str) -> &str {
    match digest.char_indices().nth(12) {
        Some((i, _)) => &digest[..i],
        None => digest,
    }
}

/// The findings of a cell in one short phrase: `none`, `2 (lost, duplicate)`,
/// or `1 (fence_breached, as expected)` for a `detect` cell that passed.
pub fn findings_summary(cell: &CellReport) -> String {
    if cell.findings.is_empty() {
        return "none".to_owned();
    }
    let mut rules: Vec<&str> = Vec::new();
    for finding in &cell.findings {
        let name = finding.rule.name();
        if !rules.contains(&name) {
            rules.push(name);
        }
    }
    let expected = matches!(cell.expect, Expectation::Detect(_)) && cell.verdict == Verdict::Pass;
    format!(
        "{} ({}{})",
        cell.findings.len(),
        rules.join(", "),
        if expected { ", as expected" } else { "" }
    )
}

/// A finding's first ids, with `...` when there are more than listed.
pub fn first_ids(finding: &Finding) -> String {
    let mut text = finding
        .ids
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if finding.count > finding.ids.len() as u64 {
        text.push_str(if text.is_empty() { "..." } else { ", ..." });
    }
    text
}

/// What a cell did, in one sentence of counts: jobs, kills, flips, fences, timing.
pub fn cell_counts(cell: &CellReport) -> String {
    let mut parts = vec![format!(
        "{} accepted",
        crate::observe::count(cell.accepted, "job")
    )];
    if cell.uncertain > 0 {
        parts.push(format!("{} uncertain", thousands(cell.uncertain)));
    }
    for (n, one) in [
        (cell.kills.len(), "kill"),
        (cell.flips.len(), "flip"),
        (cell.fences.len(), "fence"),
        (cell.processes.len(), "process"),
    ] {
        if n > 0 {
            parts.push(plural(n, one));
        }
    }
    format!(
        "{}; elapsed {} (reconcile {})",
        parts.join(", "),
        duration(cell.elapsed_ms),
        duration(cell.reconcile_ms)
    )
}

/// One line per earlier try of a cell tried again (`--retries`): its
/// seed, how long it ran, why it gave no verdict, where its logs are.
pub fn tries_lines(cell: &CellReport) -> Vec<String> {
    cell.tries
        .iter()
        .map(|t| {
            let seed = t
                .seed
                .map_or("the run's seed".to_owned(), |s| format!("seed {s}"));
            format!(
                "try {} ({seed}): inconclusive after {}: {}; logs in {}",
                t.attempt,
                duration(t.elapsed_ms),
                t.why,
                t.logs
            )
        })
        .collect()
}

/// The worst lateness the monitor saw in a cell, in one line (`None`
/// when nothing ran late): `heartbeats up to 2.4s late (previous-worker-2,
/// at 12.1s), the harness's pulse up to 300ms late, 14 late ticks`.
pub fn lateness_line(cell: &CellReport) -> Option<String> {
    let beat = cell.late.iter().max_by_key(|l| l.beat_late_ms)?;
    let tick = cell.late.iter().map(|l| l.tick_late_ms).max().unwrap_or(0);
    let mut parts = Vec::new();
    if beat.beat_late_ms > 0 {
        let whose = beat.runtime.as_deref().unwrap_or("a runtime");
        parts.push(format!(
            "heartbeats up to {} late ({whose}, at {})",
            duration(beat.beat_late_ms),
            duration(beat.at_ms)
        ));
    }
    if tick >= crate::monitor::LATE_ENOUGH_TO_RECORD.as_millis() as u64 {
        parts.push(format!("the harness's pulse up to {} late", duration(tick)));
    }
    parts.push(plural(cell.late.len(), "late tick"));
    Some(parts.join(", "))
}

/// What the monitor saw that can excuse a rescue, one line each: runtimes
/// whose heartbeat went stale (a crash rescue of their attempts has a
/// cause) and runtimes queued behind a lease-table lock request (a
/// heartbeat rescue of theirs has one, when another release asked). A
/// passing cell with rescues shows here why they were not findings.
pub fn excuse_lines(cell: &CellReport) -> Vec<String> {
    excuses(cell).into_iter().map(|(_, line)| line).collect()
}

/// [`excuse_lines`], each with when the monitor first saw it (ms since
/// the cell started), for the timeline to place.
pub fn excuses(cell: &CellReport) -> Vec<(u64, String)> {
    let late = cell.late_runtimes.iter().map(|r| {
        let line = format!(
            "runtime {} went stale: heartbeat {} old, first seen at {}",
            r.instance_id,
            duration(r.age_ms),
            duration(r.first_ms)
        );
        (r.first_ms, line)
    });
    let queued = cell.queued_runtimes.iter().map(|q| {
        let whose = q
            .requester_version
            .as_deref()
            .map_or("a session that names no release (0.6)".to_owned(), |v| {
                format!("awa {v}")
            });
        let line = format!(
            "runtime {} queued up to {} behind an exclusive lock request on {} by {whose}, first seen at {}",
            q.instance_id,
            duration(q.waited_ms),
            q.relation,
            duration(q.first_ms)
        );
        (q.first_ms, line)
    });
    let held = cell.held_by_commands.iter().map(|h| {
        let line = format!(
            "a statement of a release that names no session (0.6) waited up to {} on {} behind awa {} (a migration, a flip or an operator command), first seen at {}",
            duration(h.waited_ms),
            h.relation,
            h.command_version,
            duration(h.first_ms)
        );
        (h.first_ms, line)
    });
    late.chain(queued).chain(held).collect()
}

/// `1 kill`, `2 kills`, `3 processes`, `2,340 jobs` ([`crate::observe::count`]).
pub fn plural(n: usize, one: &str) -> String {
    crate::observe::count(u64::try_from(n).unwrap_or(u64::MAX), one)
}

/// The run's result in one line: `3 cells: 1 pass, 1 fail, 1 inconclusive`.
pub fn tally_line(report: &super::RunReport) -> String {
    let tally = report.tally();
    let mut text = format!(
        "{}: {} pass, {} fail, {} inconclusive",
        plural(report.cells.len(), "cell"),
        tally.pass,
        tally.fail,
        tally.inconclusive
    );
    if report.run.end.interrupted {
        text.push_str(" (interrupted: cells not listed did not run)");
    }
    text
}

/// The cells side by side by server, for a run over several PostgreSQL
/// majors: a header (`cell`, `pg15`, `pg18`), one row per cell (`pass
/// 1m02s`; `-` where it did not run on that major) and a `total` row
/// (the cells' elapsed times added up per server). `None` for a run on
/// one server.
pub fn by_server(report: &super::RunReport) -> Option<Vec<Vec<String>>> {
    use crate::servers::Major;
    let majors: std::collections::BTreeSet<Major> =
        report.cells.iter().filter_map(|c| c.plan.server).collect();
    if majors.len() < 2 {
        return None;
    }
    let majors: Vec<Major> = majors.into_iter().collect();
    let base = |c: &CellReport| match c.plan.server {
        Some(m) => c
            .name
            .strip_suffix(&format!("@{m}"))
            .unwrap_or(&c.name)
            .to_owned(),
        None => c.name.clone(),
    };
    let mut names: Vec<String> = Vec::new();
    for c in &report.cells {
        let name = base(c);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut rows = vec![
        std::iter::once("cell".to_owned())
            .chain(majors.iter().map(Major::to_string))
            .collect::<Vec<_>>(),
    ];
    let mut totals = vec![0u64; majors.len()];
    for name in names {
        let mut row = vec![name.clone()];
        for (i, major) in majors.iter().enumerate() {
            let cell = report
                .cells
                .iter()
                .find(|c| c.plan.server == Some(*major) && base(c) == name);
            row.push(match cell {
                Some(c) => {
                    totals[i] += c.elapsed_ms;
                    format!(
                        "{} {}",
                        super::model::verdict_name(c.verdict),
                        duration(c.elapsed_ms)
                    )
                }
                None => "-".to_owned(),
            });
        }
        rows.push(row);
    }
    rows.push(
        std::iter::once("total".to_owned())
            .chain(totals.into_iter().map(duration))
            .collect(),
    );
    Some(rows)
}

/// Replaces every duration [`duration`] can produce with `[duration]`, for stable test snapshots.
#[cfg(test)]
pub fn redact_durations(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.');
        if boundary
            && bytes[i].is_ascii_digit()
            && let Some(end) = duration_at(bytes, i)
        {
            out.push_str(&text[copied..i]);
            out.push_str("[duration]");
            i = end;
            copied = end;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// The end of a duration token starting at `start`, if one starts there.
#[cfg(test)]
fn duration_at(bytes: &[u8], start: usize) -> Option<usize> {
    let digits = |from: usize| {
        let mut end = from;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
        end
    };
    let literal = |at: usize, s: &[u8]| bytes.get(at..at + s.len()) == Some(s);
    let n = digits(start);
    let end = if literal(n, b"ms") {
        n + 2
    } else if literal(n, b".") && digits(n + 1) == n + 2 && literal(n + 2, b"s") {
        n + 3
    } else if (literal(n, b"m") && literal(n + 3, b"s"))
        || (literal(n, b"h") && literal(n + 3, b"m"))
    {
        (digits(n + 1) == n + 3).then_some(n + 4)?
    } else {
        return None;
    };
    let after = bytes.get(end);
    (!after.is_some_and(|b| b.is_ascii_alphanumeric())).then_some(end)
}

/// A stable id for a cell (an HTML anchor shared by report.md and
/// report.html): lowercase ASCII letters, digits and dashes.
pub(crate) fn anchor(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// `, of which containers 1m02s (cgroup counter) and the engine 41.0s`:
/// the containers' and the engine's shares of the children's CPU and how
/// the containers' was counted, on the docker backend.
fn containers_cpu(run: &super::model::RunInfo) -> String {
    let engine = run.end.engine_cpu_ms.map_or(String::new(), |ms| {
        format!(" and the engine {}", duration(ms))
    });
    let containers = match (run.end.container_cpu_ms, run.end.container_cpu_source) {
        (Some(ms), Some(source)) => format!(
            ", of which containers {} ({})",
            duration(ms),
            match source {
                crate::fleet::CpuSource::Cgroup => "cgroup counter",
                crate::fleet::CpuSource::Stats => "sampled stats, a lower bound",
            }
        ),
        (Some(ms), None) => format!(", of which containers {}", duration(ms)),
        _ => String::new(),
    };
    format!("{containers}{engine}")
}

/// The key/value rows that describe a run, shared by report.md and
/// report.html; `plain` escapes text, `code` renders a literal.
pub(crate) fn run_rows(
    r: &super::model::RunReport,
    plain: impl Fn(&str) -> String,
    code: impl Fn(&str) -> String,
) -> Vec<(&'static str, String)> {
    let run = &r.run;
    vec![
        ("started", plain(&run.header.started_at)),
        ("finished", plain(&run.end.finished_at)),
        (
            "wall time",
            format!(
                "{}{} (harness CPU {}, children CPU {}{})",
                duration(run.end.wall_ms),
                match run.end.prepare_ms {
                    0 => String::new(),
                    ms => format!(
                        ": {} preparing (artifacts{}), then {} of cells",
                        duration(ms),
                        if run.header.backend == "docker" {
                            " and their images"
                        } else {
                            ""
                        },
                        duration(run.end.window_ms())
                    ),
                },
                duration(run.end.harness_cpu_ms),
                duration(run.end.children_cpu_ms),
                containers_cpu(run)
            ),
        ),
    ]
    .into_iter()
    .chain(floor_row(r).map(|row| ("floor", row)))
    .chain((!run.header.schedule.is_empty()).then(|| ("schedule", plain(&schedule_row(r)))))
    .chain(
        run.header
            .stress
            .map(|stress| ("stress", plain(&stress.describe()))),
    )
    .chain(identity_rows(r, plain, code))
    .collect()
}

/// The rows of [`run_rows`] that say what ran and how to run it again:
/// seed, replay, command line, matrix, backend, shares, commit, server.
fn identity_rows(
    r: &super::model::RunReport,
    plain: impl Fn(&str) -> String,
    code: impl Fn(&str) -> String,
) -> Vec<(&'static str, String)> {
    let mut rows = replay_rows(r, &plain, &code);
    rows.extend(provenance_rows(r, &plain, &code));
    rows
}

/// The first [`identity_rows`]: how the run was asked for and where it ran.
fn replay_rows(
    r: &super::model::RunReport,
    plain: impl Fn(&str) -> String,
    code: impl Fn(&str) -> String,
) -> Vec<(&'static str, String)> {
    let run = &r.run;
    [
        (
            "seed",
            format!(
                "{} (reproduces the plan: every step, target and random choice; not the timing)",
                code(&run.header.seed.to_string())
            ),
        ),
        ("replay", code(&run.header.replay)),
        ("command line", code(&run.header.command_line)),
        (
            "matrix",
            run.header
                .matrix
                .as_deref()
                .map_or("(cells named)".to_owned(), &plain),
        ),
        ("backend", plain(&run.header.backend)),
    ]
    .into_iter()
    .chain(
        run.header
            .engine
            .as_ref()
            .map(|engine| ("engine", plain(engine))),
    )
    .chain(run.start_to_ready.map(|t| {
        (
            "start to ready",
            format!(
                "median {} ms, p90 {} ms, max {} ms over {} processes",
                t.median_ms, t.p90_ms, t.max_ms, t.processes
            ),
        )
    }))
    .collect()
}

/// The last [`identity_rows`]: which share or shares, which matrix and
/// commit, which server, which report format.
fn provenance_rows(
    r: &super::model::RunReport,
    plain: impl Fn(&str) -> String,
    code: impl Fn(&str) -> String,
) -> Vec<(&'static str, String)> {
    let run = &r.run;
    let dirty = if run.header.git_dirty {
        " (dirty: uncommitted changes)"
    } else {
        ""
    };
    run.header
        .partition
        .as_ref()
        .map(|p| ("partition", partition_row(p, r.cells.len())))
        .into_iter()
        .chain((!run.merged_from.is_empty()).then(|| {
            (
                "merged from",
                format!(
                    "{} (rehearse merge; wall time is the longest share's, CPU the shares' sum)",
                    run.merged_from
                        .iter()
                        .map(|id| code(id))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        }))
        .chain((!run.header.matrix_checksum.is_empty()).then(|| {
            (
                "matrix checksum",
                code(&format!("sha256 {}", run.header.matrix_checksum)),
            )
        }))
        .chain([
            (
                "git commit",
                format!("{}{dirty}", code(&run.header.git_commit)),
            ),
            ("PostgreSQL", plain(&run.header.postgres_version)),
            ("format", code(&r.format_version)),
        ])
        .collect()
}

/// What a run with no cells says instead of a table with no rows:
/// `share hash:7/8 has no cells: all 3 selected cells fell in the other
/// 7 shares; nothing ran, and rehearse merge joins the 8 shares`.
pub fn no_cells(r: &super::model::RunReport) -> String {
    match &r.run.header.partition {
        Some(p) => format!(
            "share {} has no cells: all {} fell in the other {}; nothing ran, and rehearse merge joins the {} shares",
            p.spec(),
            plural(p.cells.len(), "selected cell"),
            plural(p.count.saturating_sub(1) as usize, "share"),
            p.count
        ),
        None => "no cells ran".to_owned(),
    }
}

/// `hash:1/2: 2 of the 3 selected cells; rehearse merge joins the shares`.
fn partition_row(p: &crate::vocab::partition::PartitionInfo, here: usize) -> String {
    let total = plural(p.cells.len(), "selected cell");
    if here == 0 {
        format!(
            "{}: none of the {total} fell in this share (an empty share runs nothing and passes); rehearse merge joins the {} shares",
            p.spec(),
            p.count
        )
    } else {
        format!(
            "{}: {here} of the {total}; rehearse merge joins the {} shares into the whole verdict",
            p.spec(),
            p.count
        )
    }
}

/// How the run was scheduled, and how often `--jobs auto` then held a
/// cell back under CPU pressure.
pub(crate) fn schedule_row(r: &super::model::RunReport) -> String {
    let run = &r.run;
    match run.end.held_back {
        Some(held) => format!("{}; {}", run.header.schedule, held.describe()),
        None => run.header.schedule.clone(),
    }
}

/// The cells' wall time against their floor, `max(longest cell, CPU /
/// cores)`: how much of the machine the schedule left idle. The CPU is
/// counted from the cells' window on, so the window's wall time is what
/// it is weighed against (the preparation before it is the wall time
/// row's). `None` for a report that did not record its cores.
pub(crate) fn floor_row(r: &super::model::RunReport) -> Option<String> {
    let run = &r.run;
    let longest = r.cells.iter().map(|c| c.elapsed_ms).max().unwrap_or(0);
    let floor = run.floor_ms(longest)?;
    let cpu = run.end.harness_cpu_ms + run.end.children_cpu_ms;
    Some(format!(
        "{} = max(longest cell {}, CPU {} / {} cores); {} {:.2}x the floor",
        duration(floor),
        duration(longest),
        duration(cpu),
        run.header.cores,
        if run.end.prepare_ms == 0 {
            "wall time"
        } else {
            "the cells' wall time"
        },
        run.end.window_ms() as f64 / floor.max(1) as f64
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monitors_evidence_behind_excused_rescues_is_one_line_each_and_absent_when_none() {
        let mut r = crate::report::fixture::report();
        let cell = &mut r.cells[0];
        assert!(excuse_lines(cell).is_empty());
        cell.late_runtimes = vec![crate::observe::LateRuntime {
            instance_id: "previous-worker-1-2-b".into(),
            first_ms: 4_000,
            age_ms: 1_900,
        }];
        let queued = |requester: Option<&str>| crate::observe::QueuedRuntime {
            instance_id: "current-worker-2-1-a".into(),
            first_ms: 30_000,
            waited_ms: 1_600,
            requester_version: requester.map(str::to_owned),
            relation: "leases_3".into(),
            since_unix_ms: 0,
            explains_until_unix_ms: 0,
        };
        cell.queued_runtimes = vec![queued(None), queued(Some("0.6.9"))];
        assert_eq!(
            excuse_lines(cell),
            [
                "runtime previous-worker-1-2-b went stale: heartbeat 1.9s old, first seen at 4.0s",
                "runtime current-worker-2-1-a queued up to 1.6s behind an exclusive lock request on leases_3 by a session that names no release (0.6), first seen at 30.0s",
                "runtime current-worker-2-1-a queued up to 1.6s behind an exclusive lock request on leases_3 by awa 0.6.9, first seen at 30.0s",
            ]
        );
        let md = crate::report::markdown::render_markdown(&r);
        assert!(
            md.contains("Seen by the monitor (what can excuse a rescue):\n\n- runtime previous-worker-1-2-b went stale"),
            "{md}"
        );
    }

    #[test]
    fn the_floor_is_the_longest_cell_or_the_cpu_over_the_cores() {
        let mut r = crate::report::fixture::report();
        let longest = r.cells.iter().map(|c| c.elapsed_ms).max().unwrap();
        // 98.52 s of CPU on 2 cores is 49.26 s, more than the longest cell.
        assert!(longest < 49_260, "{longest}");
        assert_eq!(
            floor_row(&r).unwrap(),
            format!(
                "49.2s = max(longest cell {}, CPU 1m38s / 2 cores); wall time 3.01x the floor",
                duration(longest)
            )
        );
        // The preparation before the cells' window is not weighed: its
        // builds' CPU is not counted either.
        r.run.end.prepare_ms = 48_000;
        assert_eq!(
            floor_row(&r).unwrap(),
            format!(
                "49.2s = max(longest cell {}, CPU 1m38s / 2 cores); the cells' wall time 2.04x the floor",
                duration(longest)
            )
        );
        assert!(
            run_rows(&r, str::to_owned, str::to_owned)[2]
                .1
                .starts_with("2m28s: 48.0s preparing (artifacts), then 1m40s of cells ("),
            "{:?}",
            run_rows(&r, str::to_owned, str::to_owned)[2]
        );
        r.run.header.cores = 8;
        assert_eq!(r.run.floor_ms(longest), Some(longest));
        assert!(
            floor_row(&r)
                .unwrap()
                .starts_with(&format!("{} = ", duration(longest)))
        );
        r.run.header.cores = 0;
        assert_eq!(floor_row(&r), None);
    }

    #[test]
    fn the_cpu_row_names_the_containers_and_the_engine_shares() {
        let mut r = crate::report::fixture::report();
        assert_eq!(containers_cpu(&r.run), "");
        r.run.end.container_cpu_ms = Some(62_000);
        r.run.end.container_cpu_source = Some(crate::fleet::CpuSource::Cgroup);
        assert_eq!(
            containers_cpu(&r.run),
            ", of which containers 1m02s (cgroup counter)"
        );
        r.run.end.engine_cpu_ms = Some(41_000);
        assert_eq!(
            containers_cpu(&r.run),
            ", of which containers 1m02s (cgroup counter) and the engine 41.0s"
        );
    }

    #[test]
    fn the_schedule_row_counts_the_starts_held_back() {
        let mut r = crate::report::fixture::report();
        let planned = r.run.header.schedule.clone();
        assert_eq!(schedule_row(&r), planned);
        let held = |times, ms| crate::stream::HeldBack {
            times,
            ms,
            within_ms: 10_000,
            grew_to: None,
            shrank_to: None,
        };
        r.run.end.held_back = Some(held(0, 0));
        assert_eq!(
            schedule_row(&r),
            format!("{planned}; never held a cell back")
        );
        r.run.end.held_back = Some(held(1, 4_200));
        assert_eq!(
            schedule_row(&r),
            format!(
                "{planned}; held a cell back once (4.2s in all) while a running cell had ticked starved in the last 10.0s"
            )
        );
        r.run.end.held_back = Some(held(3, 72_000));
        assert_eq!(
            schedule_row(&r),
            format!(
                "{planned}; held a cell back 3 times (1m12s in all) while a running cell had ticked starved in the last 10.0s"
            )
        );
        r.run.end.held_back = Some(crate::stream::HeldBack {
            grew_to: Some(7),
            shrank_to: Some(2),
            ..held(3, 72_000)
        });
        assert_eq!(
            schedule_row(&r),
            format!(
                "{planned}; held a cell back 3 times (1m12s in all) while a running cell had ticked starved in the last 10.0s; grew to 7 at once while the cores idled; went down to 2 at once while cells kept starving"
            )
        );
        // It survives report.json.
        let json = crate::report::to_json(&r).unwrap();
        assert!(json.contains("\"held_back\""), "{json}");
        assert!(json.contains("\"grew_to\": 7"), "{json}");
        assert!(json.contains("\"shrank_to\": 2"), "{json}");
        let back = crate::report::from_json(std::path::Path::new("r.json"), &json).unwrap();
        assert_eq!(back.run.end.held_back, r.run.end.held_back);
    }

    #[test]
    fn a_run_over_two_servers_has_one_column_per_server() {
        let r = crate::report::fixture::on_two_servers();
        let rows = by_server(&r).expect("two servers");
        assert_eq!(rows[0], ["cell", "pg15", "pg18"]);
        assert_eq!(rows.len(), crate::report::fixture::report().cells.len() + 2);
        let first = &rows[1];
        assert!(!first[0].contains('@'), "{first:?}");
        assert!(
            first[1].ends_with(" 3.0s") && first[2].ends_with(" 3.0s"),
            "{first:?}"
        );
        let total = rows.last().unwrap();
        assert_eq!(total[0], "total");
        assert!(by_server(&crate::report::fixture::report()).is_none());
    }

    #[test]
    fn durations_have_four_shapes() {
        for (ms, text) in [
            (0, "0ms"),
            (999, "999ms"),
            (1_000, "1.0s"),
            (12_345, "12.3s"),
            (59_999, "59.9s"),
            (60_000, "1m00s"),
            (245_000, "4m05s"),
            (3_599_999, "59m59s"),
            (3_600_000, "1h00m"),
            (3_720_000, "1h02m"),
        ] {
            assert_eq!(duration(ms), text, "{ms}");
        }
    }

    #[test]
    fn redaction_replaces_durations_and_nothing_else() {
        for ms in [0, 850, 12_345, 245_000, 3_720_000] {
            let text = format!("took {} here", duration(ms));
            assert_eq!(redact_durations(&text), "took [duration] here");
        }
        for kept in [
            "seed 42",
            "version 0.6.2",
            "12.3",
            "v1ms",
            "4m5s",
            "10msgs",
            "job 77",
            "sha 5m12sab",
        ] {
            assert_eq!(redact_durations(kept), kept);
        }
        assert_eq!(
            redact_durations("(1.0s, 20ms)|3m00s|"),
            "([duration], [duration])|[duration]|"
        );
    }

    #[test]
    fn short_digest_keeps_twelve_characters() {
        assert_eq!(short_digest("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_digest("abc"), "abc");
        assert_eq!(short_digest(""), "");
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "kill"), "1 kill");
        assert_eq!(plural(0, "cell"), "0 cells");
        assert_eq!(plural(3, "process"), "3 processes");
    }
}
