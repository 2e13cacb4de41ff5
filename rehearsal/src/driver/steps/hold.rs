//! `hold`: let the fleet run as it is (optionally beside a busy reader).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::super::cell::Cell;
use super::super::{Abort, Done};
use crate::matrix::HoldStep;

/// One read statement that keeps a snapshot (and so a `backend_xmin`)
/// for `$1` seconds, inside no transaction of its own.
const READ: &str = "SELECT pg_sleep($1::float8)";

impl Cell<'_> {
    /// `hold`: sleep for the duration (interrupted by Ctrl-C). With
    /// `reads`, a client on its own connection runs back-to-back read
    /// statements of that length meanwhile; the last one ends after the
    /// hold (at most `reads` later).
    pub(super) async fn hold(&mut self, s: &HoldStep) -> Result<Done, Abort> {
        let Some(reads) = s.reads else {
            self.cancel().sleep(s.duration.to_std()).await?;
            return Ok(Done::ok(format!("held {}", s.duration)));
        };
        let client = super::super::database::connect(&self.db.url)
            .await
            .map_err(|e| Abort::Harness(format!("the reader of a hold could not connect: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            let secs = reads.to_std().as_secs_f64();
            tokio::spawn(async move {
                let mut statements = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if client.execute(READ, &[&secs]).await.is_err() {
                        break;
                    }
                    statements += 1;
                }
                statements
            })
        };
        let slept = self.cancel().sleep(s.duration.to_std()).await;
        stop.store(true, Ordering::Relaxed);
        let statements = reader.await.unwrap_or(0);
        slept?;
        Ok(Done::ok(format!(
            "held {} beside a client running {statements} read statement(s) of {reads}",
            s.duration
        )))
    }
}
