//! The `rehearse` binary: parse flags, run the library, turn the result into an exit code.

use std::io::Write;
use std::process::ExitCode;

use awa_runtime::redact::RedactingWriter;
use rehearsal::cli::Cli;
use rehearsal::{Environment, exit};

fn main() -> ExitCode {
    // A busy process of `--stress` (rehearse re-executed by a run): spin, nothing else.
    if let Some(parent) = rehearsal::stress::busy_request(std::env::args_os()) {
        rehearsal::stress::spin(parent);
    }
    awa_runtime::redact::install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors and --help both print here; only the code differs.
            // clap may quote a value it refused, so the text is redacted.
            let text = awa_runtime::redact::redact(&e.render().to_string());
            if e.use_stderr() {
                let _ = write!(std::io::stderr(), "{text}");
            } else {
                let _ = write!(std::io::stdout(), "{text}");
            }
            return ExitCode::from(exit::for_clap(&e));
        }
    };
    let result = Environment::from_process().and_then(|env| {
        // Unlocked handles: `run` has progress written from other threads,
        // which would wait forever on a lock held here for the whole command.
        // Secrets (a --database-url password) never reach the terminal.
        let mut out = RedactingWriter::new(std::io::stdout());
        let mut err = RedactingWriter::new(std::io::stderr());
        rehearsal::execute(&cli, &env, &mut out, &mut err)
    });
    match result {
        Ok(outcome) => ExitCode::from(exit::for_outcome(outcome)),
        // `rehearse plan --json | head -1`: the reader left; like other
        // Unix tools, stop quietly and successfully.
        Err(e) if e.is_broken_pipe() => ExitCode::from(exit::ALL_MET),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}", e.chain());
            ExitCode::from(exit::for_error(&e))
        }
    }
}
