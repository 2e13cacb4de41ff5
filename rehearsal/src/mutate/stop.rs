//! A stop of the whole mutate run: Ctrl-C (SIGINT) or SIGTERM to
//! `rehearse mutate`.
//!
//! The signal only raises a flag; the loops that wait on children (the
//! cells' child runs, a build) look at it, pass the stop on to what they
//! started and wait for it to clean up, and the run writes the report of
//! what finished, marked interrupted. Without this, a signal to rehearse
//! alone would leave its child runs (each with a throwaway cluster and a
//! fleet) running on.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use super::run_error::RunError;

/// Whether the run was asked to stop, and by which signal. Cloned, it is
/// the same flag.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicU8>);

/// The flag's values: not asked, and each way of asking.
const NOT_ASKED: u8 = 0;
const SIGINT: u8 = 1;
const SIGTERM: u8 = 2;

impl Stop {
    /// A flag nothing raises but [`Stop::request`].
    pub fn new() -> Stop {
        Stop::default()
    }

    /// A flag SIGINT and SIGTERM raise, from now on for the rest of the
    /// process (a thread of its own waits for them; a second signal finds
    /// the flag already up and changes nothing).
    pub fn on_signals() -> std::io::Result<Stop> {
        use tokio::signal::unix::{SignalKind, signal};
        let stop = Stop::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        // Registered here, before this returns: a signal that comes while
        // the first child starts is not missed.
        let (mut int, mut term) = {
            let _inside = rt.enter();
            (
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            )
        };
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("mutate-signals".into())
            .spawn(move || {
                rt.block_on(async move {
                    loop {
                        let which = tokio::select! {
                            _ = int.recv() => SIGINT,
                            _ = term.recv() => SIGTERM,
                        };
                        let first = flag.requested().is_none();
                        flag.raise(which);
                        let name = flag.requested().unwrap_or("a signal");
                        let line = if first {
                            format!("rehearse: {name}: stopping the running cells (each cleans up its cluster and fleet), then writing the report of what finished")
                        } else {
                            "rehearse: already stopping (the running cells are cleaning up)".to_owned()
                        };
                        // What `rehearse run` prints on a signal, to the same stream.
                        let _ = writeln!(std::io::stderr(), "{line}");
                    }
                });
            })?;
        Ok(stop)
    }

    /// Asks for the stop as SIGTERM would.
    pub fn request(&self) {
        self.raise(SIGTERM);
    }

    fn raise(&self, which: u8) {
        let _ = self
            .0
            .compare_exchange(NOT_ASKED, which, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The signal that asked for the stop, if one did.
    pub fn requested(&self) -> Option<&'static str> {
        match self.0.load(Ordering::SeqCst) {
            NOT_ASKED => None,
            SIGINT => Some("SIGINT"),
            _ => Some("SIGTERM"),
        }
    }

    /// `Err` once the stop is asked for: what a loop returns to unwind.
    pub fn check(&self) -> Result<(), RunError> {
        match self.requested() {
            None => Ok(()),
            Some(signal) => Err(RunError::Interrupted { signal }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_is_the_one_remembered() {
        let stop = Stop::new();
        assert!(stop.check().is_ok());
        let same = stop.clone();
        same.raise(SIGINT);
        stop.request();
        assert_eq!(stop.requested(), Some("SIGINT"));
        let err = stop.check().unwrap_err();
        assert!(
            matches!(err, RunError::Interrupted { signal: "SIGINT" }),
            "{err}"
        );
    }
}
