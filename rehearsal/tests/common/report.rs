//! Reading what a run wrote.

use std::path::Path;

use serde_json::Value;

/// A report folder's `report.json`.
pub fn read_report(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The cell `name` of a report.
pub fn cell<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no cell {name} in {report:#}"))
}
