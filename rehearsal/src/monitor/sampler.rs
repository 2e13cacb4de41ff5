//! The monitor's tick: one snapshot read, then recorded and sent.
//!
//! A [`Sampler`] owns the connection and everything a cell's monitor
//! keeps between ticks: the last sample of each ring (kept only when it
//! changed), the late leases and runtimes seen, when the stream last got
//! a sample, and whether the server was away since the last tick. Each
//! tick reads a [`Snapshot`] and judges the harness's and the runtimes'
//! lateness against what should be beating.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::observe::{
    CensusSample, LateLease, LateRuntime, LateSample, LivenessSample, MISPLACED_SAMPLES_KEPT,
    MisplacedSample, RingSample, TickLoad,
};
use crate::stream::RunEvent;

use super::snapshot::{Snapshot, sample};
use super::{
    Beating, CountSource, EVENT_EVERY, LATE_ENOUGH_TO_RECORD, LATE_LEASES_KEPT, Live, Samples,
};

/// A cell's monitor between ticks: its connection and what it keeps.
pub(super) struct Sampler {
    url: String,
    client: Option<Client>,
    t0: Instant,
    stale_ms: f64,
    counts: CountSource,
    /// The last ring sample taken per ring, recorded or not.
    last: BTreeMap<String, (RingSample, bool)>,
    samples: Samples,
    live: Live,
    /// When the last sample went into the stream.
    sent_ms: Option<u64>,
    /// A tick was skipped since the last sample.
    outage: bool,
    /// Who should be beating (none: lateness is not watched).
    pub(super) beating: Option<Beating>,
    /// The pulse's worst late wake since the last tick, in ms.
    pub(super) pulse: Option<Arc<AtomicU64>>,
    /// The last tick that saw heartbeats held back by the product or the
    /// server (a lock on runtime_instances, an outage), in ms.
    beats_excused_ms: Option<u64>,
    /// Leases seen late, by (job_id, run_lease).
    late_leases: BTreeMap<(i64, i64), LateLease>,
    /// Runtimes seen late, by instance id.
    late_runtimes: BTreeMap<String, LateRuntime>,
    /// The run of ticks, up to the last, whose statements the server
    /// refused as not fitting its schema: the first one's time and error,
    /// and how many.
    refused: Option<(u64, String, u64)>,
}

/// Consecutive ticks refused for the schema that make the monitor
/// [`Unreadable`](super::Unreadable): one is a table or column that went
/// between a tick's own reads (a migration committing mid-tick); three in
/// a row (750 ms at the monitor's pace) is SQL that no longer fits.
pub(super) const UNREADABLE_TICKS: u64 = 3;

impl Sampler {
    pub(super) fn new(
        url: String,
        t0: Instant,
        stale_after: Duration,
        counts: CountSource,
        live: Live,
    ) -> Sampler {
        Sampler {
            url,
            client: None,
            t0,
            stale_ms: stale_after.as_millis() as f64,
            counts,
            last: BTreeMap::new(),
            samples: Samples::default(),
            live,
            sent_ms: None,
            outage: false,
            beating: None,
            pulse: None,
            beats_excused_ms: None,
            late_leases: BTreeMap::new(),
            late_runtimes: BTreeMap::new(),
            refused: None,
        }
    }

