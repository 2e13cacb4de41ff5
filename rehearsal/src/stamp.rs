//! UTC timestamps for `report.json`, the report folder's name and the
//! lines of the process logs, without a date-time crate: the proleptic
//! Gregorian calendar from Unix seconds and back is a dozen lines each
//! (Howard Hinnant's `civil_from_days` and `days_from_civil`).

use std::time::{SystemTime, UNIX_EPOCH};

/// One instant in the two spellings a report needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UtcStamp {
    /// RFC 3339, second precision: `2026-11-30T01:45:12Z` (for [`crate::report::RunInfo`]).
    pub rfc3339: String,
    /// Compact ISO 8601 basic form: `20261130T014512Z` (for [`crate::report::report_dir`]).
    pub compact: String,
}

/// The UTC stamps of `time`; instants before 1970 read as the epoch.
pub fn utc(time: SystemTime) -> UtcStamp {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rest / 3_600, rest % 3_600 / 60, rest % 60);
    UtcStamp {
        rfc3339: format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z"),
        compact: format!("{year:04}{month:02}{day:02}T{h:02}{m:02}{s:02}Z"),
    }
}

/// Width of a [`log_time`]: every stamped line's text starts at this column.
pub const LOG_TIME_LEN: usize = 27;

/// A log line's time: RFC 3339 in UTC to the microsecond, always
/// [`LOG_TIME_LEN`] characters (`2026-12-04T15:31:22.123456Z`), so the
/// lines of several logs sort into one timeline as plain text
/// (`sort logs/CELL/*.log`); instants before 1970 read as the epoch.
pub fn log_time(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rest / 3_600, rest % 3_600 / 60, rest % 60);
    let micros = since.subsec_micros();
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{micros:06}Z")
}

