//! The docker backend end to end: the real `rehearse` binary, the real
//! Docker engine (images assembled without a base image), a real
//! registry (Debian's `docker-registry`, started by `.ci/run`, its
//! address in `REHEARSE_TEST_REGISTRY`), a real throwaway PostgreSQL.
//!
//! Every test that needs the engine says loudly when it is skipped
//! because none answers; the registry tests likewise when no registry
//! address is given. The tests take turns (one lock): they share the
//! engine, the image tags and two cores.

pub mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, ListImagesOptions, RemoveImageOptions,
};
use common::rehearse::{run, wait};
use common::report::read_report;
use common::scratch::Scratch;
use rehearsal::fleet::docker::label;
use rehearsal::fleet::process::{NOTE_PREFIX, STDERR_PREFIX, parse_log_line};
use rehearsal::fleet::{
    CpuSource, DockerFleet, Event, Fleet, FleetMsg, Labels, Parsed, Report, Runnable, Spec,
};
use rehearsal::image::Engine;
use rehearsal::image::build::{self, BuildRequest};
use serde_json::Value;

/// The environment variable `.ci/run` exports the test registry's address in.
const REGISTRY_ENV: &str = "REHEARSE_TEST_REGISTRY";

static TURNS: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURNS.lock().unwrap_or_else(|p| p.into_inner())
}

fn skipped(what: &str) {
    eprintln!("##################################################################");
    eprintln!("## SKIPPED: {what}");
    eprintln!("##################################################################");
}

/// The engine, or `None` (and a loud note) when none answers.
fn engine(test: &str) -> Option<(tokio::runtime::Runtime, Engine)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    match runtime.block_on(Engine::connect()) {
        Ok(engine) => Some((runtime, engine)),
        Err(e) => {
            skipped(&format!("{test}: no Docker engine answers ({e})"));
            None
        }
    }
}

fn registry(test: &str) -> Option<String> {
    match std::env::var(REGISTRY_ENV) {
        Ok(r) if !r.is_empty() => Some(r),
        _ => {
            skipped(&format!(
                "{test}: no test registry ({REGISTRY_ENV} unset; .ci/run starts one)"
            ));
            None
        }
    }
}

const WORKLOAD: &str = r#"
[artifacts.current]
build = "workspace"

[workload]
rate_per_s = 100
backlog = 300
# sleep-heavy, so a kill catches jobs in flight
mix = { complete = 20, retry_once = 8, fail_terminal = 4, exhaust_retries = 4, snooze_once = 6, cancel_self = 4, sleep = 50, scheduled = 4 }
cron = { every = "1s" }

[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "30s"

[[cell]]
name = "small-kill"
about = "0.6.2 workers and a workspace worker; a 0.6.2 worker is killed after it started jobs"
steps = [
  { fleet = "previous", workers = 2, producers = 1, leader = true },
  { fleet = "current", workers = 1 },
  { load = "on" },
  { hold = "2s" },
  { kill = "worker", of = "previous", after_started = 10 },
  { hold = "2s" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "fails"
about = "a clean N-1 fleet that is expected to breach the fence: a failing cell"
steps = [
  { fleet = "previous", workers = 1 },
  { hold = "1s" },
  { drain = "10s" },
]
expect = { detect = "fence_breached" }

[[cell]]
name = "long-hold"
about = "a fleet under load for long enough to be interrupted"
steps = [
  { fleet = "previous", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "120s" },
  { drain = "30s" },
]
"#;

/// A scratch tree with a matrix whose `previous` is `previous`.
fn with_previous(tag: &str, previous: &str) -> Scratch {
    let matrix = format!("[artifacts.previous]\n{previous}\n{WORKLOAD}");
    Scratch::with_matrix("docker", tag, &matrix)
}

/// `rehearse` on the scratch tree's matrix, the backend left to the flags.
fn rehearse(scratch: &Scratch, args: &[&str]) -> Command {
    let mut cmd = common::rehearse::rehearse();
    cmd.arg("--matrix-file")
        .arg(scratch.matrix())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("REHEARSE_REPORTS_DIR", scratch.reports())
        .env_remove("REHEARSE_BACKEND");
    cmd
}

/// Ids of the containers carrying `label=value` (any state).
fn containers_with(rt: &tokio::runtime::Runtime, engine: &Engine, filter: &str) -> Vec<String> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![filter.to_owned()],
        )])),
        ..Default::default()
    };
    rt.block_on(engine.docker.list_containers(Some(options)))
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

