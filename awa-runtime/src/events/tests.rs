use super::*;
use crate::store::lock_wait::{HolderRuntime, LockHolder};

/// One of every variant, each field set the way some release sets it.
fn samples() -> Vec<Event> {
    vec![
        Event::Ready(Ready {
            role: ProcessKind::Worker,
            instance_id: "w-1".into(),
            name: "current-worker-1".into(),
            version: "0.7.0".into(),
            pid: 42,
            failpoints: Some(vec!["preflight-no-lock".into()]),
        }),
        Event::Ready(Ready {
            role: ProcessKind::Producer,
            instance_id: "p-1".into(),
            name: "producer-1".into(),
            version: "0.6.2".into(),
            pid: 43,
            failpoints: None,
        }),
        Event::Accepted(Accepted {
            job_id: 7,
            mode: Mode::Scheduled,
            max_attempts: 3,
            run_at_ms: Some(1_700_000_000_000),
            version: "0.6.2".into(),
        }),
        Event::Uncertain(Uncertain {
            job_ids: vec![1, 2],
            modes: vec![Mode::Complete, Mode::Sleep],
        }),
        Event::Started(Started {
            job_id: 9,
            attempt: 2,
            run_lease: 11,
            mode: Some(Mode::RetryOnce),
            instance_id: "w-2".into(),
            version: "0.7.0".into(),
        }),
        Event::Finished(Finished {
            job_id: 9,
            attempt: 2,
            run_lease: 11,
            outcome: AttemptOutcome::DeadLettered,
            mode: None,
            version: "0.7.0".into(),
        }),
        Event::Released(LeaseRef {
            job_id: 1,
            run_lease: 2,
        }),
        Event::LeaseLost(LeaseRef {
            job_id: 3,
            run_lease: 4,
        }),
        Event::Leader(Leader {
            instance_id: "w-1".into(),
            name: "previous-worker-1".into(),
            version: "0.6.1".into(),
        }),
        Event::Rescued(Rescued {
            job_id: 3,
            run_lease: 4,
            reason: RescueReason::Heartbeat,
            dead: true,
        }),
        Event::CronFired(CronFired {
            name: "rehearse".into(),
            fire_ms: 2000,
            job_id: 5,
        }),
        Event::FoldStoodDown(FoldStoodDown {
            pinned_by: vec![101, 102],
        }),
        Event::Refused(Refused {
            reason: "schema is newer".into(),
        }),
        Event::Fatal(Fatal {
            error: "no partition for slot -1".into(),
        }),
        Event::Blocked(Blocked {
            operation: "the flip".into(),
            lock_timeout_ms: 5000,
            holders: vec![LockHolder {
                pid: 77,
                application_name: "awa previous-worker-1".into(),
                state: "idle in transaction".into(),
                transaction_age_ms: 900,
                locks: vec!["RowExclusiveLock on awa.ready_entries_1".into()],
                runtime: Some(HolderRuntime {
                    instance_id: "w-1".into(),
                    name: "previous-worker-1".into(),
                    version: "0.6.2".into(),
                    binary_version: None,
                    role: "worker".into(),
                    leader: true,
                    heartbeat_age_ms: 12,
                    matched_by: "application_name".into(),
                }),
            }],
        }),
        Event::Stopped(Stopped {
            instance_id: "w-1".into(),
            released: Some(0),
            sent: None,
        }),
        Event::Stopped(Stopped {
            instance_id: "p-1".into(),
            released: None,
            sent: Some(500),
        }),
        Event::Migrated(Migrated {
            from: 2,
            to: 3,
            version: "0.7.0".into(),
            legacy_rewrite: false,
            ahead_compatible: false,
        }),
        Event::Migrated(Migrated {
            from: 3,
            to: 2,
            version: "0.6.1".into(),
            legacy_rewrite: true,
            ahead_compatible: false,
        }),
        Event::CronUpserted(CronUpserted {
            name: "rehearse".into(),
            every_ms: 2000,
        }),
        Event::Cancelled(Cancelled {
            job_id: 4,
            was_live: true,
        }),
        Event::Flipped(Flipped {
            rings: vec![RingFlip {
                ring: "queue".into(),
                columns_slot: 1,
                columns_generation: 7,
                ledger_slot: 1,
                ledger_generation: 7,
                backfilled: 0,
            }],
            forced: Some(false),
            auto: true,
            ..Flipped::default()
        }),
        Event::Flipped(Flipped {
            already: true,
            version: Some("0.7.0".into()),
            ..Flipped::default()
        }),
        Event::FlipCheck(FlipCheck {
            authority: Some(Authority::Columns),
            ready: false,
            fresh_runtimes: Some(2),
            blocking: vec![Blocker {
                instance_id: "w-1".into(),
                name: "previous-worker-1".into(),
                version: "0.6.2".into(),
                binary_version: None,
                heartbeat_age_ms: 40,
            }],
        }),
    ]
}

