//! Placement: every ring row in the slot its ring's cursor gives it.

use super::{MAX_IDS, SchemaFeatures};
use crate::error::{Error, Result};
use serde::Serialize;
use tokio_postgres::Client;

/// The placement statement for a `cur(ring, slot_count, generation)`
/// of each ring's authoritative cursor: ready entries, claim receipts and
/// closures, and leases whose `(slot, generation)` is not one that cursor
/// could have given them. Rotation advances slot and generation in
/// lock-step and never opens a slot that holds rows, so a row of slot `s`
/// carries the generation at which `s` was last opened: `G - ((G - s) mod
/// n)` for the cursor's generation `G` and `n` slots. Any other generation
/// was written by a cursor the ring never had (a misrouted entry, a stale
/// or wrong cursor), wherever a claimer happens to find it. Per ring and
/// kind of row: how many, the first ids, and the first offender. One
/// statement, one snapshot; rings whose cursor is poisoned (-1) are not
/// judged.
macro_rules! misplaced_with_cursors {
    ($cur:literal) => {
        concat!(
            "
WITH cur AS (",
            $cur,
            "
), placed AS (
    SELECT 'queue' AS ring, 'ready entry' AS kind, job_id, slot, generation FROM awa.queue_entries
    UNION ALL SELECT 'claim', 'claim receipt', job_id, slot, generation FROM awa.claim_receipts
    UNION ALL SELECT 'claim', 'claim closure', job_id, slot, generation FROM awa.claim_closures
    UNION ALL SELECT 'lease', 'lease', job_id, slot, generation FROM awa.leases
), wrong AS (
    SELECT p.ring, p.kind, p.job_id, p.slot, p.generation, c.generation AS cursor,
           c.generation - ((c.generation - p.slot) % c.slot_count + c.slot_count) % c.slot_count AS expected
    FROM placed p JOIN cur c ON c.ring = p.ring
    WHERE c.generation >= 0
)
SELECT ring, kind, max(cursor), count(*),
       (array_agg(job_id ORDER BY job_id))[1:$1],
       (array_agg(job_id ORDER BY job_id))[1], (array_agg(slot ORDER BY job_id))[1],
       (array_agg(generation ORDER BY job_id))[1], (array_agg(expected ORDER BY job_id))[1]
FROM wrong WHERE generation <> expected
GROUP BY ring, kind
ORDER BY array_position(ARRAY['queue', 'claim', 'lease'], ring), kind"
        )
    };
}