fn run_id(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn backend_docker_without_an_engine_stops_before_anything_starts() {
    let _turn = turn();
    let scratch = with_previous("no-engine", "release = \"0.6.2\"");
    let mut cmd = rehearse(
        &scratch,
        &["--cell", "small-kill", "--seed", "1", "--backend", "docker"],
    );
    cmd.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let (status, _, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(
        err.contains("no Docker engine answers at unix:///nonexistent/docker.sock")
            && err.contains("--backend process"),
        "{err}"
    );
    assert!(
        !err.contains("artifact current"),
        "something was built: {err}"
    );
    assert!(scratch.report_dirs().is_empty());

    // auto falls back to process and says why; the image artifact is then refused.
    let scratch = with_previous("auto", "image = \"127.0.0.1:5000/awa-runtime:0.6.2\"");
    let mut cmd = rehearse(
        &scratch,
        &["--cell", "small-kill", "--seed", "1", "--backend", "auto"],
    );
    cmd.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let (status, _, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("backend auto: process, because no Docker engine answers at unix:///nonexistent/docker.sock"),
        "{err}"
    );
    assert!(err.contains("artifact \"previous\" is an image"), "{err}");
}

#[test]
fn n1_resolved_by_line_is_pulled_by_digest_and_bad_registries_are_refused() {
    let _turn = turn();
    let test = "n1_resolved_by_line_is_pulled_by_digest";
    let Some((rt, engine)) = engine(test) else {
        return;
    };
    let Some(registry) = registry(test) else {
        return;
    };
    let scratch = with_previous("line", "release = \"0.6.2\"");

    // Publish the releases, as a release engineer would.
    let (status, out, err) = run(
        rehearse(&scratch, &["artifacts", "publish", "--registry", &registry]),
        Duration::from_secs(1800),
    );
    assert!(status.success(), "{err}");
    let published = format!("{registry}/awa-runtime:0.6.2 sha256:");
    let digest = out
        .lines()
        .find_map(|l| l.strip_prefix(&published))
        .map(|hex| format!("sha256:{hex}"))
        .unwrap_or_else(|| panic!("no digest for 0.6.2 in:\n{out}"));
    let (status, out, err) = run(
        rehearse(&scratch, &["artifacts", "list", "--registry", &registry]),
        Duration::from_secs(120),
    );
    assert!(status.success(), "{err}");
    assert!(
        out.contains(&format!(
            "0.6.2  {digest}  release 0.6.2 (artifacts/awa-runtime-0.6.2.crate)"
        )),
        "{out}"
    );
    // Drop the registry's name from the local image, so the run must pull.
    let _ = rt.block_on(engine.docker.remove_image(
        &format!("{registry}/awa-runtime:0.6.2"),
        Some(RemoveImageOptions {
            noprune: true,
            ..Default::default()
        }),
        None,
    ));

    // The newest 0.6 release at or above 0.6.2, pulled by digest; a SIGKILLed container's jobs rescued.
    let line = format!("image = \"{registry}/awa-runtime\"\nline = \"0.6\"\nfloor = \"0.6.2\"");
    let scratch = with_previous("line-run", &line);
    let (status, _, err) = run(
        rehearse(
            &scratch,
            &["--cell", "small-kill", "--seed", "7", "--backend", "docker"],
        ),
        Duration::from_secs(1800),
    );
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("line 0.6 -> tag 0.6.2") && err.contains("pull"),
        "{err}"
    );
    let dir = scratch.report_dirs().pop().unwrap();
    let report = read_report(&dir);
    assert_eq!(report["run"]["backend"], "docker");
    assert!(
        report["run"]["engine"]
            .as_str()
            .unwrap()
            .starts_with("Docker engine ")
    );
    let previous = report["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "previous")
        .unwrap();
    assert_eq!(previous["version"], "0.6.2");
    assert_eq!(previous["image"]["obtained"], "pulled", "{previous}");
    assert_eq!(previous["image"]["digest"], digest.as_str());
    assert_eq!(
        previous["image"]["reference"],
        format!("{registry}/awa-runtime@{digest}")
    );
    let cell = &report["cells"][0];
    assert_eq!(cell["verdict"], "pass", "{cell}");
    let killed: Vec<&Value> = cell["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["killed"] == true)
        .collect();
    assert_eq!(killed.len(), 1, "{cell}");
    assert_eq!(
        killed[0]["signal"], 9,
        "a SIGKILLed container is reported as SIGKILL: {}",
        killed[0]
    );
    assert!(
        killed[0]["container"]
            .as_str()
            .is_some_and(|c| c.len() == 64)
    );
    let kill = &cell["kills"][0];
    assert!(
        kill["in_flight"].as_array().is_some_and(|a| !a.is_empty()),
        "the kill caught jobs in flight: {kill}"
    );
    assert!(
        cell["findings"].as_array().unwrap().is_empty(),
        "every in-flight job of the killed container was rescued: {}",
        cell["findings"]
    );
    // Proven per job: each attempt in flight at the SIGKILL ended with
    // exactly one more attempt (no rescue_unproven finding above), which
    // the report states with the count of those jobs.
    let in_flight = kill["in_flight"].as_array().unwrap();
    let victim = kill["process"].as_str().unwrap();
    assert!(
        in_flight
            .iter()
            .all(|j| j["job_id"].as_i64().is_some() && j["run_lease"].as_i64().is_some()),
        "{kill}"
    );
    let proof = format!(
        "crash rescue proven on {} in-flight job{} of killed {victim}",
        in_flight.len(),
        if in_flight.len() == 1 { "" } else { "s" }
    );
    assert!(
        cell["proved"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.ends_with(&proof))),
        "{proof}: {}",
        cell["proved"]
    );
    assert!(containers_with(&rt, &engine, &format!("{}={}", label::RUN, run_id(&dir))).is_empty());

    // Bad input: no release at or above the floor.
    let floor = format!("image = \"{registry}/awa-runtime\"\nline = \"0.6\"\nfloor = \"0.6.9\"");
    let scratch = with_previous("floor", &floor);
    let (status, _, err) = run(
        rehearse(
            &scratch,
            &["--cell", "small-kill", "--seed", "7", "--backend", "docker"],
        ),
        Duration::from_secs(600),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("artifact \"previous\": no release on line 0.6 at or above 0.6.9")
            && err.contains("rehearse artifacts publish --registry"),
        "{err}"
    );
    assert!(
        scratch.report_dirs().is_empty(),
        "nothing starts on bad input"
    );

    // Bad input: a pinned digest the registry does not have.
    let unknown = format!(
        "image = \"{registry}/awa-runtime@sha256:{}\"",
        "0".repeat(64)
    );
    let scratch = with_previous("pinned", &unknown);
    let (status, _, err) = run(
        rehearse(
            &scratch,
            &["--cell", "small-kill", "--seed", "7", "--backend", "docker"],
        ),
        Duration::from_secs(600),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("artifact \"previous\"") && err.contains("not found"),
        "{err}"
    );

    // Infrastructure: a registry that is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("image = \"127.0.0.1:{port}/awa-runtime\"\nline = \"0.6\"");
    let scratch = with_previous("down", &down);
    let (status, _, err) = run(
        rehearse(
            &scratch,
            &["--cell", "small-kill", "--seed", "7", "--backend", "docker"],
        ),
        Duration::from_secs(600),
    );
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "artifact \"previous\": registry 127.0.0.1:{port}: no answer"
        )),
        "{err}"
    );
}

