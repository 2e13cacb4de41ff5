//! Each step kind's options, read and checked against one another (a
//! fleet must start something, `after_started` only with `when = "now"`,
//! a timeout only for an auto-flip), one function a kind.

use super::super::duration::Duration;
use super::super::model::{
    AssertStep, CURRENT, CancelStep, DrainStep, FenceStep, FleetStep, FlipMode, FlipStep, HeldRing,
    HoldStep, KillStep, KillTarget, LoadStep, MigrateStep, Outcome, PgCrashStep, ResumeSignal,
    ResumeStep, RevokeStep, RollStep, RollbackStep, Signal, Step, SuspendAt, SuspendStep, Until,
    When,
};
use super::option_reader::Reader;
use super::{MAX_AFTER_STARTED, MAX_CANCELS, MAX_PRODUCERS, MAX_WORKERS};

const WHEN: [(&str, When); 3] = [
    ("now", When::Now),
    ("during_migrate", When::DuringMigrate),
    ("during_flip", When::DuringFlip),
];

const OUTCOME: [(&str, Outcome); 2] = [("ok", Outcome::Ok), ("refused", Outcome::Refused)];

/// A flip may also be expected to give up on a lock (behind a suspended process).
const FLIP_OUTCOME: [(&str, Outcome); 3] = [
    ("ok", Outcome::Ok),
    ("refused", Outcome::Refused),
    ("blocked", Outcome::Blocked),
];

/// The processes a kill, suspend or resume can target.
const TARGETS: [(&str, KillTarget); 3] = [
    ("worker", KillTarget::Worker),
    ("leader", KillTarget::Leader),
    ("producer", KillTarget::Producer),
];

/// The step named `step`, its value and options read by `r`: one arm a
/// step kind.
pub(super) fn read_step(step: &str, r: &mut Reader<'_, '_>) -> Option<Step> {
    match step {
        "fleet" => fleet(r),
        "load" => {
            let on = r.head_choice(&[("on", true), ("off", false)]);
            on.map(|on| Step::Load(LoadStep { on }))
        }
        "migrate" => migrate(r),
        "roll" => roll(r),
        "rollback" => rollback(r),
        "kill" => kill(r),
        "suspend" => suspend(r),
        "resume" => resume(r),
        "pg_crash" => r
            .head_choice(&WHEN)
            .map(|when| Step::PgCrash(PgCrashStep { when })),
        "flip" => flip(r),
        "fence" => r
            .head_artifact()
            .map(|artifact| Step::Fence(FenceStep { artifact })),
        "hold" => hold(r),
        "drain" => r
            .head_positive_duration()
            .map(|timeout| Step::Drain(DrainStep { timeout })),
        "assert" => r
            .head_check()
            .map(|check| Step::Assert(AssertStep { check })),
        "cancel" => cancel(r),
        "revoke" => revoke(r),
        _ => None,
    }
}

/// `{ migrate = "current", allow_live_runtimes = false, expect = "ok" }`
fn migrate(r: &mut Reader<'_, '_>) -> Option<Step> {
    let artifact = r.head_artifact();
    let allow_live_runtimes = r.boolean("allow_live_runtimes", false);
    let expect = r.choice("expect", &OUTCOME, Outcome::Ok);
    artifact.map(|artifact| {
        Step::Migrate(MigrateStep {
            artifact,
            allow_live_runtimes,
            expect,
        })
    })
}

/// `{ rollback = "previous", workers = 1 }`
fn rollback(r: &mut Reader<'_, '_>) -> Option<Step> {
    let artifact = r.head_artifact();
    let workers = r.count_opt("workers", 1, MAX_WORKERS);
    artifact.map(|artifact| {
        Step::Rollback(RollbackStep {
            artifact,
            workers: workers.map(to_u32),
        })
    })
}

/// `{ resume = "worker", of = "previous", signal = "cont" }`
fn resume(r: &mut Reader<'_, '_>) -> Option<Step> {
    let target = r.head_choice(&TARGETS);
    let of = r.artifact("of");
    let signal = r.choice(
        "signal",
        &[("cont", ResumeSignal::Cont), ("kill", ResumeSignal::Kill)],
        ResumeSignal::Cont,
    );
    target.map(|target| Step::Resume(ResumeStep { target, of, signal }))
}

