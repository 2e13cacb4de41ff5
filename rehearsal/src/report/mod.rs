//! Report: the last pipeline stage, turning a finished run into files a
//! release engineer attaches to a release and CI reads.
//!
//! One model, many renderers. The driver fills a [`RunReport`] (run,
//! artifacts, one [`CellReport`] per cell) and calls [`write_all`], which
//! writes into the run's folder ([`report_dir`]):
//!
//! | file | from | for |
//! |---|---|---|
//! | `report.json` | [`to_json`] | machines, and re-rendering; versioned ([`FORMAT_VERSION`]) |
//! | `report.md` | [`render_markdown`] | the release: verdicts, replay, commit, artifacts with digests |
//! | `junit.xml` | [`render_junit`] | CI: one testcase per cell |
//! | `report.html` | [`render_html`] | reviewers: an SVG timeline per cell |
//!
//! `rehearse report DIR` reads `report.json` back ([`read_json`], which
//! refuses a newer major format) and re-renders the other three with
//! [`render_all`]. The [`terminal`] module has the end-of-run summary
//! table and the per-cell progress bars.
//!
//! Every renderer is a pure function from the model to a `String`, so
//! tests compare text. Durations are all written by one function (shapes
//! `850ms`, `12.3s`, `4m05s`, `1h02m`) and no renderer prints the report
//! folder's path, so redacting a snapshot takes one pass.
//!
//! ```
//! use rehearsal::report;
//! use std::path::Path;
//!
//! let dir = report::report_dir(Path::new("reports"), "20261130T014512Z", "3f2a9c1");
//! assert_eq!(dir, Path::new("reports/20261130T014512Z-3f2a9c1"));
//! assert_eq!(report::text::duration(245_000), "4m05s");
//! ```

pub mod checklist;
mod collect;
mod folder;
mod html;
mod json;
mod junit;
mod markdown;
pub mod model;
mod schedule_history;
mod score;
pub mod terminal;
pub mod text;

#[cfg(test)]
pub(crate) mod fixture;

pub use crate::stamp::{self, UtcStamp, utc};
pub use collect::{Collector, EVENTS_JSONL, event_line, proved, read_events, replay};
pub use folder::{
    JUNIT_XML, REPORT_HTML, REPORT_JSON, REPORT_MD, render_all, report_dir, write_all,
};
pub use html::{
    Colours, Kind, MARKED_PHASES, Representation, RingSeries, Series, per_second, pinned_at_ms,
    render_html, ring_generations, timeline_svg,
};
pub use json::{ReportError, from_json, read_json, to_json};
pub use junit::render_junit;
pub use markdown::render_markdown;
pub use model::{
    ArtifactInfo, CellReport, FORMAT_VERSION, RunEnd, RunHeader, RunInfo, RunReport, Tally,
    verdict_name,
};