#[test]
fn no_container_outlives_a_failing_or_interrupted_run_and_leftovers_are_removed_at_startup() {
    let _turn = turn();
    let Some((rt, engine)) = engine("no_container_outlives_a_run") else {
        return;
    };
    let scratch = with_previous("lifecycle", "release = \"0.6.2\"");

    // A failing run, on the default backend: auto, which takes the engine.
    let (status, _, err) = run(
        rehearse(&scratch, &["--cell", "fails", "--seed", "2"]),
        Duration::from_secs(1800),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("backend auto: docker, because an engine answers: Docker engine "),
        "{err}"
    );
    let dir = scratch.report_dirs().pop().unwrap();
    let report = read_report(&dir);
    assert_eq!(report["run"]["backend"], "docker");
    assert!(
        report["run"]["backend_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("backend auto: docker")),
        "{}",
        report["run"]
    );
    assert!(containers_with(&rt, &engine, &format!("{}={}", label::RUN, run_id(&dir))).is_empty());
    assert_eq!(run_cgroups(&run_id(&dir)), Vec::<PathBuf>::new());

    // A leftover of a "crashed earlier run": its rehearse pid does not exist.
    let planted_run = format!("planted-{}", std::process::id());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let labels = HashMap::from([
        (label::RUN.to_owned(), planted_run.clone()),
        (label::PID.to_owned(), i32::MAX.to_string()),
        (label::HOST.to_owned(), host),
        (label::NAME.to_owned(), "previous-worker-1".to_owned()),
    ]);
    rt.block_on(engine.docker.create_container(
        Some(CreateContainerOptions {
            name: Some(planted_run.clone()),
            ..Default::default()
        }),
        ContainerCreateBody {
            image: Some("awa-runtime:0.6.2".into()),
            cmd: Some(vec!["worker".into()]),
            labels: Some(labels),
            ..Default::default()
        },
    ))
    .unwrap();

    // Ctrl-C in the middle of a cell.
    let mut child = rehearse(
        &scratch,
        &["--cell", "long-hold", "--seed", "3", "--backend", "docker"],
    )
    .spawn()
    .unwrap();
    let start = Instant::now();
    let dir = loop {
        let dir = scratch
            .report_dirs()
            .into_iter()
            .find(|d| !d.ends_with(run_id(&dir)));
        let working = dir.as_ref().is_some_and(|d| {
            std::fs::read_to_string(d.join("logs/long-hold/previous-worker-1.log"))
                .is_ok_and(|log| log.contains("\"event\":\"started\""))
        });
        if working {
            break dir.unwrap();
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("rehearse ended early ({status}):\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the fleet never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let run_label = format!("{}={}", label::RUN, run_id(&dir));
    assert!(
        !containers_with(&rt, &engine, &run_label).is_empty(),
        "the cell runs in containers"
    );
    // The pid is our unreaped child.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let (status, _, err) = wait(&mut child, Duration::from_secs(120));
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(
        err.contains("docker: removed 1 leftover container of earlier runs")
            && err.contains(&planted_run),
        "{err}"
    );
    assert!(containers_with(&rt, &engine, &format!("{}={planted_run}", label::RUN)).is_empty());
    assert!(
        containers_with(&rt, &engine, &run_label).is_empty(),
        "containers outlived Ctrl-C"
    );
    assert_eq!(run_cgroups(&run_id(&dir)), Vec::<PathBuf>::new());
}

#[test]
fn the_shipped_smoke_matrix_passes_on_docker_with_n1_pulled_from_the_registry() {
    let _turn = turn();
    let test = "the_shipped_smoke_matrix_passes_on_docker";
    let Some((rt, engine)) = engine(test) else {
        return;
    };
    let Some(registry) = registry(test) else {
        return;
    };
    // The shipped matrix as it is: N-1 is switched to the registry by the
    // flag the CI workflows pass, not by editing the file.
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../matrix.toml"))
            .unwrap();
    let scratch = Scratch::with_matrix("docker", "smoke", &shipped);
    let (status, _, err) = run(
        rehearse(&scratch, &["artifacts", "publish", "--registry", &registry]),
        Duration::from_secs(1800),
    );
    assert!(status.success(), "{err}");
    let pull = format!("previous={registry}/awa-runtime");
    let (status, out, err) = run(
        rehearse(
            &scratch,
            &[
                "--matrix",
                "smoke",
                "--seed",
                "11",
                "--backend",
                "docker",
                "--from-registry",
                &pull,
            ],
        ),
        Duration::from_secs(1800),
    );
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    assert!(
        err.contains(&format!("--from-registry {pull}")),
        "the replay line keeps the flag: {err}"
    );
    let dir = scratch.report_dirs().pop().unwrap();
    let report = read_report(&dir);
    let previous = report["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "previous")
        .unwrap();
    assert!(
        previous["image"]["reference"]
            .as_str()
            .unwrap()
            .contains("@sha256:"),
        "{previous}"
    );
    for cell in report["cells"].as_array().unwrap() {
        assert_eq!(cell["verdict"], "pass", "{}", cell["name"]);
    }
    assert!(containers_with(&rt, &engine, &format!("{}={}", label::RUN, run_id(&dir))).is_empty());
}

/// A clean cell beside the shipped `defect-preflight-no-lock`: an N-1
/// worker started inside the expand migration, which a correct preflight's
/// lock on `runtime_instances` holds back until the commit.
const START_INSIDE: &str = r#"
[[cell]]
name = "start-inside-migration"
about = "a 0.6.2 worker started inside the expand migration waits on the preflight's lock and registers after the commit"
steps = [
  { fleet = "previous", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "2s" },
  { fleet = "previous", workers = 1, when = "during_migrate" },
  { migrate = "current" },
  { hold = "2s" },
  { load = "off" },
  { drain = "60s" },
]
"#;

/// The migrate step's detail of `cell` in `report`.
fn migrate_detail(report: &Value, cell: &str) -> String {
    let cell = report["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == cell)
        .unwrap_or_else(|| panic!("{cell} did not run"));
    cell["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "migrate")
        .and_then(|t| t["detail"].as_str())
        .unwrap_or_else(|| panic!("{cell}: no migrate step"))
        .to_owned()
}

#[test]
fn runtimes_armed_for_a_migration_start_inside_it_although_a_container_starts_slowly() {
    let _turn = turn();
    let Some((rt, engine)) = engine("runtimes_armed_for_a_migration_start_inside_it") else {
        return;
    };
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../matrix.toml"))
            .unwrap();
    let scratch = Scratch::with_matrix("docker", "inside", &format!("{shipped}\n{START_INSIDE}"));
    let (status, out, err) = run(
        rehearse(
            &scratch,
            &[
                "--cell",
                "defect-preflight-no-lock",
                "--cell",
                "start-inside-migration",
                "--seed",
                "5",
                "--backend",
                "docker",
            ],
        ),
        Duration::from_secs(1800),
    );
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    let dir = scratch.report_dirs().pop().unwrap();
    let report = read_report(&dir);
    for cell in report["cells"].as_array().unwrap() {
        assert_eq!(cell["verdict"], "pass", "{cell}");
    }
    // The container of the defect's 0.6.1 worker takes about a second to
    // come up: the migration waited for it, so it registered in flight.
    let defect = migrate_detail(&report, "defect-preflight-no-lock");
    assert!(
        defect.contains("the migration was held open until the runtimes started inside it were up")
            && defect.contains("registered while the migration was in flight: pre_guard-worker-1"),
        "{defect}"
    );
    // With the preflight's lock the new worker waits on it, and the
    // migration goes on at once rather than after its longest hold.
    let clean = migrate_detail(&report, "start-inside-migration");
    assert!(
        clean.contains(
            "the migration was held open until a runtime started inside it waited on the migration's lock"
        ) && !clean.contains("registered while the migration was in flight"),
        "{clean}"
    );
    assert!(containers_with(&rt, &engine, &format!("{}={}", label::RUN, run_id(&dir))).is_empty());
}

/// The run parent cgroups of `run_id` still on this machine (any hierarchy).
fn run_cgroups(run_id: &str) -> Vec<PathBuf> {
    let safe: String = run_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    hierarchies
        .flatten()
        .filter_map(|h| std::fs::read_dir(h.path().join("rehearse")).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(&format!("-{safe}")))
        })
        .collect()
}

/// A stand-in registry on a free loopback port: each request is answered
/// with `answer(path)`. For the ways a registry misbehaves that a real one
/// cannot be made to (refusing everyone, serving a manifest whose bytes do
/// not match its announced digest). It lives as long as the test process.
fn stand_in_registry(answer: fn(&str) -> String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split(' ').nth(1).unwrap_or("/").to_owned();
            let _ = stream.write_all(answer(&path).as_bytes());
        }
    });
    addr
}

fn http(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
        body.len()
    )
}

/// Runs the `fails` cell (N-1 only: nothing else is built) with `previous`
/// and asserts the run stopped before anything started, with `exit`.
fn refused_before_anything_starts(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    tag: &str,
    previous: &str,
    exit: i32,
) -> String {
    let scratch = with_previous(tag, previous);
    let mut child = rehearse(
        &scratch,
        &["--cell", "fails", "--seed", "4", "--backend", "docker"],
    )
    .spawn()
    .unwrap();
    let pid = child.id();
    let (status, _, err) = wait(&mut child, Duration::from_secs(600));
    assert_eq!(status.code(), Some(exit), "{err}");
    assert!(
        scratch.report_dirs().is_empty(),
        "a report folder was left: {err}"
    );
    assert!(
        !err.contains("[fails]"),
        "the cell started on bad input: {err}"
    );
    // Nothing of any rehearse run is left running (probes included).
    let running: Vec<String> = rt
        .block_on(engine.docker.list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("{}={pid}", label::PID)],
            )])),
            ..Default::default()
        })))
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    assert!(running.is_empty(), "{running:?}");
    err
}

