//! A flag's value that parsed but that a stage cannot use: what the
//! library's `Error::BadFlag` says, for the stages below it to return.

/// `invalid --cell: "fence@pgx": ...`: the flag as typed and what is
/// wrong with its value, saying what would be valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag}: {message}")]
pub struct BadFlag {
    /// The flag, as typed (`--cell`).
    pub flag: &'static str,
    /// What is wrong and what would be valid.
    pub message: String,
}
