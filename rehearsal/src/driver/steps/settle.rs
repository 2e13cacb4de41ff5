//! `assert = "rings_pruned_back"`: once the workload is done, the rings
//! rotate and prune back.
//!
//! While load runs, a rotation rule that only advances when the current
//! slot holds rows, or a prune that stops, can hide behind the steady
//! stream of new rows. Once the workload's jobs are all done, each ring
//! must prune every row written until then within a wrap of rotations
//! and a few more (cron jobs still come and go; a correct leader keeps
//! rotating while the ring holds rows and the next slot is free).
//!
//! The bound is counted in rotations, not in wall time: a leader on a
//! busy machine ticks late, and a ring that keeps rotating is waited for.
//! The check gives up on a ring that rotated a wrap and a few more past
//! the workload's last generation and still holds its rows (prune does
//! not follow rotation), or whose cursor stood still for as long as those
//! rotations take at the cell's cadence (rotation stopped). It records
//! what was left ([`PrunedBack`]) for the liveness rule.

use std::time::{Duration, Instant};

use super::super::Abort;
use super::super::step_ctx::StepCtx;
use super::check_result::{Held, unreadable};
use super::drain::Progress;
use crate::observe::{IdleWindow, LeftRow, PrunedBack, RingPrunedBack};

/// Slots per ring in every schema this rehearsal knows.
const SLOTS: u32 = 8;
/// Rotations beyond a wrap the rings get (a prune waiting on a claim's
/// lock, a rotation waiting on a busy next slot).
const SPARE_ROTATIONS: u32 = 4;
/// Rotations past the workload's last generation within which a ring
/// must have pruned it back.
const ROTATIONS: i64 = (SLOTS + SPARE_ROTATIONS) as i64;
/// How often the check looks.
const POLL: Duration = Duration::from_millis(250);
const RINGS: [&str; 3] = ["queue", "claim", "lease"];

/// Waits for the workload's jobs to finish, then for every ring to
/// prune what it held at that moment.
pub(super) async fn rings_pruned_back(cx: &mut StepCtx<'_>) -> Result<Held, Abort> {
    if let Err(why) = workload_done(cx).await? {
        return Ok(Err(why));
    }
    let from_ms = cx.ms();
    let through = cx.probe.ring_generations().await.map_err(unreadable)?;
    let stall = stall_after(cx.plan.timings.rotate_every.to_std());
    let settled = Instant::now();
    let watched = watch_rings(cx, through, settled, stall).await?;
    let waited_ms = settled.elapsed().as_millis() as u64;
    // What stayed, read once, only when a ring kept rows: the rows'
    // own story (a lease still beating, an entry whose job is gone) is
    // what a failure of this check has to tell. A failed read leaves the
    // story out; the counts above decide the check.
    let mut left: [Vec<LeftRow>; 3] = Default::default();
    if watched.iter().any(|w| w.rows_left > 0) {
        left = cx.probe.ring_rows_left(through).await.unwrap_or_default();
    }
    let rings: Vec<RingPrunedBack> = RINGS
        .iter()
        .zip(watched.iter().zip(left))
        .map(|(ring, (w, left))| RingPrunedBack {
            ring: (*ring).to_owned(),
            through_generation: w.through,
            rows_left: w.rows_left,
            generation: w.generation,
            still_ms: w.still_ms,
            left: if w.rows_left > 0 { left } else { Vec::new() },
        })
        .collect();
    let stuck: Vec<String> = rings
        .iter()
        .filter(|r| r.rows_left > 0)
        .map(|r| {
            format!(
                "the {} ring still holds {} of generation {} or older ({}){}",
                r.ring,
                crate::observe::count(r.rows_left.unsigned_abs(), "row"),
                r.through_generation,
                r.progress(),
                r.left_rows()
            )
        })
        .collect();
    // The workload was done throughout: with the load off, the fleet
    // stood idle.
    if !cx.state.load_on {
        cx.state.obs.idle.push(IdleWindow {
            step: cx.state.step_index,
            from_ms,
            to_ms: from_ms + waited_ms,
        });
    }
    cx.state.obs.pruned_back.push(PrunedBack {
        step: cx.state.step_index,
        from_ms,
        waited_ms,
        bound_ms: stall.as_millis() as u64,
        rings,
    });
    Ok(if stuck.is_empty() {
        Ok(format!(
            "every ring pruned what it held when the workload was done (generations {}, {}, {}) in {waited_ms} ms",
            through[0], through[1], through[2]
        ))
    } else {
        Err(format!(
            "{} after {waited_ms} ms: rotation and prune did not bring it back",
            stuck.join("; "),
        ))
    })
}

