//! Ctrl-C and SIGTERM during a run: the first stops every cell (through
//! the run's cancel), a second is only acknowledged.
//!
//! Once a run has started watching, the process keeps one listener for
//! the rest of its life ([`received`]): the handler it installs stays in
//! place after the run ends, so without it a signal that came between
//! two runs of `--repeat` (while the next one prepared its artifacts)
//! would be taken and lost. With it, that signal stops the next run as
//! soon as it starts, and `--repeat` starts no further run ([`signalled`]).

use std::sync::OnceLock;

use tokio::sync::watch;

use crate::stream::{Events, Note, RunEvent};

/// Signals received so far, and the name of the last.
type Received = (u32, &'static str);

static RECEIVED: OnceLock<watch::Receiver<Received>> = OnceLock::new();

/// The process's signal count, started on first use by a thread of its
/// own that outlives every run's async runtime.
fn received() -> watch::Receiver<Received> {
    RECEIVED
        .get_or_init(|| {
            let (tx, rx) = watch::channel((0, ""));
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let listener = std::thread::Builder::new()
                .name("rehearse-signals".into())
                .spawn(move || listen(tx, ready_tx));
            // Registered before the run goes on, so no signal falls between.
            if listener.is_ok() {
                let _ = ready_rx.recv();
            }
            rx
        })
        .clone()
}

/// Counts SIGINT and SIGTERM into `tx` until the process ends; `ready`
/// once both are registered (or could not be).
fn listen(tx: watch::Sender<Received>, ready: std::sync::mpsc::Sender<()>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        let _ = ready.send(());
        return;
    };
    runtime.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let registered = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        let _ = ready.send(());
        let (Ok(mut int), Ok(mut term)) = registered else {
            return;
        };
        loop {
            let name = tokio::select! {
                _ = int.recv() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            };
            tx.send_modify(|(n, last)| {
                *n += 1;
                *last = name;
            });
        }
    });
}

/// Whether Ctrl-C or SIGTERM came since the first run of this process
/// started watching (never before one did).
pub fn signalled() -> bool {
    RECEIVED.get().is_some_and(|rx| rx.borrow().0 > 0)
}

/// Ctrl-C or SIGTERM sets `cancel_tx` (at once when one came before this
/// run started); a later signal is acknowledged.
pub(super) fn watch_signals(
    cancel_tx: watch::Sender<bool>,
    events: Events,
) -> tokio::task::JoinHandle<()> {
    let mut rx = received();
    tokio::spawn(async move {
        let mut stopping = false;
        loop {
            let (count, name) = *rx.borrow_and_update();
            if count > 0 && !stopping {
                events.send(RunEvent::Note(Note::always(
                    None,
                    format!(
                        "rehearse: {name}: stopping every process, then writing the report of what ran"
                    ),
                )));
                let _ = cancel_tx.send(true);
                stopping = true;
            } else if count > 0 {
                // Acknowledged, not acted on: the cleanup is already bounded.
                events.send(RunEvent::Note(Note::always(
                    None,
                    "rehearse: already stopping (at most a few seconds per cell)",
                )));
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
}