/// An RFC 3339 time, as the Docker engine stamps its log lines
/// (`2026-12-04T15:31:22.123456789Z`): a fraction of up to nine digits or
/// none, `Z` or a `+HH:MM`/`-HH:MM` offset. `None` when `text` is not
/// exactly one such time, or is before 1970.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let field = |from: usize, to: usize| -> Option<u64> {
        let digits = b.get(from..to)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
    };
    let punctuated = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')]
        .iter()
        .all(|&(at, c)| b.get(at) == Some(&c));
    if !punctuated || !matches!(b.get(10), Some(b'T' | b't')) {
        return None;
    }
    let (year, month, day) = (field(0, 4)?, field(5, 7)?, field(8, 10)?);
    let (hour, minute, second) = (field(11, 13)?, field(14, 16)?, field(17, 19)?);
    if year < 1970
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    // The fraction: one to nine digits after a dot, read as nanoseconds.
    let mut at = 19;
    let mut nanos = 0u32;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if !(1..=9).contains(&digits) {
            return None;
        }
        let fraction = field(at + 1, at + 1 + digits)?;
        nanos = u32::try_from(fraction * 10u64.pow(9 - digits as u32)).ok()?;
        at += 1 + digits;
    }
    let offset: i64 = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (field(at + 1, at + 3)?, field(at + 4, at + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let secs = (h * 3_600 + m * 60) as i64;
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    let utc = u64::try_from(local as i64 - offset).ok()?;
    Some(UNIX_EPOCH + std::time::Duration::new(utc, nanos))
}

/// Days in `month` (1 to 12) of `year`.
fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to (year, month, day), for years from 1970 on:
/// the inverse of [`civil_from_days`].
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    // Years start on 1 March (see civil_from_days).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of the `days`th day after 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> UtcStamp {
        utc(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn known_instants() {
        assert_eq!(at(0).rfc3339, "1970-01-01T00:00:00Z");
        // `date -u -d @951782400`: the 2000 leap day.
        assert_eq!(at(951_782_400).rfc3339, "2000-02-29T00:00:00Z");
        assert_eq!(at(951_868_799).rfc3339, "2000-02-29T23:59:59Z");
        assert_eq!(at(951_868_800).rfc3339, "2000-03-01T00:00:00Z");
        // `date -u -d 2026-11-30T01:45:12Z +%s`
        let stamp = at(1_796_003_112);
        assert_eq!(stamp.rfc3339, "2026-11-30T01:45:12Z");
        assert_eq!(stamp.compact, "20261130T014512Z");
        assert_eq!(at(4_107_542_399).rfc3339, "2100-02-28T23:59:59Z");
        assert_eq!(at(4_107_542_400).rfc3339, "2100-03-01T00:00:00Z");
    }

    #[test]
    fn log_times_are_fixed_width_microseconds() {
        let at = |secs: u64, nanos: u32| log_time(UNIX_EPOCH + Duration::new(secs, nanos));
        for (time, text) in [
            (at(0, 0), "1970-01-01T00:00:00.000000Z"),
            // Nanoseconds are cut to microseconds, never rounded up into the next second.
            (
                at(1_796_003_112, 999_999_999),
                "2026-11-30T01:45:12.999999Z",
            ),
            (at(951_782_400, 123_000_000), "2000-02-29T00:00:00.123000Z"),
            (at(4_107_542_399, 1_000), "2100-02-28T23:59:59.000001Z"),
            (
                log_time(UNIX_EPOCH - Duration::from_secs(10)),
                "1970-01-01T00:00:00.000000Z",
            ),
        ] {
            assert_eq!(time, text);
            assert_eq!(time.len(), LOG_TIME_LEN);
        }
    }

    #[test]
    fn rfc3339_times_are_read_with_any_fraction_and_offset() {
        let at = |secs: u64, nanos: u32| Some(UNIX_EPOCH + Duration::new(secs, nanos));
        for (text, time) in [
            // What the Docker engine writes: nine digits, UTC.
            (
                "2026-11-30T01:45:12.123456789Z",
                at(1_796_003_112, 123_456_789),
            ),
            ("2026-11-30T01:45:12Z", at(1_796_003_112, 0)),
            ("2026-11-30T01:45:12.5Z", at(1_796_003_112, 500_000_000)),
            ("2026-11-30t01:45:12.000001z", at(1_796_003_112, 1_000)),
            (
                "2026-11-30T02:45:12.25+01:00",
                at(1_796_003_112, 250_000_000),
            ),
            ("2026-11-29T20:15:12-05:30", at(1_796_003_112, 0)),
            ("2000-02-29T00:00:00Z", at(951_782_400, 0)),
            ("2100-03-01T00:00:00Z", at(4_107_542_400, 0)),
            ("1970-01-01T00:00:00.000000Z", at(0, 0)),
            // Not one time: refused, never half read.
            ("2026-11-30T01:45:12", None),
            ("2026-11-30T01:45:12.Z", None),
            ("2026-11-30T01:45:12.1234567890Z", None),
            ("2026-11-30 01:45:12Z", None),
            ("2026-11-30T01:45:12Z ", None),
            ("2026-13-30T01:45:12Z", None),
            ("2026-02-29T01:45:12Z", None),
            ("2026-11-30T24:00:00Z", None),
            ("2026-11-30T01:45:12+1:00", None),
            ("1969-12-31T23:59:59Z", None),
            ("1970-01-01T00:30:00+01:00", None),
            ("{\"event\":\"ready\"}", None),
            ("", None),
        ] {
            assert_eq!(parse_rfc3339(text), time, "{text}");
        }
        // What log_time writes reads back to the microsecond.
        let now = UNIX_EPOCH + Duration::new(1_796_003_112, 654_321_000);
        assert_eq!(parse_rfc3339(&log_time(now)), Some(now));
    }

    #[test]
    fn before_the_epoch_reads_as_the_epoch() {
        let early = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(utc(early).compact, "19700101T000000Z");
    }
}
