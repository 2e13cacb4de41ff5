//! Seeded defects. Each names a real bug that ADR-040/041 record; a
//! rehearsal runs the current build with one armed (a "defective
//! candidate") and must catch it. Compiled only with the `failpoints`
//! feature and armed at run time by `AWA_FAILPOINTS=name=return[;name2=return]`;
//! without the feature `armed` is a constant `false`.

/// The flip promotes the ledger without the final reconcile and verify.
pub const FLIP_SKIP_RECONCILE: &str = "flip_skip_reconcile";
/// The fence poisons only `current_slot` (not `generation` nor the
/// per-slot prune metadata) and leaves the trigger inactive.
pub const FENCE_CURRENT_SLOT_ONLY: &str = "fence_current_slot_only";
/// A compat rotator reads the authority before taking the singleton lock.
pub const AUTHORITY_BEFORE_LOCK: &str = "authority_before_lock";
/// Folds stand down on any live `backend_xmin`, not only a pinned horizon.
pub const FOLD_ANY_XMIN: &str = "fold_any_xmin";
/// The expand migration drops the 0.6 cursor columns.
pub const EXPAND_DROPS_COLUMNS: &str = "expand_drops_columns";
/// A compat rotator backfills only one ledger generation.
pub const COMPAT_BACKFILL_ONE: &str = "compat_backfill_one";
/// The migration preflight does not lock `runtime_instances`.
pub const PREFLIGHT_NO_LOCK: &str = "preflight_no_lock";

/// Ledger-mode prune checks the oldest sealed slot for live work of the
/// wrong generation (one wrap plus one back), so it truncates held
/// leases, open claims and ready entries that outlived a wrap.
pub const PRUNE_WRONG_GENERATION: &str = "prune_wrong_generation";
/// Rotation checks the current slot instead of the next one for rows: a
/// ring whose current slot keeps rows (claim closures) stops rotating.
pub const ROTATE_CHECKS_CURRENT_SLOT: &str = "rotate_checks_current_slot";
/// Rotation treats the ring as idle when its current slot is empty, not
/// the whole ring: once the work is done, rows in older sealed slots are
/// never pruned (the rule the ADR warns against).
pub const ROTATE_IDLE_ON_CURRENT_SLOT: &str = "rotate_idle_on_current_slot";
/// Cron fires only the latest due time after a gap: fire times missed
/// during a leaderless gap of more than one period are never fired.
pub const CRON_NO_CATCH_UP: &str = "cron_no_catch_up";
/// Terminal completions are guarded by job id and state only, not by run
/// lease: a stale worker's result after a rescue closes the job's newer
/// attempt, recorded against the stale lease.
pub const FINISH_IGNORES_RUN_LEASE: &str = "finish_ignores_run_lease";
/// A worker keys its attempts in flight by job id alone: claiming a
/// rescued job again before its heartbeat noticed the lost lease drops the
/// old attempt's entry without stopping its handler, which keeps its
/// concurrency slot for as long as it runs (the 0.7.0 bug found in the
/// `leader-handoff-cron` cell under load).
pub const WORKER_KEYS_ATTEMPTS_BY_JOB: &str = "worker_keys_attempts_by_job";
/// Promotion of scheduled jobs forgets `run_at`: scheduled jobs, retries
/// and snoozes run at the next promotion tick, before they are due.
pub const PROMOTE_IGNORES_RUN_AT: &str = "promote_ignores_run_at";
/// Rescue puts a re-queued job back to `available` without its ready
/// entry: no claim, which reads the entries, ever picks it again (the
/// class first suspected behind the 99 jobs of
/// `n1-leader-suspended-across-flip` under load; not their cause).
pub const RESCUE_REQUEUES_WITHOUT_ENTRY: &str = "rescue_requeues_without_entry";

