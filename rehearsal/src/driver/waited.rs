//! How long something has waited, as the driver's messages say it: the
//! budget's account of what a cell was waiting for, and a drain's.

/// `3.2 s`, `41 s`: how long something has waited, as a person says it.
pub(super) fn secs(ms: f64) -> String {
    let s = (ms / 1_000.0).max(0.0);
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_read_in_seconds() {
        assert_eq!(secs(0.0), "0.0 s");
        assert_eq!(secs(3_240.0), "3.2 s");
        assert_eq!(secs(41_200.0), "41 s");
        assert_eq!(secs(-5.0), "0.0 s");
    }
}
