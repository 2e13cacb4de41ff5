//! How counts and durations read in every sentence a run writes.

/// 12345 -> "12,345": how counts read in the sentences observations carry.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration for humans: `850ms`, `12.3s` (tenths, truncated), `4m05s`,
/// `1h02m`; the one shape every message and report writes durations in.
pub fn duration(ms: u64) -> String {
    const MINUTE: u64 = 60_000;
    const HOUR: u64 = 60 * MINUTE;
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < MINUTE {
        format!("{}.{}s", ms / 1_000, ms % 1_000 / 100)
    } else if ms < HOUR {
        format!("{}m{:02}s", ms / MINUTE, ms % MINUTE / 1_000)
    } else {
        format!("{}h{:02}m", ms / HOUR, ms % HOUR / MINUTE)
    }
}

/// `1 job`, `2,340 jobs`, `3 processes`: a count and its noun, agreeing,
/// as every sentence of a run writes them (the noun's last word takes the `s`).
pub fn count(n: u64, one: &str) -> String {
    let noun = if n == 1 {
        one.to_owned()
    } else if one.ends_with('s') || one.ends_with('x') || one.ends_with("ch") {
        format!("{one}es")
    } else {
        format!("{one}s")
    };
    format!("{} {noun}", thousands(n))
}

/// The verb form that agrees with `n`: `agree(1, "was", "were")` is `was`.
pub fn agree<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_345), "12,345");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(0, "job"), "0 jobs");
        assert_eq!(count(1, "job"), "1 job");
        assert_eq!(count(2_340, "accepted job"), "2,340 accepted jobs");
        assert_eq!(count(3, "process"), "3 processes");
        assert_eq!(count(1, "process"), "1 process");
        assert_eq!(agree(1, "was", "were"), "was");
        assert_eq!(agree(0, "was", "were"), "were");
    }
}
