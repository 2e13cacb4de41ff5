//! Findings about jobs, cron fires and counts, from what the audit read.
//!
//! Pure functions of [`Storage`] and the observations: the database did
//! the set-based work, these only name what it found.

use awa_runtime::store::audit::{MAX_IDS, Offenders, RescuedAttempt};

use super::storage::Storage;
use crate::matrix::FindingRule;
use crate::observe::{self, Doubt, Finding, Observations, thousands};

/// The phase of findings only the end state shows.
pub(super) const RECONCILE: &str = "reconcile";

/// Every job, cron and count finding, for a cell whose runtimes count an
/// attempt stale after `stale_ms`.
pub(super) fn findings(storage: &Storage, obs: &Observations, stale_ms: u64) -> Vec<Finding> {
    let mut out = how_jobs_ended(storage, obs);
    out.extend(jobs_left_live(storage));
    out.extend(how_jobs_ran(storage));
    out.extend(rescue_unproven(storage, obs));
    out.extend(unexplained_interruptions(storage, obs, stale_ms));
    out.extend(unstopped_handlers(obs));
    out.extend(cron(storage));
    out.extend(count_drift(storage));
    out
}

/// A finding for each rule of `table` whose offenders are not empty, in
/// the table's order: `(rule, offenders, what after one and after several)`.
fn flagged(table: &[(FindingRule, &Offenders, (&str, &str))]) -> Vec<Finding> {
    table
        .iter()
        .filter(|(_, offenders, _)| !offenders.is_empty())
        .map(|&(rule, offenders, what)| from_offenders(rule, offenders, what))
        .collect()
}

/// The terminal records against the jobs accepted: missing, doubled, or
/// not the state and attempt the job's mode and interruptions explain.
fn how_jobs_ended(storage: &Storage, obs: &Observations) -> Vec<Finding> {
    let jobs = &storage.jobs;
    let wrong_attempt = overruns_n1_let_through(&jobs.wrong_attempt, obs);
    flagged(&[
        (
            FindingRule::Lost,
            &jobs.lost,
            (
                "accepted job has no terminal record and no live row",
                "accepted jobs have no terminal record and no live row",
            ),
        ),
        (
            FindingRule::Duplicate,
            &jobs.duplicate,
            (
                "job has more than one terminal record",
                "jobs have more than one terminal record",
            ),
        ),
        (
            FindingRule::WrongState,
            &jobs.wrong_state,
            (
                "job ended in a state its mode was not designed for",
                "jobs ended in a state their mode was not designed for",
            ),
        ),
        (
            FindingRule::WrongAttempt,
            &wrong_attempt,
            (
                "job ended on an attempt its mode and interruptions do not explain",
                "jobs ended on an attempt their mode and interruptions do not explain",
            ),
        ),
        // Run by run: a graceful stop's release gives its attempt back, any
        // other ending spends it. A mode that ends at the cap hides a spent
        // release in its terminal; its runs still show it.
        (
            FindingRule::WrongAttempt,
            &jobs.misnumbered,
            (
                "job ran an attempt its run before does not explain (a released attempt runs again under its number)",
                "jobs ran an attempt their run before does not explain (a released attempt runs again under its number)",
            ),
        ),
    ])
}

/// Jobs still live at the end: stuck, or ready where no claim reaches them.
fn jobs_left_live(storage: &Storage) -> Vec<Finding> {
    let stuck = stuck_what(storage);
    flagged(&[
        (
            FindingRule::Stuck,
            &storage.stuck.jobs,
            (&stuck.0, &stuck.1),
        ),
        (
            FindingRule::UnreachableReady,
            &storage.unreachable,
            (
                "job is ready where no claim can reach it",
                "jobs are ready where no claim can reach them",
            ),
        ),
    ])
}

/// The runs against the jobs: executed too often, ended otherwise than
/// recorded, started early, or not stopped by an operator's cancel.
fn how_jobs_ran(storage: &Storage) -> Vec<Finding> {
    let jobs = &storage.jobs;
    flagged(&[
        (
            FindingRule::DoubleExecution,
            &jobs.double_completion,
            (
                "job recorded more than one completed execution",
                "jobs recorded more than one completed execution",
            ),
        ),
        (
            FindingRule::DoubleExecution,
            &jobs.excess_runs,
            (
                "job executed more often than its attempts, releases and stale runs explain",
                "jobs executed more often than their attempts, releases and stale runs explain",
            ),
        ),
        (
            FindingRule::TerminalMismatch,
            &storage.mismatched,
            (
                "job has a terminal record that is not the outcome of its last run (run lease and attempt)",
                "jobs have a terminal record that is not the outcome of their last run (run lease and attempt)",
            ),
        ),
        // The database's clock against the contract's waits (`run_at`, retry
        // backoff, snooze); see `audit::EARLY_STARTS`. Every release writes
        // `finished_at` and the producers' `run_at_ms` the same way, but only
        // 0.7 on records an attempt's start after its claim's snapshot, so
        // only the runs it claimed are judged (`STARTS_AFTER_SNAPSHOT_SINCE`),
        // whichever runtime closed the attempt before or promoted the job.
        (
            FindingRule::EarlyStart,
            &storage.early,
            (
                "job started an attempt before it was due",
                "jobs started an attempt before it was due",
            ),
        ),
        (
            FindingRule::CancelIgnored,
            &jobs.cancel_ignored,
            (
                "job an operator cancelled while it was live did not end cancelled",
                "jobs an operator cancelled while they were live did not end cancelled",
            ),
        ),
    ])
}

/// `N what; first: example`, `what` as it reads after one job and after several.
/// `offenders` less the overruns a handler completed unrescued while
/// only the previous release's runtimes led: a 0.6 handler gives up after
/// four deadlines, and a 0.6 leader rescues one transaction per attempt,
/// so on a loaded machine (a rescue pass of a killed leader's inheritance
/// took 7.5 s under `--stress cpu=2x`) its overruns complete on their
/// first attempt. That pace is the previous release's and no release can
/// change it; an overrun let through while a runtime of this release led
/// (the rescuer the release is about) stays a finding. An overrun in
/// flight on a process the harness killed counts as completed at the kill
/// at the latest: the process may have committed it and died before its
/// `finished` line (so a window reaching to the kill is the stricter one).
fn overruns_n1_let_through(offenders: &Offenders, obs: &Observations) -> Offenders {
    // From the attempt's start, not its deadline: stricter by a deadline
    // (a runtime of this release leading before the deadline counts).
    let excused: std::collections::BTreeSet<i64> = obs
        .overruns_completed
        .iter()
        .chain(&obs.overruns_killed)
        .filter(|o| !led_by_this_release(obs, o.started_ms, o.finished_ms))
        .map(|o| o.job_id)
        .collect();
    // The audit lists every offender, so what is left is exact.
    if excused.is_empty() || offenders.ids.len() as i64 != offenders.count {
        return offenders.clone();
    }
    let ids: Vec<i64> = offenders
        .ids
        .iter()
        .copied()
        .filter(|id| !excused.contains(id))
        .collect();
    if ids.len() == offenders.ids.len() {
        return offenders.clone();
    }
    Offenders {
        count: ids.len() as i64,
        example: ids.first().map(|id| format!("job {id}")),
        ids,
    }
}