    pub(super) async fn tick(&mut self) {
        let at_ms = self.t0.elapsed().as_millis() as u64;
        let tick_late = Duration::from_millis(
            self.pulse
                .as_ref()
                .map_or(0, |worst| worst.swap(0, Ordering::Relaxed)),
        );
        if self.client.as_ref().is_some_and(Client::is_closed) {
            // The server went away since the last tick (a crash), however
            // fast it is back.
            self.outage = true;
        }
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = super::connect_briefly(&self.url).await;
        }
        let Some(client) = self.client.as_ref() else {
            self.refused = None;
            self.samples.skipped += 1;
            self.outage = true;
            // The harness's own lateness counts whatever the server does.
            self.record_lateness(at_ms, tick_late, &[]);
            return;
        };
        let result = sample(client, at_ms, self.stale_ms, &self.counts).await;
        self.note_refusal(at_ms, result.as_ref().err());
        match result {
            Ok(Snapshot {
                rings,
                census,
                liveness,
                beats,
                instances_locked,
                misplaced,
                late_leases,
            }) => {
                self.record_late_leases(at_ms, &late_leases);
                if !misplaced.is_empty() && self.samples.misplaced.len() < MISPLACED_SAMPLES_KEPT {
                    self.samples.misplaced.push(MisplacedSample {
                        at_ms,
                        rows: misplaced,
                    });
                }
                // Heartbeats held by a lock on runtime_instances, or by a
                // server that was down (a pg_crash), are excused.
                if instances_locked || self.outage {
                    self.beats_excused_ms = Some(at_ms);
                }
                self.record_late_runtimes(at_ms, &beats);
                let beat_late_ms = self.record_lateness(at_ms, tick_late, &beats);
                self.send(&census, &rings);
                for ring in rings {
                    self.record_ring(ring);
                }
                self.samples.census.push(census);
                let after_outage = std::mem::take(&mut self.outage);
                let load = TickLoad {
                    pulse_late_ms: tick_late.as_millis() as u64,
                    beat_late_ms,
                    cpu_pressure_pct: crate::vocab::cpu::pressure_now(),
                };
                self.samples
                    .liveness
                    .extend(liveness.map(|l| LivenessSample {
                        after_outage,
                        load,
                        ..l
                    }));
            }
            Err(e) => {
                self.samples.skipped += 1;
                // A refusal for the schema came from a server that answers.
                self.outage |= crate::pg::refused_for_schema(&e).is_none();
                self.client = None;
                self.record_lateness(at_ms, tick_late, &[]);
            }
        }
    }

    /// Sends the tick's snapshot as an event when [`EVENT_EVERY`] has
    /// passed since the last one, or a ring's authority changed.
    fn send(&mut self, census: &CensusSample, rings: &[RingSample]) {
        let authority_changed = rings.iter().any(|r| {
            self.last
                .get(&r.ring)
                .is_some_and(|(prev, _)| prev.authority != r.authority)
        });
        if !due(self.sent_ms, census.at_ms, authority_changed) {
            return;
        }
        self.sent_ms = Some(census.at_ms);
        self.live.events.send(RunEvent::MonitorSample {
            cell: self.live.cell.clone(),
            census: census.clone(),
            rings: rings.to_vec(),
        });
    }

    /// Records the tick when it or a runtime that should be beating ran
    /// late: the monitor's tick against its interval, each heartbeat's
    /// age against the heartbeat interval. Returns how late the most
    /// overdue heartbeat was (0 when lateness is not watched or excused).
    fn record_lateness(&mut self, at_ms: u64, tick_late: Duration, beats: &[(String, i64)]) -> u64 {
        let Some(beating) = &self.beating else {
            return 0;
        };
        // Heartbeats held by a lock on runtime_instances or an outage (and
        // their age until each runtime's next beat after it) are the
        // product's or the server's doing, not starvation.
        let locked = self.beats_excused_ms.is_some_and(|t| {
            at_ms <= t + self.stale_ms as u64 + beating.heartbeat.as_millis() as u64
        });
        let expected = if locked {
            BTreeMap::new()
        } else {
            (beating.source)()
        };
        let interval = beating.heartbeat.as_millis() as i64;
        let worst = beats
            .iter()
            .filter_map(|(id, age)| Some((expected.get(id)?, (age - interval).max(0) as u64)))
            .max_by_key(|(_, late)| *late);
        let (runtime, beat_late_ms) =
            worst.map_or((None, 0), |(name, late)| (Some(name.clone()), late));
        let tick_late_ms = tick_late.as_millis() as u64;
        // The gate reads the pulse alone: a heartbeat can also be late for
        // the runtime's own lock waits (a heartbeat of many leases queued
        // behind closes), which fewer cells would not cure; a late pulse
        // is CPU the harness did not get.
        if tick_late_ms as f64 >= self.stale_ms / 2.0 {
            beating.starving.seen();
        }
        let floor = LATE_ENOUGH_TO_RECORD.as_millis() as u64;
        if tick_late_ms >= floor || beat_late_ms >= floor {
            self.samples.late.push(LateSample {
                at_ms,
                tick_late_ms,
                beat_late_ms,
                runtime: (beat_late_ms >= floor).then_some(runtime).flatten(),
            });
        }
        beat_late_ms
    }

    /// Keeps the first sighting and the oldest age of each runtime whose
    /// heartbeat was older than half `stale_after`: a crash rescue of its
    /// attempts then has its cause on record (it looked dead, or nearly,
    /// by the database's clock), whatever held it back (CPU, a lock on
    /// runtime_instances, its own waits). A runtime beating on time is
    /// never seen here (heartbeat 200 ms against a 750 ms floor).
    fn record_late_runtimes(&mut self, at_ms: u64, beats: &[(String, i64)]) {
        let floor = (self.stale_ms / 2.0) as i64;
        for (instance_id, age) in beats.iter().filter(|(_, age)| *age > floor) {
            let age_ms = (*age).max(0) as u64;
            self.late_runtimes
                .entry(instance_id.clone())
                .and_modify(|seen| seen.age_ms = seen.age_ms.max(age_ms))
                .or_insert(LateRuntime {
                    instance_id: instance_id.clone(),
                    first_ms: at_ms,
                    age_ms,
                });
        }
    }

    /// Keeps each late lease's first sighting and the oldest age seen.
    fn record_late_leases(&mut self, at_ms: u64, leases: &[(i64, i64, i64)]) {
        for &(job_id, run_lease, age) in leases {
            let age_ms = age.max(0) as u64;
            let kept = self.late_leases.len();
            match self.late_leases.entry((job_id, run_lease)) {
                std::collections::btree_map::Entry::Occupied(mut seen) => {
                    let seen = seen.get_mut();
                    seen.age_ms = seen.age_ms.max(age_ms);
                }
                std::collections::btree_map::Entry::Vacant(slot) if kept < LATE_LEASES_KEPT => {
                    slot.insert(LateLease {
                        job_id,
                        run_lease,
                        first_ms: at_ms,
                        age_ms,
                    });
                }
                std::collections::btree_map::Entry::Vacant(_) => {}
            }
        }
    }

    /// Counts a tick refused for the schema into the current run of them
    /// (any other outcome ends the run); a run of [`UNREADABLE_TICKS`]
    /// makes the monitor unreadable, the first such run kept.
    fn note_refusal(&mut self, at_ms: u64, error: Option<&tokio_postgres::Error>) {
        let Some(why) = error.and_then(crate::pg::refused_for_schema) else {
            self.refused = None;
            return;
        };
        let run = self.refused.get_or_insert((at_ms, why, 0));
        run.2 += 1;
        let first_run = self
            .samples
            .unreadable
            .as_ref()
            .is_none_or(|u| u.first_ms == run.0);
        if run.2 >= UNREADABLE_TICKS && first_run {
            self.samples.unreadable = Some(super::Unreadable {
                first_ms: run.0,
                last_ms: at_ms,
                ticks: run.2,
                error: run.1.clone(),
            });
        }
    }

    fn record_ring(&mut self, sample: RingSample) {
        let changed = self.last.get(&sample.ring).is_none_or(|(prev, _)| {
            (
                &prev.authority,
                prev.column_slot,
                prev.column_generation,
                prev.ledger_generation,
                prev.ledger_rows,
                prev.ledger_gaps,
            ) != (
                &sample.authority,
                sample.column_slot,
                sample.column_generation,
                sample.ledger_generation,
                sample.ledger_rows,
                sample.ledger_gaps,
            )
        });
        if changed {
            self.samples.rings.push(sample.clone());
        }
        self.last.insert(sample.ring.clone(), (sample, changed));
    }

    pub(super) fn finish(mut self) -> Samples {
        // The final state of each ring, if its last sample was not recorded.
        for (sample, recorded) in std::mem::take(&mut self.last).into_values() {
            if !recorded {
                self.samples.rings.push(sample);
            }
        }
        self.samples.rings.sort_by_key(|s| s.at_ms);
        self.samples.late_leases = std::mem::take(&mut self.late_leases)
            .into_values()
            .collect();
        self.samples.late_runtimes = std::mem::take(&mut self.late_runtimes)
            .into_values()
            .collect();
        self.samples
    }
}

