//! UTC timestamps for `report.json` and the report folder's name,
//! without a date-time crate: the proleptic Gregorian calendar from Unix
//! seconds is a dozen lines (Howard Hinnant's `civil_from_days`).

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
    fn before_the_epoch_reads_as_the_epoch() {
        let early = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(utc(early).compact, "19700101T000000Z");
    }
}
