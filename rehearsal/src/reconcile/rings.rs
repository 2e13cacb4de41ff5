//! Findings about the ring cursors: the old-binary fence, the two
//! disciplines of a mixed fleet, and the flip between them.
//!
//! The monitor's ring samples show what happened while the cell ran; the
//! flip command's output shows what the flip itself verified; the
//! database shows the end state. Each rule reads whichever of these can
//! prove it.

use std::collections::BTreeMap;

use awa_runtime::events::Event;
use awa_runtime::store::audit::MAX_IDS;

use super::rules::{RECONCILE, phase_at};
use super::storage::Storage;
use crate::matrix::FindingRule;
use crate::observe::{self, FenceRecord, Finding, Observations, RingSample};

/// The findings of the ring samples alone.
pub(super) fn sample_findings(obs: &Observations) -> Vec<Finding> {
    let mut out = mixed_discipline(&obs.rings, obs);
    out.extend(flip_samples(&obs.rings, obs));
    out
}

/// Every fence, discipline and flip finding.
pub(super) fn findings(storage: &Storage, obs: &Observations) -> Vec<Finding> {
    let mut out: Vec<Finding> = obs.fences.iter().filter_map(fence_run).collect();
    out.extend(poison(storage));
    out.extend(late_attempts(storage));
    out.extend(late_enqueues(storage, obs));
    out.extend(mixed_discipline(&obs.rings, obs));
    out.extend(ledger_ahead_under_columns(storage));
    out.extend(flip_samples(&obs.rings, obs));
    out.extend(flip_outputs(obs));
    out.extend(flip_end_state(storage, obs));
    out
}

fn finding(rule: FindingRule, phase: &str, message: String, ids: Vec<i64>, count: u64) -> Finding {
    Finding {
        rule,
        phase: phase.into(),
        message,
        ids: ids.into_iter().take(MAX_IDS).collect(),
        count,
        at_ms: None,
    }
}

/// A fenced old binary must exit with a refusal and change nothing.
fn fence_run(fence: &FenceRecord) -> Option<Finding> {
    let mut wrong = Vec::new();
    match fence.exit_code {
        None => wrong.push("did not exit".to_owned()),
        Some(0) => wrong.push("exited 0".to_owned()),
        // Any other code is loud; 2 is the refusal the contract names, and
        // without the refused event it is an error, not a fence.
        Some(_) => {}
    }
    if !fence.refused {
        wrong.push(match fence.exit_code {
            Some(code) if code != 0 => format!("exited {code} without a refused event"),
            _ => "printed no refused event".to_owned(),
        });
    }
    if fence.state_before != fence.state_after {
        wrong.push("changed the storage state".to_owned());
    }
    if wrong.is_empty() {
        return None;
    }
    let mut message = format!(
        "the fenced {} binary ({}) {}",
        fence.artifact,
        fence.version,
        wrong.join(", ")
    );
    if !fence.stderr_tail.trim().is_empty() {
        let last = fence.stderr_tail.trim().lines().last().unwrap_or_default();
        message.push_str(&format!("; its stderr ends: {last}"));
    }
    Some(finding(
        FindingRule::FenceBreached,
        "fence",
        message,
        vec![],
        1,
    ))
}

/// Under ledger authority every compat cursor field and per-slot
/// generation must hold the poison (-1).
/// ADR-041 §6: after the flip a returning pre-flip binary must fail
/// before it claims. An attempt it started after the flip is a job that
/// loses an attempt to a binary that can never close it.
fn late_attempts(storage: &Storage) -> Option<Finding> {
    let late = &storage.late_attempts;
    let first = late.first()?;
    let versions = distinct(late.iter().map(|a| a.version.as_str()));
    Some(finding(
        FindingRule::FenceBreached,
        RECONCILE,
        format!(
            "{} {} started after the flip by binaries that are not flip-aware ({}); the first, job {} run {}, {} after the flip: the fence did not stop their claim path",
            observe::count(late.len() as u64, "attempt"),
            observe::agree(late.len() as u64, "was", "were"),
            versions,
            first.job_id,
            first.run_lease,
            observe::duration(u64::try_from(first.after_flip_ms).unwrap_or(0))
        ),
        late.iter().map(|a| a.job_id).collect(),
        late.len() as u64,
    ))
}

