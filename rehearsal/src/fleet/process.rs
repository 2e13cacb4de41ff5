//! The `process` backend: every `awa` is a child process of rehearse.
//!
//! No orphans, by construction:
//! - each child runs in a process group of its own, so a Ctrl-C typed at
//!   the terminal reaches rehearse only, and rehearse decides how its
//!   fleet stops (gracefully, then by SIGKILL);
//! - each child asks the kernel for SIGKILL when its parent dies
//!   (`PR_SET_PDEATHSIG`), so even a SIGKILLed rehearse leaves no `awa`
//!   behind; the pre-exec hook re-checks the parent afterwards, closing
//!   the race where rehearse dies between fork and prctl; every child is
//!   forked by one thread that lives as long as rehearse, because the
//!   signal follows the forking *thread* (see `spawn_from_spawner_thread`);
//! - the task that owns a child both waits for it and delivers signals to
//!   it, so a signal can never reach a pid that was already reaped and
//!   recycled.
//!
//! stdout lines are parsed into [`Event`]s; stdout and stderr are both
//! appended to the process's log file (stderr lines prefixed `stderr| `),
//! between a header naming the command and a footer with the exit.
//!
//! Every line of a log starts with the time it was received
//! ([`crate::stamp::log_time`], UTC to the microsecond) and a space: the
//! time rehearse read it from the process (the same instant its
//! [`super::FleetMsg`] is stamped with), the engine's time on the docker
//! backend, the time of writing for rehearse's own notes. A cell's logs
//! therefore read as one timeline: `sort logs/CELL/*.log`.

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

use futures_util::future::BoxFuture;

use super::{
    Control, ExitInfo, Fleet, FleetError, Handle, Order, Report, ReportSender, Runnable, Spec,
    Watch, events, send_report, send_report_at,
};
use crate::stamp::{LOG_TIME_LEN, log_time, parse_rfc3339};

/// Prefix of stderr lines in a log file (after the line's time).
pub const STDERR_PREFIX: &str = "stderr| ";
/// Prefix of the lines rehearse itself writes into a log file (after the line's time).
pub const NOTE_PREFIX: &str = "# rehearse: ";

/// One line of a log file read back: the time it was received and its
/// text as the process wrote it (with [`STDERR_PREFIX`] or
/// [`NOTE_PREFIX`] where it has one); `None` for a line that does not
/// start with a time. The inverse of what the backends write, for tools
/// and tests that read the logs.
pub fn parse_log_line(line: &str) -> Option<(SystemTime, &str)> {
    let time = parse_rfc3339(line.get(..LOG_TIME_LEN)?)?;
    let text = line[LOG_TIME_LEN..].strip_prefix(' ')?;
    Some((time, text))
}

/// Runs `awa` as local child processes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessFleet;

/// A process's log file, shared by the tasks that write into it, with
/// the words the process was handed in confidence ([`Spec::watch`]).
pub(super) type Log = Arc<LogFile>;

/// See [`Log`].
pub(super) struct LogFile {
    file: Mutex<std::fs::File>,
    watch: Watch,
}

impl LogFile {
    /// Whether `text` holds a word the process was handed in confidence.
    fn holds_watched(&self, text: &str) -> bool {
        self.watch
            .words
            .iter()
            .any(|word| text.contains(word.as_str()))
    }

    /// Whether `text` printed the handed DSN masked, but with more than
    /// its password masked: it names the DSN's server and database and
    /// holds the mask, but not the DSN as the mask of the password alone
    /// leaves it. (A line that names the server without masking anything
    /// printed no DSN with a secret in it.)
    fn hides_target(&self, text: &str) -> bool {
        self.watch.target.as_ref().is_some_and(|t| {
            text.contains(&t.marker)
                && text.contains(awa_runtime::redact::MASK)
                && !text.contains(&t.expected)
        })
    }

