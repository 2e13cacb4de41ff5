//! Choices a command line makes, as plain enums the stages read.
//!
//! `cli` parses each from its flag (clap's `ValueEnum` stays there) and
//! converts it with `From`; a stage below never sees clap.

/// `--database-url` from the environment (also how `rehearse mutate`
/// hands the server to the rehearsals it runs as child processes).
pub const DATABASE_URL_ENV: &str = "REHEARSE_DATABASE_URL";

/// Where worker and producer processes run (`--backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Child processes of the artifact's binary.
    Process,
    /// Containers through the Docker API.
    Docker,
    /// Docker when an engine answers, else process.
    Auto,
}

impl Backend {
    /// The flag's word.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Process => "process",
            Backend::Docker => "docker",
            Backend::Auto => "auto",
        }
    }
}

/// What stdout carries during a run (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The summary table at the end (progress on stderr).
    Human,
    /// Every event as a JSON line as it happens (the lines of events.jsonl).
    Json,
}

/// Whether stdout is coloured (`--color`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set or TERM is dumb.
    Auto,
    /// Always, even into a pipe.
    Always,
    /// Never.
    Never,
}