/// Whether a flip-aware runtime held maintenance leadership at some point
/// in `[from_ms, to_ms]`: the one leading at `from_ms` (the latest to take
/// leadership before it) or one taking it within the window.
fn led_by_this_release(obs: &Observations, from_ms: u64, to_ms: u64) -> bool {
    let mut leaders: Vec<(u64, &str)> = obs
        .processes
        .iter()
        .filter_map(|p| Some((p.leader_at_ms?, p.version.as_str())))
        .collect();
    leaders.sort_unstable();
    let at_start = leaders.iter().rev().find(|(at, _)| *at <= from_ms);
    let during = leaders
        .iter()
        .filter(|(at, _)| *at > from_ms && *at <= to_ms);
    at_start
        .into_iter()
        .chain(during)
        .any(|(_, version)| super::release_line::flip_aware(version))
}

fn from_offenders(rule: FindingRule, offenders: &Offenders, what: (&str, &str)) -> Finding {
    let what = if offenders.count == 1 { what.0 } else { what.1 };
    let mut message = format!("{} {what}", thousands(count(offenders.count)));
    if let Some(example) = &offenders.example {
        message.push_str("; first: ");
        message.push_str(example);
    }
    Finding {
        rule,
        phase: RECONCILE.into(),
        message,
        ids: offenders.ids.iter().copied().take(MAX_IDS).collect(),
        count: count(offenders.count),
        at_ms: None,
    }
}

fn stuck_what(storage: &Storage) -> (String, String) {
    let s = &storage.stuck;
    let rows = format!(
        "({}, {})",
        observe::count(count(s.live_rows), "live row"),
        observe::count(count(s.open_claims), "open claim")
    );
    (
        format!("job is left non-terminal after drain {rows}"),
        format!("jobs are left non-terminal after drain {rows}"),
    )
}

/// Killed attempts whose rescue the storage does not prove.
fn rescue_unproven(storage: &Storage, obs: &Observations) -> Option<Finding> {
    let first = storage.rescues.first()?;
    let kill = obs.kills.iter().find(|k| {
        k.in_flight
            .iter()
            .any(|f| f.job_id == first.job_id && f.run_lease == first.run_lease)
    });
    let (victim, phase, at_ms) = match kill {
        Some(k) => (
            k.process.as_str(),
            phase_at(obs, k.at_ms).unwrap_or("kill"),
            Some(k.at_ms),
        ),
        None => ("a killed process", "kill", None),
    };
    let outcome = match &first.outcome {
        Some(o) => format!("ended {o:?}"),
        None => "was never closed".to_owned(),
    };
    let after = if first.dead_lettered {
        "was dead-lettered".to_owned()
    } else if first.next_attempt {
        format!("ran attempt {}", first.attempt + 1)
    } else {
        format!("never ran attempt {}", first.attempt + 1)
    };
    let mut ids: Vec<i64> = storage.rescues.iter().map(|r| r.job_id).collect();
    ids.dedup();
    Some(Finding {
        rule: FindingRule::RescueUnproven,
        phase: phase.into(),
        message: format!(
            "{} in flight at a hard kill {} not proven rescued; first: job {} attempt {} (run lease {}) \
             on {victim} {outcome} and {after}",
            observe::count(storage.rescues.len() as u64, "attempt"),
            observe::agree(storage.rescues.len() as u64, "was", "were"),
            first.job_id,
            first.attempt,
            first.run_lease,
        ),
        ids: ids.into_iter().take(MAX_IDS).collect(),
        count: storage.rescues.len() as u64,
        at_ms,
    })
}

/// Handlers a worker left running when it started a newer attempt of
/// their job (the newer run lease proves the older was rescued): each
/// keeps one of the worker's concurrency slots for as long as it runs,
/// and enough of them leave ready work unclaimed behind a worker that
/// looks alive and idle.
fn unstopped_handlers(obs: &Observations) -> Option<Finding> {
    let first = obs.unstopped_handlers.iter().min_by_key(|u| u.at_ms)?;
    let n = obs.unstopped_handlers.len() as u64;
    let mut workers: Vec<&str> = obs
        .unstopped_handlers
        .iter()
        .map(|u| u.process.as_str())
        .collect();
    workers.sort_unstable();
    workers.dedup();
    let mut ids: Vec<i64> = obs.unstopped_handlers.iter().map(|u| u.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    Some(Finding {
        rule: FindingRule::UnstoppedHandler,
        phase: phase_at(obs, first.at_ms).unwrap_or(RECONCILE).into(),
        message: format!(
            "{} of rescued attempts kept running beside a newer attempt of the same job, \
             each holding a slot of its worker ({}); first: {} started job {} run lease {} \
             while its handler of run lease {} (attempt {}) had neither finished nor been \
             reported lost",
            observe::count(n, "handler"),
            workers.join(", "),
            first.process,
            first.job_id,
            first.next_run_lease,
            first.run_lease,
            first.attempt,
        ),
        ids: ids.into_iter().take(MAX_IDS).collect(),
        count: n,
        at_ms: Some(first.at_ms),
    })
}

/// Rescues no injected fault explains. A rescue has a cause when its
/// attempt's runtime was killed, suspended or ended unasked, when
/// PostgreSQL crashed in the cell (every heartbeat then goes stale), or,
/// for a deadline rescue, when the job was made to overrun its deadline
/// (no other job has one). A healthy runtime starved past `stale_after`
/// is rescued too; the monitor sees that starvation, and the rule is not
/// timing-independent, so the cell is then inconclusive, not failed.
fn unexplained_interruptions(
    storage: &Storage,
    obs: &Observations,
    stale_ms: u64,
) -> Option<Finding> {
    let (_, unexplained) = split_unwatched(storage, obs, stale_ms);
    let first = unexplained.first()?;
    let mut ids: Vec<i64> = unexplained.iter().map(|r| r.job_id).collect();
    ids.dedup();
    let n = ids.len() as u64;
    Some(Finding {
        rule: FindingRule::UnexplainedInterruption,
        phase: RECONCILE.into(),
        message: interruption_message(first, n),
        ids: ids.into_iter().take(MAX_IDS).collect(),
        count: n,
        at_ms: None,
    })
}

/// Why the cell cannot be judged on its interruptions: rescues no
/// injected fault explains that fell where the monitor had no reading of
/// the leases and runtimes (its samples that far apart), so whether
/// their heartbeats were late cannot be told. On a machine busy enough to
/// stretch the monitor's samples (six cells on two cores, a large
/// backlog), a 0.6.2 lease stamped before its claim's lock wait goes
/// stale, and is rescued, between two samples a second and a half apart.
pub(super) fn interruption_doubt(
    storage: &Storage,
    obs: &Observations,
    stale_ms: u64,
) -> Option<Doubt> {
    let (unwatched, _) = split_unwatched(storage, obs, stale_ms);
    let first = unwatched.first()?;
    // Every unwatched rescue was placed on the cell's clock.
    let at = rescued_at(obs, first)?;
    let mut ids: Vec<i64> = unwatched.iter().map(|r| r.job_id).collect();
    ids.dedup();
    let n = ids.len() as u64;
    Some(Doubt {
        rule: FindingRule::UnexplainedInterruption,
        why: format!(
            "{} {} rescued with no injected fault to explain it where the monitor had no reading of \
             the leases (first: job {} attempt {} on {}, rescued ({}) at {}, no sample completed in the {} \
             before it, {}): whether the heartbeats were late cannot be told",
            observe::count(n, "job"),
            if n == 1 { "was" } else { "were" },
            first.job_id,
            first.attempt,
            first.instance_id,
            first.reason,
            observe::duration(at.max(0) as u64),
            observe::duration(stale_ms / 2),
            sample_gap(obs, at),
        ),
    })
}

/// The rescues no fault or evidence explains: those the monitor could
/// not have watched ([`unwatched`]), and the rest.
fn split_unwatched<'a>(
    storage: &'a Storage,
    obs: &Observations,
    stale_ms: u64,
) -> (Vec<&'a RescuedAttempt>, Vec<&'a RescuedAttempt>) {
    unexplained_rescues(storage, obs)
        .into_iter()
        .partition(|r| unwatched(obs, r, stale_ms))
}

