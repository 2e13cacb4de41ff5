//! The parsers of flag values clap calls, and the defaults of `--jobs` and
//! `--retries`: a bad value is refused (exit 2) before anything is built.

use super::{Jobs, Stress};

/// `--jobs` when not given: `auto`, as many cells as ask half again the
/// cores' CPU (one alone leaves the machine idle while it holds), by a
/// report that covers the cells or else matrix.toml's `[schedule]`
/// estimate, fewer on a machine busy with other work
/// (`schedule::auto_jobs`).
pub(super) const DEFAULT_JOBS: Jobs = Jobs::Auto;
/// `--retries` when not given: two more tries, so a cell the machine
/// starved once still gets a verdict, and one inconclusive three times in
/// a row is reported as such.
pub(super) const DEFAULT_RETRIES: u32 = 2;
/// The most `--retries` accepts: past it, a cell that never gets a
/// verdict is telling something about the machine, not bad luck.
const MAX_RETRIES: u32 = 5;

/// `--jobs N|auto`.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_jobs(s: &str) -> Result<Jobs, String> {
    if s != "auto" {
        count(
            s,
            1,
            crate::schedule::MAX_JOBS,
            "cells to run at once, or auto",
        )?;
    }
    s.parse()
}

/// `--retries N`.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_retries(s: &str) -> Result<u32, String> {
    count(s, 0, MAX_RETRIES, "more tries for an inconclusive cell")
}

/// `--repeat N`.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_repeat(s: &str) -> Result<u32, String> {
    count(s, 1, crate::repeat::MAX_REPEAT, "runs of the selection")
}

/// A whole number from `min` to `max`; what it counts is named in the message.
// A String: the value parsers above return it to clap as it is.
fn count(s: &str, min: u32, max: u32, what: &str) -> Result<u32, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if n < i128::from(min) => Err(format!(
            "{n} is too small: it must be at least {min} ({what}; at most {max})"
        )),
        Ok(n) if n > i128::from(max) => Err(format!(
            "{n} is too large: it must be at most {max} ({what}; at least {min})"
        )),
        Ok(n) => u32::try_from(n).map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "\"{s}\" is not a whole number; expected {min} to {max} ({what})"
        )),
    }
}

/// `--registry HOST:PORT` (publish, list, doctor): the one shape every
/// command that takes a registry accepts, so what doctor suggests runs.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_registry(s: &str) -> Result<String, String> {
    crate::image::registry::check_host(s).map(|()| s.to_owned())
}

/// `--from-registry NAME=REPOSITORY`; the reference itself is checked
/// with the matrix, where the artifact it replaces is known.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_pull(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, reference)) if !name.is_empty() && !reference.is_empty() => {
            Ok((name.to_owned(), reference.to_owned()))
        }
        _ => Err(format!(
            "\"{s}\" is not NAME=REPOSITORY; give an artifact of the matrix and where it is published, like previous=127.0.0.1:5000/awa-runtime"
        )),
    }
}

/// `--stress cpu=N|cpu=Nx`: refused (exit 2) before anything is built.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_stress(text: &str) -> Result<Stress, String> {
    text.parse()
}

/// `--partition STRATEGY:I/N`.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_partition(text: &str) -> Result<crate::partition::Partition, String> {
    text.parse()
}

/// `--seed`: any u64, in decimal or with a 0x prefix in hex.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_seed(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => text.replace('_', "").parse::<u64>(),
    };
    parsed.map_err(|_| {
        format!(
            "\"{text}\" is not a seed; expected a number from 0 to {} (decimal, or hex with 0x)",
            u64::MAX
        )
    })
}

/// `--database-url`: checked when parsed, so a bad URL is a usage error
/// (exit 2) before anything starts. The message is redacted.
// A String: clap prints a value parser's error as it is, after the flag.
pub(super) fn parse_database_url(text: &str) -> Result<String, String> {
    awa_runtime::redact::register_dsn(text);
    crate::driver::database::check_url(text)?;
    Ok(text.to_owned())
}
