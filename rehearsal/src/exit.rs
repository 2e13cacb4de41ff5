//! Exit codes, all in one place.
//!
//! CI systems branch on these, so they are named constants and every
//! error kind maps to one in a single exhaustive `match`: adding an error
//! variant does not compile until someone decides its code.

use crate::Error;
use crate::matrix::LoadError;

/// Every selected cell met its expectation (or the command had nothing to run).
pub const ALL_MET: u8 = 0;
/// At least one cell did not meet its expectation.
pub const CELL_FAILED: u8 = 1;
/// Bad input: flags, matrix file, selection. Nothing was started.
pub const BAD_INPUT: u8 = 2;
/// Inconclusive: the harness or its infrastructure failed, or a part is not built yet.
pub const INCONCLUSIVE: u8 = 3;

pub use crate::vocab::RunOutcome;

/// The exit code of a finished command.
pub fn for_outcome(outcome: RunOutcome) -> u8 {
    match outcome {
        RunOutcome::AllMet => ALL_MET,
        RunOutcome::CellFailed => CELL_FAILED,
        RunOutcome::Inconclusive => INCONCLUSIVE,
    }
}

/// The exit code of an error.
pub fn for_error(error: &Error) -> u8 {
    match error {
        Error::Matrix(LoadError::NotFound { .. }) => BAD_INPUT,
        Error::Matrix(LoadError::Read { .. }) => BAD_INPUT,
        Error::Matrix(LoadError::Invalid { .. }) => BAD_INPUT,
        Error::Select(_) => BAD_INPUT,
        Error::BadFlag { .. } => BAD_INPUT,
        Error::CurrentDir(_) => INCONCLUSIVE,
        Error::Output(_) => INCONCLUSIVE,
        Error::Json(_) => INCONCLUSIVE,
        Error::Artifact(e) if e.is_bad_input() => BAD_INPUT,
        Error::Artifact(_) => INCONCLUSIVE,
        Error::Engine(_) => INCONCLUSIVE,
        Error::Image(e) if e.is_bad_input() => BAD_INPUT,
        Error::Image(_) => INCONCLUSIVE,
        Error::Fleet(_) => INCONCLUSIVE,
        Error::Postgres(_) => INCONCLUSIVE,
        Error::MissingServer(_) => BAD_INPUT,
        Error::PlanFile(_) => BAD_INPUT,
        Error::Mutate(e) if e.is_bad_input() => BAD_INPUT,
        Error::Mutate(_) => INCONCLUSIVE,
        Error::Harness(_) => INCONCLUSIVE,
    }
}

/// The exit code for a command line clap refused (or `--help`/`--version`, which succeed).
pub fn for_clap(error: &clap::Error) -> u8 {
    if error.use_stderr() {
        BAD_INPUT
    } else {
        ALL_MET
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SelectError;

    #[test]
    fn codes_are_the_documented_ones() {
        assert_eq!(
            (ALL_MET, CELL_FAILED, BAD_INPUT, INCONCLUSIVE),
            (0, 1, 2, 3)
        );
        assert_eq!(for_outcome(RunOutcome::AllMet), 0);
        assert_eq!(for_outcome(RunOutcome::CellFailed), 1);
        assert_eq!(for_outcome(RunOutcome::Inconclusive), 3);
    }

    #[test]
    fn errors_map_to_bad_input_or_inconclusive() {
        let nothing = Error::Select(SelectError::Nothing {
            matrices: "smoke".into(),
        });
        assert_eq!(for_error(&nothing), BAD_INPUT);
        let not_found = Error::Matrix(LoadError::NotFound { start: "/".into() });
        assert_eq!(for_error(&not_found), BAD_INPUT);
        assert_eq!(
            for_error(&Error::Harness("the async runtime did not start".into())),
            INCONCLUSIVE
        );
        let broken_pipe = Error::Output(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(for_error(&broken_pipe), INCONCLUSIVE);
    }

    #[test]
    fn artifacts_split_between_bad_input_and_infrastructure() {
        use crate::artifacts::ArtifactError;
        let image = Error::Artifact(ArtifactError::ImageUnsupported {
            name: "previous".into(),
            reference: "registry/awa:0.6".into(),
        });
        assert_eq!(for_error(&image), BAD_INPUT);
        let build = Error::Artifact(ArtifactError::Build {
            name: "current".into(),
            detail: "cargo exited with 101".into(),
        });
        assert_eq!(for_error(&build), INCONCLUSIVE);
        assert_eq!(
            for_error(&Error::Postgres("initdb not found".into())),
            INCONCLUSIVE
        );
        assert_eq!(
            for_error(&Error::Harness("no runtime".into())),
            INCONCLUSIVE
        );
    }
}
