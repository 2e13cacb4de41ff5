//! Steps: one inline table, one step key, that step's options.
//!
//! serde cannot express "the key is the tag" for an internally tagged
//! enum, so each step arrives as a spanned key/value list and is converted
//! here by hand. That is also where the good messages come from: an
//! unknown step is told from a misspelt option, two step keys in one table
//! are named, and every option is checked for type and range at its own
//! line and column.

use std::collections::BTreeSet;
use std::ops::Range;

use toml::{Spanned, Value};

use super::diagnostic::{Sink, did_you_mean};
use super::duration::Duration;
use super::model::{
    AssertStep, CHECK_NAMES, CURRENT, CancelStep, Check, DrainStep, FenceStep, FleetStep, FlipMode,
    FlipStep, HoldStep, KillStep, KillTarget, LEADER_IS, LoadStep, MigrateStep, Outcome,
    PgCrashStep, ResumeSignal, ResumeStep, RollStep, RollbackStep, STEP_NAMES, Signal, Step,
    SuspendAt, SuspendStep, Until, When,
};
use super::raw::RawStep;

/// Most workers one step may start: a typo must not fork-bomb the machine.
pub const MAX_WORKERS: u64 = 32;
/// Most producers one step may start.
pub const MAX_PRODUCERS: u64 = 8;
/// Most jobs of each kind one cancel step may cancel (one command a job).
pub const MAX_CANCELS: u64 = 20;
/// Largest `after_started` threshold.
pub const MAX_AFTER_STARTED: u64 = 1_000_000;

/// The options each step takes, besides its own key.
const OPTIONS: [(&str, &[&str]); 15] = [
    ("fleet", &["workers", "producers", "leader", "when", "idle"]),
    ("load", &[]),
    ("migrate", &["allow_live_runtimes", "expect"]),
    ("roll", &["one_at_a_time", "pause", "producers"]),
    ("rollback", &["workers"]),
    ("kill", &["of", "when", "after_started", "signal"]),
    ("suspend", &["of", "for", "at"]),
    ("resume", &["of", "signal"]),
    ("pg_crash", &[]),
    ("flip", &["expect", "timeout", "by"]),
    ("fence", &[]),
    ("hold", &["reads", "until"]),
    ("drain", &[]),
    ("assert", &[]),
    ("cancel", &["running", "available"]),
];

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

fn options_of(step: &str) -> &'static [&'static str] {
    OPTIONS
        .iter()
        .find(|(name, _)| *name == step)
        .map_or(&[], |(_, options)| options)
}

/// The context prefix of a step's messages: `cell "fence", step 3 (flip)`.
///
/// `cell` is the cell's label (`cell "fence"`, or `cell #4` when it has no name).
pub(crate) fn step_context(cell: &str, index: usize, step: Option<&str>) -> String {
    match step {
        Some(name) => format!("{cell}, step {index} ({name})"),
        None => format!("{cell}, step {index}"),
    }
}

/// Converts one raw step (1-based `index`) of the cell labelled `cell`, recording every problem; `None` if any.
pub(crate) fn convert(
    raw: &Spanned<RawStep>,
    cell: &str,
    index: usize,
    artifacts: &BTreeSet<String>,
    sink: &mut Sink<'_>,
) -> Option<Step> {
    let entries = match raw.get_ref() {
        RawStep::Table(entries) => entries,
        RawStep::Broken => return None,
        RawStep::NotATable(found) => {
            sink.error(
                Some(raw.span()),
                &step_context(cell, index, None),
                format!("expected an inline table like {{ hold = \"5s\" }}, found {found}"),
            );
            return None;
        }
    };
    let step = step_name(raw, entries, cell, index, sink)?;
    let mut r = Reader {
        sink,
        context: step_context(cell, index, Some(step)),
        step,
        table: raw.span(),
        entries,
        artifacts,
        ok: true,
    };
    r.reject_unknown_options();
    let step = read_step(step, &mut r);
    if r.ok { step } else { None }
}