fn fleet(r: &mut Reader<'_, '_>) -> Option<Step> {
    let artifact = r.head_artifact();
    let workers = r.count("workers", 0, 0, MAX_WORKERS);
    let producers = r.count("producers", 0, 0, MAX_PRODUCERS);
    let leader = r.boolean("leader", false);
    let idle = r.boolean("idle", false);
    let when = r.choice("when", &WHEN, When::Now);
    if when == When::DuringFlip {
        let span = r.span_of("when");
        r.fail(
            span,
            "a fleet can start during_migrate (inside the migration's preflight window) or now; not during_flip",
        );
    }
    if leader && when != When::Now {
        let span = r.span_of("leader");
        r.fail(
            span,
            "leader = true needs when = \"now\": a fleet started inside a migration cannot wait for leadership",
        );
    }
    if workers == 0 && producers == 0 && r.ok {
        r.fail(
            Some(r.table.clone()),
            "a fleet step must start something: set workers or producers (or both)",
        );
    }
    if leader && workers == 0 {
        let span = r.span_of("leader");
        r.fail(
            span,
            "leader = true needs workers >= 1: the leader is this fleet's first worker",
        );
    }
    if idle && (workers == 0 || producers > 0) && r.ok {
        let span = r.span_of("idle");
        r.fail(
            span,
            "idle = true is for workers only: set workers >= 1 and no producers (start producers in a fleet step of their own)",
        );
    }
    let (workers, producers) = (to_u32(workers), to_u32(producers));
    artifact.map(|artifact| {
        Step::Fleet(FleetStep {
            artifact,
            workers,
            producers,
            leader,
            idle,
            when,
        })
    })
}

/// `{ cancel = "previous", running = 2, available = 2 }`
fn cancel(r: &mut Reader<'_, '_>) -> Option<Step> {
    let artifact = r.head_artifact();
    let running = r.count("running", 0, 0, MAX_CANCELS);
    let available = r.count("available", 0, 0, MAX_CANCELS);
    if running == 0 && available == 0 && r.ok {
        r.fail(
            Some(r.table.clone()),
            "a cancel step must cancel something: set running or available (or both)",
        );
    }
    let (running, available) = (to_u32(running), to_u32(available));
    artifact.map(|artifact| {
        Step::Cancel(CancelStep {
            artifact,
            running,
            available,
        })
    })
}

/// `{ revoke = "current", workers = 1, producers = 1 }`
fn revoke(r: &mut Reader<'_, '_>) -> Option<Step> {
    let artifact = r.head_artifact();
    let workers = r.count("workers", 0, 0, MAX_WORKERS);
    let producers = r.count("producers", 0, 0, MAX_PRODUCERS);
    if workers == 0 && producers == 0 && r.ok {
        r.fail(
            Some(r.table.clone()),
            "a revoke step must start what it revokes: set workers or producers (or both)",
        );
    }
    let (workers, producers) = (to_u32(workers), to_u32(producers));
    artifact.map(|artifact| {
        Step::Revoke(RevokeStep {
            artifact,
            workers,
            producers,
        })
    })
}

fn hold(r: &mut Reader<'_, '_>) -> Option<Step> {
    let duration = r.head_positive_duration();
    let reads = r.duration("reads");
    if reads.is_some_and(|d| d.is_zero() || d.as_millis() >= 5_000) {
        let span = r.span_of("reads");
        r.fail(
            span,
            "reads must be longer than 0s and shorter than 5s: a statement of 5 s or more pins the horizon, which stands the folds down rightly",
        );
    }
    let until = r.get("until").is_some().then(|| {
        r.choice(
            "until",
            &[("slot_zero_free", Until::SlotZeroFree)],
            Until::SlotZeroFree,
        )
    });
    let lock_ring = r
        .get("lock_ring")
        .is_some()
        .then(|| r.choice("lock_ring", &HeldRing::ALL, HeldRing::Queue));
    let deadlock = r.boolean("deadlock", false);
    if deadlock && !lock_ring.is_some_and(HeldRing::can_deadlock) {
        let span = r.span_of("deadlock");
        r.fail(
            span,
            "deadlock needs lock_ring = \"claim\": only a ring of two tables lets a client close a lock cycle with a prune (it holds one partition while it waits for the other)",
        );
    }
    if lock_ring.is_some() && (reads.is_some() || until.is_some()) {
        let span = r.span_of("lock_ring");
        r.fail(
            span,
            "lock_ring holds on its own: not with reads or until (its client is the only one beside the fleet, so what it proved is its own)",
        );
    }
    duration.map(|duration| {
        Step::Hold(HoldStep {
            duration,
            reads,
            until,
            lock_ring,
            deadlock,
        })
    })
}

