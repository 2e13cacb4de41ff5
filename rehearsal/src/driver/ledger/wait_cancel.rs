//! How a wait ends early: the run interrupted (Ctrl-C, SIGTERM) or a
//! cell's budget run out, as one [`Cancel`] every wait and sleep of a
//! step selects on.

use std::time::Duration;

use tokio::sync::watch;

/// The run was interrupted (Ctrl-C or SIGTERM to rehearse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted;

/// Cancellation of the whole run (set once by the signal handler), and
/// for one cell also its budget: past the deadline it fires as well.
#[derive(Clone, Debug)]
pub struct Cancel {
    run: watch::Receiver<bool>,
    deadline: Option<tokio::time::Instant>,
}

impl Cancel {
    /// A cancellation that follows `rx`.
    pub fn new(rx: watch::Receiver<bool>) -> Self {
        Cancel {
            run: rx,
            deadline: None,
        }
    }

    /// A cancellation that never fires (tests): its sender is dropped at
    /// once, which [`Cancel::fired`] reads as "never interrupted".
    pub fn never() -> Self {
        let (_, rx) = watch::channel(false);
        Cancel::new(rx)
    }

    /// The same cancellation, which also fires `budget` from now (a cell's budget).
    pub fn with_budget(&self, budget: Duration) -> Self {
        Cancel {
            run: self.run.clone(),
            deadline: Some(tokio::time::Instant::now() + budget),
        }
    }

    /// True once the run is being interrupted or the budget ran out.
    pub fn is_set(&self) -> bool {
        *self.run.borrow() || self.overran()
    }

    /// True once the budget ran out (whether or not the run is interrupted too).
    pub fn overran(&self) -> bool {
        self.deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d)
    }

    /// True when the run itself is being interrupted (Ctrl-C, SIGTERM).
    pub fn run_interrupted(&self) -> bool {
        *self.run.borrow()
    }

    /// Resolves when the run is interrupted or the budget runs out
    /// (never, if neither can happen: the sender gone without setting it, no budget).
    pub async fn fired(&self) {
        let mut rx = self.run.clone();
        let run = async {
            if rx.wait_for(|set| *set).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        match self.deadline {
            None => run.await,
            Some(deadline) => tokio::select! {
                _ = run => {}
                _ = tokio::time::sleep_until(deadline) => {}
            },
        }
    }

    /// Sleeps `d`, or returns early with [`Interrupted`].
    pub async fn sleep(&self, d: Duration) -> Result<(), Interrupted> {
        tokio::select! {
            _ = tokio::time::sleep(d) => Ok(()),
            _ = self.fired() => Err(Interrupted),
        }
    }
}
