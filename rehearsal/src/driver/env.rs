//! The `AWA_*` environment of every process the driver starts.
//!
//! The matrix's `[timings]` map onto the runtime's variables one for one;
//! the rest are fixed here, compressed so that a cell sees promotions,
//! retries, snoozes and graceful stops within seconds. Variables a release
//! does not know (0.7's `AWA_AUTO_FLIP`, `AWA_FOLD_INTERVAL`,
//! `AWA_FAILPOINTS`) are ignored by it, so every process gets the same set.

use std::collections::BTreeMap;

use crate::matrix::{Duration, JobMode, Timings};

/// Set in every child: the run's report folder, so leftovers of a run can be found by it.
pub const REPORT_DIR_VAR: &str = "REHEARSE_REPORT_DIR";

/// Fixed runtime settings, besides the matrix's timings.
pub const FIXED: [(&str, &str); 10] = [
    // Wide enough that attempts held until deadline rescue (the
    // overrun_deadline mode) never starve a worker of slots.
    ("AWA_CONCURRENCY", "64"),
    ("AWA_PROMOTE_INTERVAL", "100ms"),
    ("AWA_CRON_INTERVAL", "100ms"),
    ("AWA_POLL_INTERVAL", "20ms"),
    ("AWA_RETRY_BACKOFF", "200ms"),
    ("AWA_SNOOZE", "200ms"),
    ("AWA_SHUTDOWN_GRACE", "3s"),
    ("AWA_SLEEP", "100ms"),
    ("AWA_FOLD_INTERVAL", "2s"),
    // The runtimes' own default, pinned: a refusal is judged prompt
    // against it (reconcile's `slow_refusal`), so it must not move under
    // the rehearsal unseen.
    ("AWA_DB_PATIENCE", "30s"),
];

/// The interval a [`FIXED`] variable sets (`AWA_POLL_INTERVAL` ...), as
/// every process of a cell gets it; `None` for a variable not set there
/// or not a duration.
pub fn fixed_interval(var: &str) -> Option<Duration> {
    FIXED
        .iter()
        .find(|(k, _)| *k == var)
        .and_then(|(_, v)| v.parse().ok())
}

/// How long every process retries transient database failures before
/// giving up (`AWA_DB_PATIENCE` in [`FIXED`]): a refusal retried as if
/// it were transient takes at least this long.
pub const DB_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The waits [`FIXED`] gives every worker (`AWA_RETRY_BACKOFF`,
/// `AWA_SNOOZE`): what reconciliation holds each retry and snooze to.
pub const WAITS: awa_runtime::store::audit::Waits = awa_runtime::store::audit::Waits {
    retry_backoff: std::time::Duration::from_millis(200),
    snooze: std::time::Duration::from_millis(200),
};
/// What makes a worker idle (`idle = true` on a fleet step): it serves a
/// queue nobody enqueues to and, after its first round, waits an hour
/// before it polls for work again or, as leader, promotes, rescues or
/// fires cron; it keeps heartbeating, and rotating and pruning at the
/// matrix's cadence. The variables are the frozen rehearsal contract, and
/// so is their syntax: 0.6 reads durations in ms, s or m only.
pub const IDLE: [(&str, &str); 5] = [
    ("AWA_QUEUES", "idle"),
    ("AWA_POLL_INTERVAL", "60m"),
    ("AWA_PROMOTE_INTERVAL", "60m"),
    ("AWA_CRON_INTERVAL", "60m"),
    ("AWA_RESCUE_INTERVAL", "60m"),
];

/// How long the runtime's graceful stop may take (`AWA_SHUTDOWN_GRACE`).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// The auto-flip stability period given to the flipping artifact's workers
/// in a cell with a `flip = "auto"` step.
pub const AUTO_FLIP_AFTER: &str = "2s";

/// Attempts per produced job; fixed so that `uncertain` jobs (whose events
/// carry no `max_attempts`) are judged against the right designed terminal.
pub const MAX_ATTEMPTS: i32 = 3;

/// A duration in the runtime's syntax, always in milliseconds (`1500ms`).
pub fn awa_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// What varies between processes.
#[derive(Clone, Debug)]
pub struct ProcessEnv<'a> {
    /// The cell database.
    pub database_url: &'a str,
    /// `AWA_NAME`: the process name.
    pub name: &'a str,
    /// The matrix's timings.
    pub timings: &'a Timings,
    /// Auto-flip on (the flipping artifact's workers in an auto-flip cell) or off.
    pub auto_flip: bool,
    /// The failpoint to arm, if the artifact is a defective candidate.
    pub failpoint: Option<&'a str>,
    /// The run's report folder.
    pub report_dir: &'a str,
}