/// ADR-041 §6 on the enqueue path: after the flip, a pre-flip binary's
/// enqueue must be refused (the fenced legacy resolver and the enqueue
/// trigger). A job accepted from a producer below the schema's minimum
/// flip version whose id is above the sequence's value read once the
/// flip had committed drew its id after the flip. The released producers
/// draw ids in a statement of their own before the insert (0.6's
/// reserve), so that insert began after the flip as well: the fence saw
/// the flip and let the job in. No clock is compared, so no margin is
/// needed; a producer that drew its ids inside the insert would need one.
fn late_enqueues(storage: &Storage, obs: &Observations) -> Option<Finding> {
    if storage.authority.as_deref() != Some("ledger") {
        return None;
    }
    let drawn = obs.flips.iter().find_map(|f| f.ids_drawn_before)?;
    let min = storage
        .min_flip_version
        .as_deref()
        .map(awa_runtime::store::authority::parse_version)?;
    let pre_flip =
        |version: &str| match (awa_runtime::store::authority::parse_version(version), min) {
            (Some(v), Some(min)) => v < min,
            // Unparseable versions, or minimum, are not flip-aware (fail
            // closed), as for late attempts.
            _ => true,
        };
    let mut late: Vec<&observe::AcceptedJob> = obs
        .accepted
        .iter()
        .filter(|a| a.job_id > drawn && pre_flip(&a.version))
        .collect();
    late.sort_by_key(|a| a.job_id);
    let first = late.first()?;
    let versions = distinct(late.iter().map(|a| a.version.as_str()));
    Some(finding(
        FindingRule::FenceBreached,
        RECONCILE,
        format!(
            "{} {} accepted after the flip from producers that are not flip-aware ({}); the first, job {}, \
             has an id above {drawn}, the sequence's value read once the flip had committed, so it drew \
             its id after the flip: the fence did not stop their enqueue path",
            observe::count(late.len() as u64, "job"),
            observe::agree(late.len() as u64, "was", "were"),
            versions,
            first.job_id,
        ),
        late.iter().map(|a| a.job_id).collect(),
        late.len() as u64,
    ))
}

/// The versions named, each once, in order: `0.6.1, 0.6.2`.
fn distinct<'a>(versions: impl Iterator<Item = &'a str>) -> String {
    let mut versions: Vec<&str> = versions.collect();
    versions.sort_unstable();
    versions.dedup();
    versions.join(", ")
}

fn poison(storage: &Storage) -> Vec<Finding> {
    if storage.authority.as_deref() != Some("ledger") {
        return vec![];
    }
    storage
        .columns
        .iter()
        .filter(|c| !c.poisoned())
        .map(|c| {
            let show = |v: Option<i64>| v.map_or("dropped".to_owned(), |v| v.to_string());
            let mut message = format!(
                "under ledger authority the {} ring's cursor columns are not poisoned (current_slot {}, generation {})",
                c.ring,
                show(c.current_slot.map(i64::from)),
                show(c.generation)
            );
            if !c.unpoisoned_slots.is_empty() {
                let n = c.unpoisoned_slots.len() as u64;
                message.push_str(&format!(
                    " and {} {} a prune generation",
                    observe::count(n, "slot"),
                    observe::agree(n, "keeps", "keep")
                ));
            }
            let fields = usize::from(c.current_slot.is_some_and(|s| s != -1)) + usize::from(c.generation.is_some_and(|g| g != -1));
            finding(
                FindingRule::FenceBreached,
                RECONCILE,
                message,
                // Row keys: the unpoisoned slots.
                c.unpoisoned_slots.iter().map(|&s| i64::from(s)).collect(),
                (fields + c.unpoisoned_slots.len()) as u64,
            )
        })
        .collect()
}