/// Whether the monitor could not have seen `r`'s heartbeat (or its
/// runtime's) go late before the rescue: a heartbeat or crash rescue
/// placed on the cell's clock, with no sample that started within the
/// half `stale_after` before it and finished (the next one started)
/// before it. A lease that is stale at the rescue was at least half stale
/// throughout that span, which any sample in it reports, once the lease
/// was committed: a lease whose claim commits already stale, between two
/// samples, is not covered here.
fn unwatched(obs: &Observations, r: &RescuedAttempt, stale_ms: u64) -> bool {
    if !matches!(r.reason.as_str(), "heartbeat" | "crash") || stale_ms == 0 {
        return false;
    }
    let Some(at) = rescued_at(obs, r) else {
        return false;
    };
    let from = at - (stale_ms / 2) as i64;
    !obs.census
        .windows(2)
        .any(|w| w[0].at_ms as i64 >= from && (w[1].at_ms as i64) <= at)
}

/// When `r` was rescued, in ms since the cell started: its close by the
/// database's clock, placed by the monitor's reading of that clock
/// (none without either).
fn rescued_at(obs: &Observations, r: &RescuedAttempt) -> Option<i64> {
    r.finished_at_unix_ms
        .zip(obs.db_clock)
        .map(|(at, clock)| clock.cell_ms(at))
}

/// Where `at_ms` fell among the monitor's samples: `its samples 1.4s
/// apart there`, or after the last one.
fn sample_gap(obs: &Observations, at_ms: i64) -> String {
    match obs.census.windows(2).find(|w| w[1].at_ms as i64 >= at_ms) {
        Some(w) => format!(
            "its samples {} apart there",
            crate::observe::duration(w[1].at_ms - w[0].at_ms)
        ),
        None => "after the monitor's last sample".to_owned(),
    }
}

/// The rescues no injected fault, and no evidence the monitor kept,
/// explains.
// Long on purpose: each excuse is a few lines of evidence with the
// paragraph that says why it excuses, and the closing match reads them
// in the order they are tried; apart, the excuse and its reason would
// sit in different places.
fn unexplained_rescues<'a>(storage: &'a Storage, obs: &Observations) -> Vec<&'a RescuedAttempt> {
    let pg_crashed = obs.phases.iter().any(|p| p.name == "pg_crash");
    let faulted: std::collections::BTreeSet<&str> =
        obs.faulted_runtimes.iter().map(String::as_str).collect();
    // A lease the monitor saw going stale: its runtime's heartbeat was held
    // back (as a 0.6 heartbeat waits behind its own closes), which no
    // release can change any more; a rescuer that takes fresh attempts
    // never has this evidence.
    let seen_late: std::collections::BTreeSet<(i64, i64)> = obs
        .late_leases
        .iter()
        .map(|l| (l.job_id, l.run_lease))
        .collect();
    // A runtime the monitor saw going stale: a crash rescue of its
    // attempts took a runtime that looked dead by the database's clock,
    // whatever held its heartbeat (a migration's lock on
    // runtime_instances, CPU); a rescuer that takes attempts of runtimes
    // beating on time never has this evidence.
    let stale_runtimes: std::collections::BTreeSet<&str> = obs
        .late_runtimes
        .iter()
        .map(|r| r.instance_id.as_str())
        .collect();
    // A runtime the monitor saw queued behind a table lock that another
    // release requested (a 0.6 prune waits 2 s for its lock, past the
    // cells' stale_after): its lease heartbeats queued too, unseen by any
    // read of the leases, for a rescue closed while it waited or just
    // after; the release under test is never excused so.
    let queued_by_n1 = queued_behind_other_releases(obs);
    let held_by_n1 = |r: &RescuedAttempt| {
        r.finished_at_unix_ms.is_some_and(|at| {
            queued_by_n1.iter().any(|q| {
                q.instance_id == r.instance_id
                    && (q.since_unix_ms..=q.explains_until_unix_ms).contains(&at)
            })
        })
    };
    // An earlier release's attempt (one that names no session, 0.6)
    // rescued inside the window of a 0.6 statement the monitor saw held
    // behind a one-shot command's lock (the cell's migration, its flip):
    // 0.6 stamps the lease its claim writes, and the heartbeat it
    // refreshes, with the statement's start, before the wait, so a wait
    // past stale_after lands a lease already stale, which a rescue can
    // close before any read of the leases sees it late. The release
    // under test names its sessions and stamps by the clock: never
    // excused so.
    let held_by_command = |r: &RescuedAttempt| {
        names_no_session(&r.version)
            && r.finished_at_unix_ms.is_some_and(|at| {
                obs.held_by_commands
                    .iter()
                    .any(|h| (h.since_unix_ms..=h.explains_until_unix_ms).contains(&at))
            })
    };
    // An earlier release's runtime the harness stopped gracefully: what
    // its shutdown left to the rescuer once the stop was asked (0.6.2
    // stops heartbeating attempts it has not yet released) is the stop's
    // doing. Placed in the cell by the database's clock against the
    // cell's, give or take a monitor tick for the reading.
    let stop_asked: std::collections::BTreeMap<&str, u64> = obs
        .stopped_runtimes
        .iter()
        .filter(|s| s.artifact != "current")
        .map(|s| (s.instance_id.as_str(), s.asked_ms))
        .collect();
    let left_by_stop = |r: &RescuedAttempt| {
        let slack = crate::monitor::INTERVAL.as_millis() as i64;
        match (stop_asked.get(r.instance_id.as_str()), rescued_at(obs, r)) {
            (Some(&asked), Some(at)) => at + slack >= asked as i64,
            _ => false,
        }
    };
    storage
        .rescued
        .iter()
        .filter(|r| match r.reason.as_str() {
            "deadline" => r.mode != "overrun_deadline",
            "heartbeat" | "crash" if left_by_stop(r) => false,
            "heartbeat" if seen_late.contains(&(r.job_id, r.run_lease)) => false,
            "heartbeat" if held_by_n1(r) => false,
            "heartbeat" | "crash" if held_by_command(r) => false,
            "crash" if stale_runtimes.contains(r.instance_id.as_str()) => false,
            _ => !pg_crashed && !faulted.contains(r.instance_id.as_str()),
        })
        .collect()
}

