//! Human durations for flags and `AWA_*` variables: `250ms`, `2s`, `1m`.

use std::time::Duration;

/// Parse `N`, `Nms`, `Ns` or `Nm` (a bare number is milliseconds).
// A String: flags' value parser hands it to clap, which prints it as it is.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "ms"),
    };
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected a whole number with ms, s or m, like 250ms or 2s")
    })?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!(
            "invalid duration {s:?}: unknown unit {unit:?}; use ms, s or m, like 250ms or 2s"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_and_rejected() {
        for (input, ms) in [
            ("250ms", 250),
            ("2s", 2000),
            ("1m", 60_000),
            ("1500", 1500),
            (" 3s ", 3000),
        ] {
            assert_eq!(
                parse_duration(input).unwrap(),
                Duration::from_millis(ms),
                "{input}"
            );
        }
        for bad in ["", "s", "2h", "1.5s", "-1s", "ms5"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }
}