/// Waits for the workload's jobs to be done; `Err` says how many stayed
/// live once their count stopped going down for the drain timeout.
// The inner String is the check's failing sentence ([`Held`]'s `Err`), not an error.
async fn workload_done(cx: &mut StepCtx<'_>) -> Result<Result<(), String>, Abort> {
    let drain = cx.plan.timings.drain_timeout.to_std();
    let start = Instant::now();
    let mut progress = Progress::new(start);
    loop {
        let (_, workload) = cx.probe.live_jobs().await.map_err(unreadable)?;
        if workload == 0 {
            return Ok(Ok(()));
        }
        if progress.stalled(workload, Instant::now(), drain) {
            return Ok(Err(format!(
                "{} still live after {}, the count no lower for the last {}",
                crate::observe::count(workload.unsigned_abs(), "workload job"),
                crate::observe::duration(start.elapsed().as_millis() as u64),
                crate::observe::duration(drain.as_millis() as u64)
            )));
        }
        cx.cancel().sleep(POLL).await?;
    }
}

/// Watches each ring from `settled` on until it pruned its rows of
/// generation `through` or older, or gave up (see [`Watch::look`]).
async fn watch_rings(
    cx: &mut StepCtx<'_>,
    through: [i64; 3],
    settled: Instant,
    stall: Duration,
) -> Result<[Watch; 3], Abort> {
    let mut watched = through.map(|g| Watch::new(g, settled));
    loop {
        let now = Instant::now();
        let generations = cx.probe.ring_generations().await.map_err(unreadable)?;
        let left = cx
            .probe
            .ring_rows_through(through)
            .await
            .map_err(unreadable)?;
        for (w, (&g, &n)) in watched.iter_mut().zip(generations.iter().zip(&left)) {
            w.look(g, n, now, stall);
        }
        if watched.iter().all(|w| w.look != Look::Waiting) {
            return Ok(watched);
        }
        cx.cancel().sleep(POLL).await?;
    }
}

/// How long a ring's cursor may stand still while it holds the
/// workload's rows: as long as [`ROTATIONS`] take at the cell's cadence.
fn stall_after(rotate_every: Duration) -> Duration {
    rotate_every * (SLOTS + SPARE_ROTATIONS)
}

/// Where one ring stands in the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    /// Still rotating towards pruning the workload's rows.
    Waiting,
    /// Nothing of the workload's generations left.
    Pruned,
    /// Rotated [`ROTATIONS`] past them, or stood still a stall long, and
    /// still holds them: the check stops looking at this ring.
    GaveUp,
}

/// One ring watched by the check.
#[derive(Clone, Copy, Debug)]
struct Watch {
    /// The ring's generation when the workload was done.
    through: i64,
    /// Its generation at the last look.
    generation: i64,
    /// When its generation last moved.
    moved_at: Instant,
    /// How long it had stood still at the last look.
    still_ms: u64,
    /// Rows of `through` or older at the last look.
    rows_left: i64,
    look: Look,
}

impl Watch {
    fn new(through: i64, now: Instant) -> Self {
        Watch {
            through,
            generation: through,
            moved_at: now,
            still_ms: 0,
            rows_left: 0,
            look: Look::Waiting,
        }
    }

