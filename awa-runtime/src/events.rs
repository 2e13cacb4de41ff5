//! Machine-readable events: one JSON object per line on stdout, the
//! channel the orchestrator reads. Everything else goes to stderr.

use serde_json::{Value, json};
use std::io::Write;

/// Print one event line and flush it, so a reader sees it at once.
/// `fields` must be a JSON object; `event` is added as the first key.
pub fn emit(event: &str, fields: Value) {
    let mut obj = serde_json::Map::new();
    obj.insert("event".into(), Value::String(event.into()));
    if let Value::Object(m) = fields {
        obj.extend(m);
    }
    let line = Value::Object(obj).to_string();
    let out = std::io::stdout();
    let mut lock = out.lock();
    // A closed stdout (the reader went away) must not kill the worker.
    let _ = writeln!(lock, "{line}");
    let _ = lock.flush();
}

/// Emit a `refused` event with the reason.
pub fn refused(reason: &str) {
    emit("refused", json!({ "reason": reason }));
}
