//! Ring cursors as the audit reads them: the authority, the compat
//! columns (poisoned or not), the rotation ledgers, and the fence on the
//! claim path (attempts pre-flip binaries started after the flip).

use super::SchemaFeatures;
use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

const AUTHORITY: &str = "SELECT authority FROM awa.ring_cursor_authority";

/// The ring-cursor authority (`columns` or `ledger`), `None` before the
/// expand migration.
pub async fn authority(client: &Client, features: &SchemaFeatures) -> Result<Option<String>> {
    if !features.authority {
        return Ok(None);
    }
    let row = client
        .query_opt(AUTHORITY, &[])
        .await
        .map_err(|e| Error::db("reading the ring-cursor authority", e))?;
    Ok(row.map(|r| r.get(0)))
}

/// The compat cursor columns and per-slot generations, read through
/// `to_jsonb` so a schema without them (dropped columns read as NULL)
/// still answers.
pub const COLUMNS: &str = "
WITH st AS (
    SELECT 'queue' AS ring, to_jsonb(s) AS j FROM awa.queue_ring_state s
    UNION ALL SELECT 'claim', to_jsonb(s) FROM awa.claim_ring_state s
    UNION ALL SELECT 'lease', to_jsonb(s) FROM awa.lease_ring_state s
), sl AS (
    SELECT 'queue' AS ring, slot, to_jsonb(s)->>'generation' AS generation FROM awa.queue_ring_slots s
    UNION ALL SELECT 'claim', slot, to_jsonb(s)->>'generation' FROM awa.claim_ring_slots s
    UNION ALL SELECT 'lease', slot, to_jsonb(s)->>'generation' FROM awa.lease_ring_slots s
)
SELECT st.ring, (st.j->>'current_slot')::int, (st.j->>'generation')::bigint,
       coalesce((SELECT array_agg(sl.slot ORDER BY sl.slot) FROM sl
                 WHERE sl.ring = st.ring AND sl.generation IS NOT NULL AND sl.generation::bigint <> -1), '{}')
FROM st ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], st.ring)";

/// One ring's compat columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RingColumns {
    pub ring: String,
    /// `None` when the column does not exist.
    pub current_slot: Option<i32>,
    pub generation: Option<i64>,
    /// Slots whose legacy prune generation is not poisoned (-1).
    pub unpoisoned_slots: Vec<i32>,
}

impl RingColumns {
    /// Both cursor fields and every slot generation poisoned (or gone).
    pub fn poisoned(&self) -> bool {
        self.current_slot.is_none_or(|s| s == -1)
            && self.generation.is_none_or(|g| g == -1)
            && self.unpoisoned_slots.is_empty()
    }
}

/// The compat columns of the three rings.
pub async fn ring_columns(client: &Client) -> Result<Vec<RingColumns>> {
    let rows = client
        .query(COLUMNS, &[])
        .await
        .map_err(|e| Error::db("reading the ring cursor columns", e))?;
    Ok(rows
        .iter()
        .map(|r| RingColumns {
            ring: r.get(0),
            current_slot: r.get(1),
            generation: r.get(2),
            unpoisoned_slots: r.get(3),
        })
        .collect())
}

/// Per ring: the ledger's top, its gaps over the last wrap (missing
/// generations in `[max(0, top - slot_count + 1), top]`, as the flip
/// verifies them), rows whose slot is not `generation mod slot_count`,
/// and the highest generation any row of the ring carries (a row ahead
/// of the ledger was written by a cursor the ledger never had).
pub const LEDGERS: &str = "
WITH l AS (
    SELECT 'queue' AS ring, generation, slot FROM awa.queue_ring_rotations
    UNION ALL SELECT 'claim', generation, slot FROM awa.claim_ring_rotations
    UNION ALL SELECT 'lease', generation, slot FROM awa.lease_ring_rotations
), n AS (
    SELECT 'queue' AS ring, slot_count FROM awa.queue_ring_state
    UNION ALL SELECT 'claim', slot_count FROM awa.claim_ring_state
    UNION ALL SELECT 'lease', slot_count FROM awa.lease_ring_state
), top AS (SELECT ring, max(generation) AS top, count(*) AS n_rows FROM l GROUP BY ring),
written AS (
    SELECT 'queue' AS ring, max(generation) AS g FROM awa.queue_entries
    UNION ALL SELECT 'claim', max(generation) FROM awa.claim_receipts
    UNION ALL SELECT 'claim', max(generation) FROM awa.claim_closures
    UNION ALL SELECT 'lease', max(generation) FROM awa.leases
)
SELECT n.ring, n.slot_count, t.top, coalesce(t.n_rows, 0),
       CASE WHEN t.top IS NULL THEN 0 ELSE
           (t.top - greatest(0, t.top - n.slot_count + 1) + 1)
           - (SELECT count(*) FROM l WHERE l.ring = n.ring AND l.generation BETWEEN greatest(0, t.top - n.slot_count + 1) AND t.top)
       END AS gaps,
       (SELECT count(*) FROM l WHERE l.ring = n.ring AND l.slot <> l.generation % n.slot_count) AS misplaced,
       (SELECT max(w.g) FROM written w WHERE w.ring = n.ring) AS written
