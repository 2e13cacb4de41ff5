//! Interval cron schedules. Fire times are the multiples of `every_ms`
//! since the Unix epoch, after the schedule's anchor, so any observer can
//! list the fire times of a window. The leader fires every due time it
//! has not fired yet (catching up after a leader handoff); the primary
//! key of `cron_fires` makes each fire time yield exactly one job.

use crate::error::{Error, Result};
use tokio_postgres::Client;

const UPSERT: &str = "
INSERT INTO awa.cron_schedules (name, every_ms, queue, kind, args, priority, max_attempts, anchor_ms)
VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7, (extract(epoch FROM now()) * 1000)::bigint)
ON CONFLICT (name) DO UPDATE SET every_ms = excluded.every_ms, queue = excluded.queue, kind = excluded.kind,
    args = excluded.args, priority = excluded.priority, max_attempts = excluded.max_attempts";

const DUE: &str = "
SELECT name, every_ms, coalesce(last_fire_ms, anchor_ms), (extract(epoch FROM clock_timestamp()) * 1000)::bigint
FROM awa.cron_schedules ORDER BY name";

const FIRE: &str = "
WITH id AS (SELECT nextval('awa.job_id_seq') AS job_id)
, f AS (
    INSERT INTO awa.cron_fires (name, fire_ms, job_id, instance_id)
    SELECT $1, $2, id.job_id, $3 FROM id
    ON CONFLICT (name, fire_ms) DO NOTHING
    RETURNING job_id)
, s AS (SELECT * FROM awa.cron_schedules WHERE name = $1)
, j AS (
    INSERT INTO awa.jobs (job_id, kind, queue, args, priority, max_attempts, state)
    SELECT f.job_id, s.kind, s.queue, s.args || jsonb_build_object('cron', s.name, 'fire_ms', $2::bigint),
           s.priority, s.max_attempts, 'available'
    FROM f, s
    RETURNING job_id, queue, priority)
, cur AS (SELECT slot, generation FROM awa.flip_aware_ring_cursor('queue'))
, q AS (
    INSERT INTO awa.queue_entries (slot, generation, job_id, queue, priority, attempt)
    SELECT cur.slot, cur.generation, j.job_id, j.queue, j.priority, 0 FROM j, cur)
, u AS (UPDATE awa.cron_schedules SET last_fire_ms = GREATEST(coalesce(last_fire_ms, 0), $2) WHERE name = $1)
SELECT job_id FROM j";

/// A schedule to create or replace.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub name: String,
    pub every_ms: i64,
    pub queue: String,
    pub kind: String,
    pub args: serde_json::Value,
    pub priority: i16,
    pub max_attempts: i32,
}

/// Create or replace a schedule.
pub async fn upsert(client: &Client, s: &Schedule) -> Result<()> {
    client
        .execute(
            UPSERT,
            &[
                &s.name,
                &s.every_ms,
                &s.queue,
                &s.kind,
                &s.args.to_string(),
                &s.priority,
                &s.max_attempts,
            ],
        )
        .await
        .map_err(|e| Error::db(format!("upserting cron schedule {:?}", s.name), e))?;
    Ok(())
}

/// One fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub name: String,
    pub fire_ms: i64,
    pub job_id: i64,
}

/// The fire times after `from_ms` up to `now_ms`, at most `cap` of them.
pub fn due_times(every_ms: i64, from_ms: i64, now_ms: i64, cap: usize) -> Vec<i64> {
    let mut t = (from_ms.div_euclid(every_ms) + 1) * every_ms;
    let mut out = Vec::new();
    while t <= now_ms && out.len() < cap {
        out.push(t);
        t += every_ms;
    }
    out
}

/// Fire every due time of every schedule (leader only).
pub async fn fire_due(client: &Client, instance_id: &str) -> Result<Vec<Fired>> {
    let rows = client
        .query(DUE, &[])
        .await
        .map_err(|e| Error::db("reading cron schedules", e))?;
    let mut fired = Vec::new();
    for row in rows {
        let (name, every, from, now): (String, i64, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        // The seeded defect skips the fire times a gap left behind.
        let from = if crate::failpoint::armed(crate::failpoint::CRON_NO_CATCH_UP) {
            from.max(now - every)
        } else {
            from
        };
        for t in due_times(every, from, now, 1000) {
            let got = client
                .query(FIRE, &[&name, &t, &instance_id])
                .await
                .map_err(|e| Error::db(format!("firing cron schedule {name:?}"), e))?;
            if let Some(r) = got.first() {
                fired.push(Fired {
                    name: name.clone(),
                    fire_ms: t,
                    job_id: r.get(0),
                });
            }
        }
    }
    Ok(fired)
}

#[cfg(test)]
mod tests {
    use super::due_times;

    #[test]
    fn due_times_are_multiples_after_the_anchor() {
        assert_eq!(due_times(1000, 1500, 4200, 10), vec![2000, 3000, 4000]);
        assert_eq!(due_times(1000, 2000, 2999, 10), Vec::<i64>::new());
        assert_eq!(due_times(1000, 2000, 3000, 10), vec![3000]);
        assert_eq!(due_times(1000, 0, 100_000, 2), vec![1000, 2000]);
    }
}
