//! The docker backend end to end: the real `rehearse` binary, the real
//! Docker engine (images assembled without a base image), a real
//! registry (Debian's `docker-registry`, started by `.ci/run`, its
//! address in `REHEARSE_TEST_REGISTRY`), a real throwaway PostgreSQL.
//!
//! Every test that needs the engine says loudly when it is skipped
//! because none answers; the registry tests likewise when no registry
//! address is given. The tests take turns (one lock): they share the
//! engine, the image tags and two cores.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveImageOptions,
};
use rehearsal::fleet::docker::label;
use rehearsal::image::Engine;
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

/// A scratch directory with a matrix whose `previous` is `previous`, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, previous: &str) -> Scratch {
        let matrix = format!("[artifacts.previous]\n{previous}\n{WORKLOAD}");
        Scratch::with_matrix(tag, &matrix)
    }

    fn with_matrix(tag: &str, matrix: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("rehearse-docker-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("reports")).unwrap();
        std::fs::write(dir.join("matrix.toml"), matrix).unwrap();
        Scratch(dir)
    }

    fn rehearse(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rehearse"));
        cmd.arg("--matrix-file")
            .arg(self.0.join("matrix.toml"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("REHEARSE_REPORTS_DIR", self.0.join("reports"))
            .env_remove("REHEARSE_BACKEND")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn report_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(self.0.join("reports"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        dirs
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait(child: &mut Child, limit: Duration) -> (ExitStatus, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("rehearse did not finish within {limit:?}; stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

fn run(mut cmd: Command, limit: Duration) -> (ExitStatus, String, String) {
    let mut child = cmd.spawn().expect("start rehearse");
    wait(&mut child, limit)
}

fn read_report(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
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
    let scratch = Scratch::new("no-engine", "release = \"0.6.2\"");
    let mut cmd = scratch.rehearse(&["--cell", "small-kill", "--seed", "1", "--backend", "docker"]);
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
    let scratch = Scratch::new("auto", "image = \"127.0.0.1:5000/awa-runtime:0.6.2\"");
    let mut cmd = scratch.rehearse(&["--cell", "small-kill", "--seed", "1", "--backend", "auto"]);
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
    let scratch = Scratch::new("line", "release = \"0.6.2\"");

    // Publish the releases, as a release engineer would.
    let (status, out, err) = run(
        scratch.rehearse(&["artifacts", "publish", "--registry", &registry]),
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
        scratch.rehearse(&["artifacts", "list", "--registry", &registry]),
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
    let scratch = Scratch::new("line-run", &line);
    let (status, _, err) = run(
        scratch.rehearse(&["--cell", "small-kill", "--seed", "7", "--backend", "docker"]),
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
    assert!(containers_with(&rt, &engine, &format!("{}={}", label::RUN, run_id(&dir))).is_empty());

    // Bad input: no release at or above the floor.
    let floor = format!("image = \"{registry}/awa-runtime\"\nline = \"0.6\"\nfloor = \"0.6.9\"");
    let scratch = Scratch::new("floor", &floor);
    let (status, _, err) = run(
        scratch.rehearse(&["--cell", "small-kill", "--seed", "7", "--backend", "docker"]),
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
    let scratch = Scratch::new("pinned", &unknown);
    let (status, _, err) = run(
        scratch.rehearse(&["--cell", "small-kill", "--seed", "7", "--backend", "docker"]),
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
    let scratch = Scratch::new("down", &down);
    let (status, _, err) = run(
        scratch.rehearse(&["--cell", "small-kill", "--seed", "7", "--backend", "docker"]),
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
    let scratch = Scratch::new("lifecycle", "release = \"0.6.2\"");

    // A failing run.
    let (status, _, err) = run(
        scratch.rehearse(&["--cell", "fails", "--seed", "2", "--backend", "docker"]),
        Duration::from_secs(1800),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    let dir = scratch.report_dirs().pop().unwrap();
    assert!(containers_with(&rt, &engine, &format!("{}={}", label::RUN, run_id(&dir))).is_empty());

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
    let mut child = scratch
        .rehearse(&["--cell", "long-hold", "--seed", "3", "--backend", "docker"])
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
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../matrix.toml"))
            .unwrap();
    let release = "[artifacts.previous]        # N-1: the mandatory 0.6.2 stepping stone\nrelease = \"0.6.2\"";
    assert!(
        shipped.contains(release),
        "the shipped matrix's previous changed; update this test"
    );
    let matrix = shipped.replace(
        release,
        &format!("[artifacts.previous]\nimage = \"{registry}/awa-runtime\"\nline = \"0.6\"\nfloor = \"0.6.2\""),
    );
    let scratch = Scratch::with_matrix("smoke", &matrix);
    let (status, _, err) = run(
        scratch.rehearse(&["artifacts", "publish", "--registry", &registry]),
        Duration::from_secs(1800),
    );
    assert!(status.success(), "{err}");
    let (status, out, err) = run(
        scratch.rehearse(&["--matrix", "smoke", "--seed", "11", "--backend", "docker"]),
        Duration::from_secs(1800),
    );
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
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
