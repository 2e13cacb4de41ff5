//! The release line that changed what a runtime does and shows: 0.7.0
//! brought the flip, the start gate, stopping the handler of a lost lease,
//! and sessions named `awa <version> <instance_id>`.

/// The first release with the flip (and everything listed above).
pub const FLIP_RELEASE: semver::Version = semver::Version::new(0, 7, 0);

/// Whether `version` belongs to this workspace's release line or a later
/// one: the release under rehearsal (and what it knows, the ledger
/// authority), as opposed to the released N-1 it rolls out over. Words
/// that are no release number are not.
pub fn of_this_line(version: &str) -> bool {
    // By major and minor only: a pre-release of this line (`0.7.0-rc.1`)
    // is of it, where semver orders it below `0.7.0`.
    let line = |v: &str| semver::Version::parse(v).ok().map(|v| (v.major, v.minor));
    match (line(version), line(awa_runtime::version::VERSION)) {
        (Some(v), Some(own)) => v >= own,
        _ => false,
    }
}

/// Whether a runtime reporting `version` is of [`FLIP_RELEASE`] or later;
/// `None` when `version` is not a release number.
pub fn from_flip_release(version: &str) -> Option<bool> {
    semver::Version::parse(version)
        .ok()
        .map(|v| v >= FLIP_RELEASE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_placed_around_the_flip_and_other_words_are_not() {
        assert_eq!(from_flip_release("0.6.2"), Some(false));
        assert_eq!(from_flip_release("0.7.0"), Some(true));
        assert_eq!(from_flip_release("0.8.1"), Some(true));
        assert_eq!(from_flip_release("unknown"), None);
    }

    #[test]
    fn this_line_is_the_workspace_minor_and_later() {
        let own = semver::Version::parse(awa_runtime::version::VERSION).unwrap();
        assert!(of_this_line(awa_runtime::version::VERSION));
        assert!(of_this_line(&format!("{}.{}.0", own.major, own.minor)));
        assert!(of_this_line(&format!("{}.{}.0", own.major, own.minor + 1)));
        let older = format!("{}.{}.9", own.major, own.minor.saturating_sub(1));
        assert_eq!(of_this_line(&older), own.minor == 0);
        assert!(of_this_line(&format!("{}.{}.0-rc.1", own.major, own.minor)));
        assert!(!of_this_line("unknown"));
    }
}
