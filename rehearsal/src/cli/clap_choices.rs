//! The clap spellings of the backend, output format, colour and shell
//! choices, and their conversion into the plain enums of `vocab`, which
//! the stages below use.

use clap::ValueEnum;

use super::Cli;

/// Where worker and producer processes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Child processes of the artifact's binary.
    Process,
    /// Containers through the Docker API.
    Docker,
    /// Docker when an engine answers, else process.
    Auto,
}

/// `--format`: what stdout carries during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The summary table at the end (progress on stderr).
    Human,
    /// Every event as a JSON line as it happens (the lines of events.jsonl).
    Json,
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set or TERM is dumb.
    Auto,
    /// Always, even into a pipe.
    Always,
    /// Never.
    Never,
}

/// `rehearse completions SHELL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// bash
    Bash,
    /// zsh
    Zsh,
    /// fish
    Fish,
}

/// The completion script for `shell` (built in memory: clap_complete
/// panics on a write error, and a closed pipe must end quietly).
pub fn completions(shell: Shell) -> Vec<u8> {
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut Cli::command(), "rehearse", &mut script);
    script
}

impl Backend {
    /// The flag's word.
    pub fn name(self) -> &'static str {
        crate::vocab::Backend::from(self).name()
    }
}

impl From<Backend> for crate::vocab::Backend {
    fn from(backend: Backend) -> Self {
        match backend {
            Backend::Process => Self::Process,
            Backend::Docker => Self::Docker,
            Backend::Auto => Self::Auto,
        }
    }
}

impl From<Format> for crate::vocab::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Human => Self::Human,
            Format::Json => Self::Json,
        }
    }
}

impl From<Color> for crate::vocab::Color {
    fn from(color: Color) -> Self {
        match color {
            Color::Auto => Self::Auto,
            Color::Always => Self::Always,
            Color::Never => Self::Never,
        }
    }
}
