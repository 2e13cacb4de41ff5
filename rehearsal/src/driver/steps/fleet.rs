//! `fleet`: start workers and producers of an artifact.

use std::time::{Duration, Instant};

use super::super::ledger::Role;
use super::super::state::ArmedFault;
use super::super::step_ctx::StepCtx;
use super::super::{Abort, Done};
use crate::fleet::ProcId;
use crate::matrix::{FleetStep, When};
use crate::observe::MidMigrationStart;

/// How long a `leader = true` fleet waits for its first worker's `leader` event.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// `fleet`: start workers (with `leader`, the first alone until it
/// reports leadership) and add producers, which run while load is on.
/// With `when = "during_migrate"` it is armed instead, and started by
/// [`fleet_inside_migration`] as the next migration runs.
pub(super) async fn fleet(cx: &mut StepCtx<'_>, s: &FleetStep) -> Result<Done, Abort> {
    if s.when != When::Now {
        cx.state.armed.push((s.when, ArmedFault::Fleet(s.clone())));
        let step: crate::matrix::Step = crate::matrix::Step::Fleet(s.clone());
        return Ok(Done::with(
            crate::observe::StepOutcome::Armed,
            step.to_string(),
        ));
    }
    let mut notes = Vec::new();
    let version = cx.version_of(&s.artifact);
    let workers = cx.state.add_seats(Role::Worker, &s.artifact, s.workers);
    for &w in &workers {
        cx.state.seats[w].idle = s.idle;
    }
    if s.leader && !workers.is_empty() {
        let head = workers[0];
        cx.launch_seats(&[head], &mut notes).await?;
        match cx.state.seats[head]
            .proc
            .filter(|&id| cx.proc(id, |p| p.ready))
        {
            Some(id) => {
                let led = cx
                    .wait_for(LEADER_TIMEOUT, |l| l.procs[id].leader_at_ms)
                    .await?;
                let name = cx.proc(id, |p| p.name.clone());
                match led {
                    Some(at) => {
                        notes.push(format!("{name} took maintenance leadership at {at} ms"))
                    }
                    None => {
                        let other =
                            cx.view(|l| l.current_leader().map(|o| l.procs[o].name.clone()));
                        cx.state.fail(format!(
                            "{name} did not take maintenance leadership within {}s (leader: {})",
                            LEADER_TIMEOUT.as_secs(),
                            other.unwrap_or_else(|| "none".into())
                        ));
                    }
                }
            }
            None => cx
                .state
                .fail("leader = true, but the first worker did not start, so it cannot lead"),
        }
        cx.launch_seats(&workers[1..], &mut notes).await?;
    } else {
        cx.launch_seats(&workers, &mut notes).await?;
    }
    let producers = cx.state.add_seats(Role::Producer, &s.artifact, s.producers);
    if cx.state.load_on {
        cx.launch_seats(&producers, &mut notes).await?;
    }
    let mut detail = format!(
        "{} ({version}): workers {}",
        s.artifact,
        super::seat_names(cx, &workers)
    );
    if !producers.is_empty() {
        if cx.state.load_on {
            detail.push_str(&format!(
                "; producers {}",
                super::seat_names(cx, &producers)
            ));
        } else {
            detail.push_str(&format!(
                "; {} to run while load is on",
                crate::observe::count(producers.len() as u64, "producer")
            ));
        }
    }
    notes.insert(0, detail);
    Ok(Done::ok(notes.join("; ")))
}

/// How long an armed fleet waits for the migration to pass its preflight.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);
/// What the 0.7 migration prints once its preflight is done and it holds
/// the transaction open (`AWA_MIGRATE_PAUSE`).
const HOLDING_OPEN: &str = "holding the migration open";
/// In one statement (one snapshot): whether the migration is still in
/// flight, and the `runtime_instances` rows of `version` not among the ids
/// given. In flight means it holds its transaction-scoped advisory lock
/// (the runtime's `MIGRATE_LOCK_KEY` as pg_locks splits it: `$3` high, `$4`
/// low) and its commit is not visible in this snapshot: the schema version
/// is still `$5`, the one from before it. The lock alone is not enough: at
/// commit PostgreSQL releases table locks before advisory locks, so a
/// runtime the preflight's lock held back can register, commit and be seen
/// while pg_locks still shows the advisory lock of a migration that has
/// committed. A row is visible only once its insert committed; under the
/// preflight's lock that can only be after the migration committed, and
/// then this snapshot sees the new schema version too.
const REGISTERED_IN_FLIGHT: &str = "
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND granted
                 AND classid = $3::oid AND objid = $4::oid AND objsubid = 1)
         AND (SELECT coalesce(max(version), 0) FROM awa.schema_version) = $5,
       coalesce((SELECT array_agg(name ORDER BY name) FROM awa.runtime_instances
                 WHERE version = $1 AND NOT (instance_id = ANY($2))), '{}')";
