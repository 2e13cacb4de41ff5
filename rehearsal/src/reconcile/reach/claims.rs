//! `mixed_claims`: workers of two versions both started attempts.

/// Workers of at least two versions started attempts (`claimed_by`).
pub(super) fn mixed_claims(claimed_by: &[String]) -> (bool, String) {
    match claimed_by {
        [] => (false, "no worker started an attempt".into()),
        [one] => (false, format!("only {one} workers started attempts")),
        many => (
            true,
            format!("workers of {} started attempts", many.join(" and ")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::one;
    use crate::matrix::Reach;
    use crate::observe::Observations;

    #[test]
    fn mixed_claims_needs_two_versions() {
        let obs = Observations::default();
        assert!(!one(Reach::MixedClaims, &obs, &["0.7.0".into()]).reached);
        assert!(one(Reach::MixedClaims, &obs, &["0.6.2".into(), "0.7.0".into()]).reached);
    }
}