    /// `text` redacted, and with the process's watched words hidden too
    /// (where a masking left one outside anything shaped like a secret).
    fn hidden(&self, text: &str) -> String {
        let mut text = awa_runtime::redact::redact(text);
        for word in &self.watch.words {
            if text.contains(word.as_str()) {
                text = text.replace(word.as_str(), awa_runtime::redact::MASK);
            }
        }
        text
    }
}

/// Appends one line of rehearse's own, stamped now (see [`log_line_at`]).
pub(super) fn log_line(log: &Log, line: &str) {
    log_line_at(log, None, line);
}

/// Appends one line, secrets redacted (the environment header carries
/// `AWA_DATABASE_URL`, and a process may echo what it was given), stamped
/// `time` or, without one, now. Returns the instant of writing, for the
/// message about the line: "now" is read on both clocks under the file's
/// lock, so a log's lines are in the order of their times even when
/// stdout and stderr are read by two tasks.
pub(super) fn log_line_at(log: &Log, time: Option<SystemTime>, line: &str) -> Instant {
    let line = log.hidden(line);
    let file = log.file.lock();
    let at = Instant::now();
    let time = log_time(time.unwrap_or_else(SystemTime::now));
    if let Ok(mut file) = file {
        // A full disk must not stop the rehearsal; the events still flow.
        let _ = writeln!(file, "{time} {line}");
    }
    at
}

/// Creates (or appends to) a log file and its folder, for a process
/// that must never print any of `watch`.
pub(super) fn open_log(path: &Path, watch: &Watch) -> Result<Log, FleetError> {
    let error = |source| FleetError::Log {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(error)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(error)?;
    Ok(Arc::new(LogFile {
        file: Mutex::new(file),
        watch: watch.clone(),
    }))
}

impl Fleet for ProcessFleet {
    fn backend(&self) -> &'static str {
        "process"
    }

    fn spawn(&self, spec: Spec, sink: ReportSender) -> BoxFuture<'_, Result<Handle, FleetError>> {
        // A fork and exec take about a millisecond: done now, handed back ready.
        Box::pin(std::future::ready(self.spawn_now(spec, sink)))
    }
}

impl ProcessFleet {
    fn spawn_now(&self, spec: Spec, sink: ReportSender) -> Result<Handle, FleetError> {
        let Runnable::Binary(program) = spec.runnable.clone() else {
            return Err(FleetError::Unsupported {
                backend: "process",
                runnable: spec.runnable.clone(),
            });
        };
        let log = open_log(&spec.log, &spec.watch)?;
        let cmd = command(&program, &spec);
        log_header(&log, &program, &spec);
        let mut child = spawn_from_spawner_thread(cmd).map_err(|source| {
            log_line(&log, &format!("{NOTE_PREFIX}failed to start: {source}"));
            FleetError::Spawn {
                name: spec.name.clone(),
                runnable: spec.runnable.clone(),
                source,
            }
        })?;
        let pid = child.id();
        let id = spec.id;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        tokio::spawn(forward_output(
            stdout,
            stderr,
            id,
            sink.clone(),
            log.clone(),
        ));
        let (control, controls) = mpsc::unbounded_channel::<Order>();
        tokio::spawn(own_child(child, pid, id, controls, sink, log));
        Ok(Handle::new(id, pid, control))
    }
}

/// The command for `spec`: its own process group, piped output, only the
/// `AWA_*` environment the spec gives, and SIGKILL when rehearse dies.
/// Makes the child `cmd` starts die with this rehearse (SIGKILL when it
/// goes, however it goes), and not start at all if rehearse is already
/// gone by the time the child runs.
pub(crate) fn die_with_rehearse(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let parent = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid, through nix's
    // thin wrappers); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                // rehearse died between fork and prctl: do not run unwatched.
                return Err(std::io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }
}

fn command(program: &Path, spec: &Spec) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Last resort if the owning task is dropped without reaping.
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("AWA_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    die_with_rehearse(cmd.as_std_mut());
    cmd
}

