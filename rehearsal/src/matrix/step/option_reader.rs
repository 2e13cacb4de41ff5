//! The options of one step table read as types, each problem recorded
//! at its own line and column: strings, booleans, counts in a range,
//! durations, choices with a did-you-mean, declared artifacts, checks.

use std::collections::BTreeSet;
use std::ops::Range;

use toml::{Spanned, Value};

use super::super::diagnostic::{Problems, did_you_mean};
use super::super::duration::Duration;
use super::super::model::{CHECK_NAMES, Check, LEADER_IS};
use super::{describe, options_of};

/// Reads the options of one step table, recording problems as it goes.
pub(super) struct Reader<'a, 's> {
    pub(super) sink: &'a mut Problems<'s>,
    pub(super) context: String,
    pub(super) step: &'static str,
    pub(super) table: Range<usize>,
    pub(super) entries: &'a [(Spanned<String>, Spanned<Value>)],
    pub(super) artifacts: &'a BTreeSet<String>,
    pub(super) ok: bool,
}

impl<'a> Reader<'a, '_> {
    pub(super) fn fail(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        self.ok = false;
        self.sink.error(span, &self.context, message);
    }

    pub(super) fn get(&self, key: &str) -> Option<&'a Spanned<Value>> {
        self.entries
            .iter()
            .find(|(k, _)| k.get_ref() == key)
            .map(|(_, v)| v)
    }

    pub(super) fn span_of(&self, key: &str) -> Option<Range<usize>> {
        self.get(key).map(Spanned::span)
    }

    pub(super) fn reject_unknown_options(&mut self) {
        let allowed = options_of(self.step);
        let unknown: Vec<&Spanned<String>> = self
            .entries
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.get_ref() != self.step && !allowed.contains(&k.get_ref().as_str()))
            .collect();
        for key in unknown {
            let name = key.get_ref();
            let message = if allowed.is_empty() {
                format!("unknown option \"{name}\"; {} takes no options", self.step)
            } else {
                format!(
                    "unknown option \"{name}\" for {}{}; expected one of {}",
                    self.step,
                    did_you_mean(name, allowed.iter().copied()),
                    allowed.join(", ")
                )
            };
            self.fail(Some(key.span()), message);
        }
    }

    /// A string option; a wrong type is reported against `expected`.
    fn string(&mut self, key: &str, expected: &str) -> Option<(&'a str, Range<usize>)> {
        let value = self.get(key)?;
        match value.get_ref() {
            Value::String(s) => Some((s.as_str(), value.span())),
            other => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be {expected}, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn known_artifact(&mut self, name: &str, span: Range<usize>) -> Option<String> {
        if self.artifacts.contains(name) {
            return Some(name.to_owned());
        }
        let declared: Vec<&str> = self.artifacts.iter().map(String::as_str).collect();
        let message = if declared.is_empty() {
            format!(
                "unknown artifact \"{name}\"; no artifacts are declared: add an [artifacts.{name}] table"
            )
        } else {
            format!(
                "unknown artifact \"{name}\"{}; declared artifacts: {}",
                did_you_mean(name, declared.iter().copied()),
                declared.join(", ")
            )
        };
        self.fail(Some(span), message);
        None
    }

    /// The step key's value, naming a declared artifact.
    pub(super) fn head_artifact(&mut self) -> Option<String> {
        let (name, span) = self.string(self.step, "an artifact name (a string)")?;
        self.known_artifact(name, span)
    }

    /// An optional option naming a declared artifact.
    pub(super) fn artifact(&mut self, key: &str) -> Option<String> {
        let (name, span) = self.string(key, "an artifact name (a string)")?;
        self.known_artifact(name, span)
    }

    pub(super) fn boolean(&mut self, key: &str, default: bool) -> bool {
        let Some(value) = self.get(key) else {
            return default;
        };
        match value.get_ref() {
            Value::Boolean(b) => *b,
            other => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be true or false, found {}", describe(other)),
                );
                default
            }
        }
    }

    /// An integer option in `min..=max`, or `default` when absent.
    pub(super) fn count(&mut self, key: &str, default: u64, min: u64, max: u64) -> u64 {
        self.count_opt(key, min, max).unwrap_or(default)
    }

    pub(super) fn count_opt(&mut self, key: &str, min: u64, max: u64) -> Option<u64> {
        let value = self.get(key)?;
        let expected = format!("an integer from {min} to {max}");
        match value.get_ref() {
            Value::Integer(n) if (min as i128..=max as i128).contains(&(*n as i128)) => {
                Some(*n as u64)
            }
            Value::Integer(n) => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be {expected}, found {n}"),
                );
                None
            }
            other => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be {expected}, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn parse_duration(&mut self, key: &str) -> Option<Duration> {
        let (text, span) = self.string(key, "a duration like \"2s\"")?;
        match text.parse::<Duration>() {
            Ok(d) => Some(d),
            Err(e) => {
                self.fail(Some(span), e.to_string());
                None
            }
        }
    }

    /// An optional duration option.
    pub(super) fn duration(&mut self, key: &str) -> Option<Duration> {
        self.parse_duration(key)
    }

    /// The step key's value as a duration longer than zero.
    pub(super) fn head_positive_duration(&mut self) -> Option<Duration> {
        let d = self.parse_duration(self.step)?;
        if d.is_zero() {
            let span = self.span_of(self.step);
            self.fail(span, format!("{} must be longer than 0s", self.step));
            return None;
        }
        Some(d)
    }

    fn pick<T: Copy>(&mut self, key: &str, choices: &[(&str, T)]) -> Option<T> {
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        let (text, span) = self.string(key, &format!("one of {}", names.join(", ")))?;
        if let Some((_, v)) = choices.iter().find(|(n, _)| *n == text) {
            return Some(*v);
        }
        self.fail(
            Some(span),
            format!(
                "invalid {key} \"{text}\"{}; expected one of {}",
                did_you_mean(text, names.iter().copied()),
                names.join(", ")
            ),
        );
        None
    }

    /// The step key's value, one of `choices`.
    pub(super) fn head_choice<T: Copy>(&mut self, choices: &[(&str, T)]) -> Option<T> {
        self.pick(self.step, choices)
    }

    /// An option that is one of `choices`, or `default` when absent or invalid.
    pub(super) fn choice<T: Copy>(&mut self, key: &str, choices: &[(&str, T)], default: T) -> T {
        self.pick(key, choices).unwrap_or(default)
    }

    pub(super) fn head_check(&mut self) -> Option<Check> {
        let (text, span) = self.string(self.step, "a check name (a string)")?;
        match text.parse::<Check>() {
            Ok(Check::LeaderIs(artifact)) => {
                let start = span.start + 1 + LEADER_IS.len();
                self.known_artifact(&artifact, start..span.end)
                    .map(Check::LeaderIs)
            }
            Ok(check) => Some(check),
            Err(()) => {
                let hint = if text.starts_with("leader_is") {
                    String::new()
                } else {
                    did_you_mean(text, CHECK_NAMES)
                };
                self.fail(
                    Some(span),
                    format!(
                        "unknown check \"{text}\"{hint}; expected one of {}, {LEADER_IS}<artifact>",
                        CHECK_NAMES.join(", ")
                    ),
                );
                None
            }
        }
    }
}
