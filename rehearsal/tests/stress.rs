//! `--stress`: the real `rehearse` binary runs a small cell beside busy
//! processes (rehearse itself, re-executed with a hidden argument), which
//! exist while it runs and are gone when it ends, whether it ends by
//! itself or is SIGKILLed; the report records the load. A bad value is
//! refused before anything is built.
//!
//! The cells run against a cluster the test starts itself
//! (`--database-url`), so that a SIGKILLed rehearse leaves no throwaway
//! cluster behind: only its children, which must die with it.

pub mod common;

use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use awa_harness::pgtemp::Cluster;
use common::matrix::current_only;
use common::rehearse::{on_scratch, run, wait};
use common::report::read_report;
use common::scratch::Scratch;
use rehearsal::stress::BUSY_ARG;

const CELLS: &str = r#"
[[cell]]
name = "idle"
about = "one workspace worker, held beside the load"
fresh_install = true
steps = [
  { fleet = "current", workers = 1, leader = true },
  { hold = "2s" },
  { drain = "30s" },
]
"#;

fn scratch(tag: &str) -> Scratch {
    let workload = "rate_per_s = 10\nmix = { complete = 1 }";
    Scratch::with_matrix("stress", tag, &current_only(workload, CELLS))
}

/// The busy processes serving the rehearse with pid `rehearse` (found by
/// their argv, `rehearse __stress-busy PID`), with their parent pids.
fn busy_of(rehearse: u32) -> BTreeSet<(u32, u32)> {
    let want = format!("\0{BUSY_ARG}\0{rehearse}\0");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(&want) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // After the command name: state, then the parent's pid.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        found.insert((pid, ppid));
    }
    found
}

/// User plus system CPU ticks of process `pid` so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
    fields
        .get(11..13)
        .map_or(0, |f| f.iter().map(|t| t.parse::<u64>().unwrap_or(0)).sum())
}

/// Waits until `count` busy processes serve `child`, and returns their
/// pids; panics if rehearse ends first or they never come.
fn wait_for_busy(child: &mut Child, count: usize) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let busy = busy_of(child.id());
        if busy.len() == count {
            for (pid, ppid) in &busy {
                assert_eq!(*ppid, child.id(), "busy process {pid} is rehearse's child");
            }
            return busy.into_iter().map(|(pid, _)| pid).collect();
        }
        assert!(
            busy.len() < count,
            "more busy processes than asked: {busy:?}"
        );
        if let Some(status) = child.try_wait().unwrap() {
            let (_, _, err) = wait(child, Duration::from_secs(1));
            panic!("rehearse ended ({status}) before its {count} busy processes showed:\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no {count} busy processes within 10 minutes: {busy:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The state letter of process `pid` while it is still a rehearse (a
/// recycled pid is another program): `None` once it is gone.
fn rehearse_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (name, rest) = stat.rsplit_once(')')?;
    name.ends_with("(rehearse")
        .then(|| rest.trim_start().chars().next())
        .flatten()
}

#[test]
fn a_bad_stress_is_refused_before_anything_is_built() {
    let scratch = scratch("refused");
    for (args, env, value) in [
        (&["--stress", "cpu=0"][..], None, "cpu=0"),
        (&["--stress", "cpu=2y"], None, "cpu=2y"),
        (&[], Some("lots"), "lots"),
    ] {
        let mut cmd = on_scratch(&scratch, &["--cell", "idle"]);
        cmd.args(args);
        if let Some(value) = env {
            cmd.env(rehearsal::cli::STRESS_ENV, value);
        }
        let (status, _, err) = run(cmd, Duration::from_secs(60));
        assert_eq!(status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(
            err.contains("--stress")
                && err.contains(&format!("'{value}'"))
                && err.contains("cpu=N (N busy processes, 1 to 256) or cpu=Nx"),
            "{err}"
        );
        // clap's refusal alone: nothing was looked for, built or started.
        assert!(err.starts_with("error: invalid value"), "{err}");
        assert!(scratch.report_dirs().is_empty(), "no report folder");
    }
}

#[test]
fn busy_processes_run_beside_the_cells_and_none_outlives_rehearse() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cluster = rt.block_on(Cluster::start()).unwrap();
    let dsn = cluster.url("postgres");

    // A run that ends by itself: two busy processes while it runs, none after.
    let ran = scratch("run");
    let mut child = on_scratch(
        &ran,
        &["--cell", "idle", "--seed", "5", "--stress", "cpu=2"],
    )
    .env(rehearsal::cli::DATABASE_URL_ENV, &dsn)
    .spawn()
    .unwrap();
    let pid = child.id();
    let busy = wait_for_busy(&mut child, 2);
    let before: Vec<u64> = busy.iter().map(|&p| cpu_ticks(p)).collect();
    std::thread::sleep(Duration::from_millis(500));
    for (&p, ticks) in busy.iter().zip(before) {
        assert!(cpu_ticks(p) > ticks, "busy process {p} uses no CPU");
    }
    let (status, out, err) = wait(&mut child, Duration::from_secs(600));
    assert_eq!(status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(
        busy_of(pid),
        BTreeSet::new(),
        "busy processes outlived rehearse"
    );
    for p in &busy {
        // Killed and reaped by rehearse itself: not even a zombie is left.
        assert_eq!(rehearse_state(*p), None, "busy process {p} is still there");
    }
    assert!(err.contains("stress: 2 busy processes (on "), "{err}");
    let dir = ran.report_dir();
    let report = read_report(&dir);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        report["format_version"],
        rehearsal::report::model::FORMAT_VERSION
    );
    assert_eq!(
        report["run"]["stress"],
        serde_json::json!({"spec": "cpu=2", "processes": 2, "cores": cores})
    );
    let replay = report["run"]["replay"].as_str().unwrap();
    assert!(
        replay.ends_with("--cell idle --seed 5 --stress cpu=2"),
        "{replay}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains(&format!(
            "| stress | 2 busy processes (on {cores} core{}) |",
            if cores == 1 { "" } else { "s" }
        )),
        "{md}"
    );

    // A SIGKILLed rehearse cannot stop them: the kernel does.
    let killed = scratch("killed");
    let mut child = on_scratch(&killed, &["--cell", "idle", "--stress", "cpu=1"])
        .env(rehearsal::cli::DATABASE_URL_ENV, &dsn)
        .spawn()
        .unwrap();
    let pid = child.id();
    let busy = wait_for_busy(&mut child, 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    // Reaped by whoever inherits it; a zombie is dead already.
    let dead = |p: &u32| rehearse_state(*p).is_none_or(|state| state == 'Z');
    while !busy_of(pid).is_empty() || !busy.iter().all(dead) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "busy processes outlived a SIGKILLed rehearse: {:?}",
            busy_of(pid)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(cluster);
}