/// The lines that are messages about artifact `previous` (progress lines
/// write `artifact previous:`, messages `artifact "previous":`).
fn error_lines(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| l.contains("artifact \"previous\""))
        .collect()
}

#[test]
fn registries_that_refuse_or_serve_a_digest_that_does_not_match_are_refused_by_name() {
    let _turn = turn();
    let Some((rt, engine)) = engine("registries_that_refuse") else {
        return;
    };
    // A registry that refuses everyone: bad input, saying how to log in.
    let refusing = stand_in_registry(|_| {
        http(
            "401 Unauthorized",
            "WWW-Authenticate: Basic realm=\"registry\"\r\n",
            "",
        )
    });
    let err = refused_before_anything_starts(
        &rt,
        &engine,
        "refuses",
        &format!("image = \"{refusing}/awa-runtime\"\nline = \"0.6\""),
        2,
    );
    assert_eq!(
        error_lines(&err).len(),
        1,
        "one message, naming the artifact: {err}"
    );
    assert!(
        err.contains(&format!(
            "artifact \"previous\": registry {refusing}: refused access (401 Unauthorized); set REHEARSE_REGISTRY_USER and REHEARSE_REGISTRY_PASSWORD"
        )),
        "{err}"
    );

    // A registry whose manifest does not hash to the digest it announces.
    let tampered = stand_in_registry(|path| {
        if path.contains("/tags/list") {
            http(
                "200 OK",
                "Content-Type: application/json\r\n",
                r#"{"name":"awa-runtime","tags":["0.6.1","0.6.2"]}"#,
            )
        } else {
            http(
                "200 OK",
                &format!(
                    "Content-Type: application/vnd.docker.distribution.manifest.v2+json\r\nDocker-Content-Digest: sha256:{}\r\n",
                    "a".repeat(64)
                ),
                r#"{"schemaVersion":2}"#,
            )
        }
    });
    let err = refused_before_anything_starts(
        &rt,
        &engine,
        "tampered",
        &format!("image = \"{tampered}/awa-runtime\"\nline = \"0.6\""),
        2,
    );
    assert!(
        err.contains(&format!(
            "artifact \"previous\": digest mismatch for {tampered}/awa-runtime:0.6.2: expected sha256:{}",
            "a".repeat(64)
        )) && err.contains("check the reference or republish"),
        "{err}"
    );
}