/// Whether a sample read at `at_ms` goes into the stream, the last one
/// having gone at `sent_ms`.
fn due(sent_ms: Option<u64>, at_ms: u64, authority_changed: bool) -> bool {
    authority_changed
        || sent_ms.is_none_or(|sent| at_ms.saturating_sub(sent) >= EVENT_EVERY.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::Counts;
    use crate::stream::Events;

    fn sampler() -> Sampler {
        Sampler::new(
            String::new(),
            Instant::now(),
            Duration::from_millis(1_500),
            Arc::new(Counts::new),
            Live {
                events: Events::discard(),
                cell: "c".into(),
            },
        )
    }

    #[test]
    fn samples_go_into_the_stream_once_a_second_or_at_an_authority_change() {
        assert!(due(None, 0, false), "the first sample goes at once");
        assert!(!due(Some(0), 250, false));
        assert!(!due(Some(0), 999, false));
        assert!(due(Some(0), 1_000, false));
        assert!(due(Some(0), 250, true), "a flip is sent when it is seen");
    }

    fn ring(at_ms: u64, generation: i64) -> RingSample {
        RingSample {
            at_ms,
            ring: "queue".into(),
            authority: "columns".into(),
            column_slot: Some((generation % 8) as i32),
            column_generation: Some(generation),
            ledger_generation: Some(generation),
            ledger_slot: Some((generation % 8) as i32),
            ledger_rows: generation + 1,
            ledger_gaps: 0,
        }
    }

    #[test]
    fn ring_samples_are_kept_on_change_and_at_the_end() {
        let mut s = sampler();
        s.record_ring(ring(0, 1));
        s.record_ring(ring(250, 1));
        s.record_ring(ring(500, 2));
        s.record_ring(ring(750, 2));
        s.record_ring(ring(1000, 2));
        let samples = s.finish();
        let kept: Vec<(u64, i64)> = samples
            .rings
            .iter()
            .map(|r| (r.at_ms, r.column_generation.unwrap_or(-2)))
            .collect();
        assert_eq!(kept, [(0, 1), (500, 2), (1000, 2)]);
    }
}
