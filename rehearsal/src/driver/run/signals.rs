//! Ctrl-C and SIGTERM during a run: the first stops every cell (through
//! the run's cancel), a second is only acknowledged.

use tokio::sync::watch;

use crate::stream::{Events, Note, RunEvent};

/// Ctrl-C or SIGTERM sets `cancel_tx`; a second signal is acknowledged.
pub(super) fn watch_signals(
    cancel_tx: watch::Sender<bool>,
    events: Events,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        events.send(RunEvent::Note(Note::always(
            None,
            format!(
                "rehearse: {name}: stopping every process, then writing the report of what ran"
            ),
        )));
        let _ = cancel_tx.send(true);
        // A second signal is acknowledged, not acted on: the cleanup is already bounded.
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            events.send(RunEvent::Note(Note::always(
                None,
                "rehearse: already stopping (at most a few seconds per cell)",
            )));
        }
    })
}
