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
//! `cli` parses the flag into a [`Stress`] and the report records a
//! [`StressInfo`], words of `vocab::stress` that the event stream carries
//! too; this module starts the [`BusyLoad`] the pipeline holds.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};

use nix::unistd::Pid;

pub use crate::vocab::stress::{MAX_PER_CORE, MAX_PROCESSES, Stress, StressInfo};

/// The first argument of a busy process (`rehearse __stress-busy PID`):
/// hidden from `--help`, and what finds them in a process listing.
pub const BUSY_ARG: &str = "__stress-busy";

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