FROM n LEFT JOIN top t ON t.ring = n.ring
ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], n.ring)";

/// One ring's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ledger {
    pub ring: String,
    pub slot_count: i32,
    /// The max generation (`None`: the ledger is empty).
    pub top: Option<i64>,
    pub rows: i64,
    /// Generations missing over the last wrap.
    pub gaps: i64,
    /// Rows whose slot is not `generation mod slot_count`.
    pub misplaced: i64,
    /// The highest generation a row of the ring's tables carries.
    pub written: Option<i64>,
}

/// The three ledgers, `None` before the expand migration.
pub async fn ledgers(client: &Client, features: &SchemaFeatures) -> Result<Option<Vec<Ledger>>> {
    if !features.ledgers {
        return Ok(None);
    }
    let rows = client
        .query(LEDGERS, &[])
        .await
        .map_err(|e| Error::db("reading the ring ledgers", e))?;
    Ok(Some(
        rows.iter()
            .map(|r| Ledger {
                ring: r.get(0),
                slot_count: r.get(1),
                top: r.get(2),
                rows: r.get(3),
                gaps: r.get(4),
                misplaced: r.get(5),
                written: r.get(6),
            })
            .collect(),
    ))
}

/// Attempts started more than [`FLIP_COMMIT_MARGIN_MS`] after the flip,
/// with the version of the binary that started each (one statement; the
/// caller keeps those below the schema's minimum flip version).
const ATTEMPTS_AFTER_FLIP: &str = "
SELECT e.job_id, e.run_lease, e.version,
       (extract(epoch FROM e.started_at - a.flipped_at) * 1000)::bigint,
       awa.ring_authority_min_flip_version()
FROM awa.executions e, awa.ring_cursor_authority a
WHERE a.authority = 'ledger' AND a.flipped_at IS NOT NULL
  AND e.started_at > a.flipped_at + $1::float8 * interval '1 millisecond'
  AND e.version <> $2
ORDER BY e.job_id, e.run_lease";

/// How long after `flipped_at` (the flip's last statement) its commit may
/// still be invisible to a starting transaction. Attempts started within
/// it are not judged: they may have seen `columns` legitimately.
pub const FLIP_COMMIT_MARGIN_MS: f64 = 50.0;

/// An attempt a binary below the minimum flip version started after the
/// flip: the fence did not stop its claim path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LateAttempt {
    pub job_id: i64,
    pub run_lease: i64,
    pub version: String,
    /// Milliseconds after the flip.
    pub after_flip_ms: i64,
}

/// Attempts started after the flip by binaries that are not flip-aware
/// (empty before the flip, or before the expand migration).
pub async fn attempts_after_flip_by_pre_flip_binaries(
    client: &Client,
    features: &SchemaFeatures,
) -> Result<Vec<LateAttempt>> {
    if !features.authority {
        return Ok(vec![]);
    }
    let rows = client
        .query(
            ATTEMPTS_AFTER_FLIP,
            &[&FLIP_COMMIT_MARGIN_MS, &crate::version::VERSION],
        )
        .await
        .map_err(|e| Error::db("reading attempts started after the flip", e))?;
    Ok(rows
        .iter()
        .filter(|r| {
            let min = crate::store::authority::parse_version(r.get::<_, &str>(4));
            let version = crate::store::authority::parse_version(r.get::<_, &str>(2));
            match (version, min) {
                (Some(v), Some(min)) => v < min,
                // Unparseable versions are not flip-aware (fail closed).
                _ => true,
            }
        })
        .map(|r| LateAttempt {
            job_id: r.get(0),
            run_lease: r.get(1),
            version: r.get(2),
            after_flip_ms: r.get(3),
        })
        .collect())
}

/// The oldest binary version the schema counts as flip-aware (`X.Y.Z`),
/// `None` before the expand migration. Binaries below it are the ones
/// the fence must stop after the flip.
pub async fn min_flip_version(
    client: &Client,
    features: &SchemaFeatures,
) -> Result<Option<String>> {
    if !features.authority {
        return Ok(None);
    }
    let row = client
        .query_one(crate::store::authority::MIN_FLIP_VERSION, &[])
        .await
        .map_err(|e| Error::db("reading ring_authority_min_flip_version()", e))?;
    Ok(Some(row.get(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisoned_means_both_fields_and_every_slot() {
        let mut r = RingColumns {
            ring: "queue".into(),
            current_slot: Some(-1),
            generation: Some(-1),
            unpoisoned_slots: vec![],
        };
        assert!(r.poisoned());
        r.generation = Some(7);
        assert!(!r.poisoned(), "only current_slot poisoned");
        r.generation = None;
        assert!(r.poisoned(), "a dropped column cannot be written");
        r.unpoisoned_slots = vec![3];
        assert!(!r.poisoned());
    }
}
