//! `--stress cpu=N`: a load nemesis beside the run.
//!
//! Release machines and CI runners are shared and noisy, and a verdict is
//! only worth having if it holds there (DESIGN §8, verdicts on a busy
//! machine: a starved cell is inconclusive, never a pass on missing
//! evidence nor a fail on the harness's own account). `--stress` makes the
//! noise on purpose: the run starts busy processes before its schedule is
//! chosen and its first cell starts, and they spin beside every cell until
//! the run ends.
//!
//! A busy process is rehearse itself, re-executed with the argument
//! [`BUSY_ARG`] and the pid of the rehearse it serves: a separate process
//! on the scheduler's run queue, as another job on a shared runner is,
//! not a thread that shares rehearse's own scheduling. None outlives its
//! rehearse, however the run ends: the run kills and reaps them when it
//! ends (returning, failing or unwinding from a panic, see [`BusyLoad`]);
//! the kernel kills them when rehearse dies (`PR_SET_PDEATHSIG`, as for
//! the fleet's processes); and each one leaves by itself as soon as its
//! parent is not the rehearse it was started for.
//!
//! This module is vocabulary at the bottom of the crate: `cli` parses the
//! flag into a [`Stress`], the pipeline starts a [`BusyLoad`], the report
//! records a [`StressInfo`].

use std::ffi::OsString;
use std::fmt;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;

use nix::unistd::Pid;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most busy processes `cpu=N` starts.
pub const MAX_PROCESSES: u32 = 256;

/// The most busy processes per core `cpu=Nx` starts: past this the
/// machine is not noisy but unusable, and every cell would starve.
pub const MAX_PER_CORE: u32 = 16;

/// The first argument of a busy process (`rehearse __stress-busy PID`):
/// hidden from `--help`, and what finds them in a process listing.
pub const BUSY_ARG: &str = "__stress-busy";

/// `--stress`: how much load to run beside the cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stress {
    /// `cpu=N`: N busy processes, whatever the cores.
    Processes(u32),
    /// `cpu=Nx`: N busy processes per core.
    PerCore(u32),
}

/// The accepted forms, for every refusal.
const FORMS: &str =
    "cpu=N (N busy processes, 1 to 256) or cpu=Nx (N per core, 1x to 16x), e.g. cpu=2x";

impl FromStr for Stress {
    type Err = String;

    fn from_str(s: &str) -> Result<Stress, String> {
        let refuse = |why: &str| format!("\"{s}\" {why}; give {FORMS}");
        let Some(value) = s.strip_prefix("cpu=") else {
            return Err(refuse("is not a CPU load"));
        };
        let (digits, per_core) = match value.strip_suffix('x') {
            Some(digits) => (digits, true),
            None => (value, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refuse("is not a count nor a multiple of the cores"));
        }
        let n = digits.parse::<u32>().unwrap_or(u32::MAX);
        match per_core {
            true if (1..=MAX_PER_CORE).contains(&n) => Ok(Stress::PerCore(n)),
            true => Err(refuse(&format!("is not 1x to {MAX_PER_CORE}x the cores"))),
            false if (1..=MAX_PROCESSES).contains(&n) => Ok(Stress::Processes(n)),
            false => Err(refuse(&format!("is not 1 to {MAX_PROCESSES} processes"))),
        }
    }
}

impl fmt::Display for Stress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stress::Processes(n) => write!(f, "cpu={n}"),
            Stress::PerCore(n) => write!(f, "cpu={n}x"),
        }
    }
}

/// As the flag's value (`"cpu=2x"`), in report.json.
impl Serialize for Stress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Stress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stress, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Stress {
    /// How many busy processes it means on a machine of `cores`.
    pub fn processes(self, cores: u32) -> u32 {
        match self {
            Stress::Processes(n) => n,
            Stress::PerCore(n) => n * cores.max(1),
        }
    }

    /// What report.json records of it on a machine of `cores`.
    pub fn info(self, cores: u32) -> StressInfo {
        StressInfo {
            spec: self,
            processes: self.processes(cores),
            cores,
        }
    }
}

/// The load a run ran beside, as report.json records it (format 1.15):
/// the verdicts of a stressed run were reached on a deliberately
/// oversubscribed machine, and its replay line repeats the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StressInfo {
    /// The flag's value (`cpu=2x`).
    pub spec: Stress,
    /// Busy processes it started.
    pub processes: u32,
    /// The machine's cores, as the scheduler counts them.
    pub cores: u32,
}

impl StressInfo {
    /// `4 busy processes (2x the 2 cores)`, for the terminal and the run table.
    pub fn describe(&self) -> String {
        let busy = format!(
            "{} busy process{}",
            self.processes,
            if self.processes == 1 { "" } else { "es" }
        );
        let cores = format!(
            "{} core{}",
            self.cores,
            if self.cores == 1 { "" } else { "s" }
        );
        match self.spec {
            Stress::PerCore(n) => format!("{busy} ({n}x the {cores})"),
            Stress::Processes(_) => format!("{busy} (on {cores})"),
        }
    }
}