/// The environment every `awa` process of a cell gets.
pub fn runtime_env(p: &ProcessEnv<'_>) -> Vec<(String, String)> {
    let t = p.timings;
    let mut env: Vec<(String, String)> = vec![
        ("AWA_DATABASE_URL".into(), p.database_url.into()),
        ("AWA_NAME".into(), p.name.into()),
        ("AWA_HEARTBEAT_INTERVAL".into(), awa_duration(t.heartbeat)),
        ("AWA_STALE_AFTER".into(), awa_duration(t.stale_after)),
        ("AWA_RESCUE_INTERVAL".into(), awa_duration(t.rescue_every)),
        ("AWA_ROTATE_INTERVAL".into(), awa_duration(t.rotate_every)),
        ("AWA_DEADLINE".into(), awa_duration(t.deadline)),
    ];
    env.extend(
        FIXED
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let auto = if p.auto_flip { AUTO_FLIP_AFTER } else { "off" };
    env.push(("AWA_AUTO_FLIP".into(), auto.into()));
    if let Some(fp) = p.failpoint {
        env.push(("AWA_FAILPOINTS".into(), format!("{fp}=return")));
    }
    env.push((REPORT_DIR_VAR.into(), p.report_dir.into()));
    env
}

/// The producer settings added to a runtime environment.
pub fn producer_env(
    rate_per_s: f64,
    count: u64,
    mix: &str,
    sleep: Duration,
) -> Vec<(String, String)> {
    vec![
        ("AWA_RATE".into(), format_rate(rate_per_s)),
        ("AWA_COUNT".into(), count.to_string()),
        ("AWA_MIX".into(), mix.into()),
        ("AWA_MAX_ATTEMPTS".into(), MAX_ATTEMPTS.to_string()),
        // After FIXED's default, so it wins.
        ("AWA_SLEEP".into(), awa_duration(sleep)),
    ]
}

fn format_rate(rate: f64) -> String {
    if rate.fract() == 0.0 {
        format!("{rate:.0}")
    } else {
        format!("{rate:.3}")
    }
}

/// The mix in `awa produce --mix` syntax, zero weights left out.
pub fn mix_string(mix: &BTreeMap<JobMode, u32>) -> String {
    JobMode::ALL
        .iter()
        .filter_map(|m| {
            mix.get(m)
                .filter(|w| **w > 0)
                .map(|w| format!("{}={w}", m.name()))
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_intervals_read_as_durations() {
        assert_eq!(
            fixed_interval("AWA_POLL_INTERVAL"),
            Some(Duration::from_millis(20))
        );
        assert_eq!(
            fixed_interval("AWA_FOLD_INTERVAL"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(fixed_interval("AWA_CONCURRENCY"), None, "not a duration");
        assert_eq!(fixed_interval("AWA_HEARTBEAT_INTERVAL"), None, "not fixed");
    }

    fn timings() -> Timings {
        Timings {
            heartbeat: Duration::from_millis(200),
            stale_after: Duration::from_millis(1500),
            rescue_every: Duration::from_millis(250),
            rotate_every: Duration::from_secs(1),
            deadline: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(60),
            budget: crate::matrix::DEFAULT_BUDGET,
        }
    }

    fn get<'e>(env: &'e [(String, String)], key: &str) -> Option<&'e str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn timings_map_onto_the_runtime_variables() {
        let t = timings();
        let env = runtime_env(&ProcessEnv {
            database_url: "postgres://postgres@127.0.0.1:5432/cell",
            name: "previous-worker-1",
            timings: &t,
            auto_flip: false,
            failpoint: None,
            report_dir: "/r",
        });
        for (key, want) in [
            (
                "AWA_DATABASE_URL",
                "postgres://postgres@127.0.0.1:5432/cell",
            ),
            ("AWA_NAME", "previous-worker-1"),
            ("AWA_HEARTBEAT_INTERVAL", "200ms"),
            ("AWA_STALE_AFTER", "1500ms"),
            ("AWA_RESCUE_INTERVAL", "250ms"),
            ("AWA_ROTATE_INTERVAL", "1000ms"),
            ("AWA_DEADLINE", "2000ms"),
            ("AWA_PROMOTE_INTERVAL", "100ms"),
            ("AWA_CRON_INTERVAL", "100ms"),
            ("AWA_POLL_INTERVAL", "20ms"),
            ("AWA_RETRY_BACKOFF", "200ms"),
            ("AWA_SNOOZE", "200ms"),
            ("AWA_SHUTDOWN_GRACE", "3s"),
            ("AWA_SLEEP", "100ms"),
            ("AWA_FOLD_INTERVAL", "2s"),
            ("AWA_DB_PATIENCE", "30s"),
            ("AWA_CONCURRENCY", "64"),
            ("AWA_AUTO_FLIP", "off"),
            ("REHEARSE_REPORT_DIR", "/r"),
        ] {
            assert_eq!(get(&env, key), Some(want), "{key}");
        }
        assert_eq!(get(&env, "AWA_FAILPOINTS"), None);
        // Every key once.
        let mut keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), env.len());
    }

    #[test]
    fn the_waits_reconciliation_holds_to_are_the_ones_given() {
        let fixed = |key: &str| FIXED.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        assert_eq!(
            fixed("AWA_RETRY_BACKOFF").map(str::to_owned),
            Some(format!("{}ms", WAITS.retry_backoff.as_millis()))
        );
        assert_eq!(
            fixed("AWA_SNOOZE").map(str::to_owned),
            Some(format!("{}ms", WAITS.snooze.as_millis()))
        );
        assert_eq!(
            fixed("AWA_DB_PATIENCE").map(str::to_owned),
            Some(format!("{}s", DB_PATIENCE.as_secs()))
        );
    }

    #[test]
    fn auto_flip_and_failpoints_are_per_process() {
        let t = timings();
        let env = runtime_env(&ProcessEnv {
            database_url: "u",
            name: "defective_flip-worker-1",
            timings: &t,
            auto_flip: true,
            failpoint: Some("flip_skip_reconcile"),
            report_dir: "/r",
        });
        assert_eq!(get(&env, "AWA_AUTO_FLIP"), Some("2s"));
        assert_eq!(
            get(&env, "AWA_FAILPOINTS"),
            Some("flip_skip_reconcile=return")
        );
    }

    #[test]
    fn producer_settings_and_mix() {
        let mix = BTreeMap::from([
            (JobMode::Sleep, 10),
            (JobMode::Complete, 60),
            (JobMode::CancelSelf, 0),
            (JobMode::OverrunDeadline, 2),
        ]);
        assert_eq!(mix_string(&mix), "complete=60,sleep=10,overrun_deadline=2");
        let env = producer_env(200.0 / 3.0, 0, "complete=1", Duration::from_secs(12));
        assert_eq!(get(&env, "AWA_RATE"), Some("66.667"));
        assert_eq!(get(&env, "AWA_COUNT"), Some("0"));
        assert_eq!(get(&env, "AWA_MAX_ATTEMPTS"), Some("3"));
        assert_eq!(
            get(
                &producer_env(0.0, 300, "complete=1", Duration::from_millis(100)),
                "AWA_RATE"
            ),
            Some("0")
        );
        assert_eq!(
            get(
                &producer_env(100.0, 0, "x", Duration::from_millis(100)),
                "AWA_RATE"
            ),
            Some("100")
        );
    }
}
