//! Maintenance leadership and its duties. One runtime at a time holds a
//! session advisory lock on a dedicated connection; while it does, it
//! promotes due jobs, rescues attempts, fires cron and prunes and rotates
//! the rings. Losing the connection loses the lock, and another runtime
//! takes over.

use crate::db::{Conn, Patience};
use crate::error::{Error, Result};
use crate::events::{self, CronFired, Event, FoldStoodDown, Leader, emit};
use crate::store::authority::{self, Authority, FlipOutcome};
use crate::store::{Ring, cron, enqueue, folds, instances, rescue, rings};
use crate::timings::Timings;
use std::time::Instant;
use tokio::sync::{mpsc, watch};

pub use crate::locks::LEADER_LOCK_KEY;

const TRY_LEAD: &str = "SELECT pg_try_advisory_lock($1)";
const RESIGN: &str = "SELECT pg_advisory_unlock($1)";

/// Who this runtime is, for events and rows.
#[derive(Debug, Clone)]
pub struct Identity {
    pub instance_id: String,
    pub name: String,
    pub version: String,
}

/// Run until `stop` turns true. Permanent failures go to `fatal`.
pub async fn run(
    url: String,
    me: Identity,
    t: Timings,
    mut stop: watch::Receiver<bool>,
    fatal: mpsc::Sender<Error>,
) {
    let Some(mut conn) = Conn::open_or_report(&url, &fatal).await else {
        return;
    };
    let mut patience = Patience::new(t.db_patience);
    while !*stop.borrow() {
        match lead(&mut conn, &me, &t, &mut stop).await {
            Ok(()) => patience.ok(),
            Err(e) => {
                match patience.failed("maintenance (leadership is lost with the connection)", e) {
                    Some(e) => {
                        let _ = fatal.send(e).await;
                        return;
                    }
                    None => {
                        conn.reset();
                        sleep_or_stop(&mut stop, t.poll.max(std::time::Duration::from_millis(200)))
                            .await;
                    }
                }
            }
        }
    }
    if let Ok(c) = conn.client().await {
        let _ = c.query_one(RESIGN, &[&LEADER_LOCK_KEY]).await;
    }
}

async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: std::time::Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}

/// Try to become leader; if we do, do the duties until stopped or failed.
async fn lead(
    conn: &mut Conn,
    me: &Identity,
    t: &Timings,
    stop: &mut watch::Receiver<bool>,
) -> Result<()> {
    let got: bool = conn
        .client()
        .await?
        .query_one(TRY_LEAD, &[&LEADER_LOCK_KEY])
        .await
        .map_err(|e| Error::db("trying for maintenance leadership", e))?
        .get(0);
    if !got {
        sleep_or_stop(stop, t.heartbeat.min(std::time::Duration::from_millis(500))).await;
        return Ok(());
    }
    take_office(conn, me, t).await?;
    duties(conn, me, t, stop).await
}

/// Leadership won: the leader's session bounded in idle time, the
/// runtime marked leader, and the `leader` event said.
async fn take_office(conn: &mut Conn, me: &Identity, t: &Timings) -> Result<()> {
    // A leader suspended between ticks would keep the advisory lock (and
    // with it rescue, rotation and cron) for as long as it is stopped: its
    // session goes idle far longer than any tick gap, so let the server
    // end it once its heartbeat is stale too, and another runtime leads.
    let idle_bound = t.stale_after.max(t.promote_every * 4).max(t.heartbeat * 4);
    conn.client()
        .await?
        .batch_execute(&format!(
            "SET idle_session_timeout = {}",
            idle_bound.as_millis()
        ))
        .await
        .map_err(|e| Error::db("bounding the leader session's idle time", e))?;
    instances::mark_leader(conn.client().await?, &me.instance_id).await?;
    emit(&Event::Leader(Leader {
        instance_id: me.instance_id.clone(),
        name: me.name.clone(),
        version: me.version.clone(),
    }));
    Ok(())
}