#[test]
fn every_variant_round_trips_through_its_line() {
    let samples = samples();
    for event in &samples {
        let line = event.to_line();
        assert!(
            line.starts_with(&format!(r#"{{"event":"{}""#, event.name())),
            "{line}"
        );
        assert_eq!(parse(&line), Parsed::Event(event.clone()), "{line}");
    }
    let mut named: Vec<&str> = samples.iter().map(Event::name).collect();
    named.dedup();
    assert_eq!(
        named,
        Event::NAMES,
        "one sample per variant, in NAMES order"
    );
}

/// Lines exactly as the frozen 0.6.1 and 0.6.2 sources write them
/// (src/worker.rs, producer.rs, maintenance.rs, cli.rs of their archives).
#[test]
fn what_the_frozen_releases_write_parses() {
    for line in [
        r#"{"event":"ready","role":"worker","instance_id":"i-1","name":"previous-worker-1","version":"0.6.1","pid":9}"#,
        r#"{"event":"ready","role":"producer","instance_id":"i-2","name":"producer","version":"0.6.2","pid":10}"#,
        r#"{"event":"accepted","job_id":8,"mode":"complete","max_attempts":3,"run_at_ms":null,"version":"0.6.2"}"#,
        r#"{"event":"uncertain","job_ids":[1],"modes":["overrun_deadline"]}"#,
        r#"{"event":"started","job_id":9,"attempt":1,"run_lease":11,"mode":"sleep","instance_id":"i-1","version":"0.6.1"}"#,
        r#"{"event":"finished","job_id":9,"attempt":1,"run_lease":11,"outcome":"snoozed","mode":"snooze_once","version":"0.6.1"}"#,
        r#"{"event":"finished","job_id":9,"attempt":1,"run_lease":11,"outcome":"stale","mode":null,"version":"0.6.2"}"#,
        r#"{"event":"released","job_id":9,"run_lease":12}"#,
        r#"{"event":"leader","instance_id":"i-1","name":"previous-worker-1","version":"0.6.2"}"#,
        r#"{"event":"rescued","job_id":3,"run_lease":4,"reason":"deadline","dead":false}"#,
        r#"{"event":"cron_fired","name":"rehearse","fire_ms":2000,"job_id":5}"#,
        r#"{"event":"refused","reason":"the schema is newer than this binary"}"#,
        r#"{"event":"fatal","error":"boom"}"#,
        r#"{"event":"stopped","instance_id":"i-1","released":0}"#,
        r#"{"event":"stopped","instance_id":"i-2","sent":40}"#,
        r#"{"event":"migrated","from":2,"to":2,"version":"0.6.2"}"#,
        r#"{"event":"migrated","from":3,"to":3,"ahead_compatible":true,"version":"0.6.2"}"#,
        r#"{"event":"migrated","from":3,"to":2,"legacy_rewrite":true,"version":"0.6.1"}"#,
        r#"{"event":"cron_upserted","name":"rehearse","every_ms":2000}"#,
        r#"{"event":"cancelled","job_id":4,"was_live":false}"#,
    ] {
        let parsed = parse(line);
        let Parsed::Event(event) = &parsed else {
            panic!("{line}: {parsed:?}");
        };
        let back: Value = serde_json::from_str(&event.to_line()).unwrap();
        let want: Value = serde_json::from_str(line).unwrap();
        assert_eq!(back, want, "writes back what it read");
    }
}

#[test]
fn an_unknown_event_is_kept_with_its_line() {
    let line = r#"{"event":"ring_folded","ring":"queue","generation":4}"#;
    assert_eq!(
        parse(line),
        Parsed::Unknown {
            name: "ring_folded".into(),
            line: line.into(),
        }
    );
}

#[test]
fn what_breaks_the_contract_is_garbled_and_kept() {
    for line in [
        "",
        "hello",
        "[1,2]",
        r#"{"no_event":1}"#,
        r#"{"event":3}"#,
        // a known kind without a field it must carry
        r#"{"event":"started","job_id":1}"#,
        r#"{"event":"accepted","job_id":"x","mode":"complete","max_attempts":3,"version":"0.6.2"}"#,
        // a mode or an outcome the contract does not have
        r#"{"event":"accepted","job_id":1,"mode":"explode","max_attempts":3,"version":"0.6.2"}"#,
        r#"{"event":"finished","job_id":9,"attempt":1,"run_lease":11,"outcome":"exploded","mode":null,"version":"0.7.0"}"#,
    ] {
        assert_eq!(
            parse(line),
            Parsed::Garbled { line: line.into() },
            "{line:?}"
        );
    }
}