/// An image of a host binary, as rehearse builds the runtime's.
fn test_image(binary: &str, repository: &str, tag: &str) -> BuildRequest {
    BuildRequest {
        artifact: "test".into(),
        binary: binary.into(),
        repository: repository.into(),
        tag: tag.into(),
        version: "0.0.0".into(),
        source: format!("test binary {binary}"),
        source_digest: format!("sha256:{}", "b".repeat(64)),
        binary_digest: format!("sha256:{}", "b".repeat(64)),
        revision: None,
        mutable_tag: true,
    }
}

/// [`test_image`] built, tagged `rehearse-test:<tag>-<pid>`.
fn image_of(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    binary: &str,
    tag: &str,
) -> BuildRequest {
    let request = test_image(
        binary,
        "rehearse-test",
        &format!("{tag}-{}", std::process::id()),
    );
    rt.block_on(build::ensure(engine, &request)).unwrap();
    request
}

/// A spec that runs `binary` with `args` in a container of an image of
/// it ([`image_of`], tagged by `tag`), its log in a fresh folder of its
/// own: the spec, the image (for [`remove_image`]) and the folder.
fn host_binary_spec(
    rt: &tokio::runtime::Runtime,
    engine: &Engine,
    binary: &str,
    tag: &str,
    args: Vec<String>,
) -> (Spec, BuildRequest, PathBuf) {
    let image = image_of(rt, engine, binary, tag);
    let found = rt
        .block_on(rehearsal::image::inspect(engine, &image.reference()))
        .unwrap()
        .unwrap();
    let logs = std::env::temp_dir().join(format!("rehearse-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&logs);
    let spec = Spec {
        id: 0,
        name: tag.into(),
        runnable: Runnable::Image {
            reference: image.reference(),
            id: found.id,
        },
        labels: Labels {
            cell: tag.into(),
            role: tag.into(),
            ..Default::default()
        },
        args,
        env: Vec::new(),
        log: logs.join(format!("{tag}.log")),
        watch: Default::default(),
    };
    (spec, image, logs)
}

/// The exit a container's reports end with, the lines before it passed over.
async fn exit_of(
    reports: &mut tokio::sync::mpsc::UnboundedReceiver<FleetMsg>,
) -> rehearsal::fleet::ExitInfo {
    loop {
        match reports.recv().await {
            Some(FleetMsg {
                report: Report::Exited(info),
                ..
            }) => break info,
            Some(_) => {}
            None => panic!("the fleet dropped the container"),
        }
    }
}

fn remove_image(rt: &tokio::runtime::Runtime, engine: &Engine, reference: &str) {
    let _ = rt.block_on(engine.docker.remove_image(
        reference,
        Some(RemoveImageOptions {
            force: true,
            ..Default::default()
        }),
        None,
    ));
}

#[test]
fn an_image_that_will_not_start_and_a_release_tag_holding_another_source_are_refused() {
    let _turn = turn();
    let Some((rt, engine)) = engine("an_image_that_will_not_start") else {
        return;
    };
    // `false --version` exits 1: an image whose awa will not start.
    let broken = image_of(&rt, &engine, "/bin/false", "broken");
    let err = refused_before_anything_starts(
        &rt,
        &engine,
        "wont-start",
        &format!("image = \"{}\"", broken.reference()),
        2,
    );
    remove_image(&rt, &engine, &broken.reference());
    assert_eq!(error_lines(&err).len(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "artifact \"previous\": the image {} does not run `awa --version`: exit code 1",
            broken.reference()
        )) && err.contains("rebuild or republish it"),
        "{err}"
    );

    // A release whose local tag already holds another source. The tree is
    // a copy of this checkout's manifest with the release's image renamed
    // (so no other run on this engine meets the planted tag), its archives
    // and its build cache.
    let tree = ConflictTree::new();
    let planted = BuildRequest {
        mutable_tag: false,
        ..test_image("/bin/true", &tree.repository, "0.6.2")
    };
    remove_image(&rt, &engine, &planted.reference());
    rt.block_on(build::ensure(&engine, &planted)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rehearse"));
    cmd.args(["--cell", "fails", "--seed", "4", "--backend", "docker"])
        .current_dir(&tree.root)
        .env("REHEARSE_REPORTS_DIR", tree.root.join("reports"))
        .env_remove("REHEARSE_MATRIX_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, _, err) = run(cmd, Duration::from_secs(1800));
    let after = rt
        .block_on(rehearsal::image::inspect(&engine, &planted.reference()))
        .unwrap()
        .map(|f| f.id);
    remove_image(&rt, &engine, &planted.reference());
    assert_eq!(status.code(), Some(2), "{err}");
    assert_eq!(error_lines(&err).len(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "artifact \"previous\": the local image {}:0.6.2 holds another source (source digest sha256:{}, expected sha256:",
            tree.repository,
            "b".repeat(64)
        )) && err.contains(&format!("docker image rm {}:0.6.2", tree.repository)),
        "{err}"
    );
    assert!(after.is_some(), "the planted tag was overwritten: {err}");
    assert!(
        std::fs::read_dir(tree.root.join("reports")).map_or(true, |mut d| d.next().is_none()),
        "nothing starts on bad input"
    );
}

/// A checkout in miniature for the tag-conflict test: the manifest with
/// the images renamed, the release archives, the real build cache.
struct ConflictTree {
    root: PathBuf,
    repository: String,
}

impl ConflictTree {
    fn new() -> ConflictTree {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let root = std::env::temp_dir().join(format!("rehearse-conflict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("artifacts")).unwrap();
        std::fs::create_dir_all(root.join("awa-runtime")).unwrap();
        std::fs::copy(
            checkout.join("awa-runtime/Cargo.toml"),
            root.join("awa-runtime/Cargo.toml"),
        )
        .unwrap();
        let repository = format!("rehearse-test-conflict-{}", std::process::id());
        let manifest = std::fs::read_to_string(checkout.join("artifacts/manifest.toml"))
            .unwrap()
            .replace(
                "image = \"awa-runtime:",
                &format!("image = \"{repository}:"),
            );
        std::fs::write(root.join("artifacts/manifest.toml"), manifest).unwrap();
        for archive in std::fs::read_dir(checkout.join("artifacts"))
            .unwrap()
            .flatten()
        {
            if archive.path().extension().is_some_and(|e| e == "crate") {
                std::os::unix::fs::symlink(
                    archive.path(),
                    root.join("artifacts").join(archive.file_name()),
                )
                .unwrap();
            }
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| checkout.join("target"));
        std::os::unix::fs::symlink(target, root.join("target")).unwrap();
        std::fs::write(
            root.join("matrix.toml"),
            format!("[artifacts.previous]\nrelease = \"0.6.2\"\n{WORKLOAD}"),
        )
        .unwrap();
        ConflictTree { root, repository }
    }
}

impl Drop for ConflictTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// User plus system CPU of this process's reaped children, in ms.
fn children_cpu_ms() -> u64 {
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1000 + t.tv_usec() as u64 / 1000;
    ms(usage.user_time()) + ms(usage.system_time())
}

#[test]
fn a_short_busy_containers_whole_cpu_is_counted() {
    let _turn = turn();
    let Some((rt, engine)) = engine("a_short_busy_containers_whole_cpu_is_counted") else {
        return;
    };
    if std::env::var("DOCKER_HOST").is_ok_and(|h| h.starts_with("tcp://")) {
        skipped(
            "a_short_busy_containers_whole_cpu_is_counted: the engine is remote, its cgroups are not visible here",
        );
        return;
    }
    // The same work on the host first, measured by the kernel's child accounting.
    let dd = ["if=/dev/zero", "of=/dev/null", "bs=4k", "count=300000"];
    let before = children_cpu_ms();
    let host = Command::new("/usr/bin/dd")
        .args(dd)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(host.success());
    let host_ms = children_cpu_ms() - before;

    let (spec, image, logs) = host_binary_spec(
        &rt,
        &engine,
        "/usr/bin/dd",
        "dd",
        dd.map(String::from).to_vec(),
    );
    let run_id = format!("cpu-test-{}", std::process::id());
    let fleet = DockerFleet::new(engine.clone(), &run_id, false);
    rt.block_on(fleet.prepare()).unwrap();
    let started = Instant::now();
    let exit = rt.block_on(async {
        let (sink, mut reports) = tokio::sync::mpsc::unbounded_channel::<FleetMsg>();
        fleet.spawn(spec, sink).await.unwrap();
        exit_of(&mut reports).await
    });
    let lived = started.elapsed();
    rt.block_on(fleet.shutdown()).unwrap();
    remove_image(&rt, &engine, &image.reference());
    let _ = std::fs::remove_dir_all(&logs);
    assert_eq!(exit.code, Some(0), "{exit}");
    let cpu = fleet.container_cpu().unwrap();
    assert_eq!(cpu.source, CpuSource::Cgroup, "{cpu:?}");
    // Seccomp makes each syscall in a container a little dearer: allow for it.
    assert!(
        cpu.ms * 10 >= host_ms * 6 && cpu.ms <= host_ms * 2 + 100,
        "the container's CPU {} ms, the same work on the host {host_ms} ms (lived {lived:?})",
        cpu.ms
    );
    assert_eq!(
        run_cgroups(&run_id),
        Vec::<PathBuf>::new(),
        "its cgroup outlived the run"
    );
}

#[test]
fn artifacts_prune_removes_rehearse_images_but_those_in_use() {
    let _turn = turn();
    let Some((rt, engine)) = engine("artifacts_prune") else {
        return;
    };
    let repository = format!("rehearse-test-prune-{}", std::process::id());
    let (idle, used) = (
        test_image("/bin/true", &repository, "idle"),
        test_image("/bin/true", &repository, "used"),
    );
    for request in [&idle, &used] {
        rt.block_on(build::ensure(&engine, request)).unwrap();
    }
    // A container (of another run, say) still uses one of them.
    let holder = format!("rehearse-prune-holder-{}", std::process::id());
    rt.block_on(engine.docker.create_container(
        Some(CreateContainerOptions {
            name: Some(holder.clone()),
            ..Default::default()
        }),
        ContainerCreateBody {
            image: Some(used.reference()),
            ..Default::default()
        },
    ))
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rehearse"));
    cmd.args(["artifacts", "prune", "--repository", &repository])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, out, err) = run(cmd, Duration::from_secs(120));
    let present = |r: &BuildRequest| {
        rt.block_on(rehearsal::image::inspect(&engine, &r.reference()))
            .unwrap()
            .is_some()
    };
    let (idle_left, used_left) = (present(&idle), present(&used));
    let _ = rt.block_on(engine.docker.remove_container(&holder, None));
    remove_image(&rt, &engine, &used.reference());
    assert!(status.success(), "{err}");
    assert!(!idle_left, "{out}");
    assert!(used_left, "{out}");
    assert!(
        out.contains(&format!("removed {}", idle.reference()))
            && out.contains(&format!(
                "kept {} (in use by a container)",
                used.reference()
            ))
            && out.contains("pruned 1 image,"),
        "{out}"
    );
}

#[test]
fn container_log_lines_carry_the_engines_time_and_are_parsed_without_it() {
    let _turn = turn();
    let test = "container_log_lines_carry_the_engines_time_and_are_parsed_without_it";
    let Some((rt, engine)) = engine(test) else {
        return;
    };
    let event = r#"{"event":"refused","reason":"fenced"}"#;
    // An event, a stderr line, a line longer than the engine's 16 KiB
    // buffer (so it comes in parts, each with its own time), and a last
    // line without its newline.
    let script = format!("echo '{event}'; echo oops >&2; printf '%20000s\\n' x; printf tail");
    let (spec, image, logs) = host_binary_spec(
        &rt,
        &engine,
        "/usr/bin/dash",
        "dash",
        vec!["-c".into(), script],
    );
    let log_file = spec.log.clone();
    let run_id = format!("logs-test-{}", std::process::id());
    let fleet = DockerFleet::new(engine.clone(), &run_id, false);
    rt.block_on(fleet.prepare()).unwrap();
    let started = SystemTime::now();
    let reports = rt.block_on(async {
        let (sink, mut reports) = tokio::sync::mpsc::unbounded_channel::<FleetMsg>();
        fleet.spawn(spec, sink).await.unwrap();
        let (mut got, mut closed, mut exited) = (Vec::new(), false, false);
        while !(closed && exited) {
            let msg = tokio::time::timeout(Duration::from_secs(120), reports.recv())
                .await
                .expect("the container's reports within 2 minutes")
                .expect("the fleet keeps the channel open");
            closed |= matches!(msg.report, Report::OutputClosed);
            exited |= matches!(msg.report, Report::Exited(_));
            got.push(msg.report);
        }
        got
    });
    let ended = SystemTime::now();
    rt.block_on(fleet.shutdown()).unwrap();
    remove_image(&rt, &engine, &image.reference());
    let log = std::fs::read_to_string(&log_file).unwrap();
    let _ = std::fs::remove_dir_all(&logs);

    let long = format!("{}x", " ".repeat(19_999));
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    for line in log.lines() {
        let (time, text) = parse_log_line(line)
            .unwrap_or_else(|| panic!("a line without its time: {line:.80}\n{log:.2000}"));
        // A local engine shares this machine's clock.
        if !std::env::var("DOCKER_HOST").is_ok_and(|h| h.starts_with("tcp://")) {
            assert!(
                time + Duration::from_secs(2) >= started && time <= ended + Duration::from_secs(2),
                "{line:.80} is outside the test's {started:?}..{ended:?}"
            );
        }
        // stdout and stderr are two pipes: ordered each, not between them.
        match text.strip_prefix(STDERR_PREFIX) {
            Some(line) => stderr.push(line),
            None if !text.starts_with(NOTE_PREFIX) => stdout.push(text),
            None => {}
        }
    }
    assert_eq!(
        (stdout, stderr),
        (vec![event, long.as_str(), "tail"], vec!["oops"]),
        "the container's output, every line with the engine's time taken off:\n{log:.2000}"
    );
    let parsed = |r: &Report| matches!(r, Report::Line(Parsed::Event(Event::Refused(r))) if r.reason == "fenced");
    assert!(reports.iter().any(parsed), "{reports:?}");
    assert!(
        reports
            .iter()
            .any(|r| matches!(r, Report::Stderr(l) if l == "oops")),
        "{reports:?}"
    );
    assert!(
        reports
            .iter()
            .any(|r| matches!(r, Report::Line(Parsed::Garbled { line }) if *line == long)),
        "the long line arrives whole"
    );
}

/// A publish to a registry that does not answer stops before it builds,
/// probes or tags anything: no probe container and no tag for that
/// registry are left on the engine.
#[test]
fn a_publish_to_a_registry_that_does_not_answer_starts_and_tags_nothing() {
    let _turn = turn();
    let Some((rt, engine)) = engine("publish_nowhere") else {
        return;
    };
    // A loopback port nothing listens on.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let before = containers_with(&rt, &engine, label::RUN);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rehearse"));
    cmd.args(["artifacts", "publish", "--registry", &nowhere])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, _out, err) = run(cmd, Duration::from_secs(120));
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("nothing was built or tagged"), "{err}");
    assert_eq!(containers_with(&rt, &engine, label::RUN), before, "{err}");
    let tagged = rt
        .block_on(engine.docker.list_images(None::<ListImagesOptions>))
        .unwrap()
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .filter(|t| t.starts_with(&format!("{nowhere}/")))
        .collect::<Vec<_>>();
    assert!(tagged.is_empty(), "{tagged:?}");

    // What doctor advises for that registry is a command publish takes:
    // run as written, it gets as far as the registry (exit 3), not refused (2).
    let out = Command::new(env!("CARGO_BIN_EXE_rehearse"))
        .args(["doctor", "--registry", &nowhere])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let advised: Vec<&str> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("rehearse "))
        .collect();
    assert!(!advised.is_empty(), "doctor advised no command:\n{text}");
    for command in advised {
        let words: Vec<&str> = command.split_whitespace().skip(1).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_rehearse"))
            .args(&words)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(3),
            "doctor advised `{command}`: {err}"
        );
    }

    // A registry without its port is refused as typed (exit 2), as doctor refuses it.
    for args in [
        &["artifacts", "publish", "--registry", "localhost"][..],
        &["doctor", "--registry", "localhost"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rehearse"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("give the port too (like localhost:5000)"),
            "{err}"
        );
    }
}

