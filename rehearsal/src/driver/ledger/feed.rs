//! The fleet view shared between the one task that feeds it from the
//! fleet's channel (and sends each process's end on the event stream) and
//! the steps that wait on a condition over it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};

use super::{Cancel, FleetView, Interrupted};
use crate::fleet::{FleetMsg, ProcId, Report};
use crate::stream::{Events, RunEvent};

/// The ledger, shared between the task that fills it and the steps that wait on it.
#[derive(Debug)]
pub struct Shared {
    ledger: Mutex<FleetView>,
    changed: Notify,
}

impl Shared {
    /// A shared ledger and the task that feeds it from `rx`; the ends of
    /// processes go on to `events` as `process_exited` of `cell`.
    pub fn start(
        t0: Instant,
        mut rx: mpsc::UnboundedReceiver<FleetMsg>,
        events: Events,
        cell: String,
    ) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            ledger: Mutex::new(FleetView::new(t0)),
            changed: Notify::new(),
        });
        let feed = shared.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                feed.apply(msg, &events, &cell);
                // Drain what else is queued before waking the waiters.
                while let Ok(msg) = rx.try_recv() {
                    feed.apply(msg, &events, &cell);
                }
                feed.changed.notify_waiters();
            }
        });
        shared
    }

    fn apply(&self, msg: FleetMsg, events: &Events, cell: &str) {
        let exited = match &msg.report {
            Report::Exited(info) => Some((msg.id, *info, msg.at)),
            _ => None,
        };
        let mut ledger = self.lock();
        ledger.apply(msg);
        if let Some((id, info, at)) = exited
            && let Some(p) = ledger.procs.get(id)
        {
            events.send(RunEvent::ProcessExited {
                cell: cell.to_owned(),
                process: p.name.clone(),
                code: info.code,
                signal: info.signal,
                at_ms: ledger.ms(at),
            });
        }
    }

    /// The ledger, locked (hold it briefly: the feed task waits).
    pub fn lock(&self) -> MutexGuard<'_, FleetView> {
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until `check` returns `Some`, for at most `timeout`
    /// (`Ok(None)` when it runs out). Conditions that depend on time alone
    /// are re-checked every 50 ms.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        cancel: &Cancel,
        mut check: impl FnMut(&FleetView) -> Option<T>,
    ) -> Result<Option<T>, Interrupted> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            if let Some(found) = check(&self.lock()) {
                return Ok(Some(found));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = cancel.fired() => return Err(Interrupted),
            }
        }
    }

    /// Waits until `id` has ended and its output is read; false on timeout.
    pub async fn await_done(
        &self,
        id: ProcId,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<bool, Interrupted> {
        Ok(self
            .wait_for(timeout, cancel, |l| l.procs[id].done().then_some(()))
            .await?
            .is_some())
    }

    /// SIGKILLs `id` as the harness's own doing (no finding) and waits for its end.
    pub async fn kill_quietly(&self, id: ProcId) {
        let handle = {
            let mut l = self.lock();
            l.procs[id].killed = true;
            l.procs[id].handle.clone()
        };
        if let Some(h) = handle {
            h.kill();
        }
        let _ = self
            .await_done(id, Duration::from_secs(10), &Cancel::never())
            .await;
    }
}
