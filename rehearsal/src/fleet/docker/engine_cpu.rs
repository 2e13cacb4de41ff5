//! The container engine's own CPU while a run used it.
//!
//! The run's cgroup counts what runs inside its containers. The work the
//! engine does for them runs outside: the daemon and containerd answering
//! the run's calls, a shim per container, `runc` starting and signalling
//! them and, with the `fuse-overlayfs` storage driver, a FUSE process per
//! container serving every file read and write of the container's root
//! file system. On the two-core machine five docker cells kept CPU
//! pressure near 99% with nothing else running, while the containers'
//! counter said a third of that: a floor and a `--jobs auto` sized from
//! the containers alone packed cells the machine could not carry.
//!
//! An [`EngineMeter`] samples the engine's processes (by name, on this
//! machine: a local engine) once a [`SAMPLE_EVERY`] on a thread of its
//! own, and [`EngineMeter::stop`] gives the CPU they used between start
//! and stop. A process that ends between two samples loses its last
//! second, and short-lived `runc` calls mostly go unseen, so the figure
//! is a lower bound. It also counts the engine's work for anything else
//! it runs meanwhile (another run's containers): the engine is shared,
//! and its load on this machine is what the run had to live with.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the engine's processes are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The name prefixes (`/proc/<pid>/comm`, cut at 15 bytes) of the
/// engine's processes: the daemon, containerd and its shims, the OCI
/// runtime, the FUSE storage driver and the port proxy.
pub const ENGINE_PROCESSES: [&str; 5] = [
    "dockerd",
    "containerd",
    "runc",
    "fuse-overlayfs",
    "docker-proxy",
];

/// One process's CPU as `/proc/<pid>/stat` gives it: its start time
/// (which, with the pid, names it across pid reuse) and user plus system
/// time, both in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcCpu {
    /// Field 22, `starttime`.
    pub started: u64,
    /// Fields 14 and 15, `utime + stime`.
    pub ticks: u64,
}

/// The name and CPU of a `/proc/<pid>/stat` text; `None` when it does not
/// parse. The name sits in parentheses and may hold spaces and
/// parentheses itself, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<(String, ProcCpu)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_owned();
    // After the name: field 3 (state) onwards.
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some((
        name,
        ProcCpu {
            started: field(22)?,
            ticks: field(14)? + field(15)?,
        },
    ))
}

/// Whether a process of this name is one of `names` (by prefix).
pub fn is_named(name: &str, names: &[&str]) -> bool {
    names.iter().any(|p| name.starts_with(p))
}

/// What the meter keeps per process: its ticks when first seen (0 for a
/// process that started after the meter) and when last seen.
#[derive(Clone, Copy, Debug)]
struct Seen {
    base: u64,
    last: u64,
}

/// Engine CPU over a window, from successive readings.
#[derive(Debug, Default)]
pub struct Tally {
    seen: HashMap<(u32, u64), Seen>,
    readings: u64,
}

impl Tally {
    /// Takes one reading of the engine's processes, `(pid, cpu)`. On the
    /// first reading every process is a baseline; a process first seen
    /// later started inside the window, so all of its time counts.
    pub fn read(&mut self, procs: impl IntoIterator<Item = (u32, ProcCpu)>) {
        let first = self.readings == 0;
        for (pid, cpu) in procs {
            self.seen
                .entry((pid, cpu.started))
                .and_modify(|s| s.last = s.last.max(cpu.ticks))
                .or_insert(Seen {
                    base: if first { cpu.ticks } else { 0 },
                    last: cpu.ticks,
                });
        }
        self.readings += 1;
    }

    /// Clock ticks used inside the window; `None` when no reading found
    /// an engine process (a remote engine, or none named as expected).
    pub fn ticks(&self) -> Option<u64> {
        (!self.seen.is_empty()).then(|| self.seen.values().map(|s| s.last - s.base).sum())
    }
}

/// Every process of `names` on this machine now, from `/proc`.
fn processes(names: &[&str]) -> Vec<(u32, ProcCpu)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (name, cpu) = parse_stat(&text)?;
            is_named(&name, names).then_some((pid, cpu))
        })
        .collect()
}

/// The kernel's clock ticks per second (`_SC_CLK_TCK`), 100 where it
/// cannot be read.
fn ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// A running sampler of the engine's CPU.
#[derive(Debug)]
pub struct EngineMeter {
    names: &'static [&'static str],
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    thread: Option<JoinHandle<()>>,
}

impl EngineMeter {
    /// Takes the baseline reading of the engine's processes now and
    /// keeps reading every [`SAMPLE_EVERY`] until stopped.
    pub fn start() -> EngineMeter {
        EngineMeter::of(&ENGINE_PROCESSES)
    }

