//! The events `awa` prints on stdout, one JSON object per line, typed.
//!
//! The contract is frozen from 0.6.1 on and 0.7 only adds to it, so the
//! parser is lenient in one direction: an event kind it does not know,
//! or a known kind with fields it does not need, still parses (as
//! [`Event::Other`] or with those fields ignored). A line that is not a
//! JSON object is [`Event::Garbled`]: the contract says stdout carries
//! only events, so the driver logs it, and never guesses.

use serde::Deserialize;
use serde_json::Value;

/// One line of an `awa` process's stdout.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The process registered and is running (`worker` or `producer`).
    Ready(Ready),
    /// A producer's job committed.
    Accepted(Accepted),
    /// A batch whose commit's fate is unknown.
    Uncertain(Uncertain),
    /// A worker started an attempt.
    Started(Started),
    /// A worker recorded an attempt's outcome.
    Finished(Finished),
    /// This process won maintenance leadership.
    Leader(Leader),
    /// The leader rescued an attempt.
    Rescued(Rescued),
    /// The leader fired a cron time.
    CronFired(CronFired),
    /// A guard or fence refused (the process exits 2).
    Refused {
        /// Why, as the runtime words it.
        reason: String,
    },
    /// A permanent failure (the process exits non-zero).
    Fatal {
        /// The error.
        error: String,
    },
    /// A graceful stop completed.
    Stopped,
    /// `awa migrate` finished.
    Migrated {
        /// Schema version before.
        from: i64,
        /// Schema version after.
        to: i64,
    },
    /// (0.7) `awa storage flip-ring-authority` flipped, or found it flipped; the whole object.
    Flipped(Value),
    /// (0.7) the flip's readiness report; the whole object.
    FlipCheck(Value),
    /// A well-formed event this harness does not interpret (`released`, `cron_upserted`, ...).
    Other {
        /// Its `event` field.
        name: String,
    },
    /// A stdout line that is not a JSON object with an `event` string.
    Garbled,
}

/// `{"event":"ready",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Ready {
    /// `worker` or `producer`.
    pub role: String,
    /// The runtime_instances key.
    pub instance_id: String,
    /// `AWA_NAME`.
    pub name: String,
    /// The binary's version.
    pub version: String,
    /// Its process id.
    pub pid: u32,
}

/// `{"event":"accepted",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Accepted {
    /// The job.
    pub job_id: i64,
    /// Workload mode.
    pub mode: String,
    /// Attempts it may take.
    pub max_attempts: i32,
    /// For scheduled jobs, when it becomes available (Unix ms).
    #[serde(default)]
    pub run_at_ms: Option<i64>,
    /// The producer's version.
    pub version: String,
}

/// `{"event":"uncertain","job_ids":[..],"modes":[..]}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Uncertain {
    /// The batch's reserved ids.
    pub job_ids: Vec<i64>,
    /// Their modes, index for index.
    pub modes: Vec<String>,
}

/// `{"event":"started",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Started {
    /// The job.
    pub job_id: i64,
    /// 1-based attempt number.
    pub attempt: i32,
    /// The attempt's lease, which guards its completion.
    pub run_lease: i64,
    /// Workload mode (absent for jobs without one).
    #[serde(default)]
    pub mode: Option<String>,
    /// The worker's runtime instance.
    pub instance_id: String,
    /// The worker's version.
    pub version: String,
}

/// `{"event":"finished",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Finished {
    /// The job.
    pub job_id: i64,
    /// The attempt.
    pub attempt: i32,
    /// The attempt's lease.
    pub run_lease: i64,
    /// `completed`, `retry`, `stale`, ...
    pub outcome: String,
    /// Workload mode.
    #[serde(default)]
    pub mode: Option<String>,
    /// The worker's version.
    pub version: String,
}

/// `{"event":"leader",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Leader {
    /// The leader's runtime instance.
    pub instance_id: String,
    /// Its `AWA_NAME`.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// `{"event":"rescued",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Rescued {
    /// The job.
    pub job_id: i64,
    /// The rescued attempt's lease.
    pub run_lease: i64,
    /// `deadline`, `crash` or `heartbeat`.
    pub reason: String,
    /// Dead-lettered rather than re-queued.
    pub dead: bool,
}

/// `{"event":"cron_fired",...}`
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CronFired {
    /// The schedule.
    pub name: String,
    /// The fire time (Unix ms, a multiple of the interval).
    pub fire_ms: i64,
    /// The job it produced.
    pub job_id: i64,
}

#[derive(Deserialize)]
struct Reason {
    reason: String,
}

#[derive(Deserialize)]
struct FatalBody {
    error: String,
}