/// The table's one step key; `None` with the error said when it has none
/// or several.
fn step_name(
    raw: &Spanned<RawStep>,
    entries: &[(Spanned<String>, Spanned<Value>)],
    cell: &str,
    index: usize,
    sink: &mut Sink<'_>,
) -> Option<&'static str> {
    let step_keys: Vec<&(Spanned<String>, Spanned<Value>)> = entries
        .iter()
        .filter(|(k, _)| STEP_NAMES.contains(&k.get_ref().as_str()))
        .collect();
    match step_keys.as_slice() {
        [(key, _)] => STEP_NAMES.into_iter().find(|s| s == key.get_ref()),
        [] => {
            report_missing_step(raw, entries, cell, index, sink);
            None
        }
        [_, second, ..] => {
            let names: Vec<&str> = step_keys
                .iter()
                .map(|(k, _)| k.get_ref().as_str())
                .collect();
            sink.error(
                Some(second.0.span()),
                &step_context(cell, index, None),
                format!(
                    "one step per table, found {} step keys ({}); split them into separate steps",
                    names.len(),
                    names.join(", ")
                ),
            );
            None
        }
    }
}

/// The step named `step`, its value and options read by `r`: one arm a
/// step kind.
fn read_step(step: &str, r: &mut Reader<'_, '_>) -> Option<Step> {
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

/// A table without a step key: either a misspelt step, or options alone.
fn report_missing_step(
    raw: &Spanned<RawStep>,
    entries: &[(Spanned<String>, Spanned<Value>)],
    cell: &str,
    index: usize,
    sink: &mut Sink<'_>,
) {
    let context = step_context(cell, index, None);
    let is_option = |key: &str| OPTIONS.iter().any(|(_, options)| options.contains(&key));
    let expected = STEP_NAMES.join(", ");
    if let Some((key, _)) = entries.iter().find(|(k, _)| !is_option(k.get_ref())) {
        let name = key.get_ref();
        sink.error(
            Some(key.span()),
            &context,
            format!(
                "unknown step \"{name}\"{}; expected one of {expected}",
                did_you_mean(name, STEP_NAMES)
            ),
        );
    } else if entries.is_empty() {
        sink.error(
            Some(raw.span()),
            &context,
            format!("empty step; expected one of {expected}"),
        );
    } else {
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.get_ref().as_str()).collect();
        sink.error(
            Some(raw.span()),
            &context,
            format!(
                "step has options ({}) but no step key; expected one of {expected}",
                keys.join(", ")
            ),
        );
    }
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
    duration.map(|duration| {
        Step::Hold(HoldStep {
            duration,
            reads,
            until,
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

/// Reads the options of one step table, recording problems as it goes.
struct Reader<'a, 's> {
    sink: &'a mut Sink<'s>,
    context: String,
    step: &'static str,
    table: Range<usize>,
    entries: &'a [(Spanned<String>, Spanned<Value>)],
    artifacts: &'a BTreeSet<String>,
    ok: bool,
}

impl<'a> Reader<'a, '_> {
    fn fail(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        self.ok = false;
        self.sink.error(span, &self.context, message);
    }

    fn get(&self, key: &str) -> Option<&'a Spanned<Value>> {
        self.entries
            .iter()
            .find(|(k, _)| k.get_ref() == key)
            .map(|(_, v)| v)
    }

    fn span_of(&self, key: &str) -> Option<Range<usize>> {
        self.get(key).map(Spanned::span)
    }

    fn reject_unknown_options(&mut self) {
        let allowed = options_of(self.step);
        let unknown: Vec<&Spanned<String>> = self
            .entries
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.get_ref() != self.step && !allowed.contains(&k.get_ref().as_str()))
            .collect();
        for key in unknown {
            let name = key.get_ref();
            let message = if allowed.is_empty() {
                format!("unknown option \"{name}\"; {} takes no options", self.step)
            } else {
                format!(
                    "unknown option \"{name}\" for {}{}; expected one of {}",
                    self.step,
                    did_you_mean(name, allowed.iter().copied()),
                    allowed.join(", ")
                )
            };
            self.fail(Some(key.span()), message);
        }
    }

    /// A string option; a wrong type is reported against `expected`.
    fn string(&mut self, key: &str, expected: &str) -> Option<(&'a str, Range<usize>)> {
        let value = self.get(key)?;
        match value.get_ref() {
            Value::String(s) => Some((s.as_str(), value.span())),
            other => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be {expected}, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn known_artifact(&mut self, name: &str, span: Range<usize>) -> Option<String> {
        if self.artifacts.contains(name) {
            return Some(name.to_owned());
        }
        let declared: Vec<&str> = self.artifacts.iter().map(String::as_str).collect();
        let message = if declared.is_empty() {
            format!(
                "unknown artifact \"{name}\"; no artifacts are declared: add an [artifacts.{name}] table"
            )
        } else {
            format!(
                "unknown artifact \"{name}\"{}; declared artifacts: {}",
                did_you_mean(name, declared.iter().copied()),
                declared.join(", ")
            )
        };
        self.fail(Some(span), message);
        None
    }

    /// The step key's value, naming a declared artifact.
    fn head_artifact(&mut self) -> Option<String> {
        let (name, span) = self.string(self.step, "an artifact name (a string)")?;
        self.known_artifact(name, span)
    }

    /// An optional option naming a declared artifact.
    fn artifact(&mut self, key: &str) -> Option<String> {
        let (name, span) = self.string(key, "an artifact name (a string)")?;
        self.known_artifact(name, span)
    }

    fn boolean(&mut self, key: &str, default: bool) -> bool {
        let Some(value) = self.get(key) else {
            return default;
        };
        match value.get_ref() {
            Value::Boolean(b) => *b,
            other => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be true or false, found {}", describe(other)),
                );
                default
            }
        }
    }

    /// An integer option in `min..=max`, or `default` when absent.
    fn count(&mut self, key: &str, default: u64, min: u64, max: u64) -> u64 {
        self.count_opt(key, min, max).unwrap_or(default)
    }

    fn count_opt(&mut self, key: &str, min: u64, max: u64) -> Option<u64> {
        let value = self.get(key)?;
        let expected = format!("an integer from {min} to {max}");
        match value.get_ref() {
            Value::Integer(n) if (min as i128..=max as i128).contains(&(*n as i128)) => {
                Some(*n as u64)
            }
            Value::Integer(n) => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be {expected}, found {n}"),
                );
                None
            }
            other => {
                self.fail(
                    Some(value.span()),
                    format!("{key} must be {expected}, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn parse_duration(&mut self, key: &str) -> Option<Duration> {
        let (text, span) = self.string(key, "a duration like \"2s\"")?;
        match text.parse::<Duration>() {
            Ok(d) => Some(d),
            Err(e) => {
                self.fail(Some(span), e.to_string());
                None
            }
        }
    }

    /// An optional duration option.
    fn duration(&mut self, key: &str) -> Option<Duration> {
        self.parse_duration(key)
    }

    /// The step key's value as a duration longer than zero.
    fn head_positive_duration(&mut self) -> Option<Duration> {
        let d = self.parse_duration(self.step)?;
        if d.is_zero() {
            let span = self.span_of(self.step);
            self.fail(span, format!("{} must be longer than 0s", self.step));
            return None;
        }
        Some(d)
    }

    fn pick<T: Copy>(&mut self, key: &str, choices: &[(&str, T)]) -> Option<T> {
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        let (text, span) = self.string(key, &format!("one of {}", names.join(", ")))?;
        if let Some((_, v)) = choices.iter().find(|(n, _)| *n == text) {
            return Some(*v);
        }
        self.fail(
            Some(span),
            format!(
                "invalid {key} \"{text}\"{}; expected one of {}",
                did_you_mean(text, names.iter().copied()),
                names.join(", ")
            ),
        );
        None
    }

    /// The step key's value, one of `choices`.
    fn head_choice<T: Copy>(&mut self, choices: &[(&str, T)]) -> Option<T> {
        self.pick(self.step, choices)
    }

    /// An option that is one of `choices`, or `default` when absent or invalid.
    fn choice<T: Copy>(&mut self, key: &str, choices: &[(&str, T)], default: T) -> T {
        self.pick(key, choices).unwrap_or(default)
    }

    fn head_check(&mut self) -> Option<Check> {
        let (text, span) = self.string(self.step, "a check name (a string)")?;
        match text.parse::<Check>() {
            Ok(Check::LeaderIs(artifact)) => {
                let start = span.start + 1 + LEADER_IS.len();
                self.known_artifact(&artifact, start..span.end)
                    .map(Check::LeaderIs)
            }
            Ok(check) => Some(check),
            Err(()) => {
                let hint = if text.starts_with("leader_is") {
                    String::new()
                } else {
                    did_you_mean(text, CHECK_NAMES)
                };
                self.fail(
                    Some(span),
                    format!(
                        "unknown check \"{text}\"{hint}; expected one of {}, {LEADER_IS}<artifact>",
                        CHECK_NAMES.join(", ")
                    ),
                );
                None
            }
        }
    }
}

/// A TOML value named for an error message: `string "two"`, `integer 3`.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("string \"{s}\""),
        Value::Integer(n) => format!("integer {n}"),
        Value::Float(x) => format!("float {x}"),
        Value::Boolean(b) => format!("boolean {b}"),
        Value::Datetime(d) => format!("datetime {d}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Table(_) => "a table".to_owned(),
    }
}