/// The instances of `$1` and the schema version, before the fleet starts.
const BEFORE_FLEET: &str = "
SELECT coalesce((SELECT array_agg(instance_id) FROM awa.runtime_instances WHERE version = $1), '{}'),
       (SELECT coalesce(max(version), 0) FROM awa.schema_version)";

/// What a registration watcher compares with: the instances of the
/// fleet's version and the schema version from before the fleet started.
#[derive(Clone)]
struct Before {
    instances: Vec<String>,
    schema_version: i32,
}

impl Before {
    /// Reads both now, for the runtimes of `version`.
    async fn read(
        client: &tokio_postgres::Client,
        version: &str,
    ) -> Result<Before, tokio_postgres::Error> {
        let row = client.query_one(BEFORE_FLEET, &[&version]).await?;
        Ok(Before {
            instances: row.get(0),
            schema_version: row.get(1),
        })
    }
}

/// An armed fleet, started inside the migration of process `migration`
/// once it has passed its preflight. A watcher on its own connection
/// records which of the new runtimes' `runtime_instances` rows became
/// visible while the migration was still in flight.
pub(super) async fn fleet_inside_migration(
    cx: &mut StepCtx<'_>,
    s: &FleetStep,
    migration: Option<ProcId>,
) -> Result<String, Abort> {
    let inside = match migration {
        Some(id) => await_preflight(cx, id).await?,
        None => false,
    };
    let version = cx.version_of(&s.artifact);
    let at_ms = cx.ms();
    let (look, watcher) = watch_registrations_of(cx, &version).await;
    let first = cx.view(|l| l.procs.len());
    let now = FleetStep {
        when: When::Now,
        ..s.clone()
    };
    if let Some(hold) = &cx.state.migration_hold {
        hold.watch();
    }
    let done = fleet(cx, &now).await;
    let seen_held = match &look {
        Some((client, before)) => registered_now(client, &version, before).await,
        None => Vec::new(),
    };
    let held = match cx.state.migration_hold.take() {
        Some(hold) => Some(hold.let_go().await),
        None => None,
    };
    let done = done?;
    let processes: Vec<String> =
        cx.view(|l| l.procs[first..].iter().map(|p| p.name.clone()).collect());
    let mut registered_in_flight = match watcher {
        Some(w) => w.await.unwrap_or_default(),
        None => Vec::new(),
    };
    for name in seen_held {
        if !registered_in_flight.contains(&name) {
            registered_in_flight.push(name);
        }
    }
    let text = inside_migration_text(&done.detail, inside, held, &registered_in_flight);
    cx.state.obs.mid_migration.push(MidMigrationStart {
        artifact: s.artifact.clone(),
        version,
        processes,
        at_ms,
        inside,
        registered_in_flight,
    });
    Ok(text)
}

/// The watchers of the runtimes of `version` that register during the
/// migration, each on its own connection: a poller (its task), and a
/// second look to take while the hold still keeps the migration open
/// once the runtimes are up (their rows are visible then, or held back
/// by the preflight's lock, however late the poller's last look before
/// the commit came). Both with the instances already known; `None`
/// where a connection failed.
async fn watch_registrations_of(
    cx: &StepCtx<'_>,
    version: &str,
) -> (
    Option<(tokio_postgres::Client, Before)>,
    Option<tokio::task::JoinHandle<Vec<String>>>,
) {
    let watch = match super::super::database::connect(&cx.db.url).await {
        Ok(client) => match Before::read(&client, version).await {
            Ok(before) => Some((client, before)),
            Err(_) => None,
        },
        Err(_) => None,
    };
    let look = match &watch {
        Some((_, before)) => super::super::database::connect(&cx.db.url)
            .await
            .ok()
            .map(|client| (client, before.clone())),
        None => None,
    };
    let watcher = watch.map(|(client, before)| {
        tokio::spawn(watch_registrations(client, version.to_owned(), before))
    });
    (look, watcher)
}

/// Waits until migration process `id` says it holds its transaction
/// open after the preflight; false when it ended or never said so.
async fn await_preflight(cx: &mut StepCtx<'_>, id: ProcId) -> Result<bool, Abort> {
    let deadline = Instant::now() + PREFLIGHT_TIMEOUT;
    while Instant::now() < deadline {
        let (holding, ended) = cx.proc(id, |p| {
            let holding = p.stderr_tail.iter().any(|line| line.contains(HOLDING_OPEN));
            (holding, p.exit.is_some())
        });
        if holding {
            return Ok(true);
        }
        if ended {
            return Ok(false);
        }
        cx.cancel().sleep(Duration::from_millis(5)).await?;
    }
    Ok(false)
}