/// What [`unexplained_interruptions`] says about `n` jobs, the `first`
/// of them named with why none of the excuses held for it.
fn interruption_message(first: &awa_runtime::store::audit::RescuedAttempt, n: u64) -> String {
    let what = if n == 1 { "job was" } else { "jobs were" };
    format!(
        "{} {what} interrupted with no injected fault to explain it; first: job {} ({}) \
         attempt {} (run lease {}) on {} was rescued ({}) though its runtime was neither \
         killed, suspended nor ended unasked{}",
        thousands(n),
        first.job_id,
        first.mode,
        first.attempt,
        first.run_lease,
        first.instance_id,
        first.reason,
        if first.reason == "deadline" {
            ", and its job has no deadline to overrun"
        } else if first.reason == "heartbeat" {
            ", the monitor never saw its lease's heartbeat late, and PostgreSQL did not crash"
        } else {
            ", and PostgreSQL did not crash"
        }
    )
}

/// The waits the monitor saw behind a lease-table lock requested by a
/// session of a release other than the one under test (the `current`
/// artifact's processes): one naming another version, or one naming none
/// when the cell ran a release older than 0.7 (which names no session;
/// without one, an unnamed requester is no excuse).
fn queued_behind_other_releases(obs: &Observations) -> Vec<&crate::observe::QueuedRuntime> {
    let current: std::collections::BTreeSet<&str> = obs
        .processes
        .iter()
        .filter(|p| p.artifact == "current")
        .map(|p| p.version.as_str())
        .collect();
    let unnamed_release_ran = obs
        .processes
        .iter()
        .any(|p| p.artifact != "current" && names_no_session(&p.version));
    obs.queued_runtimes
        .iter()
        .filter(|q| match q.requester_version.as_deref() {
            Some(v) => !current.contains(v),
            None => unnamed_release_ran,
        })
        .collect()
}

/// Whether a release of `version` leaves its sessions unnamed: 0.6 and
/// earlier (0.7 sets `application_name` to `awa <version> <instance_id>`).
fn names_no_session(version: &str) -> bool {
    crate::vocab::release::from_flip_release(version) == Some(false)
}