/// The flip installs the trigger layer of the fence but not the resolver
/// layer: the legacy resolver `awa.ring_cursor(ring)` and the enqueue
/// fence stay open, so a pre-flip binary running across the flip keeps
/// claiming and enqueueing.
pub const FENCE_NO_RESOLVER: &str = "fence_no_resolver";
/// The flip fences the legacy resolver but leaves the cursor trigger
/// inactive: a pre-flip leader running across the flip advances the
/// poisoned columns old-style and prunes by them.
pub const FENCE_NO_TRIGGER: &str = "fence_no_trigger";
/// Enqueue puts ready entries one slot ahead of the queue cursor, at the
/// cursor's generation: a claimer picks most of them up at once, so no
/// job is lost or stuck, but until then they sit where no cursor put
/// them (and a prune of that slot would not see them as live).
pub const ENQUEUE_MISROUTES_SLOT: &str = "enqueue_misroutes_slot";
/// An operator's cancel of a running job answers that the job was live
/// but leaves it alone: the job runs on and completes.
pub const CANCEL_IGNORES_RUNNING: &str = "cancel_ignores_running";
/// A compat (`columns`) rotator advances the cursor and shadows the
/// ledger but does not record the opened slot's generation in
/// `{ring}_ring_slots`, the bookkeeping only the compat prune (of 0.6 and
/// of 0.7 in compat mode) reads: a slot opened this way is later judged
/// by the generation of the wrap before, so its live work looks dead.
pub const COMPAT_SKIPS_SLOT_GENERATION: &str = "compat_skips_slot_generation";
/// A graceful stop's release hands the attempt back without giving its
/// number back: the next run of a released job spends one more attempt,
/// as if a roll or a drain had interrupted it.
pub const RELEASE_SPENDS_ATTEMPT: &str = "release_spends_attempt";
/// Terminal completions are guarded by job id and state only and record
/// the attempt they closed: a stale worker's result after a rescue closes
/// the job's newer attempt under that attempt's own lease, so the record
/// reads as the newer run's while that run is told its lease is gone.
pub const FINISH_CLOSES_NEWER_ATTEMPT: &str = "finish_closes_newer_attempt";
/// The rescue pass also takes healthy attempts now and then (the first
/// run of every tenth job, its heartbeat fresh), as a heartbeat rescue:
/// the job runs again one attempt on, and every count still adds up.
pub const RESCUE_HEALTHY_ATTEMPTS: &str = "rescue_healthy_attempts";
/// The error classifier takes SQLSTATE class 42 (access rule violations:
/// a revoked privilege, a missing table) for a transient failure, as one
/// that hopes a grant or a migration in progress will cure it: a process
/// that meets a permanent error retries it for its whole patience
/// (`AWA_DB_PATIENCE`) before it surfaces.
pub const PERMANENT_AS_TRANSIENT: &str = "permanent_as_transient";
/// The leader sets its next fold to the pass that just folded, not a
/// fold interval on: its maintenance loop, which sleeps until the first
/// duty falls due (at least 5 ms), folds on every pass, hundreds of
/// times a second, while every job still ends as designed (the class of
/// a due time computed backwards, `now - period`).
pub const MAINTENANCE_SPINS: &str = "maintenance_spins";
/// The redaction reads a quoted secret value (`password='a b'`) as an
/// unquoted one, up to the first space: of a key=value DSN whose password
/// has a space in it, the runtime hides (and registers) only the part
/// before the space, and prints the rest wherever it prints its target.
pub const QUOTED_SECRET_CUT_AT_SPACE: &str = "quoted_secret_cut_at_space";

/// Every seeded defect.
pub const ALL: [&str; 26] = [
    FLIP_SKIP_RECONCILE,
    FENCE_CURRENT_SLOT_ONLY,
    AUTHORITY_BEFORE_LOCK,
    FOLD_ANY_XMIN,
    EXPAND_DROPS_COLUMNS,
    COMPAT_BACKFILL_ONE,
    PREFLIGHT_NO_LOCK,
    PRUNE_WRONG_GENERATION,
    ROTATE_CHECKS_CURRENT_SLOT,
    CRON_NO_CATCH_UP,
    ROTATE_IDLE_ON_CURRENT_SLOT,
    FINISH_IGNORES_RUN_LEASE,
    WORKER_KEYS_ATTEMPTS_BY_JOB,
    PROMOTE_IGNORES_RUN_AT,
    RESCUE_REQUEUES_WITHOUT_ENTRY,
    FENCE_NO_RESOLVER,
    FENCE_NO_TRIGGER,
    ENQUEUE_MISROUTES_SLOT,
    CANCEL_IGNORES_RUNNING,
    COMPAT_SKIPS_SLOT_GENERATION,
    RELEASE_SPENDS_ATTEMPT,
    FINISH_CLOSES_NEWER_ATTEMPT,
    RESCUE_HEALTHY_ATTEMPTS,
    PERMANENT_AS_TRANSIENT,
    MAINTENANCE_SPINS,
    QUOTED_SECRET_CUT_AT_SPACE,
];

/// Whether the failpoint `name` is armed.
#[cfg(feature = "failpoints")]
pub fn armed(name: &str) -> bool {
    setup();
    fn probe(name: &str) -> bool {
        fail::fail_point!(name, |_| true);
        false
    }
    probe(name)
}

/// Whether the failpoint `name` is armed (never, in this build).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn armed(_name: &str) -> bool {
    false
}

/// Arm the failpoints listed in `AWA_FAILPOINTS`, once per process.
#[cfg(feature = "failpoints")]
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let spec = std::env::var("AWA_FAILPOINTS").unwrap_or_default();
        for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, action) = entry.split_once('=').unwrap_or((entry, "return"));
            if !ALL.contains(&name) {
                eprintln!(
                    "awa: unknown failpoint {name:?} in AWA_FAILPOINTS; known: {}",
                    ALL.join(", ")
                );
                continue;
            }
            if let Err(e) = fail::cfg(name, action) {
                eprintln!("awa: cannot arm failpoint {name}: {e}");
            } else {
                eprintln!("awa: SEEDED DEFECT ARMED: {name}");
            }
        }
    });
}

/// The failpoints armed in this process (for `ready` events and reports).
pub fn armed_list() -> Vec<&'static str> {
    ALL.into_iter().filter(|n| armed(n)).collect()
}

/// Arm `name` in this process (tests of the seeded defects).
#[cfg(feature = "failpoints")]
pub fn arm(name: &str) {
    setup();
    fail::cfg(name, "return").expect("a valid failpoint action");
}

/// Disarm `name` in this process.
#[cfg(feature = "failpoints")]
pub fn disarm(name: &str) {
    fail::remove(name);
}