/// The log's header: the command line and its environment (redacted by
/// [`log_line`]).
fn log_header(log: &Log, program: &Path, spec: &Spec) {
    let mut words = vec![program.display().to_string()];
    words.extend(spec.args.iter().cloned());
    log_line(log, &format!("{NOTE_PREFIX}{}", words.join(" ")));
    log_env(log, spec);
}

/// The log's note of the environment (redacted by [`log_line`]).
pub(super) fn log_env(log: &Log, spec: &Spec) {
    log_line(
        log,
        &format!("{NOTE_PREFIX}env {}", spec.env_words().join(" ")),
    );
}

/// Reads the child's stdout and stderr to their ends, then says so.
async fn forward_output(
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    id: super::ProcId,
    sink: ReportSender,
    log: Log,
) {
    let out = read_lines(stdout, id, &sink, &log, false);
    let err = read_lines(stderr, id, &sink, &log, true);
    tokio::join!(out, err);
    send_report(&sink, id, Report::OutputClosed);
}

/// The one task that owns the child: it delivers each control as a
/// signal until the child is reaped, then logs and reports the exit.
async fn own_child(
    mut child: tokio::process::Child,
    pid: Option<u32>,
    id: super::ProcId,
    mut controls: mpsc::UnboundedReceiver<Order>,
    sink: ReportSender,
    log: Log,
) {
    let mut listening = true;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            ctl = controls.recv(), if listening => match ctl {
                Some(order) => {
                    let sent = deliver(&mut child, pid, order.control);
                    let check = match (order.control, pid) {
                        (Control::Suspend, Some(pid)) => Some((pid, true)),
                        (Control::Resume, Some(pid)) => Some((pid, false)),
                        _ => None,
                    };
                    match check {
                        // Checked on the side: the child may end meanwhile.
                        Some((pid, stopped)) if sent.is_ok() && order.awaited() => {
                            tokio::spawn(async move {
                                order.applied(confirm(pid, stopped).await);
                            });
                        }
                        _ => order.applied(sent),
                    }
                }
                None => listening = false,
            },
        }
    };
    let info = status.map(|status| ExitInfo {
        code: status.code(),
        signal: status.signal(),
    });
    report_exit(info, id, &sink, &log);
}

/// One control as a signal to the child. Called only by [`own_child`]
/// before it has reaped the child (it is the only waiter), so `pid` is
/// still this child's.
fn deliver(
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    control: Control,
) -> Result<(), String> {
    // A String: it goes to `Order::applied` (or is dropped), whose waiter only words it.
    let signal = |signal: Signal| match pid {
        // The pid is our unreaped child (see above).
        Some(pid) => nix::sys::signal::kill(Pid::from_raw(pid as i32), signal)
            .map_err(|e| format!("{signal} to pid {pid} failed: {e}")),
        None => Err("it has no pid to signal".into()),
    };
    match control {
        Control::Terminate => {
            let sent = signal(Signal::SIGTERM);
            // A suspended process would hold the SIGTERM until resumed: a
            // graceful stop must not wait on a cell that left it stopped.
            let _ = signal(Signal::SIGCONT);
            sent
        }
        Control::Suspend => signal(Signal::SIGSTOP),
        Control::Resume => signal(Signal::SIGCONT),
        Control::Kill => child
            .start_kill()
            .map_err(|e| format!("SIGKILL failed: {e}")),
    }
}

/// How long a signalled process has to show the state a suspend or resume
/// asked for: the kernel stops a thread the next time it runs, which on a
/// starved machine can take a while, but not seconds.
const CONFIRM_BOUND: Duration = Duration::from_secs(2);

