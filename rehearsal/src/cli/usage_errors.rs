//! clap's refusals reworded where they would mislead: a bad value read from
//! an environment variable names the variable, an unknown subcommand offers
//! the nearest one, a run flag before a subcommand says where it goes.

use std::ffi::OsString;

/// `error`, reworded when the value it refuses came from an environment
/// variable rather than the command line: a CI log must say which
/// variable to fix, not a flag nobody typed.
pub(super) fn from_variable(
    command: &clap::Command,
    args: &[OsString],
    error: clap::Error,
) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() == ErrorKind::InvalidSubcommand {
        return unknown_subcommand(command, error);
    }
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return error;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        error.get(ContextKind::InvalidArg),
        error.get(ContextKind::InvalidValue),
    ) else {
        return error;
    };
    let names = |long: &str| arg == &format!("--{long}") || arg.starts_with(&format!("--{long} "));
    let Some((long, var)) = env_bound(command).into_iter().find(|(long, var)| {
        names(long)
            && !typed(args, long)
            && std::env::var_os(var).is_some_and(|v| v.to_string_lossy() == *value)
    }) else {
        return error;
    };
    let why = match (
        error.get(ContextKind::ValidValue),
        std::error::Error::source(&error),
    ) {
        (Some(ContextValue::Strings(valid)), _) => {
            format!("it must be one of {}", valid.join(", "))
        }
        (_, Some(source)) => source.to_string(),
        _ => format!("it is not a value --{long} accepts"),
    };
    // The variable's value is the user's own; a DSN's password is hidden.
    let shown = awa_runtime::redact::redact(value);
    clap::Error::raw(
        ErrorKind::ValueValidation,
        format!(
            "invalid value '{shown}' in the environment variable {var} (read as --{long}): {why}; fix {var} or unset it\n"
        ),
    )
}

/// `rehearse pln`: the subcommands listed, with the nearest one offered.
fn unknown_subcommand(command: &clap::Command, error: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let Some(ContextValue::String(word)) = error.get(ContextKind::InvalidSubcommand) else {
        return error;
    };
    let names: Vec<&str> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(clap::Command::get_name)
        .collect();
    clap::Error::raw(
        ErrorKind::InvalidSubcommand,
        format!(
            "no subcommand \"{word}\"{}; the subcommands: {} (rehearse --help says what each does)\n",
            crate::matrix::did_you_mean(word, names.iter().copied()),
            names.join(", ")
        ),
    )
}

/// Every flag bound to an environment variable, in `command` and its
/// subcommands: (long name, variable).
fn env_bound(command: &clap::Command) -> Vec<(String, String)> {
    let mut bound: Vec<(String, String)> = command
        .get_arguments()
        .filter_map(|a| {
            Some((
                a.get_long()?.to_owned(),
                a.get_env()?.to_string_lossy().into_owned(),
            ))
        })
        .collect();
    for sub in command.get_subcommands() {
        bound.extend(env_bound(sub));
    }
    bound
}

/// Whether `--long` was given on the command line (as `--long V` or `--long=V`).
fn typed(args: &[OsString], long: &str) -> bool {
    let flag = format!("--{long}");
    args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == flag || a.starts_with(&format!("{flag}="))
    })
}

/// A flag of the bare `rehearse --matrix NAME` form given on the command
/// line, as `--long`; the global flags do not count.
pub(super) fn bare_flag_given(
    command: &clap::Command,
    matches: &clap::ArgMatches,
) -> Option<String> {
    command
        .get_arguments()
        .filter(|a| !a.is_global_set())
        .find(|a| {
            matches.value_source(a.get_id().as_str())
                == Some(clap::parser::ValueSource::CommandLine)
        })
        .map(|a| {
            a.get_long()
                .map_or_else(|| a.get_id().to_string(), |l| format!("--{l}"))
        })
}