/// The busy processes of one run. Dropping it kills and reaps every one
/// (SIGKILL, then wait), so the load ends with the run however the run's
/// code leaves the scope that holds it: a return, an error, a panic.
#[derive(Debug)]
pub struct BusyLoad {
    children: Vec<Child>,
}

impl BusyLoad {
    /// Starts `count` busy processes, each rehearse re-executed with
    /// [`BUSY_ARG`]. On failure the ones already started are stopped.
    ///
    /// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child
    /// ends: the caller's thread must outlive the load (the pipeline's
    /// thread, which holds it, does).
    pub fn start(count: u32) -> std::io::Result<BusyLoad> {
        let exe = std::env::current_exe()?;
        let parent = std::process::id();
        let mut load = BusyLoad {
            children: Vec::new(),
        };
        for _ in 0..count {
            let mut cmd = Command::new(&exe);
            cmd.arg(BUSY_ARG)
                .arg(parent.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // A Ctrl-C at the terminal reaches rehearse only: the run
                // winds its cells down under the same load, then stops it.
                .process_group(0);
            crate::fleet::process::die_with_rehearse(&mut cmd);
            // On an error, `load` drops here and stops the ones started.
            load.children.push(cmd.spawn()?);
        }
        Ok(load)
    }

    /// Kills and reaps every busy process (idempotent).
    pub fn stop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for mut child in self.children.drain(..) {
            // SIGKILL cannot be caught: the wait is short.
            let _ = child.wait();
        }
    }
}

impl Drop for BusyLoad {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The parent pid when `args` (a whole argv, program name first) asks for
/// a busy process: `rehearse __stress-busy PID`.
pub fn busy_request(args: impl IntoIterator<Item = OsString>) -> Option<u32> {
    let mut args = args.into_iter().skip(1);
    if args.next()? != BUSY_ARG {
        return None;
    }
    let parent = args.next()?.to_str()?.parse().ok()?;
    args.next().is_none().then_some(parent)
}

/// A busy process's whole life: keeps one core busy until the rehearse
/// with pid `parent` is no longer its parent, then exits.
pub fn spin(parent: u32) -> ! {
    let parent = Pid::from_raw(parent as i32);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    loop {
        // About a millisecond of arithmetic the optimizer cannot drop.
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x = std::hint::black_box(x);
        }
        if nix::unistd::getppid() != parent {
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_takes_a_count_or_a_multiple_of_the_cores() {
        for (text, stress) in [
            ("cpu=1", Stress::Processes(1)),
            ("cpu=4", Stress::Processes(4)),
            ("cpu=256", Stress::Processes(256)),
            ("cpu=04", Stress::Processes(4)),
            ("cpu=1x", Stress::PerCore(1)),
            ("cpu=2x", Stress::PerCore(2)),
            ("cpu=16x", Stress::PerCore(16)),
        ] {
            assert_eq!(text.parse::<Stress>(), Ok(stress), "{text}");
        }
        for text in [
            "",
            "cpu",
            "cpu=",
            "cpu=0",
            "cpu=257",
            "cpu=99999999999",
            "cpu=0x",
            "cpu=17x",
            "cpu=x",
            "cpu=-1",
            "cpu=+2",
            "cpu=1.5",
            "cpu=1.5x",
            "cpu=2xx",
            "cpu=2X",
            "cpu= 2",
            "cpu=2 ",
            "CPU=2",
            "mem=2",
            "io=2x",
            "cpu=2,io=1",
            "2",
            "2x",
        ] {
            let err = text.parse::<Stress>().expect_err(text);
            assert!(
                err.starts_with(&format!("\"{text}\" "))
                    && err.contains("cpu=N")
                    && err.contains("cpu=Nx"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn it_is_written_as_typed_and_counted_on_the_cores() {
        for text in ["cpu=3", "cpu=2x"] {
            let stress: Stress = text.parse().unwrap();
            assert_eq!(stress.to_string(), text);
            let json = serde_json::to_string(&stress).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Stress>(&json).unwrap(), stress);
        }
        assert!(serde_json::from_str::<Stress>("\"cpu=0\"").is_err());
        assert_eq!(Stress::PerCore(2).processes(2), 4);
        assert_eq!(Stress::PerCore(2).processes(0), 2);
        assert_eq!(Stress::Processes(3).processes(64), 3);
        assert_eq!(
            Stress::PerCore(2).info(2).describe(),
            "4 busy processes (2x the 2 cores)"
        );
        assert_eq!(
            Stress::Processes(1).info(1).describe(),
            "1 busy process (on 1 core)"
        );
    }

    #[test]
    fn only_the_exact_busy_argv_asks_for_a_busy_process() {
        let argv = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(busy_request(argv(&["rehearse", BUSY_ARG, "42"])), Some(42));
        for words in [
            &["rehearse"][..],
            &["rehearse", "run"],
            &["rehearse", BUSY_ARG],
            &["rehearse", BUSY_ARG, "me"],
            &["rehearse", BUSY_ARG, "42", "more"],
            &["rehearse", "--matrix", BUSY_ARG, "42"],
        ] {
            assert_eq!(busy_request(argv(words)), None, "{words:?}");
        }
    }
}
