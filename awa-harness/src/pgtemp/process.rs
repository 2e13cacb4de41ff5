//! The postmaster's process tree: signals to pids we started, its
//! children read from `/proc`, and killing the lot for a crash.

use std::fs;
use std::io;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{EXIT_POLL, PgError, STOP_TIMEOUT, io_err};

/// Sends `sig` to `pid`; callers only pass pids of processes we started
/// or found as their children.
pub(super) fn send_signal(pid: i32, sig: Signal) -> io::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).map_err(io::Error::from)
}

/// A process identity that survives pid reuse: pid plus start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PidStart {
    pid: i32,
    start_time: u64,
}

/// Parsed fields of `/proc/<pid>/stat`: (state, ppid, start time).
pub(super) fn read_stat(pid: i32) -> Option<(char, i32, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or
    // parentheses, so parse from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state), fields[1] field 4 (ppid), fields[19]
    // field 22 (starttime).
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, ppid, start))
}

/// Live children of `ppid`, found by scanning `/proc/*/stat`.
pub(super) fn children_of(ppid: i32) -> Vec<PidStart> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| match read_stat(pid) {
            Some((state, parent, start_time)) if parent == ppid && state != 'Z' => {
                Some(PidStart { pid, start_time })
            }
            _ => None,
        })
        .collect()
}

/// True once `proc` has exited (gone, a zombie, or its pid reused).
pub(super) fn is_gone(proc: PidStart) -> bool {
    match read_stat(proc.pid) {
        None => true,
        Some((state, _, start_time)) => state == 'Z' || start_time != proc.start_time,
    }
}

/// Waits (bounded) until every process in `procs` has exited, so that a
/// following restart does not find the old shared memory still attached.
pub(super) fn wait_all_gone(procs: &[PidStart], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while procs.iter().any(|p| !is_gone(*p)) && Instant::now() < deadline {
        std::thread::sleep(EXIT_POLL);
    }
}

/// Kills the postmaster `child` and all its children with SIGKILL and reaps
/// the postmaster.
///
/// The postmaster is frozen with SIGSTOP first, so that while we list its
/// children from `/proc` it can neither fork new ones nor reap killed ones
/// (keeping their pids from being reused). SIGKILL works on a stopped process.
pub(super) fn kill_tree(child: &mut Child) -> Result<(), PgError> {
    let pid = child.id() as i32;
    if child
        .try_wait()
        .map_err(|e| io_err(format!("check postmaster pid {pid}"), e))?
        .is_some()
    {
        return Ok(());
    }
    // Not yet reaped, so the pid is still ours and signalling it is safe.
    send_signal(pid, Signal::SIGSTOP)
        .map_err(|e| io_err(format!("stop postmaster pid {pid}"), e))?;
    let children = children_of(pid);
    for proc in &children {
        // A child may already be exiting; failure to signal it is harmless.
        let _ = send_signal(proc.pid, Signal::SIGKILL);
    }
    send_signal(pid, Signal::SIGKILL)
        .map_err(|e| io_err(format!("kill postmaster pid {pid}"), e))?;
    child
        .wait()
        .map_err(|e| io_err(format!("reap postmaster pid {pid}"), e))?;
    wait_all_gone(&children, STOP_TIMEOUT);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_self_parses() {
        let me = std::process::id() as i32;
        let (state, ppid, _) = read_stat(me).expect("own /proc stat");
        assert_ne!(state, 'Z');
        assert!(ppid >= 0);
    }
}
