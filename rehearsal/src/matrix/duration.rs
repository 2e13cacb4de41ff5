//! Durations as matrix.toml writes them: `"250ms"`, `"2s"`, `"1m30s"`.
//!
//! A tiny parser of our own rather than a crate: the grammar is four units
//! and whole numbers, and we want the error to say what would be valid.
//! Durations serialize back to the same syntax, so a plan read from
//! report.json parses again.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative span of time with millisecond resolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    millis: u64,
}

/// Units largest first; a duration lists each at most once, in this order.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

impl Duration {
    /// Zero length: valid for a pause, refused where a wait must happen.
    pub const ZERO: Duration = Duration { millis: 0 };

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Duration { millis }
    }

    /// A duration of `secs` whole seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Duration {
            millis: secs * 1_000,
        }
    }

    /// Length in milliseconds, the unit the runtime's `AWA_*` settings take.
    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// The same length as a `std` duration, for sleeping and timeouts.
    pub const fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.millis)
    }

    /// True for a zero-length duration.
    pub const fn is_zero(self) -> bool {
        self.millis == 0
    }
}

/// Why a duration string was refused; displays with the input and the syntax.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration \"{input}\": {reason}; expected a whole number and a unit (ms, s, m, h), like \"250ms\", \"2s\" or \"1m30s\""
)]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

impl DurationError {
    fn new(input: &str, reason: &'static str) -> Self {
        DurationError {
            input: input.to_owned(),
            reason,
        }
    }

    /// The short reason, without the input and the syntax reminder.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl FromStr for Duration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| DurationError::new(input, reason);
        if input.is_empty() {
            return Err(err("it is empty"));
        }
        if input.starts_with('-') {
            return Err(err("durations cannot be negative"));
        }
        let mut rest = input;
        let mut total: u64 = 0;
        // Index into UNITS of the last unit seen; the next must be smaller.
        let mut last_unit: Option<usize> = None;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(err(if rest.starts_with(char::is_alphabetic) {
                    "a unit needs a number before it"
                } else {
                    "expected a digit"
                }));
            }
            let (number, tail) = rest.split_at(digits);
            if tail.starts_with('.') || tail.starts_with(',') {
                return Err(err(
                    "use whole numbers, e.g. \"1500ms\" instead of \"1.5s\"",
                ));
            }
            let letters = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
            if letters == 0 {
                return Err(err(if tail.is_empty() {
                    "the number has no unit"
                } else {
                    "expected a unit after the number"
                }));
            }
            let (unit, tail) = tail.split_at(letters);
            let Some(unit_index) = UNITS.iter().position(|(name, _)| *name == unit) else {
                return Err(err("unknown unit"));
            };
            if last_unit.is_some_and(|last| unit_index <= last) {
                return Err(err(
                    "units must go from largest to smallest, each at most once",
                ));
            }
            last_unit = Some(unit_index);
            let value: u64 = number.parse().map_err(|_| err("the number is too large"))?;
            total = value
                .checked_mul(UNITS[unit_index].1)
                .and_then(|ms| total.checked_add(ms))
                .ok_or_else(|| err("the number is too large"))?;
            rest = tail;
        }
        Ok(Duration { millis: total })
    }
}

impl fmt::Display for Duration {
    /// Canonical form: one number in the largest unit that divides it exactly
    /// ("1500ms", "90s", "1m", "0s"), the way people write timings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis == 0 {
            return f.write_str("0s");
        }
        let (name, size) = UNITS
            .into_iter()
            .find(|(_, size)| self.millis.is_multiple_of(*size))
            .unwrap_or(("ms", 1));
        write!(f, "{}{name}", self.millis / size)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_inputs() {
        let table: &[(&str, u64)] = &[
            ("0s", 0),
            ("0ms", 0),
            ("1ms", 1),
            ("250ms", 250),
            ("1500ms", 1_500),
            ("2s", 2_000),
            ("1m", 60_000),
            ("1h", 3_600_000),
            ("1m30s", 90_000),
            ("1h2m3s4ms", 3_723_004),
            ("1s500ms", 1_500),
            ("05s", 5_000),
            ("90s", 90_000),
            ("18446744073709551615ms", u64::MAX),
        ];
        for (input, millis) in table {
            let parsed: Duration = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(parsed.as_millis(), *millis, "{input}");
        }
    }

    #[test]
    fn rejected_inputs() {
        let table: &[(&str, &str)] = &[
            ("", "it is empty"),
            ("2", "the number has no unit"),
            ("1500", "the number has no unit"),
            ("s", "a unit needs a number before it"),
            ("ms", "a unit needs a number before it"),
            (
                "1.5s",
                "use whole numbers, e.g. \"1500ms\" instead of \"1.5s\"",
            ),
            (
                "1,5s",
                "use whole numbers, e.g. \"1500ms\" instead of \"1.5s\"",
            ),
            ("-1s", "durations cannot be negative"),
            ("+1s", "expected a digit"),
            (" 2s", "expected a digit"),
            ("2 s", "expected a unit after the number"),
            ("2s ", "expected a digit"),
            ("2sec", "unknown unit"),
            ("2S", "unknown unit"),
            ("2d", "unknown unit"),
            ("2us", "unknown unit"),
            (
                "1s1m",
                "units must go from largest to smallest, each at most once",
            ),
            (
                "1s1s",
                "units must go from largest to smallest, each at most once",
            ),
            (
                "1ms1s",
                "units must go from largest to smallest, each at most once",
            ),
            ("18446744073709551616ms", "the number is too large"),
            ("18446744073709551615s", "the number is too large"),
            ("5124095576030h1551616ms", "the number is too large"),
        ];
        for (input, reason) in table {
            let err = input.parse::<Duration>().expect_err(input);
            assert_eq!(err.reason(), *reason, "{input:?}");
        }
    }

    #[test]
    fn error_message_names_input_and_syntax() {
        let err = "1.5s".parse::<Duration>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid duration \"1.5s\": use whole numbers, e.g. \"1500ms\" instead of \"1.5s\"; \
             expected a whole number and a unit (ms, s, m, h), like \"250ms\", \"2s\" or \"1m30s\""
        );
    }

    #[test]
    fn display_is_canonical_and_round_trips() {
        let table: &[(u64, &str)] = &[
            (0, "0s"),
            (1, "1ms"),
            (250, "250ms"),
            (1_500, "1500ms"),
            (2_000, "2s"),
            (60_000, "1m"),
            (90_000, "90s"),
            (3_600_000, "1h"),
            (5_400_000, "90m"),
            (3_723_004, "3723004ms"),
        ];
        for (millis, text) in table {
            let duration = Duration::from_millis(*millis);
            assert_eq!(duration.to_string(), *text);
            assert_eq!(text.parse::<Duration>(), Ok(duration));
        }
    }

    #[test]
    fn serde_uses_the_matrix_syntax() {
        let json = serde_json::to_string(&Duration::from_millis(1_500)).unwrap();
        assert_eq!(json, "\"1500ms\"");
        let back: Duration = serde_json::from_str("\"1m30s\"").unwrap();
        assert_eq!(back, Duration::from_secs(90));
        assert!(serde_json::from_str::<Duration>("\"soon\"").is_err());
    }
}
