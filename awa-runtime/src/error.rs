//! The runtime's error type and its mapping onto the process exit codes of
//! the rehearsal contract (0 clean, 2 refused, other non-zero on error).

use std::fmt;

/// Exit code of a command that did what it was asked (the rehearsal contract).
pub const EXIT_OK: i32 = 0;
/// Exit code of a guard or fence refusal (the rehearsal contract).
pub const EXIT_REFUSED: i32 = 2;
/// Exit code of bad input: an unknown flag, a malformed value.
pub const EXIT_USAGE: i32 = 2;
/// Exit code of any other failure (database unreachable, storage error).
pub const EXIT_ERROR: i32 = 1;
/// Exit code of an operator command that gave up waiting for a lock
/// another session holds (nothing was changed; the holders are named).
pub const EXIT_BLOCKED: i32 = 3;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A guard or fence said no; nothing was written.
    #[error("refused: {0}")]
    Refused(String),
    /// A flag or environment variable has a value we cannot use.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The database could not be reached.
    #[error(
        "cannot connect to the database ({target}): {detail}; check --database-url / AWA_DATABASE_URL and that the server is up"
    )]
    Connect {
        target: String,
        detail: String,
        /// The server's SQLSTATE when it answered and refused the session
        /// (class 28 for a login it refused, 3D000 for a database it does
        /// not have); `None` when it did not answer. Not in the message,
        /// which `detail` already words: a caller that decides on the kind
        /// of failure reads it here instead of in the text.
        sqlstate: Option<String>,
    },
    /// A statement failed.
    #[error("{context}: {detail}")]
    Db {
        context: String,
        detail: String,
        transient: bool,
        /// The server's SQLSTATE, when the server answered.
        sqlstate: Option<String>,
    },
    /// An operator command gave up waiting for a lock; the holders are named.
    #[error("{0}")]
    Blocked(Box<crate::locks::Blocked>),
    /// Local I/O (stdout closed, signal setup).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Refused(_) => EXIT_REFUSED,
            Error::Config(_) => EXIT_USAGE,
            Error::Blocked(_) => EXIT_BLOCKED,
            Error::Connect { .. } | Error::Db { .. } | Error::Io(_) => EXIT_ERROR,
        }
    }

    /// True for failures a retry after reconnecting may cure (the server
    /// restarted, the connection dropped).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::Db {
                    transient: true,
                    ..
                }
        )
    }

    /// The server's SQLSTATE of a failed statement.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Db { sqlstate, .. } => sqlstate.as_deref(),
            _ => None,
        }
    }

    /// Wrap a driver error with what we were doing.
    pub fn db(context: impl fmt::Display, e: tokio_postgres::Error) -> Error {
        Error::Db {
            context: context.to_string(),
            transient: is_transient(&e),
            sqlstate: e.code().map(|c| c.code().to_string()),
            detail: describe(&e),
        }
    }
}

/// A readable one-line account of a driver error: the server's message,
/// detail and hint, or the transport error chain; secrets redacted.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(d) = db.detail() {
            s.push_str(&format!("; detail: {d}"));
        }
        if let Some(h) = db.hint() {
            s.push_str(&format!("; hint: {h}"));
        }
        return crate::redact::redact(&s);
    }
    chain(e)
}

/// An error and its causes on one line, `: `-separated, with secrets
/// redacted: how the whole workspace shows an error in a message.
pub fn chain(e: &dyn std::error::Error) -> String {
    chain_joined(e, ": ")
}

/// An error and its causes joined by `separator` (`"\n  caused by: "`
/// for one cause a line), with secrets redacted. A cause whose text the
/// message before it already includes is left out, so each is said once.
pub fn chain_joined(e: &dyn std::error::Error, separator: &str) -> String {
    let mut text = e.to_string();
    let mut last = text.clone();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !last.contains(&said) {
            text.push_str(separator);
            text.push_str(&said);
        }
        last = said;
        source = cause.source();
    }
    crate::redact::redact(&text)
}

/// Connection-level failures: closed connections, server shutdown or
/// crash recovery (SQLSTATE classes 08 and 57), serialization conflicts.
fn is_transient(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            if permanent_read_as_transient(c) {
                return true;
            }
            // 25P03: the server ended a session left idle in a
            // transaction (the process was stopped there); a new
            // connection carries on. Whether the client reads that FATAL
            // or only sees the socket close is a race.
            c.starts_with("08") || c.starts_with("57") || matches!(c, "40001" | "40P01" | "25P03")
        }
        None => true,
    }
}

/// The seeded defect [`crate::failpoint::PERMANENT_AS_TRANSIENT`]: an
/// access rule violation (SQLSTATE class 42, a revoked privilege among
/// them) read as a failure a retry may cure.
fn permanent_read_as_transient(sqlstate: &str) -> bool {
    crate::failpoint::armed(crate::failpoint::PERMANENT_AS_TRANSIENT) && sqlstate.starts_with("42")
}

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