/// Samples of one ring, in time order.
fn by_ring(samples: &[RingSample]) -> BTreeMap<&str, Vec<&RingSample>> {
    let mut rings: BTreeMap<&str, Vec<&RingSample>> = BTreeMap::new();
    for s in samples {
        rings.entry(s.ring.as_str()).or_default().push(s);
    }
    for list in rings.values_mut() {
        list.sort_by_key(|s| s.at_ms);
    }
    rings
}

/// One finding per ring and kind of breach, pointing at the first sample.
fn per_ring(
    samples: &[RingSample],
    obs: &Observations,
    breached: impl Fn(&RingSample) -> Option<String>,
    rule: FindingRule,
    key: impl Fn(&RingSample) -> i64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (ring, list) in by_ring(samples) {
        let bad: Vec<(&RingSample, String)> = list
            .iter()
            .filter_map(|s| breached(s).map(|why| (*s, why)))
            .collect();
        let Some((first, why)) = bad.first() else {
            continue;
        };
        let mut ids: Vec<i64> = bad.iter().map(|(s, _)| key(s)).collect();
        ids.dedup();
        out.push(
            finding(
                rule,
                phase_at(obs, first.at_ms).unwrap_or(RECONCILE),
                format!(
                    "the {ring} ring {why} at {} ({} in all)",
                    observe::duration(first.at_ms),
                    observe::count(bad.len() as u64, "sample")
                ),
                ids,
                bad.len() as u64,
            )
            .at(first.at_ms),
        );
    }
    out
}

/// The MixedFleet invariant as the samples show it: under `columns` the
/// ledger never runs ahead of the columns and never has gaps; under
/// `ledger` the columns stay poisoned.
fn mixed_discipline(samples: &[RingSample], obs: &Observations) -> Vec<Finding> {
    let ledger_key = |s: &RingSample| s.ledger_generation.unwrap_or(-1);
    let mut out = per_ring(
        samples,
        obs,
        |s| {
            match s.ledger_generation {
            Some(l) if s.authority == "columns" => s
                .column_generation
                .filter(|&c| l > c)
                .map(|c| {
                    format!(
                        "advanced its ledger to generation {l} past its columns (generation {c}) under columns authority"
                    )
                }),
            _ => None,
        }
        },
        FindingRule::MixedDiscipline,
        ledger_key,
    );
    out.extend(per_ring(
        samples,
        obs,
        |s| {
            (s.authority != "none" && s.ledger_gaps > 0).then(|| {
                format!(
                    "had {} missing from its ledger",
                    observe::count(u64::try_from(s.ledger_gaps).unwrap_or(0), "generation")
                )
            })
        },
        FindingRule::MixedDiscipline,
        ledger_key,
    ));
    out.extend(per_ring(
        samples,
        obs,
        // Columns a contract dropped are nothing to move.
        |s| match (s.column_slot, s.column_generation) {
            (Some(slot), Some(generation))
                if s.authority == "ledger" && (slot, generation) != (-1, -1) =>
            {
                Some(format!(
                    "moved its columns to (slot {slot}, generation {generation}) under ledger authority"
                ))
            }
            _ => None,
        },
        FindingRule::MixedDiscipline,
        |s| s.column_generation.unwrap_or(-1),
    ));
    out
}