#[derive(Deserialize)]
struct MigratedBody {
    from: i64,
    to: i64,
}

/// What a `flipped` event says, typed (its object stays in [`Event::Flipped`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct FlipSummary {
    /// Authority was ledger already; nothing was flipped.
    pub already: bool,
    /// `--force` overrode the readiness check.
    pub forced: bool,
    /// Each ring's generation at the flip.
    pub rings: Vec<FlippedRing>,
}

/// One ring of a `flipped` event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct FlippedRing {
    /// `queue`, `claim` or `lease`.
    pub ring: Option<String>,
    /// The ledger's generation after the flip.
    pub ledger_generation: Option<i64>,
    /// The columns' generation before it.
    pub columns_generation: Option<i64>,
}

impl FlipSummary {
    /// The summary of a `flipped` event's object (`None` for any other event).
    pub fn of(event: &Event) -> Option<FlipSummary> {
        match event {
            Event::Flipped(v) => Some(serde_json::from_value(v.clone()).unwrap_or_default()),
            _ => None,
        }
    }
}

impl Event {
    /// Parses one stdout line.
    pub fn parse(line: &str) -> Event {
        match serde_json::from_str::<Value>(line) {
            Ok(value) => Event::from_value(value),
            Err(_) => Event::Garbled,
        }
    }