    /// Takes one look: the ring at `generation` holding `rows_left` of
    /// the workload's generations. A ring given up on stays given up, and
    /// a ring seen pruned stays pruned: once none of those rows is left,
    /// a later row of generation `through` is new (a cron job's lease
    /// while an idle ring has not rotated since), not the workload's.
    fn look(&mut self, generation: i64, rows_left: i64, now: Instant, stall: Duration) {
        if self.look != Look::Waiting {
            return;
        }
        if generation != self.generation {
            self.generation = generation;
            self.moved_at = now;
        }
        let still = now.saturating_duration_since(self.moved_at);
        self.still_ms = still.as_millis() as u64;
        self.rows_left = rows_left;
        self.look = if rows_left <= 0 {
            Look::Pruned
        } else if generation - self.through >= ROTATIONS || still >= stall {
            Look::GaveUp
        } else {
            Look::Waiting
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALL: Duration = Duration::from_secs(12);

    #[test]
    fn a_ring_that_keeps_rotating_slowly_is_waited_for() {
        let t0 = Instant::now();
        let mut w = Watch::new(20, t0);
        // A rotation every 3 s (a leader ticking late), rows left until
        // the ninth: waited for all 27 s, then pruned.
        for i in 1..=9 {
            let left = if i < 9 { 76 } else { 0 };
            w.look(20 + i, left, t0 + Duration::from_secs(3 * i as u64), STALL);
            let want = if i < 9 { Look::Waiting } else { Look::Pruned };
            assert_eq!(w.look, want, "rotation {i}");
        }
    }

    #[test]
    fn a_ring_seen_pruned_stays_pruned_when_a_new_row_of_its_generation_comes() {
        // The lease ring, idle, stands at the workload's generation: its
        // rows are gone at the first look; 13 s later (the claim ring still
        // rotating its closures away) a cron job's lease of that
        // generation is in flight. It is not the workload's row.
        let t0 = Instant::now();
        let mut w = Watch::new(27, t0);
        w.look(27, 0, t0 + Duration::from_millis(250), STALL);
        assert_eq!(w.look, Look::Pruned);
        w.look(27, 1, t0 + Duration::from_secs(13), STALL);
        assert_eq!((w.look, w.rows_left), (Look::Pruned, 0));
    }

    #[test]
    fn a_ring_that_stands_still_with_rows_is_given_up_on_after_a_stall() {
        let t0 = Instant::now();
        let mut w = Watch::new(20, t0);
        w.look(21, 76, t0 + Duration::from_secs(1), STALL);
        w.look(21, 76, t0 + Duration::from_secs(12), STALL);
        assert_eq!(w.look, Look::Waiting);
        w.look(21, 76, t0 + Duration::from_secs(13), STALL);
        assert_eq!(w.look, Look::GaveUp);
        assert_eq!(w.still_ms, 12_000);
        // Given up stays given up, whatever the ring does next.
        w.look(22, 0, t0 + Duration::from_secs(14), STALL);
        assert_eq!((w.look, w.generation, w.rows_left), (Look::GaveUp, 21, 76));
    }

    #[test]
    fn a_ring_that_rotates_a_wrap_and_more_without_pruning_is_given_up_on() {
        let t0 = Instant::now();
        let mut w = Watch::new(20, t0);
        for i in 1..ROTATIONS {
            w.look(20 + i, 5, t0 + Duration::from_millis(500 * i as u64), STALL);
            assert_eq!(w.look, Look::Waiting, "rotation {i}");
        }
        w.look(20 + ROTATIONS, 5, t0 + Duration::from_secs(7), STALL);
        assert_eq!(w.look, Look::GaveUp);
    }

    #[test]
    fn the_stall_is_a_wrap_and_the_spare_rotations_at_the_cadence() {
        assert_eq!(stall_after(Duration::from_secs(1)), STALL);
    }
}