/// The end-state view of the same invariant: under `columns` no ledger
/// may be ahead of its columns.
fn ledger_ahead_under_columns(storage: &Storage) -> Vec<Finding> {
    if storage.authority.as_deref() != Some("columns") {
        return vec![];
    }
    let Some(ledgers) = &storage.ledgers else {
        return vec![];
    };
    ledgers
        .iter()
        .filter_map(|l| {
            let columns = storage.columns.iter().find(|c| c.ring == l.ring)?;
            let (top, generation) = (l.top?, columns.generation?);
            (top > generation).then(|| {
                finding(
                    FindingRule::MixedDiscipline,
                    RECONCILE,
                    format!(
                        "under columns authority the {} ring's ledger ends at generation {top}, ahead of its columns (generation {generation})",
                        l.ring
                    ),
                    vec![top],
                    1,
                )
            })
        })
        .collect()
}

/// Around each authority change the samples show: the first ledger
/// sample must carry the last columns generation (the flip reconciled the
/// ledger through the final columns) and have no gaps.
fn flip_samples(samples: &[RingSample], obs: &Observations) -> Vec<Finding> {
    let mut out = Vec::new();
    for (ring, list) in by_ring(samples) {
        for pair in list.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            if before.authority != "columns" || after.authority != "ledger" {
                continue;
            }
            // Columns authority without columns is `columns_dropped`'s finding.
            let Some(last_columns) = before.column_generation else {
                continue;
            };
            let phase = phase_at(obs, after.at_ms).unwrap_or("flip");
            let found = match after.ledger_generation {
                Some(l) if l >= last_columns && after.ledger_gaps == 0 => None,
                Some(l) if l >= last_columns => Some(finding(
                    FindingRule::FlipUnverified,
                    phase,
                    format!(
                        "right after the flip the {ring} ring's ledger had {} missing",
                        observe::count(u64::try_from(after.ledger_gaps).unwrap_or(0), "generation")
                    ),
                    vec![l],
                    1,
                )),
                Some(l) => Some(finding(
                    FindingRule::FlipUnverified,
                    phase,
                    format!(
                        "right after the flip the {ring} ring's ledger ended at generation {l}, behind the last columns generation {} seen before it",
                        last_columns
                    ),
                    vec![l, last_columns],
                    1,
                )),
                None => Some(finding(
                    FindingRule::FlipUnverified,
                    phase,
                    format!("right after the flip the {ring} ring had no ledger"),
                    vec![],
                    1,
                )),
            };
            // Seen in the first sample under the ledger.
            out.extend(found.map(|f| f.at(after.at_ms)));
        }
    }
    out
}

/// What each flip printed: every ring of its `flipped` events, with the
/// generation of its columns (G) and of its ledger (L); `L < G` means the
/// ledger was promoted behind the columns.
fn flip_outputs(obs: &Observations) -> Vec<Finding> {
    let mut out = Vec::new();
    for flip in &obs.flips {
        let phase = phase_at(obs, flip.at_ms).unwrap_or("flip");
        let rings = flip
            .output
            .iter()
            .filter_map(|event| match event {
                Event::Flipped(f) => Some(&f.rings),
                _ => None,
            })
            .flatten();
        for ring in rings {
            let (name, g, l) = (&ring.ring, ring.columns_generation, ring.ledger_generation);
            if l < g {
                out.push(finding(
                    FindingRule::FlipUnverified,
                    phase,
                    format!("the {} flip promoted the {name} ring's ledger at generation {l}, behind its columns at generation {g}", flip.mode.name()),
                    vec![l, g],
                    1,
                ));
            }
        }
    }
    out
}