fn roll(r: &mut Reader<'_, '_>) -> Option<Step> {
    let artifact = r.head_artifact();
    let one_at_a_time = r.boolean("one_at_a_time", true);
    let pause = r.duration("pause").unwrap_or(Duration::from_secs(1));
    let producers = r.boolean("producers", true);
    if !one_at_a_time && r.get("pause").is_some() {
        let span = r.span_of("pause");
        r.fail(
            span,
            "pause only applies with one_at_a_time = true: an all-at-once roll has no gaps",
        );
    }
    artifact.map(|artifact| {
        Step::Roll(RollStep {
            artifact,
            one_at_a_time,
            pause,
            producers,
        })
    })
}

fn suspend(r: &mut Reader<'_, '_>) -> Option<Step> {
    let target = r.head_choice(&TARGETS);
    let of = r.artifact("of");
    let duration = r.duration("for");
    let at = r.choice(
        "at",
        &[
            ("any", SuspendAt::Any),
            ("between_transactions", SuspendAt::BetweenTransactions),
            ("holding_ring_locks", SuspendAt::HoldingRingLocks),
        ],
        SuspendAt::Any,
    );
    if duration.is_some_and(|d| d.is_zero()) {
        let span = r.span_of("for");
        r.fail(
            span,
            "for must be longer than 0s; leave it out to stay suspended until a resume step",
        );
    }
    target.map(|target| {
        Step::Suspend(SuspendStep {
            target,
            of,
            duration,
            at,
        })
    })
}

fn kill(r: &mut Reader<'_, '_>) -> Option<Step> {
    let target = r.head_choice(&TARGETS);
    let of = r.artifact("of");
    let when = r.choice("when", &WHEN, When::Now);
    let after_started = r.count("after_started", 0, 0, MAX_AFTER_STARTED);
    let signal = r.choice("signal", &[("kill", Signal::Kill)], Signal::Kill);
    if after_started > 0 {
        let span = r.span_of("after_started");
        if target == Some(KillTarget::Producer) {
            r.fail(
                span,
                "after_started counts jobs a worker started; a producer starts none",
            );
        } else if when != When::Now {
            r.fail(span, "after_started only applies to when = \"now\"; a kill during a migrate or flip fires as that phase runs");
        }
    }
    target.map(|target| {
        Step::Kill(KillStep {
            target,
            of,
            when,
            after_started,
            signal,
        })
    })
}

fn flip(r: &mut Reader<'_, '_>) -> Option<Step> {
    let mode = r.head_choice(&[
        ("manual", FlipMode::Manual),
        ("force", FlipMode::Force),
        ("auto", FlipMode::Auto),
    ]);
    let expect = r.choice("expect", &FLIP_OUTCOME, Outcome::Ok);
    let timeout = r.duration("timeout");
    let by = r.artifact("by");
    if expect == Outcome::Blocked && mode == Some(FlipMode::Auto) {
        let span = r.span_of("expect");
        r.fail(
            span,
            "expect = \"blocked\" applies to a manual or forced flip: the auto-flip retries behind a held lock",
        );
    }
    let timeout = match mode {
        Some(FlipMode::Auto) => {
            let timeout = timeout.unwrap_or(Duration::from_secs(30));
            if timeout.is_zero() {
                let span = r.span_of("timeout");
                r.fail(
                    span,
                    "timeout must be longer than 0s: the leader needs time to auto-flip",
                );
            }
            Some(timeout)
        }
        Some(other) => {
            if r.get("timeout").is_some() {
                let span = r.span_of("timeout");
                r.fail(
                    span,
                    format!(
                        "timeout only applies to flip = \"auto\"; a {} flip runs once",
                        other.name()
                    ),
                );
            }
            None
        }
        None => None,
    };
    let by = match by {
        Some(by) => by,
        None if r.artifacts.contains(CURRENT) => CURRENT.to_owned(),
        None => {
            let span = Some(r.table.clone());
            r.fail(span, "flip runs with artifact \"current\" by default, which is not declared; set by = \"ARTIFACT\"");
            String::new()
        }
    };
    mode.map(|mode| {
        Step::Flip(FlipStep {
            mode,
            expect,
            timeout,
            by,
        })
    })
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
