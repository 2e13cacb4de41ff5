//! report.html in a real browser: a real run of two small cells (one
//! that passes, one that expects a finding a clean build never produces,
//! so it fails), its page loaded by Debian's headless `chromium`. The
//! screenshot must be a PNG, and in the DOM the browser built every cell
//! must have its timeline with non-empty series, the failing cell open
//! and the passing one folded.
//!
//! Without chromium on PATH the test says so loudly and passes; `.ci/run`
//! installs it.

pub mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::matrix::current_only;
use common::rehearse::on_scratch;
use common::scratch::Scratch;
use rehearsal::report::REPORT_HTML;

const WORKLOAD: &str = "rate_per_s = 100
backlog = 50
mix = { complete = 8, retry_once = 1, sleep = 1 }";

const CELLS: &str = r#"
[[cell]]
name = "kept"
about = "a small fleet with a kill: every job kept"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "2s" },
  { kill = "worker", after_started = 5 },
  { hold = "1s" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "missed"
about = "expects a lost job a clean build never loses, so it fails"
fresh_install = true
expect = { detect = "lost" }
steps = [
  { fleet = "current", workers = 1, producers = 1 },
  { load = "on" },
  { hold = "2s" },
  { load = "off" },
  { drain = "30s" },
]

[[checklist]]
item = "hard kills with crash and heartbeat rescue asserted"
cells = ["kept"]
"#;

/// Appended to a copy of the page (the report itself runs no script):
/// at 1400x900, whether the page scrolls sideways and where the verdict,
/// the checklist and the failing cells sit, written into the DOM.
const MEASURE: &str = r#"<script>
const bottomOf = (sel) => { const e = document.querySelector(sel); return e ? Math.round(e.getBoundingClientRect().bottom) : -1; };
document.body.setAttribute("data-measured", JSON.stringify({
  overflow: document.documentElement.scrollWidth - window.innerWidth,
  width: window.innerWidth,
  height: window.innerHeight,
  verdict: bottomOf("p.outcome"),
  checklist: bottomOf("table.checklist"),
  missed: bottomOf("ul.missed"),
}));
</script>"#;

fn skipped(what: &str) {
    eprintln!("##################################################################");
    eprintln!("## SKIPPED: {what}");
    eprintln!("##################################################################");
}

/// `chromium` (Debian's name) or `chromium-browser`, from PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs headless chromium on `page` with `args`, a throwaway profile, and
/// no sandbox (it refuses to start as root with one); killed after 90 s.
fn headless(browser: &Path, profile: &Path, args: &[String], page: &Path) -> Output {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let started = Instant::now();
    while child.try_wait().expect("wait for chromium").is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("chromium's output");
    assert!(
        output.status.success(),
        "chromium {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs the two cells and returns the run's report folder.
fn run_matrix(scratch: &Scratch) -> PathBuf {
    let output = on_scratch(
        scratch,
        &[
            "--cell", "kept", "--cell", "missed", "--seed", "9", "--quiet",
        ],
    )
    // The page, not the backend, is under test here.
    .args(["--backend", "process"])
    .output()
    .expect("run rehearse");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // "missed" fails by design; "kept" must pass (checked in the page below).
    assert_eq!(output.status.code(), Some(1), "stderr:\n{stderr}");
    scratch.report_dir()
}

/// The part of the DOM from cell `name`'s section to its end.
fn section<'a>(dom: &'a str, name: &str) -> &'a str {
    let start = dom
        .find(&format!("<section class=\"cell\" id=\"cell-{name}\">"))
        .unwrap_or_else(|| panic!("no section for cell {name}"));
    let rest = &dom[start..];
    &rest[..rest.find("</section>").expect("the section ends")]
}

/// The `points` of every series polyline of a section, by what it draws.
fn series(section: &str) -> Vec<(String, String)> {
    section
        .split("<polyline class=\"series\" ")
        .skip(1)
        .map(|rest| {
            let tag = &rest[..rest.find('>').unwrap()];
            let points = tag
                .split(" points=\"")
                .nth(1)
                .map(|p| p[..p.find('"').unwrap()].to_owned())
                .unwrap_or_default();
            let what = tag[..tag.find(" stroke=").unwrap_or(tag.len())].to_owned();
            (what, points)
        })
        .collect()
}

#[test]
fn the_report_renders_in_headless_chromium_with_a_timeline_per_cell() {
    let Some(browser) = chromium() else {
        skipped("report.html in a browser: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let scratch = Scratch::with_matrix("html", "run", &current_only(WORKLOAD, CELLS));
    let folder = run_matrix(&scratch);
    let page = folder.join(REPORT_HTML);
    let profile = scratch.path().join("chromium-profile");

    // Kept after the test, to look at: target/tmp/report-html/report.png.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("report.png");
    let _ = std::fs::remove_file(&png);
    let shot = format!("--screenshot={}", png.display());
    headless(
        &browser,
        &profile,
        &[shot, "--window-size=1280,2400".into()],
        &page,
    );
    let bytes = std::fs::read(&png).expect("the screenshot was written");
    assert!(bytes.len() > 1_000, "a {} byte screenshot", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    eprintln!("screenshot: {}", png.display());

    let dumped = headless(&browser, &profile, &["--dump-dom".into()], &page);
    let dom = String::from_utf8(dumped.stdout).expect("the DOM is UTF-8");
    std::fs::write(shots.join("report.dom.html"), &dom).unwrap();
    for name in ["kept", "missed"] {
        let cell = section(&dom, name);
        assert_eq!(cell.matches("<svg ").count(), 1, "{name}: one timeline");
        let drawn = series(cell);
        for kind in ["accepted", "started", "finished"] {
            assert!(
                drawn
                    .iter()
                    .any(|(what, _)| what.contains(&format!("data-kind=\"{kind}\""))),
                "{name}: no {kind} series in {drawn:?}"
            );
        }
        assert!(
            drawn.iter().any(|(what, _)| what.contains("data-ring=")),
            "{name}: no ring series in {drawn:?}"
        );
        for (what, points) in &drawn {
            let pairs: Vec<&str> = points.split_whitespace().collect();
            assert!(
                !pairs.is_empty() && pairs.iter().all(|p| p.split(',').count() == 2),
                "{name}: {what} has points {points:?}"
            );
        }
    }
    let opening = |name: &str| {
        let cell = section(&dom, name);
        cell[cell.find("<details").unwrap()..cell.find("<summary>").unwrap()].to_owned()
    };
    assert_eq!(opening("missed"), "<details class=\"cell\" open=\"\">\n");
    assert_eq!(opening("kept"), "<details class=\"cell\">\n");
    assert!(section(&dom, "kept").contains("<span class=\"v-pass\">pass</span>"));
    assert!(section(&dom, "missed").contains("<span class=\"v-fail\">fail</span>"));
    // The kill is marked on the passing cell's timeline.
    assert!(section(&dom, "kept").contains("<g data-phase=\"kill\">"));

    // The first screen at 1400x900 answers "can we ship?": the verdict,
    // the §9 checklist and the cell that did not pass all end within it,
    // and nothing (the artifacts' digests, long paths) scrolls sideways.
    let measured_page = scratch.path().join("measured.html");
    let html = std::fs::read_to_string(&page).unwrap();
    std::fs::write(
        &measured_page,
        html.replace("</body>", &format!("{MEASURE}</body>")),
    )
    .unwrap();
    let dumped = headless(
        &browser,
        &profile,
        &["--window-size=1400,900".into(), "--dump-dom".into()],
        &measured_page,
    );
    let dom = String::from_utf8(dumped.stdout).expect("the DOM is UTF-8");
    let at = dom.find("data-measured=\"").expect("the measure ran") + "data-measured=\"".len();
    let json = dom[at..at + dom[at..].find('"').unwrap()].replace("&quot;", "\"");
    let m: serde_json::Value = serde_json::from_str(&json).expect(&json);
    eprintln!("first screen at 1400x900: {m}");
    assert_eq!(m["width"], 1400, "{m}");
    assert!(
        m["overflow"].as_i64().unwrap() <= 0,
        "the page scrolls sideways: {m}"
    );
    let screen = m["height"].as_i64().unwrap();
    for part in ["verdict", "checklist", "missed"] {
        let bottom = m[part].as_i64().unwrap();
        assert!(
            (0..=screen).contains(&bottom),
            "{part} ends at {bottom}px, below the first screen: {m}"
        );
    }
}