    /// Reads one event from its JSON object (as kept in a process's output).
    pub fn from_value(value: Value) -> Event {
        let Some(name) = value
            .get("event")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Event::Garbled;
        };
        fn typed<T: for<'de> Deserialize<'de>>(v: Value) -> Option<T> {
            serde_json::from_value(v).ok()
        }
        let parsed = match name.as_str() {
            "ready" => typed(value).map(Event::Ready),
            "accepted" => typed(value).map(Event::Accepted),
            "uncertain" => typed(value).map(Event::Uncertain),
            "started" => typed(value).map(Event::Started),
            "finished" => typed(value).map(Event::Finished),
            "leader" => typed(value).map(Event::Leader),
            "rescued" => typed(value).map(Event::Rescued),
            "cron_fired" => typed(value).map(Event::CronFired),
            "refused" => typed::<Reason>(value).map(|r| Event::Refused { reason: r.reason }),
            "fatal" => typed::<FatalBody>(value).map(|f| Event::Fatal { error: f.error }),
            "stopped" => Some(Event::Stopped),
            "migrated" => typed::<MigratedBody>(value).map(|m| Event::Migrated {
                from: m.from,
                to: m.to,
            }),
            "flipped" => Some(Event::Flipped(value)),
            "flip_check" => Some(Event::FlipCheck(value)),
            _ => return Event::Other { name },
        };
        // A known kind missing a field it must carry breaks the contract.
        parsed.unwrap_or(Event::Garbled)
    }

    /// The `event` name, for counts and logs.
    pub fn kind(&self) -> &str {
        match self {
            Event::Ready(_) => "ready",
            Event::Accepted(_) => "accepted",
            Event::Uncertain(_) => "uncertain",
            Event::Started(_) => "started",
            Event::Finished(_) => "finished",
            Event::Leader(_) => "leader",
            Event::Rescued(_) => "rescued",
            Event::CronFired(_) => "cron_fired",
            Event::Refused { .. } => "refused",
            Event::Fatal { .. } => "fatal",
            Event::Stopped => "stopped",
            Event::Migrated { .. } => "migrated",
            Event::Flipped(_) => "flipped",
            Event::FlipCheck(_) => "flip_check",
            Event::Other { name } => name,
            Event::Garbled => "garbled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contract_event_parses() {
        let table: &[(&str, Event)] = &[
            (
                r#"{"event":"ready","role":"worker","instance_id":"w-1","name":"previous-worker-1","version":"0.6.2","pid":42}"#,
                Event::Ready(Ready {
                    role: "worker".into(),
                    instance_id: "w-1".into(),
                    name: "previous-worker-1".into(),
                    version: "0.6.2".into(),
                    pid: 42,
                }),
            ),
            (
                r#"{"event":"accepted","job_id":7,"mode":"scheduled","max_attempts":3,"run_at_ms":1700000000000,"version":"0.6.2"}"#,
                Event::Accepted(Accepted {
                    job_id: 7,
                    mode: "scheduled".into(),
                    max_attempts: 3,
                    run_at_ms: Some(1_700_000_000_000),
                    version: "0.6.2".into(),
                }),
            ),
            (
                r#"{"event":"accepted","job_id":8,"mode":"complete","max_attempts":3,"run_at_ms":null,"version":"0.7.0"}"#,
                Event::Accepted(Accepted {
                    job_id: 8,
                    mode: "complete".into(),
                    max_attempts: 3,
                    run_at_ms: None,
                    version: "0.7.0".into(),
                }),
            ),
            (
                r#"{"event":"uncertain","job_ids":[1,2],"modes":["complete","sleep"]}"#,
                Event::Uncertain(Uncertain {
                    job_ids: vec![1, 2],
                    modes: vec!["complete".into(), "sleep".into()],
                }),
            ),
            (
                r#"{"event":"started","job_id":9,"attempt":2,"run_lease":11,"mode":"retry_once","instance_id":"w-2","version":"0.7.0"}"#,
                Event::Started(Started {
                    job_id: 9,
                    attempt: 2,
                    run_lease: 11,
                    mode: Some("retry_once".into()),
                    instance_id: "w-2".into(),
                    version: "0.7.0".into(),
                }),
            ),
            (
                r#"{"event":"finished","job_id":9,"attempt":2,"run_lease":11,"outcome":"completed","mode":null,"version":"0.7.0"}"#,
                Event::Finished(Finished {
                    job_id: 9,
                    attempt: 2,
                    run_lease: 11,
                    outcome: "completed".into(),
                    mode: None,
                    version: "0.7.0".into(),
                }),
            ),
            (
                r#"{"event":"leader","instance_id":"w-1","name":"previous-worker-1","version":"0.6.2"}"#,
                Event::Leader(Leader {
                    instance_id: "w-1".into(),
                    name: "previous-worker-1".into(),
                    version: "0.6.2".into(),
                }),
            ),
            (
                r#"{"event":"rescued","job_id":3,"run_lease":4,"reason":"crash","dead":false}"#,
                Event::Rescued(Rescued {
                    job_id: 3,
                    run_lease: 4,
                    reason: "crash".into(),
                    dead: false,
                }),
            ),
            (
                r#"{"event":"cron_fired","name":"rehearse","fire_ms":2000,"job_id":5}"#,
                Event::CronFired(CronFired {
                    name: "rehearse".into(),
                    fire_ms: 2000,
                    job_id: 5,
                }),
            ),
            (
                r#"{"event":"refused","reason":"schema is newer"}"#,
                Event::Refused {
                    reason: "schema is newer".into(),
                },
            ),
            (
                r#"{"event":"fatal","error":"no partition for slot -1"}"#,
                Event::Fatal {
                    error: "no partition for slot -1".into(),
                },
            ),
            (
                r#"{"event":"stopped","instance_id":"w-1","released":0}"#,
                Event::Stopped,
            ),
            (
                r#"{"event":"migrated","from":2,"to":3,"version":"0.7.0"}"#,
                Event::Migrated { from: 2, to: 3 },
            ),
            (
                r#"{"event":"released","job_id":1,"run_lease":2}"#,
                Event::Other {
                    name: "released".into(),
                },
            ),
        ];
        for (line, want) in table {
            assert_eq!(&Event::parse(line), want, "{line}");
        }
    }

    #[test]
    fn flip_events_keep_the_whole_object() {
        let line = r#"{"event":"flipped","rings":[{"ring":"queue","columns_generation":7,"ledger_generation":7}],"forced":false}"#;
        match Event::parse(line) {
            Event::Flipped(v) => assert_eq!(v["rings"][0]["ledger_generation"], 7),
            other => panic!("{other:?}"),
        }
        let line =
            r#"{"event":"flip_check","ready":false,"blocking":[{"name":"previous-worker-1"}]}"#;
        assert!(matches!(Event::parse(line), Event::FlipCheck(v) if v["ready"] == false));
    }

    #[test]
    fn what_breaks_the_contract_is_garbled() {
        for line in [
            "",
            "hello",
            "[1,2]",
            r#"{"no_event":1}"#,
            r#"{"event":3}"#,
            // a known kind without a field it must carry
            r#"{"event":"started","job_id":1}"#,
            r#"{"event":"accepted","job_id":"x","mode":"complete","max_attempts":3,"version":"0.6.2"}"#,
        ] {
            assert_eq!(Event::parse(line), Event::Garbled, "{line:?}");
        }
    }

    #[test]
    fn kind_names_match_the_wire() {
        assert_eq!(
            Event::parse(r#"{"event":"cron_fired","name":"a","fire_ms":1,"job_id":2}"#).kind(),
            "cron_fired"
        );
        assert_eq!(
            Event::parse(r#"{"event":"cron_upserted"}"#).kind(),
            "cron_upserted"
        );
        assert_eq!(Event::Garbled.kind(), "garbled");
    }
}