/// Fire times without a job, and fire times with more than one.
fn cron(storage: &Storage) -> Vec<Finding> {
    let (missed, double): (Vec<_>, Vec<_>) =
        storage.cron.iter().partition(|f| f.job_ids.is_empty());
    let mut out = Vec::new();
    if let Some(first) = missed.first() {
        out.push(Finding {
            rule: FindingRule::CronMissedFire,
            phase: RECONCILE.into(),
            message: format!(
                "{} produced no job; first: schedule {:?} at {} ms",
                observe::count(missed.len() as u64, "cron fire time"),
                first.name,
                first.fire_ms
            ),
            // Row keys: the fire times.
            ids: missed.iter().map(|f| f.fire_ms).take(MAX_IDS).collect(),
            count: missed.len() as u64,
            // Fire times are Unix ms; the observations hold no cell start to place them.
            at_ms: None,
        });
    }
    if let Some(first) = double.first() {
        let what = if first.job_ids.len() > 1 {
            format!("jobs {:?} claim it", first.job_ids)
        } else {
            format!(
                "job {} has {} terminal records",
                first.job_ids[0], first.max_records
            )
        };
        let mut ids: Vec<i64> = double
            .iter()
            .flat_map(|f| f.job_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        out.push(Finding {
            rule: FindingRule::CronDoubleFire,
            phase: RECONCILE.into(),
            message: format!(
                "{} produced more than one job or a job terminal more than once; \
                 first: schedule {:?} at {} ms, {what}",
                observe::count(double.len() as u64, "cron fire time"),
                first.name,
                first.fire_ms
            ),
            ids: ids.into_iter().take(MAX_IDS).collect(),
            count: double.len() as u64,
            at_ms: None,
        });
    }
    out
}

/// Operator per-state counts that differ from the true ones.
fn count_drift(storage: &Storage) -> Option<Finding> {
    let drift: Vec<_> = storage
        .counts
        .iter()
        .filter(|c| c.truth != c.operator)
        .collect();
    if drift.is_empty() {
        return None;
    }
    let detail: Vec<String> = drift
        .iter()
        .map(|c| format!("{} {} (true {})", c.state, c.operator, c.truth))
        .collect();
    Some(Finding {
        rule: FindingRule::CountDrift,
        phase: RECONCILE.into(),
        message: format!(
            "operator terminal counts differ from the true per-state counts: {}",
            detail.join(", ")
        ),
        ids: vec![],
        // How many terminal outcomes the operator miscounts, all states together.
        count: drift.iter().map(|c| c.truth.abs_diff(c.operator)).sum(),
        at_ms: None,
    })
}

/// The name of the phase that was running at `at_ms` (the latest to
/// start, when phases nest).
pub(super) fn phase_at(obs: &Observations, at_ms: u64) -> Option<&str> {
    obs.phases
        .iter()
        .filter(|p| p.start_ms <= at_ms && at_ms <= p.end_ms)
        .max_by_key(|p| p.start_ms)
        .map(|p| p.name.as_str())
}

/// A database count as a finding count.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use awa_runtime::store::audit::{CronFault, StateCount, UnprovenRescue};

    use super::*;
    use crate::observe::{CensusSample, InFlight, KillRecord, Phase, UnstoppedHandler};

    fn offenders(count: i64, ids: &[i64], example: &str) -> Offenders {
        Offenders {
            count,
            ids: ids.to_vec(),
            example: Some(example.into()),
        }
    }

    fn rules(found: &[Finding]) -> Vec<FindingRule> {
        found.iter().map(|f| f.rule).collect()
    }

    #[test]
    fn a_clean_audit_finds_nothing() {
        let storage = Storage {
            counts: vec![StateCount {
                state: "completed".into(),
                truth: 10,
                operator: 10,
            }],
            ..Default::default()
        };
        assert_eq!(findings(&storage, &Observations::default(), 1_500), []);
    }

    #[test]
    fn each_job_audit_becomes_its_rule_with_ids_and_an_example() {
        let mut storage = Storage::default();
        storage.jobs.lost = offenders(3, &[101, 102, 103], "job 101 (complete)");
        storage.jobs.duplicate = offenders(1, &[7], "job 7 (complete) has 2 terminal records");
        storage.jobs.wrong_state = offenders(
            1,
            &[8],
            "job 8 (fail_terminal ...) ended (completed, 1), expected (failed, 1)",
        );
        storage.jobs.wrong_attempt = offenders(1, &[9], "job 9 ...");
        storage.jobs.misnumbered = offenders(
            1,
            &[14],
            "job 14 (exhaust_retries): run lease 2 ran attempt 2 after run lease 1 ended released \
             on attempt 1, so it was due attempt 1",
        );
        storage.jobs.double_completion = offenders(
            1,
            &[10],
            "job 10 (complete) has 2 executions that completed",
        );
        storage.jobs.excess_runs = offenders(1, &[11], "job 11 ...");
        storage.stuck.jobs = offenders(2, &[12, 13], "job 12 is still running (attempt 1)");
        storage.stuck.live_rows = 1;
        storage.stuck.open_claims = 1;
        storage.unreachable = offenders(
            1,
            &[12],
            "job 12 is available (attempt 1) with no ready entry in its queue default, \
             where claims look; it has no entry in any slot",
        );
        let found = findings(&storage, &Observations::default(), 1_500);
        assert_eq!(
            rules(&found),
            [
                FindingRule::Lost,
                FindingRule::Duplicate,
                FindingRule::WrongState,
                FindingRule::WrongAttempt,
                FindingRule::WrongAttempt,
                FindingRule::Stuck,
                FindingRule::UnreachableReady,
                FindingRule::DoubleExecution,
                FindingRule::DoubleExecution,
            ]
        );
        assert_eq!(
            found[4].message,
            "1 job ran an attempt its run before does not explain (a released attempt runs again \
             under its number); first: job 14 (exhaust_retries): run lease 2 ran attempt 2 after \
             run lease 1 ended released on attempt 1, so it was due attempt 1"
        );
        let lost = &found[0];
        assert_eq!(
            lost.message,
            "3 accepted jobs have no terminal record and no live row; first: job 101 (complete)"
        );
        assert_eq!(
            (lost.ids.as_slice(), lost.count, lost.phase.as_str()),
            (&[101, 102, 103][..], 3, "reconcile")
        );
        assert_eq!(lost.at_ms, None, "only the end state shows a lost job");
        assert_eq!(
            found[6].message,
            "1 job is ready where no claim can reach it; first: job 12 is available (attempt 1) \
             with no ready entry in its queue default, where claims look; it has no entry in any slot"
        );
        assert!(
            found[5].message.contains("(1 live row, 1 open claim)"),
            "{}",
            found[5].message
        );
    }

    #[test]
    fn a_terminal_record_that_is_not_the_last_run_is_a_mismatch() {
        let storage = Storage {
            mismatched: offenders(
                1,
                &[10],
                "job 10: its ring record (completed) says attempt 2, but run lease 1 ran attempt 1",
            ),
            ..Default::default()
        };
        let found = findings(&storage, &Observations::default(), 1_500);
        assert_eq!(rules(&found), [FindingRule::TerminalMismatch]);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[10][..], 1));
        assert!(
            found[0]
                .message
                .starts_with("1 job has a terminal record that is not the outcome of its last run"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn an_attempt_started_before_it_was_due_is_an_early_start() {
        let storage = Storage {
            early: offenders(
                2,
                &[12, 40],
                "job 12 attempt 2 (run lease 2) started 187.5 ms before the 200.0 ms backoff after attempt 1's retry ended",
            ),
            ..Default::default()
        };
        let found = findings(&storage, &Observations::default(), 1_500);
        assert_eq!(rules(&found), [FindingRule::EarlyStart]);
        assert_eq!(
            (found[0].ids.as_slice(), found[0].count),
            (&[12, 40][..], 2)
        );
        assert!(
            found[0].message.starts_with(
                "2 jobs started an attempt before it was due; first: job 12 attempt 2"
            ),
            "{}",
            found[0].message
        );
        assert!(FindingRule::EarlyStart.timing_independent());
        // Nothing early, nothing found.
        assert_eq!(
            findings(&Storage::default(), &Observations::default(), 1_500),
            []
        );
    }

    #[test]
    fn ids_are_capped_at_twenty() {
        let ids: Vec<i64> = (1..=30).collect();
        let f = from_offenders(
            FindingRule::Lost,
            &offenders(30, &ids, "x"),
            ("job", "jobs"),
        );
        assert_eq!(f.ids.len(), MAX_IDS);
        assert_eq!(f.count, 30);
    }

    #[test]
    fn an_unproven_rescue_names_the_kill_and_its_phase() {
        let storage = Storage {
            rescues: vec![UnprovenRescue {
                job_id: 42,
                attempt: 1,
                run_lease: 1,
                outcome: Some("completed".into()),
                next_attempt: false,
                dead_lettered: false,
            }],
            ..Default::default()
        };
        let obs = Observations {
            kills: vec![KillRecord {
                process: "previous-worker-2".into(),
                version: "0.6.2".into(),
                role: "worker".into(),
                at_ms: 1_500,
                in_flight: vec![InFlight {
                    job_id: 42,
                    attempt: 1,
                    run_lease: 1,
                }],
            }],
            phases: vec![Phase {
                step: 4,
                name: "kill".into(),
                detail: String::new(),
                start_ms: 1_400,
                end_ms: 1_600,
                outcome: crate::observe::StepOutcome::Ok,
            }],
            ..Default::default()
        };
        let found = findings(&storage, &obs, 1_500);
        assert_eq!(rules(&found), [FindingRule::RescueUnproven]);
        assert_eq!(found[0].phase, "kill");
        assert_eq!(found[0].at_ms, Some(1_500), "the moment of the kill");
        assert_eq!(found[0].ids, [42]);
        assert!(
            found[0].message.ends_with("job 42 attempt 1 (run lease 1) on previous-worker-2 ended \"completed\" and never ran attempt 2"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn a_rescue_no_injected_fault_explains_is_unexplained() {
        use awa_runtime::store::audit::RescuedAttempt;
        let rescued = |job_id: i64, reason: &str, instance: &str, mode: &str| RescuedAttempt {
            job_id,
            run_lease: 1,
            attempt: 1,
            reason: reason.into(),
            instance_id: instance.into(),
            mode: mode.into(),
            finished_at_unix_ms: Some(1_000),
            version: "0.7.0".into(),
        };
        let storage = Storage {
            rescued: vec![
                // Its runtime was killed, and a deadline overrun: explained.
                rescued(3, "crash", "current-worker-1-a", "complete"),
                rescued(4, "deadline", "current-worker-2-b", "overrun_deadline"),
                // A healthy runtime's attempt, and a deadline nobody set.
                rescued(5, "heartbeat", "current-worker-2-b", "sleep"),
                rescued(6, "deadline", "current-worker-2-b", "complete"),
            ],
            ..Default::default()
        };
        let obs = Observations {
            faulted_runtimes: vec!["current-worker-1-a".into()],
            ..Default::default()
        };
        let found = findings(&storage, &obs, 1_500);
        assert_eq!(rules(&found), [FindingRule::UnexplainedInterruption]);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[5, 6][..], 2));
        assert_eq!(
            found[0].message,
            "2 jobs were interrupted with no injected fault to explain it; first: job 5 (sleep) \
             attempt 1 (run lease 1) on current-worker-2-b was rescued (heartbeat) though its \
             runtime was neither killed, suspended nor ended unasked, the monitor never saw its \
             lease's heartbeat late, and PostgreSQL did not crash"
        );
        // The monitor saw job 5's lease go stale: its heartbeat was held
        // back, the rescue has its cause; another lease of the job was not.
        let late = |job_id: i64, run_lease: i64| crate::observe::LateLease {
            job_id,
            run_lease,
            first_ms: 1_000,
            age_ms: 1_250,
        };
        let seen = Observations {
            late_leases: vec![late(5, 1), late(6, 1)],
            ..obs.clone()
        };
        let found = findings(&storage, &seen, 1_500);
        assert_eq!(
            (found[0].ids.as_slice(), found[0].count),
            (&[6][..], 1),
            "a late lease explains a heartbeat rescue, not a deadline nobody set"
        );
        let other_lease = Observations {
            late_leases: vec![late(5, 2)],
            ..obs.clone()
        };
        let found = findings(&storage, &other_lease, 1_500);
        assert_eq!(found[0].ids, [5, 6]);
        assert!(!FindingRule::UnexplainedInterruption.timing_independent());
        // A PostgreSQL crash explains every crash and heartbeat rescue, not
        // a deadline nobody set.
        let crashed = Observations {
            phases: vec![Phase {
                step: 3,
                name: "pg_crash".into(),
                detail: String::new(),
                start_ms: 0,
                end_ms: 1,
                outcome: crate::observe::StepOutcome::Ok,
            }],
            ..obs
        };
        let found = findings(&storage, &crashed, 1_500);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[6][..], 1));
    }

    /// Census samples at `ticks` (ms of the cell), as the monitor keeps them.
    fn sampled(ticks: impl Iterator<Item = u64>) -> Vec<CensusSample> {
        ticks
            .map(|at_ms| CensusSample {
                at_ms,
                by_version: Default::default(),
                fresh_runtimes: Default::default(),
                delta_rows: 0,
                lock_waits: 0,
                xacts: None,
                scans: Default::default(),
            })
            .collect()
    }

    #[test]
    fn a_rescue_where_the_monitor_had_no_reading_is_doubted_not_found() {
        use awa_runtime::store::audit::RescuedAttempt;
        // A 0.6.2 attempt rescued for its heartbeat at 11.0 s of the cell
        // (the database's clock at 1,000,000 ms is the cell's 0).
        let storage = Storage {
            rescued: vec![RescuedAttempt {
                job_id: 1809,
                run_lease: 1,
                attempt: 1,
                reason: "heartbeat".into(),
                instance_id: "previous-worker-1-a".into(),
                mode: "overrun_deadline".into(),
                finished_at_unix_ms: Some(1_011_000),
                version: "0.6.2".into(),
            }],
            ..Default::default()
        };
        let sampled_at = |ticks: &[u64]| Observations {
            census: sampled(ticks.iter().copied()),
            db_clock: Some(crate::observe::DbClock {
                unix_ms: 1_000_000,
                at_ms: 0,
            }),
            ..Default::default()
        };
        // Samples every 250 ms: the monitor read the leases in the 750 ms
        // before the rescue and saw nothing late, so the rescue stands.
        let watched = sampled_at(&(0..=48).map(|i| i * 250).collect::<Vec<_>>());
        assert_eq!(watched.census, sampled((0..=12_000).step_by(250)));
        assert_eq!(
            rules(&findings(&storage, &watched, 1_500)),
            [FindingRule::UnexplainedInterruption]
        );
        assert_eq!(interruption_doubt(&storage, &watched, 1_500), None);
        // Samples at 9.4 s and 10.9 s (the monitor slowed by a busy
        // database): no reading completed in the 750 ms before 11.0 s.
        let blind = sampled_at(&[8_507, 9_381, 10_917, 12_310]);
        assert_eq!(findings(&storage, &blind, 1_500), []);
        let doubt = interruption_doubt(&storage, &blind, 1_500).expect("a doubt");
        assert_eq!(doubt.rule, FindingRule::UnexplainedInterruption);
        assert_eq!(
            doubt.why,
            "1 job was rescued with no injected fault to explain it where the monitor had no reading of \
             the leases (first: job 1809 attempt 1 on previous-worker-1-a, rescued (heartbeat) at 11.0s, \
             no sample completed in the 750ms before it, its samples 1.3s apart there): whether the \
             heartbeats were late cannot be told"
        );
        // A deadline nobody set is judged however far apart the samples.
        let mut first = storage.rescued[0].clone();
        first.reason = "deadline".into();
        first.mode = "complete".into();
        let deadline = Storage {
            rescued: vec![first],
            ..Default::default()
        };
        assert_eq!(
            rules(&findings(&deadline, &blind, 1_500)),
            [FindingRule::UnexplainedInterruption]
        );
        assert_eq!(interruption_doubt(&deadline, &blind, 1_500), None);
    }

    #[test]
    fn a_crash_rescue_is_explained_only_by_a_runtime_the_monitor_saw_going_stale() {
        use awa_runtime::store::audit::RescuedAttempt;
        let crash = |job_id: i64, instance: &str| RescuedAttempt {
            job_id,
            run_lease: 1,
            attempt: 1,
            reason: "crash".into(),
            instance_id: instance.into(),
            mode: "sleep".into(),
            finished_at_unix_ms: Some(1_000),
            version: "0.7.0".into(),
        };
        let storage = Storage {
            rescued: vec![
                crash(7, "previous-worker-1-a"),
                crash(8, "current-worker-2-b"),
            ],
            ..Default::default()
        };
        // Nobody seen late: both rescues took runtimes beating on time.
        let found = findings(&storage, &Observations::default(), 1_500);
        assert_eq!(rules(&found), [FindingRule::UnexplainedInterruption]);
        assert_eq!(found[0].ids, [7, 8]);
        // previous-worker-1's heartbeat was held (a migration's lock on
        // runtime_instances): its attempt's rescue has its cause; the
        // other runtime beat on time, so its rescue is still a finding.
        let obs = Observations {
            late_runtimes: vec![crate::observe::LateRuntime {
                instance_id: "previous-worker-1-a".into(),
                first_ms: 4_000,
                age_ms: 1_900,
            }],
            ..Default::default()
        };
        let found = findings(&storage, &obs, 1_500);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[8][..], 1));
    }

    #[test]
    fn a_heartbeat_rescue_is_explained_by_a_queue_behind_another_releases_table_lock_only() {
        use awa_runtime::store::audit::RescuedAttempt;
        // Rescues closed at 101.0 s (Unix ms 101_000) by the database's clock.
        let beat = |job_id: i64, instance: &str| RescuedAttempt {
            job_id,
            run_lease: 1,
            attempt: 1,
            reason: "heartbeat".into(),
            instance_id: instance.into(),
            mode: "sleep".into(),
            finished_at_unix_ms: Some(101_000),
            version: "0.7.0".into(),
        };
        let storage = Storage {
            rescued: vec![
                beat(9, "current-worker-2-b"),
                beat(10, "current-worker-1-a"),
            ],
            ..Default::default()
        };
        let current =
            crate::report::fixture::worker_process("current-worker-2", "current", "0.7.0", None);
        // A wait from 99.4 s that can explain rescues until 102.0 s.
        let queued = |instance: &str, requester: Option<&str>| crate::observe::QueuedRuntime {
            instance_id: instance.into(),
            first_ms: 30_000,
            waited_ms: 1_600,
            requester_version: requester.map(str::to_owned),
            relation: "leases_3".into(),
            since_unix_ms: 99_400,
            explains_until_unix_ms: 102_000,
        };
        let previous =
            crate::report::fixture::worker_process("previous-worker-1", "previous", "0.6.2", None);
        let with = |q: Vec<crate::observe::QueuedRuntime>| Observations {
            processes: vec![current.clone(), previous.clone()],
            queued_runtimes: q,
            ..Default::default()
        };
        // Nothing queued: both are findings.
        let found = findings(&storage, &with(Vec::new()), 1_500);
        assert_eq!(found[0].ids, [9, 10]);
        // current-worker-2 queued behind a 0.6 prune (its session names no
        // version): its rescue has a cause; current-worker-1's has none.
        let found = findings(
            &storage,
            &with(vec![queued("current-worker-2-b", None)]),
            1_500,
        );
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[10][..], 1));
        // The same runtime queued, but at another time: a wait that ended
        // well before the rescue, or began after it, explains nothing.
        for (since, until) in [(90_000, 100_999), (101_001, 104_000)] {
            let elsewhere = crate::observe::QueuedRuntime {
                since_unix_ms: since,
                explains_until_unix_ms: until,
                ..queued("current-worker-2-b", None)
            };
            assert_eq!(
                findings(&storage, &with(vec![elsewhere]), 1_500)[0].ids,
                [9, 10]
            );
        }
        // The same queue behind the release under test's own prune (0.7.0)
        // is the release's doing: no excuse.
        let found = findings(
            &storage,
            &with(vec![queued("current-worker-2-b", Some("0.7.0"))]),
            1_500,
        );
        assert_eq!(found[0].ids, [9, 10]);
        // An unnamed requester in a cell that ran no release older than
        // 0.7: nobody who leaves sessions unnamed was there, so no excuse.
        let no_06 = Observations {
            processes: vec![current.clone()],
            ..with(vec![queued("current-worker-2-b", None)])
        };
        assert_eq!(findings(&storage, &no_06, 1_500)[0].ids, [9, 10]);
        // Behind another named release (an N-1 that names its sessions): excused.
        let found = findings(
            &storage,
            &with(vec![queued("current-worker-2-b", Some("0.6.9"))]),
            1_500,
        );
        assert_eq!(found[0].ids, [10]);
    }

    #[test]
    fn an_earlier_releases_attempt_is_explained_by_its_statement_held_behind_a_command_only_inside_the_window()
     {
        use awa_runtime::store::audit::RescuedAttempt;
        // Rescues closed at 101.0 s (Unix ms 101_000) by the database's clock.
        let rescued = |job_id: i64, reason: &str, version: &str| RescuedAttempt {
            job_id,
            run_lease: 1,
            attempt: 1,
            reason: reason.into(),
            instance_id: format!("worker-{job_id}"),
            mode: "complete".into(),
            finished_at_unix_ms: Some(101_000),
            version: version.into(),
        };
        let storage = Storage {
            rescued: vec![
                rescued(1, "heartbeat", "0.6.2"),
                rescued(2, "crash", "0.6.2"),
                // The release under test, and a deadline nobody set.
                rescued(3, "heartbeat", "0.7.0"),
                rescued(4, "deadline", "0.6.2"),
            ],
            ..Default::default()
        };
        // A 0.6 claim waited from 99.0 s behind the migration; the wait
        // explains rescues until 102.0 s.
        let held = |since: i64, until: i64| crate::observe::HeldByCommand {
            first_ms: 30_000,
            waited_ms: 1_600,
            command_version: "0.7.0".into(),
            relation: "jobs".into(),
            since_unix_ms: since,
            explains_until_unix_ms: until,
        };
        let with = |h: Vec<crate::observe::HeldByCommand>| Observations {
            held_by_commands: h,
            ..Default::default()
        };
        // Nothing held: every rescue is a finding.
        assert_eq!(
            findings(&storage, &with(Vec::new()), 1_500)[0].ids,
            [1, 2, 3, 4]
        );
        // Held: 0.6.2's heartbeat and crash rescues have their cause; the
        // release under test's rescue and the deadline do not.
        let found = findings(&storage, &with(vec![held(99_000, 102_000)]), 1_500);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[3, 4][..], 2));
        // A wait that ended before the rescue, or began after it, explains nothing.
        for (since, until) in [(90_000, 100_999), (101_001, 104_000)] {
            assert_eq!(
                findings(&storage, &with(vec![held(since, until)]), 1_500)[0].ids,
                [1, 2, 3, 4]
            );
        }
    }

    #[test]
    fn what_an_earlier_release_left_to_the_rescuer_after_a_graceful_stop_was_asked_is_explained() {
        use awa_runtime::store::audit::RescuedAttempt;
        // The database's clock read 1_000_000 at 5 s into the cell:
        // Unix ms 1_020_000 is 25 s into it.
        let clock = crate::observe::DbClock {
            at_ms: 5_000,
            unix_ms: 1_000_000,
        };
        let rescued = |job_id: i64, reason: &str, instance: &str, cell_s: i64| RescuedAttempt {
            job_id,
            run_lease: 1,
            attempt: 1,
            reason: reason.into(),
            instance_id: instance.into(),
            mode: "sleep".into(),
            finished_at_unix_ms: Some(1_000_000 + (cell_s - 5) * 1_000),
            version: "0.7.0".into(),
        };
        let storage = Storage {
            rescued: vec![
                // Before the stop was asked at 20 s: a healthy attempt taken.
                rescued(1, "heartbeat", "previous-worker-2-a", 12),
                // After it: what the shutdown left.
                rescued(2, "heartbeat", "previous-worker-2-a", 22),
                rescued(3, "crash", "previous-worker-2-a", 23),
                // The release under test stopped too: its graceful stop must
                // release what it holds, so a rescue after it is a finding.
                rescued(4, "heartbeat", "current-worker-1-b", 22),
            ],
            ..Default::default()
        };
        let stopped = |instance: &str, artifact: &str| crate::observe::StoppedRuntime {
            instance_id: instance.into(),
            artifact: artifact.into(),
            asked_ms: 20_000,
        };
        let obs = Observations {
            stopped_runtimes: vec![
                stopped("previous-worker-2-a", "previous"),
                stopped("current-worker-1-b", "current"),
            ],
            db_clock: Some(clock),
            census: sampled((0..=30_000).step_by(250)),
            ..Default::default()
        };
        let found = findings(&storage, &obs, 1_500);
        assert_eq!((found[0].ids.as_slice(), found[0].count), (&[1, 4][..], 2));
        // Without the database's clock the rescues cannot be placed: no excuse.
        let blind = Observations {
            db_clock: None,
            ..obs.clone()
        };
        assert_eq!(findings(&storage, &blind, 1_500)[0].ids, [1, 2, 3, 4]);
    }

    #[test]
    fn an_overrun_completed_unrescued_is_excused_only_while_the_previous_release_led() {
        let leader = |name: &str, version: &str, at: u64| {
            crate::report::fixture::worker_process(name, "x", version, Some(at))
        };
        let overrun =
            |job_id: i64, started_ms: u64, finished_ms: u64| crate::observe::UnrescuedOverrun {
                job_id,
                started_ms,
                finished_ms,
            };
        let mut storage = Storage::default();
        storage.jobs.wrong_attempt = offenders(3, &[21, 22, 23], "job 21 (overrun_deadline) ...");
        // 0.6.2 led until a 0.7 worker took over at 20 s.
        let processes = vec![
            leader("previous-worker-1", "0.6.2", 1_000),
            leader("current-worker-3", "0.7.0", 20_000),
        ];
        let obs = Observations {
            processes,
            overruns_completed: vec![
                overrun(21, 5_000, 13_000),  // under 0.6.2 throughout: excused
                overrun(22, 15_000, 23_000), // 0.7 took over meanwhile: judged
            ],
            ..Default::default()
        };
        let found = findings(&storage, &obs, 1_500);
        assert_eq!(rules(&found), [FindingRule::WrongAttempt]);
        assert_eq!(
            (found[0].ids.as_slice(), found[0].count),
            (&[22, 23][..], 2),
            "job 23 was never an unrescued overrun, job 22 ran while this release led"
        );
        // Every offender excused: no finding.
        let mut only = Storage::default();
        only.jobs.wrong_attempt = offenders(1, &[21], "job 21 (overrun_deadline) ...");
        assert_eq!(findings(&only, &obs, 1_500), []);
        // Without the overrun record (a 0.7 handler never gives up), the
        // same terminal is a finding.
        assert_eq!(
            rules(&findings(&only, &Observations::default(), 1_500)),
            [FindingRule::WrongAttempt]
        );
        // In flight on a process killed before this release led (its
        // `finished` line lost with it): excused; killed after a 0.7 worker
        // took over, it may have completed under that leader: judged.
        let killed = |at: u64| Observations {
            processes: obs.processes.clone(),
            overruns_killed: vec![overrun(21, 12_000, at)],
            ..Default::default()
        };
        assert_eq!(findings(&only, &killed(19_900), 1_500), []);
        assert_eq!(
            rules(&findings(&only, &killed(20_100), 1_500)),
            [FindingRule::WrongAttempt]
        );
    }

    /// The rule catches what the ledger records of a worker that left a
    /// rescued attempt's handler running (see
    /// `driver::ledger::tests::a_newer_run_lease_started_over_a_running_older_one_is_an_unstopped_handler`).
    #[test]
    fn unstopped_handlers_are_one_finding_naming_the_first_and_the_workers() {
        let unstopped = |process: &str, job_id: i64, at_ms: u64| UnstoppedHandler {
            process: process.into(),
            job_id,
            attempt: 1,
            run_lease: 1,
            next_run_lease: 2,
            at_ms,
        };
        let obs = Observations {
            unstopped_handlers: vec![
                unstopped("current-worker-2", 6615, 41_000),
                unstopped("current-worker-2", 6564, 40_000),
                unstopped("current-worker-1", 6819, 42_000),
            ],
            phases: vec![Phase {
                step: 7,
                name: "roll".into(),
                detail: String::new(),
                start_ms: 35_000,
                end_ms: 53_000,
                outcome: crate::observe::StepOutcome::Ok,
            }],
            ..Default::default()
        };
        let found = findings(&Storage::default(), &obs, 1_500);
        assert_eq!(rules(&found), [FindingRule::UnstoppedHandler]);
        let f = &found[0];
        assert_eq!((f.count, f.ids.as_slice()), (3, &[6564, 6615, 6819][..]));
        assert_eq!((f.phase.as_str(), f.at_ms), ("roll", Some(40_000)));
        assert_eq!(
            f.message,
            "3 handlers of rescued attempts kept running beside a newer attempt of the same job, \
             each holding a slot of its worker (current-worker-1, current-worker-2); first: \
             current-worker-2 started job 6564 run lease 2 while its handler of run lease 1 \
             (attempt 1) had neither finished nor been reported lost"
        );
        assert!(findings(&Storage::default(), &Observations::default(), 1_500).is_empty());
    }

    #[test]
    fn cron_faults_split_into_missed_and_double() {
        let mut storage = Storage::default();
        let fault = |fire_ms: i64, job_ids: &[i64], max_records: i64| CronFault {
            name: "tick".into(),
            fire_ms,
            job_ids: job_ids.to_vec(),
            max_records,
        };
        storage.cron = vec![
            fault(2_000, &[], 0),
            fault(4_000, &[], 0),
            fault(6_000, &[61, 62], 1),
            fault(8_000, &[80], 2),
        ];
        let found = findings(&storage, &Observations::default(), 1_500);
        assert_eq!(
            rules(&found),
            [FindingRule::CronMissedFire, FindingRule::CronDoubleFire]
        );
        assert_eq!(
            (found[0].ids.as_slice(), found[0].count),
            (&[2_000, 4_000][..], 2)
        );
        assert_eq!(
            (found[1].ids.as_slice(), found[1].count),
            (&[61, 62, 80][..], 2)
        );
        assert!(
            found[1]
                .message
                .ends_with("first: schedule \"tick\" at 6000 ms, jobs [61, 62] claim it"),
            "{}",
            found[1].message
        );
    }

    #[test]
    fn count_drift_sums_the_miscounted_outcomes() {
        let storage = Storage {
            counts: vec![
                StateCount {
                    state: "cancelled".into(),
                    truth: 4,
                    operator: 4,
                },
                StateCount {
                    state: "completed".into(),
                    truth: 1_000,
                    operator: 998,
                },
                StateCount {
                    state: "failed".into(),
                    truth: 10,
                    operator: 11,
                },
            ],
            ..Default::default()
        };
        let found = findings(&storage, &Observations::default(), 1_500);
        assert_eq!(rules(&found), [FindingRule::CountDrift]);
        assert_eq!(found[0].count, 3);
        assert_eq!(
            found[0].message,
            "operator terminal counts differ from the true per-state counts: completed 998 (true 1000), failed 11 (true 10)"
        );
    }
}