/// The leader's duties, each when it is due, until stopped or failed.
// Long on purpose: one loop over six duties, each three lines of "when
// due, do it, set the next time"; split into a function per duty, the
// loop would read the same with the schedule spread out. Kept whole also
// because `rehearse mutate` names a mutant by its enclosing function, and
// the scored samples and `[[mutate.equivalent]]` entries name these.
async fn duties(
    conn: &mut Conn,
    me: &Identity,
    t: &Timings,
    stop: &mut watch::Receiver<bool>,
) -> Result<()> {
    let start = Instant::now();
    let mut due = Due {
        promote: start,
        rescue: start,
        cron: start,
        rotate: start + t.rotate_every,
        fold: start + t.fold_every,
        flip_check: start,
    };
    let mut ready_since: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let now = Instant::now();
        if now >= due.promote {
            enqueue::promote_due(conn.client().await?).await?;
            due.promote = now + t.promote_every;
        }
        if now >= due.cron {
            for f in cron::fire_due(conn.client().await?, &me.instance_id).await? {
                emit(&Event::CronFired(CronFired {
                    name: f.name,
                    fire_ms: f.fire_ms,
                    job_id: f.job_id,
                }));
            }
            due.cron = now + t.cron_every;
        }
        if now >= due.rescue {
            for r in rescue_pass(conn, t).await? {
                emit(&Event::Rescued(events::Rescued {
                    job_id: r.job_id,
                    run_lease: r.run_lease,
                    reason: r.reason,
                    dead: r.dead,
                }));
            }
            due.rescue = now + t.rescue_every;
        }
        if now >= due.rotate {
            for ring in Ring::ALL {
                rings::prune(conn.client_mut().await?, ring, t.prune_lock_wait()).await?;
                rings::rotate(conn.client_mut().await?, ring).await?;
            }
            due.rotate = now + t.rotate_every;
        }
        if now >= due.fold {
            match folds::fold(conn.client_mut().await?).await? {
                folds::Folded::StoodDown { pinned_by } => {
                    emit(&Event::FoldStoodDown(FoldStoodDown { pinned_by }))
                }
                folds::Folded::Done { .. } => {}
            }
            due.fold = if fold_spins() {
                now
            } else {
                now + t.fold_every
            };
        }
        if now >= due.flip_check {
            if let Some(stability) = t.auto_flip_after {
                auto_flip(conn, t, stability, &mut ready_since).await?;
            }
            due.flip_check = now + t.heartbeat;
        }
        let next = due.next();
        sleep_or_stop(
            stop,
            next.saturating_duration_since(Instant::now())
                .max(std::time::Duration::from_millis(5)),
        )
        .await;
    }
}

/// The seeded defect `maintenance_spins`: the next fold falls due on the
/// pass that just folded, so the loop folds on every pass.
fn fold_spins() -> bool {
    crate::failpoint::armed(crate::failpoint::MAINTENANCE_SPINS)
}

/// One rescue pass. A pass that lost a deadlock (or a serialization
/// conflict) to a worker closing or heartbeating the same attempts has
/// rolled back and is tried again at the next tick: dropping the
/// connection for it would drop leadership too, and leave the fleet
/// without rotation and rescue until another runtime leads.
async fn rescue_pass(conn: &mut Conn, t: &Timings) -> Result<Vec<rescue::Rescued>> {
    match rescue::rescue(conn.client_mut().await?, t.stale_ms()).await {
        Err(e) if matches!(e.sqlstate(), Some("40P01" | "40001")) => {
            eprintln!("awa: a rescue pass lost a lock conflict, trying again next tick: {e}");
            Ok(Vec::new())
        }
        other => other,
    }
}

struct Due {
    promote: Instant,
    rescue: Instant,
    cron: Instant,
    rotate: Instant,
    fold: Instant,
    flip_check: Instant,
}

impl Due {
    /// When the first duty falls due.
    fn next(&self) -> Instant {
        self.promote
            .min(self.cron)
            .min(self.rescue)
            .min(self.rotate)
            .min(self.fold)
            .min(self.flip_check)
    }
}

/// The leader's auto-flip: once every fresh runtime has reported a
/// flip-aware `binary_version` continuously for `stability` (and at least
/// one is fresh), flip. Any blocker resets the clock.
async fn auto_flip(
    conn: &mut Conn,
    t: &Timings,
    stability: std::time::Duration,
    ready_since: &mut Option<Instant>,
) -> Result<()> {
    if authority::read(conn.client().await?).await? == Authority::Ledger {
        *ready_since = None;
        return Ok(());
    }
    let (blocking, fresh) = authority::flip_readiness(conn.client().await?, t.stale_ms()).await?;
    if !blocking.is_empty() || fresh == 0 {
        *ready_since = None;
        return Ok(());
    }
    let since = *ready_since.get_or_insert_with(Instant::now);
    if since.elapsed() < stability {
        return Ok(());
    }
    match authority::flip(conn.client_mut().await?, t.stale_ms(), false).await {
        Ok(FlipOutcome::Flipped { rings, .. }) => emit(&Event::Flipped(events::Flipped {
            rings,
            forced: Some(false),
            auto: true,
            ..events::Flipped::default()
        })),
        Ok(FlipOutcome::Already) => {}
        Ok(FlipOutcome::Blocked { .. }) => *ready_since = None,
        // A session holding the rings' locks (a suspended process): say
        // who, and try again after another stability period.
        Err(Error::Blocked(blocked)) => {
            eprintln!("awa: the auto-flip: {blocked}");
            emit(&Event::Blocked(*blocked));
            *ready_since = None;
        }
        Err(e) => return Err(e),
    }
    Ok(())
}
