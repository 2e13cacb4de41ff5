//! The release line that changed what a runtime does and shows: 0.7.0
//! brought the flip, the start gate, stopping the handler of a lost lease,
//! and sessions named `awa <version> <instance_id>`.

/// The first release with the flip (and everything listed above).
pub const FLIP_RELEASE: semver::Version = semver::Version::new(0, 7, 0);

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
}