/// The container's process on this machine: its pid, when `/proc` shows
/// it in the container's cgroup (an engine in a VM or another pid
/// namespace gives a pid that means nothing here).
fn visible_pid(rt: &tokio::runtime::Runtime, engine: &Engine, container: &str) -> Option<i64> {
    let pid = rt
        .block_on(engine.docker.inspect_container(container, None))
        .ok()?
        .state?
        .pid?;
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .filter(|cgroup| cgroup.contains(&container[..12]))
        .map(|_| pid)
}

/// The scheduler state of every thread of process `pid`.
fn thread_states(pid: i64) -> Vec<char> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter_map(|stat| stat.rsplit_once(')')?.1.trim_start().chars().next())
        .collect()
}

/// Where the engine cannot freeze a container (it fails under load with
/// "unable to freeze"), a suspend stops its process by SIGSTOP through
/// the engine, proved in `/proc`, and the resume lets it go by SIGCONT:
/// the fleet set to suspend by signal takes that path every time.
#[test]
fn a_container_the_engine_cannot_pause_is_stopped_and_let_go_by_signal() {
    let _turn = turn();
    let test = "a_container_the_engine_cannot_pause_is_stopped_and_let_go_by_signal";
    let Some((rt, engine)) = engine(test) else {
        return;
    };
    let (spec, image, logs) =
        host_binary_spec(&rt, &engine, "/usr/bin/sleep", "sleep", vec!["60".into()]);
    let run_id = format!("signal-test-{}", std::process::id());
    let fleet = DockerFleet::new(engine.clone(), &run_id, false)
        .suspending_by(rehearsal::fleet::docker::SuspendBy::Signal);
    rt.block_on(fleet.prepare()).unwrap();
    let (sink, mut reports) = tokio::sync::mpsc::unbounded_channel::<FleetMsg>();
    let handle = rt.block_on(fleet.spawn(spec, sink)).unwrap();
    let container = handle.container.clone().unwrap();
    let Some(pid) = visible_pid(&rt, &engine, &container) else {
        handle.kill();
        rt.block_on(fleet.shutdown()).unwrap();
        remove_image(&rt, &engine, &image.reference());
        skipped(&format!(
            "{test}: the engine's processes are not visible in this pid namespace"
        ));
        return;
    };
    let running = thread_states(pid);
    let suspended = rt.block_on(handle.suspended());
    let stopped = thread_states(pid);
    let resumed = rt.block_on(handle.resumed());
    let let_go = thread_states(pid);
    handle.kill();
    let exit = rt.block_on(exit_of(&mut reports));
    rt.block_on(fleet.shutdown()).unwrap();
    remove_image(&rt, &engine, &image.reference());
    let _ = std::fs::remove_dir_all(&logs);
    assert!(
        !running.is_empty() && !running.contains(&'T'),
        "{running:?}"
    );
    assert_eq!(suspended, Ok(()));
    assert!(
        !stopped.is_empty() && stopped.iter().all(|&s| s == 'T'),
        "{stopped:?}"
    );
    assert_eq!(resumed, Ok(()));
    assert!(!let_go.is_empty() && !let_go.contains(&'T'), "{let_go:?}");
    assert_eq!(exit.signal, Some(9), "{exit}");
}