    /// The same over the processes `names` name.
    fn of(names: &'static [&'static str]) -> EngineMeter {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        if let Ok(mut t) = tally.lock() {
            t.read(processes(names));
        }
        let thread = {
            let (stop, tally) = (stop.clone(), tally.clone());
            std::thread::Builder::new()
                .name("engine-cpu".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(SAMPLE_EVERY);
                        let procs = processes(names);
                        if let Ok(mut t) = tally.lock() {
                            t.read(procs);
                        }
                    }
                })
                .ok()
        };
        EngineMeter {
            names,
            stop,
            tally,
            thread,
        }
    }

    /// Takes a last reading and gives the engine's CPU since the start,
    /// in ms; `None` when no engine process was ever seen.
    pub fn stop(mut self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
        let mut tally = self.tally.lock().ok()?;
        tally.read(processes(self.names));
        Some(tally.ticks()? * 1_000 / ticks_per_second())
    }
}

impl Drop for EngineMeter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line of `name` with `utime`, `stime` and `starttime`.
    fn stat(pid: u32, name: &str, utime: u64, stime: u64, started: u64) -> String {
        format!(
            "{pid} ({name}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 12 0 {started} 1000 200 0"
        )
    }

    #[test]
    fn stat_lines_give_name_cpu_and_start_even_with_odd_names() {
        let (name, cpu) = parse_stat(&stat(42, "fuse-overlayfs", 120, 30, 9_000)).expect("parses");
        assert_eq!(name, "fuse-overlayfs");
        assert_eq!(
            cpu,
            ProcCpu {
                started: 9_000,
                ticks: 150
            }
        );
        // A name with a space and a parenthesis: fields count from the last `)`.
        let (name, cpu) = parse_stat(&stat(7, "a) b", 5, 6, 77)).expect("parses");
        assert_eq!((name.as_str(), cpu.ticks, cpu.started), ("a) b", 11, 77));
        assert_eq!(parse_stat("12 (cut"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn engine_processes_are_told_by_name() {
        for name in [
            "dockerd",
            "containerd",
            "containerd-shim",
            "runc",
            "fuse-overlayfs",
            "docker-proxy",
        ] {
            assert!(is_named(name, &ENGINE_PROCESSES), "{name}");
        }
        for name in ["postgres", "awa", "rehearse", "bash", "cargo"] {
            assert!(!is_named(name, &ENGINE_PROCESSES), "{name}");
        }
    }

    #[test]
    fn the_tally_counts_the_window_only() {
        let cpu = |started, ticks| ProcCpu { started, ticks };
        let mut t = Tally::default();
        assert_eq!(t.ticks(), None);
        // Baseline: the daemon has used 1,000 ticks before the run.
        t.read([(10, cpu(1, 1_000))]);
        assert_eq!(t.ticks(), Some(0));
        // The daemon works 50 ticks; a FUSE process starts and works 30.
        t.read([(10, cpu(1, 1_050)), (20, cpu(500, 30))]);
        assert_eq!(t.ticks(), Some(80));
        // The FUSE process ends (its 30 stay counted) and its pid is
        // reused by another that works 5: a new process, not a reset.
        t.read([(10, cpu(1, 1_060)), (20, cpu(900, 5))]);
        assert_eq!(t.ticks(), Some(60 + 30 + 5));
    }

    #[test]
    fn a_meter_counts_a_busy_process_of_its_names_started_after_it() {
        // A real busy process under a name no engine uses (`yes` copied
        // as `rm-PID`, this test process's own, so a test run beside this
        // one meters only its own copy), started after the meter: its CPU
        // counts in full, and no other process does.
        let name: &'static str = Box::leak(format!("rm-{}", std::process::id()).into_boxed_str());
        let names: &'static [&'static str] = Box::leak(vec![name].into_boxed_slice());
        let dir = std::env::temp_dir().join(format!("engine-cpu-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let busy = dir.join(name);
        std::fs::copy("/usr/bin/yes", &busy).expect("copies yes");
        let meter = EngineMeter::of(names);
        let started = std::time::Instant::now();
        let mut child = std::process::Command::new(&busy)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("starts");
        std::thread::sleep(Duration::from_millis(500));
        let ms = meter.stop();
        // Measured, not timed: the bound is the process's own wall time
        // up to the reading (a sleep overshoots on a loaded machine), plus
        // one clock tick of rounding. A single-threaded process cannot use
        // more CPU than that, whatever else runs.
        let lived = started.elapsed().as_millis() as u64 + 10;
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        let ms = ms.expect("the process was seen");
        // It was seen running: at least one tick of CPU is counted.
        assert!(
            (10..=lived).contains(&ms),
            "{ms} ms of CPU in {lived} ms of life"
        );
        // Nothing of that name runs now: a meter sees no process.
        assert_eq!(EngineMeter::of(names).stop(), None);
    }
}
