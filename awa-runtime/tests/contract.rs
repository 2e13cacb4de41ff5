//! The event contract against real binaries: the frozen 0.6.1 and 0.6.2
//! (built from their archives) and this build run far enough to print
//! every event they print in a rehearsal (ready, accepted, started,
//! finished, leader, cron_fired, cron_upserted, cancelled, migrated,
//! stopped, refused; and this build's flip events), and every stdout line
//! must read as an event of `awa_runtime::events`: none unknown, none
//! garbled.

mod common;

use awa_runtime::events::{self, Event, Parsed};
use common::*;
use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Every stdout line a binary printed, as written.
#[derive(Default)]
struct Lines(Vec<String>);

impl Lines {
    fn add(&mut self, stdout: &str) {
        self.0.extend(stdout.lines().map(str::to_owned));
    }

    /// Every line parsed; panics on the first line that is not an event.
    fn events(&self, bin: &str) -> Vec<Event> {
        self.0
            .iter()
            .map(|line| match events::parse(line) {
                Parsed::Event(e) => e,
                other => panic!("{bin}: a stdout line outside the contract: {other:?}"),
            })
            .collect()
    }
}

/// The line is an event named `name` (key order differs between releases).
fn named(line: &str, name: &str) -> bool {
    events::parse(line)
        .event()
        .is_some_and(|e| e.name() == name)
}

/// A worker whose stdout lines are kept raw (the common harness reads them as JSON values).
async fn worker_until(bin: &str, url: &str, finished: usize, lines: &mut Lines) {
    let mut cmd = Command::new(bin);
    cmd.arg("worker")
        .env("AWA_DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in FAST {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn awa worker");
    let out = child.stdout.take().expect("stdout");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let reader = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut out = BufReader::new(out).lines();
            while let Ok(Some(line)) = out.next_line().await {
                seen.lock().unwrap().push(line);
            }
        })
    };
    let start = Instant::now();
    loop {
        let n = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|l| named(l, "finished"))
            .count();
        let cron = seen.lock().unwrap().iter().any(|l| named(l, "cron_fired"));
        if n >= finished && cron {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{bin}: {n} of {finished} finished events (cron fired: {cron}) after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the worker stops after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{bin}: a clean stop");
    reader.await.unwrap();
    lines.0.extend(seen.lock().unwrap().drain(..));
}

/// Runs one binary through a rehearsal's commands on its own database and
/// returns the event names it printed.
async fn exercise(bin: &str, current: bool) -> BTreeSet<&'static str> {
    let db = Db::empty("contract").await;
    let mut lines = Lines::default();
    let (code, out, err) = run(bin, &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 0, "{bin} migrate: {err}");
    lines.add(&out);
    let (code, out, err) = run(
        bin,
        &db.url,
        &["cron", "upsert", "--name", "tick", "--every", "200ms"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{bin} cron upsert: {err}");
    lines.add(&out);
    let (code, out, err) = run(
        bin,
        &db.url,
        &[
            "produce",
            "--count",
            "24",
            "--rate",
            "500",
            "--mix",
            "complete=3,retry_once=1,fail_terminal=1,snooze_once=1,cancel_self=1,sleep=1",
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{bin} produce: {err}");
    lines.add(&out);
    worker_until(bin, &db.url, 24, &mut lines).await;
    let (code, out, err) = run(bin, &db.url, &["job", "cancel", "1"], &[]).await;
    assert_eq!(code, 0, "{bin} job cancel: {err}");
    lines.add(&out);
    if current {
        for args in [
            &["storage", "flip-ring-authority", "--check"][..],
            &["storage", "flip-ring-authority"][..],
        ] {
            let (code, out, err) = run(bin, &db.url, args, &[]).await;
            assert_eq!(code, 0, "{bin} {args:?}: {err}");
            lines.add(&out);
        }
    } else {
        let (code, out, _) = run(bin, &db.url, &["storage", "flip-ring-authority"], &[]).await;
        assert_eq!(
            code,
            awa_runtime::error::EXIT_REFUSED,
            "{bin}: no flip before 0.7"
        );
        lines.add(&out);
    }
    let events = lines.events(bin);
    assert!(!events.is_empty(), "{bin} printed nothing");
    events.iter().map(Event::name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_binaries_print_only_events_of_the_contract() {
    let (bin061, bin062) =
        tokio::task::spawn_blocking(|| (release_bin("0.6.1"), release_bin("0.6.2")))
            .await
            .unwrap();
    let every_release = [
        "migrated",
        "cron_upserted",
        "ready",
        "accepted",
        "started",
        "finished",
        "leader",
        "cron_fired",
        "stopped",
        "cancelled",
    ];
    for (bin, current) in [
        (bin061.as_str(), false),
        (bin062.as_str(), false),
        (awa_bin(), true),
    ] {
        let names = exercise(bin, current).await;
        for name in every_release {
            assert!(names.contains(name), "{bin} printed no {name}: {names:?}");
        }
        let flip: &[&str] = if current {
            &["flip_check", "flipped"]
        } else {
            &["refused"]
        };
        for name in flip {
            assert!(names.contains(name), "{bin} printed no {name}: {names:?}");
        }
    }
}