/// Waits until every thread of `pid` is stopped (`stopped`) or none is,
/// as `/proc` shows it: the evidence a suspend or resume took that does
/// not come from the process itself.
// A String: it goes to `Order::applied`, whose waiter only words it.
pub(super) async fn confirm(pid: u32, stopped: bool) -> Result<(), String> {
    let start = std::time::Instant::now();
    loop {
        let states = match thread_states(pid) {
            Ok(states) if !states.is_empty() => states,
            // Let go, it ran and ended (an N-1 leader resumed after a flip
            // meets the fence and exits within a tick): a resume took. The
            // step's proof sees the end and says so.
            Ok(_) if !stopped => return Ok(()),
            Err(e) if !stopped && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Ok(_) | Err(_) => return Err(format!("pid {pid} is gone from /proc: it ended")),
        };
        let held = states.iter().filter(|&&c| is_stopped(c)).count();
        let done = if stopped {
            held == states.len()
        } else {
            held == 0
        };
        if done {
            return Ok(());
        }
        if start.elapsed() >= CONFIRM_BOUND {
            let (want, signal) = if stopped {
                ("stopped", "SIGSTOP")
            } else {
                ("running", "SIGCONT")
            };
            return Err(format!(
                "{} of {} threads of pid {pid} were not {want} {} ms after {signal}",
                if stopped { states.len() - held } else { held },
                states.len(),
                start.elapsed().as_millis()
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The scheduler state of each thread of `pid` (`R`, `S`, `T`, ...).
fn thread_states(pid: u32) -> std::io::Result<Vec<char>> {
    let mut states = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = std::fs::read_to_string(entry?.path().join("stat"));
        // A thread that ended between the listing and the read is no thread.
        if let Some(state) = stat.ok().as_deref().and_then(stat_state) {
            states.push(state);
        }
    }
    Ok(states)
}

/// The state letter of a `/proc/.../stat` line: the first field after the
/// command name, which is in parentheses and may itself hold `)` or spaces.
fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Stopped by a signal (`T`) or, under a tracer, at a trace stop (`t`).
fn is_stopped(state: char) -> bool {
    matches!(state, 'T' | 't')
}

/// A spawn request for the spawner thread: the command, the runtime it
/// belongs to, and where the child goes.
type SpawnJob = (
    tokio::process::Command,
    tokio::runtime::Handle,
    std::sync::mpsc::Sender<std::io::Result<tokio::process::Child>>,
);

/// Forks every child from one thread that lives as long as rehearse.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
/// not only the process. Runtime threads can come and go (a
/// `block_in_place`, an idle blocking thread), and a child forked by one
/// of them would be SIGKILLed in the middle of a cell when it retires.
/// This thread never returns, so a child dies exactly when rehearse does.
fn spawn_from_spawner_thread(
    cmd: tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    static SPAWNER: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<SpawnJob>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("rehearse-spawner".into())
            .spawn(move || {
                while let Ok((mut cmd, runtime, reply)) = rx.recv() {
                    // The child's reaper is the runtime's; enter it to spawn.
                    let _entered = runtime.enter();
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the spawner thread");
        Mutex::new(tx)
    });
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| std::io::Error::other(format!("not inside the tokio runtime: {e}")))?;
    let (reply, child) = std::sync::mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((cmd, runtime, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    // A fork and exec: about a millisecond, fine to wait for on a runtime thread.
    child
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Forwards every line of one stream until it closes; bytes that are not
/// UTF-8 are replaced rather than ending the stream.
async fn read_lines(
    stream: impl AsyncRead + Unpin,
    id: usize,
    sink: &ReportSender,
    log: &Log,
    is_stderr: bool,
) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        report_line(&buf, is_stderr, id, sink, log, None);
    }
}

/// Logs one output line of process `id` (stderr marked) and sends it to the
/// driver: stdout lines parsed as the runtime's events. Both backends read
/// their processes' output through this. The message is stamped with the
/// instant the line is logged; the log line with `engine_time` when the
/// engine timed the line itself (the docker backend), else with that
/// same instant.
///
/// A line that holds one of the words the process was handed in
/// confidence ([`Spec::watch`]: its password's) printed a secret: it goes
/// on hidden, after a [`Report::SecretPrinted`] that says so, and nothing
/// of the word reaches the driver or the log. (Whether redaction would
/// change a line is no test of that: a runtime that hid a value itself
/// leaves text a second pass cuts differently, `password=***)`.) Any
/// other line goes on as printed, and is logged redacted.
pub(super) fn report_line(
    raw: &[u8],
    is_stderr: bool,
    id: usize,
    sink: &ReportSender,
    log: &Log,
    engine_time: Option<SystemTime>,
) {
    let printed = String::from_utf8_lossy(raw);
    let printed = printed.trim_end_matches(['\n', '\r']);
    let secret = log.holds_watched(printed);
    let line = if secret {
        log.hidden(printed)
    } else {
        printed.to_owned()
    };
    let (at, report) = if is_stderr {
        let at = log_line_at(log, engine_time, &format!("{STDERR_PREFIX}{line}"));
        (at, Report::Stderr(line.clone()))
    } else {
        let at = log_line_at(log, engine_time, &line);
        (at, Report::Line(events::parse(&line)))
    };
    if secret {
        let flagged = Report::SecretPrinted {
            stderr: is_stderr,
            line: line.clone(),
        };
        send_report_at(sink, id, at, flagged);
    } else if log.hides_target(printed) {
        let flagged = Report::TargetHidden {
            stderr: is_stderr,
            line: log.hidden(printed),
        };
        send_report_at(sink, id, at, flagged);
    }
    send_report_at(sink, id, at, report);
}

/// Logs how process `id` ended and reports it to the driver; `Err` says
/// why its status could not be read (logged; reported as an exit without
/// a status). Both backends report their processes' exits through this.
pub(super) fn report_exit(
    info: Result<ExitInfo, impl std::fmt::Display>,
    id: usize,
    sink: &ReportSender,
    log: &Log,
) {
    let info = info.unwrap_or_else(|e| {
        log_line(log, &format!("{NOTE_PREFIX}failed to wait: {e}"));
        ExitInfo {
            code: None,
            signal: None,
        }
    });
    let at = log_line_at(log, None, &format!("{NOTE_PREFIX}{info}"));
    send_report_at(sink, id, at, Report::Exited(info));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Event, FleetMsg, Parsed};

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rehearse-fleet-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn spec(dir: &Path, script: &str) -> Spec {
        Spec {
            id: 3,
            name: "sh-1".into(),
            runnable: Runnable::Binary("/bin/sh".into()),
            labels: Default::default(),
            args: vec!["-c".into(), script.into()],
            env: vec![("AWA_NAME".into(), "sh-1".into())],
            log: dir.join("logs").join("cell").join("sh-1.log"),
            watch: Watch::default(),
        }
    }

    async fn collect(mut rx: mpsc::UnboundedReceiver<FleetMsg>) -> Vec<Report> {
        let mut out = Vec::new();
        let mut closed = false;
        let mut exited = false;
        while !(closed && exited) {
            let msg = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("a report within 10 s")
                .expect("channel open");
            assert_eq!(msg.id, 3);
            closed |= matches!(msg.report, Report::OutputClosed);
            exited |= matches!(msg.report, Report::Exited(_));
            out.push(msg.report);
        }
        out
    }

    /// The text of every line of `log` after its time, checking that each
    /// line has one: fixed width, UTC to the microsecond, between `from`
    /// and `to` (truncated to the microsecond), never going back.
    fn timed_lines(log: &str, from: SystemTime, to: SystemTime) -> Vec<&str> {
        let from = from - std::time::Duration::from_micros(1);
        let mut last = from;
        log.lines()
            .map(|line| {
                let shape = line.as_bytes();
                assert!(
                    shape.len() > LOG_TIME_LEN
                        && shape[4] == b'-'
                        && shape[10] == b'T'
                        && shape[19] == b'.'
                        && shape[20..26].iter().all(u8::is_ascii_digit)
                        && shape[26] == b'Z'
                        && shape[27] == b' ',
                    "not `YYYY-MM-DDTHH:MM:SS.ffffffZ text`: {line:?}"
                );
                let (time, text) =
                    parse_log_line(line).unwrap_or_else(|| panic!("no time: {line:?}"));
                assert!(
                    time >= last && time <= to,
                    "{line:?} out of order in:\n{log}"
                );
                last = time;
                text
            })
            .collect()
    }

    #[test]
    fn log_lines_read_back_to_their_time_and_text() {
        let at = std::time::UNIX_EPOCH + Duration::new(1_796_003_112, 123_456_000);
        for (line, want) in [
            (
                "2026-11-30T01:45:12.123456Z stderr| oops",
                Some((at, "stderr| oops")),
            ),
            ("2026-11-30T01:45:12.123456Z ", Some((at, ""))),
            (
                "2026-11-30T01:45:12.123456Z # rehearse: exit code 0",
                Some((at, "# rehearse: exit code 0")),
            ),
            ("stderr| oops", None),
            ("2026-11-30T01:45:12.123456Z", None),
            ("2026-11-30T01:45:12.123456Zstderr| oops", None),
            ("{\"event\":\"ready\"}", None),
        ] {
            assert_eq!(parse_log_line(line), want, "{line}");
        }
    }

    #[tokio::test]
    async fn a_resume_whose_process_ends_at_once_took_and_a_suspend_of_an_ended_one_did_not() {
        // A shell that stops itself and, let go, ends at once: what an N-1
        // leader resumed after a flip does when it meets the fence.
        let mut child = tokio::process::Command::new("/bin/sh")
            .args(["-c", "kill -STOP $$; exit 0"])
            .spawn()
            .expect("starts");
        let pid = child.id().expect("a pid");
        confirm(pid, true).await.expect("it stopped itself");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGCONT)
            .expect("SIGCONT");
        // Reaped before the check looks: gone from /proc altogether.
        child.wait().await.expect("it ends");
        assert_eq!(confirm(pid, false).await, Ok(()));
        // A suspend of a process that is gone did not take.
        let err = confirm(pid, true).await.expect_err("gone");
        assert!(err.contains("it ended"), "{err}");
    }

    #[tokio::test]
    async fn lines_are_typed_logged_and_the_exit_reported() {
        let dir = scratch("lines");
        let started = SystemTime::now();
        let (tx, rx) = mpsc::unbounded_channel();
        let script = r#"echo '{"event":"refused","reason":"fenced"}'; echo oops >&2; echo "name=$AWA_NAME"; exit 2"#;
        ProcessFleet.spawn(spec(&dir, script), tx).await.unwrap();
        let reports = collect(rx).await;
        assert!(reports.iter().any(
            |r| matches!(r, Report::Line(Parsed::Event(Event::Refused(r))) if r.reason == "fenced")
        ));
        assert!(
            reports.iter().any(
                |r| matches!(r, Report::Line(Parsed::Garbled { line }) if line == "name=sh-1")
            )
        );
        assert!(
            reports
                .iter()
                .any(|r| matches!(r, Report::Stderr(l) if l == "oops"))
        );
        assert!(
            reports
                .iter()
                .any(|r| matches!(r, Report::Exited(ExitInfo { code: Some(2), .. })))
        );
        let log = std::fs::read_to_string(dir.join("logs/cell/sh-1.log")).unwrap();
        let lines = timed_lines(&log, started, SystemTime::now());
        assert!(lines[0].starts_with("# rehearse: /bin/sh -c"), "{log}");
        assert!(
            lines[1].starts_with("# rehearse: env AWA_NAME=sh-1"),
            "{log}"
        );
        assert!(lines.contains(&"stderr| oops"), "{log}");
        assert!(
            lines.contains(&"{\"event\":\"refused\",\"reason\":\"fenced\"}"),
            "{log}"
        );
        assert_eq!(lines.last(), Some(&"# rehearse: exit code 2"), "{log}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_line_that_carries_a_secret_is_flagged_and_goes_on_hidden() {
        let dir = scratch("secrets");
        let (tx, rx) = mpsc::unbounded_channel();
        // A watched word alone on stderr and inside a URL's password in an
        // event on stdout; a line its own redaction cut (`***)`) and a
        // password it was not handed are no finding (nor shown). Nothing
        // is registered with the redaction: the watch alone hides the word.
        let script = r#"echo 'lost s3kr1t-fleet-word' >&2; echo '{"event":"fatal","error":"cannot connect to postgres://u:s3kr1t-fleet-word@h/db"}'; echo 'to (host=h password=***): refused' >&2; echo 'to postgres://u:hunter22@h/db' >&2"#;
        let mut spec = spec(&dir, script);
        spec.watch.words = vec!["s3kr1t-fleet-word".into()];
        ProcessFleet.spawn(spec, tx).await.unwrap();
        let reports = collect(rx).await;
        let flagged: Vec<(bool, &str)> = reports
            .iter()
            .filter_map(|r| match r {
                Report::SecretPrinted { stderr, line } => Some((*stderr, line.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(flagged.len(), 2, "{reports:?}");
        assert!(flagged.contains(&(true, "lost ***")), "{flagged:?}");
        assert!(
            flagged
                .iter()
                .any(|(e, l)| !e && l.contains("postgres://u:***@h/db")),
            "{flagged:?}"
        );
        // Each flag comes just before its line, which is hidden too.
        let at = reports
            .iter()
            .position(|r| matches!(r, Report::SecretPrinted { stderr: true, .. }))
            .unwrap();
        assert!(matches!(&reports[at + 1], Report::Stderr(l) if l == "lost ***"));
        assert!(reports.iter().any(
            |r| matches!(r, Report::Line(Parsed::Event(Event::Fatal(f))) if f.error.contains("u:***@h"))
        ));
        let log = std::fs::read_to_string(dir.join("logs/cell/sh-1.log")).unwrap();
        assert!(
            !log.contains("s3kr1t") && !log.contains("hunter22"),
            "{log}"
        );
        assert!(log.contains("stderr| to postgres://u:***@h/db"), "{log}");
        assert!(log.contains("stderr| to (host=h password=***"), "{log}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_line_that_prints_its_target_with_more_than_the_password_hidden_is_flagged() {
        let dir = scratch("target");
        let (tx, rx) = mpsc::unbounded_channel();
        // The handed DSN printed as a correct redaction prints it (no
        // flag), then with the user's last letter and the colon masked as
        // well; then the server and database named with nothing masked,
        // and a line about something else (no flag).
        let script = r#"echo 'to postgres://app:***@h:5432/jobs: refused' >&2; echo 'to postgres://ap***@h:5432/jobs: refused' >&2; echo 'h:5432/jobs is down' >&2; echo 'h:5432 is down' >&2"#;
        let mut spec = spec(&dir, script);
        spec.watch = Watch {
            words: vec!["s3kr1t-fleet-word".into()],
            target: Some(super::super::Target {
                marker: "h:5432/jobs".into(),
                expected: "postgres://app:***@h:5432/jobs".into(),
            }),
        };
        ProcessFleet.spawn(spec, tx).await.unwrap();
        let reports = collect(rx).await;
        let flagged: Vec<(bool, &str)> = reports
            .iter()
            .filter_map(|r| match r {
                Report::TargetHidden { stderr, line } => Some((*stderr, line.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(
            flagged,
            [(true, "to postgres://ap***@h:5432/jobs: refused")],
            "{reports:?}"
        );
        assert!(
            !reports
                .iter()
                .any(|r| matches!(r, Report::SecretPrinted { .. })),
            "{reports:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn terminate_and_kill_reach_the_child_in_its_own_group() {
        let dir = scratch("signals");
        // SIGTERM is trapped into a clean exit 0; the loop keeps it alive otherwise.
        let script = "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done";
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = ProcessFleet.spawn(spec(&dir, script), tx).await.unwrap();
        let pid = Pid::from_raw(handle.pid.unwrap() as i32);
        // Its own process group: a terminal's Ctrl-C would not reach it.
        assert_eq!(nix::unistd::getpgid(Some(pid)), Ok(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
        handle.terminate();
        let reports = collect(rx).await;
        assert!(
            reports
                .iter()
                .any(|r| matches!(r, Report::Exited(ExitInfo { code: Some(0), .. }))),
            "{reports:?}"
        );

        let (tx, rx) = mpsc::unbounded_channel();
        let handle = ProcessFleet
            .spawn(spec(&dir, "trap '' TERM; while :; do sleep 0.05; done"), tx)
            .await
            .unwrap();
        handle.kill();
        let reports = collect(rx).await;
        assert!(
            reports.iter().any(|r| matches!(
                r,
                Report::Exited(ExitInfo {
                    code: None,
                    signal: Some(9)
                })
            )),
            "{reports:?}"
        );
        // After the exit, controls are dropped rather than sent to a recycled pid.
        handle.kill();
        handle.terminate();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn suspend_stops_the_child_without_ending_it_and_resume_lets_it_go_on() {
        let dir = scratch("suspend");
        let script = "while :; do echo tick; sleep 0.02; done";
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handle = ProcessFleet.spawn(spec(&dir, script), tx).await.unwrap();
        let pid = Pid::from_raw(handle.pid.unwrap() as i32);
        let stopped = |pid: Pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let state = stat.rsplit(')').next().unwrap().trim_start().chars().next();
            state == Some('T')
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        handle.suspended().await.unwrap();
        assert!(
            stopped(pid),
            "suspended() returns once the child is stopped"
        );
        while rx.try_recv().is_ok() {}
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(rx.try_recv().is_err(), "a suspended child prints nothing");
        handle.resumed().await.unwrap();
        assert!(!stopped(pid), "resumed() returns once the child runs");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(rx.try_recv().is_ok(), "it prints again");
        // A graceful stop of a suspended child does not wait for a resume.
        handle.suspended().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.terminate();
        let reports = collect(rx).await;
        assert!(
            reports.iter().any(|r| matches!(
                r,
                Report::Exited(ExitInfo {
                    signal: Some(15),
                    ..
                })
            )),
            "{reports:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_suspend_of_a_child_that_ended_is_an_error_not_a_stop() {
        let dir = scratch("suspend-ended");
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = ProcessFleet.spawn(spec(&dir, "exit 0"), tx).await.unwrap();
        let _ = collect(rx).await;
        let err = handle.suspended().await.unwrap_err();
        assert!(err.contains("ended"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stat_lines_give_the_state_after_the_command_name() {
        for (stat, state) in [
            ("1234 (awa) S 1 1234 1234 0 -1", Some('S')),
            ("1234 (a) b) T 1 1234", Some('T')),
            ("1234 (tokio-runtime-w) t 1", Some('t')),
            ("1234 (awa", None),
            ("", None),
        ] {
            assert_eq!(stat_state(stat), state, "{stat}");
        }
        assert!(is_stopped('T') && is_stopped('t'));
        assert!(!is_stopped('S') && !is_stopped('R') && !is_stopped('D'));
    }

    #[tokio::test]
    async fn a_missing_binary_is_a_spawn_error_naming_it() {
        let dir = scratch("missing");
        let mut s = spec(&dir, "");
        s.runnable = Runnable::Binary(dir.join("no-such-awa"));
        let (tx, _rx) = mpsc::unbounded_channel();
        let err = ProcessFleet.spawn(s, tx).await.unwrap_err();
        assert!(
            err.to_string().starts_with("failed to start sh-1 ("),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
