//! `assert = "rings_pruned_back"`: once the workload is done, the rings
//! rotate and prune back.
//!
//! While load runs, a rotation rule that only advances when the current
//! slot holds rows, or a prune that stops, can hide behind the steady
//! stream of new rows. Once the workload's jobs are all done, each ring
//! must prune every row written until then within a wrap of rotations
//! and a few more (cron jobs still come and go; a correct leader keeps
//! rotating while the ring holds rows and the next slot is free). The
//! check records what was left ([`PrunedBack`]) for the liveness rule.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::cell::Cell;
use super::assert::{Held, unreadable};
use super::drain::Progress;
use crate::observe::{PrunedBack, RingPrunedBack};

/// Slots per ring in every schema this rehearsal knows.
const SLOTS: u32 = 8;
/// Rotations beyond a wrap the rings get (a prune waiting on a claim's
/// lock, a slow tick).
const SPARE_ROTATIONS: u32 = 4;
/// How often the check looks.
const POLL: Duration = Duration::from_millis(250);
const RINGS: [&str; 3] = ["queue", "claim", "lease"];

impl Cell<'_> {
    /// Waits for the workload's jobs to finish, then for every ring to
    /// prune what it held at that moment.
    pub(super) async fn rings_pruned_back(&mut self) -> Result<Held, Abort> {
        let drain = self.plan.timings.drain_timeout.to_std();
        let start = Instant::now();
        let mut progress = Progress::new(start);
        loop {
            let (_, workload) = self.probe.live_jobs().await.map_err(unreadable)?;
            if workload == 0 {
                break;
            }
            if progress.stalled(workload, Instant::now(), drain) {
                return Ok(Err(format!(
                    "{} still live after {}, the count no lower for the last {}",
                    crate::observe::count(workload.unsigned_abs(), "workload job"),
                    crate::observe::duration(start.elapsed().as_millis() as u64),
                    crate::observe::duration(drain.as_millis() as u64)
                )));
            }
            self.cancel().sleep(POLL).await?;
        }
        let from_ms = self.ms();
        let through = self.probe.ring_generations().await.map_err(unreadable)?;
        let bound = self.plan.timings.rotate_every.to_std() * (SLOTS + SPARE_ROTATIONS);
        let settled = Instant::now();
        let mut left = self
            .probe
            .ring_rows_through(through)
            .await
            .map_err(unreadable)?;
        while left.iter().any(|&n| n > 0) && settled.elapsed() < bound {
            self.cancel().sleep(POLL).await?;
            left = self
                .probe
                .ring_rows_through(through)
                .await
                .map_err(unreadable)?;
        }
        let waited_ms = settled.elapsed().as_millis() as u64;
        let rings: Vec<RingPrunedBack> = RINGS
            .iter()
            .zip(through.iter().zip(left))
            .map(|(ring, (&g, n))| RingPrunedBack {
                ring: (*ring).to_owned(),
                through_generation: g,
                rows_left: n,
            })
            .collect();
        let stuck: Vec<String> = rings
            .iter()
            .filter(|r| r.rows_left > 0)
            .map(|r| {
                format!(
                    "the {} ring still holds {} of generation {} or older",
                    r.ring,
                    crate::observe::count(r.rows_left.unsigned_abs(), "row"),
                    r.through_generation
                )
            })
            .collect();
        self.state.obs.pruned_back.push(PrunedBack {
            step: self.state.step_index,
            from_ms,
            waited_ms,
            bound_ms: bound.as_millis() as u64,
            rings,
        });
        Ok(if stuck.is_empty() {
            Ok(format!(
                "every ring pruned what it held when the workload was done (generations {}, {}, {}) in {waited_ms} ms",
                through[0], through[1], through[2]
            ))
        } else {
            Err(format!(
                "{} after {} ms: rotation and prune did not bring it back",
                stuck.join("; "),
                bound.as_millis()
            ))
        })
    }
}