/// Placement ([`misplaced_with_cursors`]) reading the authority: the
/// ledger's top under `ledger`, the singleton columns under `columns`.
pub const MISPLACED: &str = misplaced_with_cursors!(
    "
    SELECT 'queue' AS ring, s.slot_count,
           CASE WHEN a.authority = 'ledger'
                THEN (SELECT r.generation FROM awa.queue_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
                ELSE s.generation END AS generation
    FROM awa.queue_ring_state s, awa.ring_cursor_authority a
    UNION ALL
    SELECT 'claim', s.slot_count,
           CASE WHEN a.authority = 'ledger'
                THEN (SELECT r.generation FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
                ELSE s.generation END
    FROM awa.claim_ring_state s, awa.ring_cursor_authority a
    UNION ALL
    SELECT 'lease', s.slot_count,
           CASE WHEN a.authority = 'ledger'
                THEN (SELECT r.generation FROM awa.lease_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
                ELSE s.generation END
    FROM awa.lease_ring_state s, awa.ring_cursor_authority a"
);

/// Placement on a schema before the expand migration: the columns are the
/// only cursor.
pub const MISPLACED_COLUMNS: &str = misplaced_with_cursors!(
    "
    SELECT 'queue' AS ring, slot_count, generation FROM awa.queue_ring_state
    UNION ALL SELECT 'claim', slot_count, generation FROM awa.claim_ring_state
    UNION ALL SELECT 'lease', slot_count, generation FROM awa.lease_ring_state"
);

/// Placement on a schema whose singleton cursor columns a contract
/// dropped: the ledgers' tops are the only cursor.
pub const MISPLACED_LEDGERS: &str = misplaced_with_cursors!(
    "
    SELECT 'queue' AS ring, s.slot_count,
           (SELECT r.generation FROM awa.queue_ring_rotations r ORDER BY r.generation DESC LIMIT 1) AS generation
    FROM awa.queue_ring_state s
    UNION ALL
    SELECT 'claim', s.slot_count,
           (SELECT r.generation FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
    FROM awa.claim_ring_state s
    UNION ALL
    SELECT 'lease', s.slot_count,
           (SELECT r.generation FROM awa.lease_ring_rotations r ORDER BY r.generation DESC LIMIT 1)
    FROM awa.lease_ring_state s"
);

/// Rows of one kind in one ring that sit where no cursor put them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Misplaced {
    /// `queue`, `claim` or `lease`.
    pub ring: String,
    /// `ready entry`, `claim receipt`, `claim closure` or `lease`.
    pub kind: String,
    /// The ring's authoritative cursor generation at the snapshot.
    pub cursor: i64,
    /// How many rows.
    pub count: i64,
    /// The first [`MAX_IDS`] job ids, ascending.
    pub ids: Vec<i64>,
    /// The first offender: job id, its slot, its generation, and the
    /// generation that slot was last opened at.
    pub first: [i64; 4],
}

impl Misplaced {
    /// `ready entry of job 12 in slot 3 at generation 11, where slot 3 was last opened at generation 3`.
    pub fn describe_first(&self) -> String {
        let [job, slot, generation, expected] = self.first;
        format!(
            "{} of job {job} in slot {slot} at generation {generation}, where the {} ring's cursor \
             (generation {}) last opened slot {slot} at generation {expected}",
            self.kind, self.ring, self.cursor
        )
    }
}

/// The statement [`misplaced`] runs on a schema with `features`, for a
/// caller that reads it in a snapshot of its own (the rehearsal's
/// monitor); its one parameter is [`MAX_IDS`] as `int4`.
pub fn misplaced_sql(features: &SchemaFeatures) -> &'static str {
    match (
        features.cursor_columns,
        features.authority && features.ledgers,
    ) {
        (true, true) => MISPLACED,
        (true, false) => MISPLACED_COLUMNS,
        (false, _) => MISPLACED_LEDGERS,
    }
}

/// The rows of [`misplaced_sql`], read.
pub fn misplaced_rows(rows: &[tokio_postgres::Row]) -> Vec<Misplaced> {
    rows.iter()
        .map(|r| Misplaced {
            ring: r.get(0),
            kind: r.get(1),
            cursor: r.get(2),
            count: r.get(3),
            ids: r.get(4),
            first: [
                r.get::<_, i64>(5),
                i64::from(r.get::<_, i32>(6)),
                r.get::<_, i64>(7),
                r.get::<_, i64>(8),
            ],
        })
        .collect()
}

/// Every misplaced ring row, per ring and kind. A schema without the
/// columns placement reads (an expand that dropped them, which the schema
/// and N-1 rules name) has no placement to judge: none, not an error.
pub async fn misplaced(client: &Client, features: &SchemaFeatures) -> Result<Vec<Misplaced>> {
    read_misplaced(client, features)
        .await
        .map_err(|e| Error::db("reading ring rows outside their slots", e))
}

/// [`misplaced`] for a caller that keeps the driver's error: inside a
/// transaction the read runs under a savepoint, so a schema lacking what
/// it reads leaves the caller's transaction usable; outside one (the
/// savepoint refused with SQLSTATE 25P01) it runs on its own.
pub async fn read_misplaced(
    client: &Client,
    features: &SchemaFeatures,
) -> std::result::Result<Vec<Misplaced>, tokio_postgres::Error> {
    use tokio_postgres::error::SqlState;
    let in_transaction = match client.batch_execute(PLACEMENT_SAVEPOINT).await {
        Ok(()) => true,
        Err(e) if e.code() == Some(&SqlState::NO_ACTIVE_SQL_TRANSACTION) => false,
        Err(e) => return Err(e),
    };
    let read = client
        .query(misplaced_sql(features), &[&(MAX_IDS as i32)])
        .await;
    let (end, found) = match read {
        Ok(rows) => (PLACEMENT_RELEASE, misplaced_rows(&rows)),
        Err(e) if schema_lacks(&e) => (PLACEMENT_ROLLBACK, Vec::new()),
        Err(e) => return Err(e),
    };
    if in_transaction {
        client.batch_execute(end).await?;
    }
    Ok(found)
}

/// The savepoint [`misplaced`] reads under, so a schema that lacks what
/// it reads does not abort the caller's transaction.
pub const PLACEMENT_SAVEPOINT: &str = "SAVEPOINT placement";
/// [`PLACEMENT_SAVEPOINT`] kept: the read succeeded.
pub const PLACEMENT_RELEASE: &str = "RELEASE SAVEPOINT placement";
/// [`PLACEMENT_SAVEPOINT`] undone: the schema lacked what placement reads.
pub const PLACEMENT_ROLLBACK: &str = "ROLLBACK TO SAVEPOINT placement";

/// Whether `e` says the schema lacks a column or table the query names
/// (SQLSTATE 42703 or 42P01).
pub fn schema_lacks(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code()
        .is_some_and(|c| *c == SqlState::UNDEFINED_COLUMN || *c == SqlState::UNDEFINED_TABLE)
}