/// What a fleet started inside a migration did, in words: its start,
/// whether the migration was seen past its preflight, how long it was
/// held open, and who registered while it was in flight.
fn inside_migration_text(
    detail: &str,
    inside: bool,
    held: Option<String>,
    registered_in_flight: &[String],
) -> String {
    let mut text = format!("started inside the migration: {detail}");
    if !inside {
        text.push_str(
            "; the migration was not seen past its preflight, so the start may have missed it",
        );
    }
    if let Some(why) = held {
        text.push_str(&format!("; the migration was held open until {why}"));
    }
    if !registered_in_flight.is_empty() {
        text.push_str(&format!(
            "; registered while the migration was in flight: {}",
            registered_in_flight.join(", ")
        ));
    }
    text
}

/// Names of `version`'s new `runtime_instances` rows visible now, if the
/// migration is still in flight (none if it is not, or the query fails).
async fn registered_now(
    client: &tokio_postgres::Client,
    version: &str,
    before: &Before,
) -> Vec<String> {
    match in_flight_registrations(client, version, before).await {
        Some((true, names)) => names,
        _ => Vec::new(),
    }
}

/// One look: whether the migration is in flight, and `version`'s rows
/// registered since `before` (`None` when the query fails).
async fn in_flight_registrations(
    client: &tokio_postgres::Client,
    version: &str,
    before: &Before,
) -> Option<(bool, Vec<String>)> {
    let (high, low) =
        super::super::probe::advisory_key_halves(awa_runtime::schema::MIGRATE_LOCK_KEY);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
        &version,
        &before.instances,
        &high,
        &low,
        &before.schema_version,
    ];
    let row = client.query_one(REGISTERED_IN_FLIGHT, &params).await.ok()?;
    Some((row.get(0), row.get(1)))
}

/// Names of `version`'s new `runtime_instances` rows seen while the
/// migration was in flight; returns once it is not (or after 30 s).
async fn watch_registrations(
    client: tokio_postgres::Client,
    version: String,
    before: Before,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        let Some((true, names)) = in_flight_registrations(&client, &version, &before).await else {
            break;
        };
        for name in names {
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use awa_harness::pgtemp::Cluster;
    use awa_runtime::schema::{MigrateOptions, migrate};
    use awa_runtime::version::SCHEMA_VERSION;

    /// Regression: on docker a clean cell read `floor_bypassed` because a
    /// runtime the preflight's lock held back registered in the moment
    /// between the migration's commit releasing its table lock and its
    /// advisory lock. Here that moment is held open: the advisory key stays
    /// taken (a session lock, as pg_locks shows the migration's) after the
    /// "migration" commits a newer schema version.
    #[tokio::test]
    async fn a_registration_after_the_migration_committed_is_not_in_flight_though_its_lock_shows() {
        let cluster = Cluster::start().await.expect("a throwaway cluster");
        cluster.create_database("watch").await.unwrap();
        let mut setup = cluster.connect("watch").await.unwrap();
        migrate(&mut setup, &MigrateOptions::default())
            .await
            .unwrap();
        let migration = cluster.connect("watch").await.unwrap();
        migration
            .execute(
                "SELECT pg_advisory_lock($1)",
                &[&awa_runtime::schema::MIGRATE_LOCK_KEY],
            )
            .await
            .unwrap();
        let watcher = cluster.connect("watch").await.unwrap();
        let before = Before::read(&watcher, "0.6.2").await.unwrap();
        assert_eq!(before.schema_version, SCHEMA_VERSION);
        assert_eq!(
            in_flight_registrations(&watcher, "0.6.2", &before).await,
            Some((true, vec![]))
        );
        awa_runtime::store::instances::register(&setup, "i-1", "w-1", "0.6.2", "worker")
            .await
            .unwrap();
        // Before the migration commits: a registration in flight.
        assert_eq!(
            in_flight_registrations(&watcher, "0.6.2", &before).await,
            Some((true, vec!["w-1".to_owned()]))
        );
        setup
            .execute(
                "INSERT INTO awa.schema_version (version) VALUES ($1)",
                &[&(SCHEMA_VERSION + 1)],
            )
            .await
            .unwrap();
        // Committed, the lock still showing: not in flight.
        assert_eq!(
            in_flight_registrations(&watcher, "0.6.2", &before).await,
            Some((false, vec!["w-1".to_owned()]))
        );
        assert_eq!(
            registered_now(&watcher, "0.6.2", &before).await,
            Vec::<String>::new()
        );
        assert_eq!(
            watch_registrations(watcher, "0.6.2".into(), before).await,
            Vec::<String>::new()
        );
    }
}