/// After a flip that succeeded, the database must be in ledger authority
/// with every ledger present, gap-free over its last wrap, each row in the
/// slot its generation names, and no ring row written ahead of it.
fn flip_end_state(storage: &Storage, obs: &Observations) -> Vec<Finding> {
    let flipped = obs
        .flips
        .iter()
        .any(|f| f.exit_code == Some(awa_runtime::error::EXIT_OK))
        || obs.rings.iter().any(|s| s.authority == "ledger");
    let authority = storage.authority.as_deref();
    if flipped && authority != Some("ledger") {
        return vec![finding(
            FindingRule::FlipUnverified,
            RECONCILE,
            format!(
                "a flip succeeded but the ring-cursor authority is {} at the end",
                authority.unwrap_or("missing")
            ),
            vec![],
            1,
        )];
    }
    if authority != Some("ledger") {
        return vec![];
    }
    let Some(ledgers) = &storage.ledgers else {
        return vec![finding(
            FindingRule::FlipUnverified,
            RECONCILE,
            "ledger authority is set but the ring ledgers do not exist".into(),
            vec![],
            1,
        )];
    };
    let mut out = Vec::new();
    for l in ledgers {
        let ring = &l.ring;
        let Some(top) = l.top else {
            out.push(finding(
                FindingRule::FlipUnverified,
                RECONCILE,
                format!("under ledger authority the {ring} ring's ledger is empty"),
                vec![],
                1,
            ));
            continue;
        };
        let mut wrong = Vec::new();
        if l.gaps > 0 {
            wrong.push(format!(
                "misses {} of its last wrap",
                observe::count(u64::try_from(l.gaps).unwrap_or(0), "generation")
            ));
        }
        if l.misplaced > 0 {
            wrong.push(format!(
                "has {} whose slot is not generation mod {}",
                observe::count(u64::try_from(l.misplaced).unwrap_or(0), "row"),
                l.slot_count
            ));
        }
        if let Some(written) = l.written.filter(|&w| w > top) {
            wrong.push(format!(
                "has ring rows written at generation {written}, which the ledger never reached"
            ));
        }
        if !wrong.is_empty() {
            out.push(finding(
                FindingRule::FlipUnverified,
                RECONCILE,
                format!(
                    "under ledger authority the {ring} ring's ledger (top generation {top}) {}",
                    wrong.join(" and ")
                ),
                vec![top],
                (l.gaps + l.misplaced).max(1) as u64,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use awa_runtime::store::audit::{Ledger, RingColumns};

    use awa_runtime::events::{FlipCheck, Flipped};
    use awa_runtime::store::authority::RingFlip;

    use super::*;
    use crate::matrix::{FlipMode, Outcome};
    use crate::observe::FlipRecord;

    fn fence(exit_code: Option<i32>, refused: bool, after: &str) -> FenceRecord {
        FenceRecord {
            artifact: "previous".into(),
            version: "0.6.2".into(),
            exit_code,
            refused,
            state_before: "abc".into(),
            state_after: after.into(),
            stderr_tail: "error: refused: ring cursor authority is ledger\n".into(),
        }
    }

    fn sample(
        at_ms: u64,
        ring: &str,
        authority: &str,
        columns: (i32, i64),
        ledger: Option<i64>,
        gaps: i64,
    ) -> RingSample {
        RingSample {
            at_ms,
            ring: ring.into(),
            authority: authority.into(),
            column_slot: Some(columns.0),
            column_generation: Some(columns.1),
            ledger_generation: ledger,
            ledger_slot: ledger.map(|g| (g % 8) as i32),
            ledger_rows: 8,
            ledger_gaps: gaps,
        }
    }

    fn rules(found: &[Finding]) -> Vec<FindingRule> {
        found.iter().map(|f| f.rule).collect()
    }

    fn ledger(ring: &str, top: i64) -> Ledger {
        Ledger {
            ring: ring.into(),
            slot_count: 8,
            top: Some(top),
            rows: 8,
            gaps: 0,
            misplaced: 0,
            written: Some(top),
        }
    }

    fn poisoned(ring: &str) -> RingColumns {
        RingColumns {
            ring: ring.into(),
            current_slot: Some(-1),
            generation: Some(-1),
            unpoisoned_slots: vec![],
        }
    }

    /// A ring as a flip left it: (slot, generation) of its columns and of
    /// its ledger, and the ledger rows the flip added.
    fn ring_flip(ring: &str, columns: (i32, i64), ledger: (i32, i64), backfilled: u64) -> RingFlip {
        RingFlip {
            ring: ring.into(),
            columns_slot: columns.0,
            columns_generation: columns.1,
            ledger_slot: ledger.0,
            ledger_generation: ledger.1,
            backfilled,
        }
    }

    /// The `flipped` event of a manual flip that moved these rings.
    fn flipped(rings: &[RingFlip]) -> Event {
        Event::Flipped(Flipped {
            rings: rings.to_vec(),
            forced: Some(false),
            version: Some("0.7.0".into()),
            ..Default::default()
        })
    }

    /// A cell that flipped cleanly: samples before and after, the flip's
    /// output, and the end state.
    fn clean_flip() -> (Storage, Observations) {
        let storage = Storage {
            authority: Some("ledger".into()),
            columns: ["queue", "claim", "lease"].map(poisoned).to_vec(),
            ledgers: Some(["queue", "claim", "lease"].map(|r| ledger(r, 30)).to_vec()),
            ..Default::default()
        };
        let obs = Observations {
            fences: vec![fence(Some(2), true, "abc")],
            flips: vec![FlipRecord {
                holder_ages: Vec::new(),
                ids_drawn_before: None,
                mode: FlipMode::Manual,
                expected: Outcome::Ok,
                exit_code: Some(0),
                at_ms: 5_000,
                output: vec![flipped(&[ring_flip("queue", (4, 20), (4, 20), 2)])],
            }],
            rings: vec![
                sample(4_000, "queue", "columns", (2, 18), Some(17), 0),
                sample(4_500, "queue", "columns", (4, 20), Some(20), 0),
                sample(5_500, "queue", "ledger", (-1, -1), Some(21), 0),
            ],
            ..Default::default()
        };
        (storage, obs)
    }

    #[test]
    fn a_clean_flip_and_fence_find_nothing() {
        let (storage, obs) = clean_flip();
        assert_eq!(findings(&storage, &obs), []);
    }

    #[test]
    fn attempts_a_pre_flip_binary_started_after_the_flip_breach_the_fence() {
        let (mut storage, obs) = clean_flip();
        let late = |job_id, version: &str, after_flip_ms| awa_runtime::store::audit::LateAttempt {
            job_id,
            run_lease: 2,
            version: version.into(),
            after_flip_ms,
        };
        storage.late_attempts = vec![late(41, "0.6.2", 1_800), late(43, "0.6.2", 1_900)];
        let found = findings(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FenceBreached]);
        assert_eq!(found[0].ids, [41, 43]);
        assert_eq!(found[0].count, 2);
        assert!(
            found[0].message.starts_with("2 attempts were started after the flip by binaries that are not flip-aware (0.6.2); the first, job 41 run 2, 1.8s after the flip"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn jobs_a_pre_flip_producer_enqueued_after_the_flip_breach_the_fence() {
        let accepted = |job_id, version: &str| observe::AcceptedJob {
            job_id,
            mode: awa_runtime::workload::Mode::Complete,
            max_attempts: 3,
            version: version.into(),
            run_at_ms: None,
        };
        let (mut storage, mut obs) = clean_flip();
        storage.min_flip_version = Some("0.7.0".into());
        obs.flips[0].ids_drawn_before = Some(100);
        // Drawn before the flip had committed (0.6.2, up to 100), and a
        // flip-aware producer's after it: neither is a breach.
        obs.accepted = vec![
            accepted(90, "0.6.2"),
            accepted(100, "0.6.2"),
            accepted(150, "0.7.0"),
        ];
        assert_eq!(findings(&storage, &obs), []);

        // Ids drawn after it from a 0.6.2 producer and an unparseable one.
        obs.accepted.extend([
            accepted(130, "0.6.2"),
            accepted(120, "0.6.2"),
            accepted(140, "dev"),
        ]);
        let found = findings(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FenceBreached]);
        assert_eq!(
            (found[0].ids.as_slice(), found[0].count),
            (&[120, 130, 140][..], 3)
        );
        assert!(
            found[0].message.starts_with(
                "3 jobs were accepted after the flip from producers that are not flip-aware (0.6.2, dev); \
                 the first, job 120, has an id above 100, the sequence's value read once the flip had committed"
            ),
            "{}",
            found[0].message
        );

        // Not judged without the sequence's reading, or without the flip.
        let mut unread = obs.clone();
        unread.flips[0].ids_drawn_before = None;
        assert_eq!(findings(&storage, &unread), []);
        let mut columns = storage;
        columns.authority = Some("columns".into());
        columns.columns = Vec::new();
        columns.ledgers = None;
        assert!(
            !findings(&columns, &obs)
                .iter()
                .any(|f| f.message.contains("accepted after the flip")),
            "judged under columns authority"
        );
    }

    #[test]
    fn fence_runs_that_did_not_refuse_or_changed_state_are_breaches() {
        assert_eq!(fence_run(&fence(Some(2), true, "abc")), None);
        // A loud non-zero exit with a refusal is not a breach.
        assert_eq!(fence_run(&fence(Some(1), true, "abc")), None);
        for (f, needle) in [
            (
                fence(Some(0), false, "abc"),
                "exited 0, printed no refused event",
            ),
            (fence(Some(2), true, "xyz"), "changed the storage state"),
            (
                fence(Some(1), false, "abc"),
                "exited 1 without a refused event",
            ),
            (fence(None, true, "abc"), "did not exit"),
        ] {
            let found = fence_run(&f).unwrap_or_else(|| panic!("{needle}: not found"));
            assert_eq!(
                (found.rule, found.phase.as_str()),
                (FindingRule::FenceBreached, "fence")
            );
            assert!(found.message.contains(needle), "{}", found.message);
            assert!(
                found
                    .message
                    .ends_with("its stderr ends: error: refused: ring cursor authority is ledger"),
                "{}",
                found.message
            );
        }
    }

    #[test]
    fn unpoisoned_columns_under_ledger_authority_breach_the_fence() {
        let (mut storage, obs) = clean_flip();
        storage.columns[1] = RingColumns {
            ring: "claim".into(),
            current_slot: Some(-1),
            generation: Some(17),
            unpoisoned_slots: vec![0, 1],
        };
        let found = findings(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FenceBreached]);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[0, 1][..], 3));
        assert!(
            found[0].message.contains(
                "the claim ring's cursor columns are not poisoned (current_slot -1, generation 17)"
            ),
            "{}",
            found[0].message
        );
        // Under columns authority the columns are supposed to move.
        storage.authority = Some("columns".into());
        assert!(poison(&storage).is_empty());
    }

    #[test]
    fn mixed_discipline_from_samples() {
        let obs = Observations::default();
        let ahead = [
            sample(1_000, "claim", "columns", (1, 9), Some(9), 0),
            sample(2_000, "claim", "columns", (2, 10), Some(11), 0),
        ];
        let found = mixed_discipline(&ahead, &obs);
        assert_eq!(rules(&found), [FindingRule::MixedDiscipline]);
        assert_eq!(
            found[0].at_ms,
            Some(2_000),
            "the first sample that showed it"
        );
        assert!(found[0].message.starts_with("the claim ring advanced its ledger to generation 11 past its columns (generation 10)"), "{}", found[0].message);

        let gaps = [sample(1_000, "lease", "columns", (1, 9), Some(9), 2)];
        assert!(
            mixed_discipline(&gaps, &obs)[0]
                .message
                .contains("had 2 generations missing")
        );

        let moved = [
            sample(1_000, "queue", "ledger", (0, 0), Some(40), 0),
            sample(1_200, "queue", "ledger", (1, 1), Some(40), 0),
        ];
        let found = mixed_discipline(&moved, &obs);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].count, found[0].ids.as_slice()), (2, &[0, 1][..]));
        assert!(
            found[0]
                .message
                .contains("moved its columns to (slot 0, generation 0) under ledger authority")
        );

        let behind_is_fine = [
            sample(1_000, "queue", "columns", (5, 13), Some(11), 0),
            sample(1_000, "queue", "none", (5, 13), None, 0),
        ];
        assert_eq!(mixed_discipline(&behind_is_fine, &obs), []);
    }

    #[test]
    fn a_ledger_ahead_of_its_columns_at_the_end_is_mixed_discipline() {
        let storage = Storage {
            authority: Some("columns".into()),
            columns: vec![RingColumns {
                ring: "queue".into(),
                current_slot: Some(2),
                generation: Some(10),
                unpoisoned_slots: vec![1],
            }],
            ledgers: Some(vec![ledger("queue", 12)]),
            ..Default::default()
        };
        let found = findings(&storage, &Observations::default());
        assert_eq!(rules(&found), [FindingRule::MixedDiscipline]);
        assert_eq!(found[0].ids, [12]);
    }

    #[test]
    fn a_ledger_behind_the_columns_across_the_flip_is_unverified() {
        let (storage, mut obs) = clean_flip();
        obs.rings[2].ledger_generation = Some(18);
        let found = findings(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FlipUnverified]);
        assert_eq!(
            found[0].at_ms,
            Some(5_500),
            "the first sample under the ledger"
        );
        assert!(
            found[0]
                .message
                .contains("ended at generation 18, behind the last columns generation 20"),
            "{}",
            found[0].message
        );

        let (storage, mut obs) = clean_flip();
        obs.rings[2].ledger_gaps = 1;
        // Both the flip check and the gap check see it.
        assert_eq!(
            rules(&findings(&storage, &obs)),
            [FindingRule::MixedDiscipline, FindingRule::FlipUnverified]
        );
    }

    #[test]
    fn a_flip_that_reports_its_ledger_behind_is_unverified() {
        let (storage, mut obs) = clean_flip();
        obs.flips[0].output = vec![
            Event::FlipCheck(FlipCheck {
                authority: None,
                ready: true,
                fresh_runtimes: None,
                blocking: vec![],
            }),
            flipped(&[
                ring_flip("queue", (4, 20), (4, 20), 0),
                ring_flip("claim", (7, 31), (3, 27), 0),
            ]),
        ];
        obs.phases = vec![crate::observe::Phase {
            step: 6,
            name: "flip".into(),
            detail: String::new(),
            start_ms: 4_900,
            end_ms: 5_100,
            outcome: crate::observe::StepOutcome::Ok,
        }];
        let found = findings(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FlipUnverified]);
        assert_eq!(
            (found[0].phase.as_str(), found[0].ids.as_slice()),
            ("flip", &[27, 31][..])
        );
        assert!(found[0].message.contains(
            "promoted the claim ring's ledger at generation 27, behind its columns at generation 31"
        ));
    }

    #[test]
    fn the_end_state_after_a_flip_must_verify() {
        let (mut storage, obs) = clean_flip();
        storage.authority = Some("columns".into());
        storage.columns = vec![];
        let found = flip_end_state(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FlipUnverified]);
        assert!(
            found[0]
                .message
                .contains("the ring-cursor authority is columns at the end")
        );

        let (mut storage, obs) = clean_flip();
        let ledgers = storage.ledgers.as_mut().unwrap();
        ledgers[0].gaps = 2;
        ledgers[1].written = Some(31);
        ledgers[2].top = None;
        let found = flip_end_state(&storage, &obs);
        assert_eq!(rules(&found), [FindingRule::FlipUnverified; 3]);
        assert!(
            found[0]
                .message
                .contains("misses 2 generations of its last wrap")
        );
        assert!(
            found[1]
                .message
                .contains("ring rows written at generation 31, which the ledger never reached")
        );
        assert!(
            found[2]
                .message
                .contains("the lease ring's ledger is empty")
        );
    }
}
