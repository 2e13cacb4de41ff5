//! The CPU of every container of a run, counted by the kernel.
//!
//! The engine's stats stream samples a container about once a second and
//! stops when it ends, so the CPU of short containers (migrate, flip,
//! fence runs, a worker killed early) and the last second of every other
//! one are lost. Instead the run's containers are started under one parent
//! cgroup of their own (`HostConfig.cgroup_parent`, on an engine with the
//! `cgroupfs` driver): the kernel charges a task's CPU to every ancestor of
//! its cgroup, and the parent's counter keeps the time of children that
//! have ended and been removed. Reading it once at shutdown gives the
//! whole CPU of everything the run started in containers.
//!
//! The parent is `/rehearse/<pid>-<run id>`: the pid of the rehearse that
//! owns it lets a later run remove the empty parents of crashed runs.
//! Only a local engine's cgroups are visible here; with a remote engine
//! (`DOCKER_HOST=tcp://...`) the counter is not found and the backend
//! falls back to the stats samples, and says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The folder under the cgroup root that holds the runs' parents.
pub const ROOT: &str = "rehearse";

/// One mounted cgroup hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    /// Where it is mounted (`/sys/fs/cgroup/cpuacct`).
    path: PathBuf,
    /// cgroup v2 (`cgroup2`), else a v1 hierarchy.
    unified: bool,
    /// A v1 hierarchy with the `cpuacct` controller.
    cpuacct: bool,
}

/// The cgroup mounts listed in `/proc/self/mountinfo`-formatted `text`.
fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let path = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1).unwrap_or_default();
            match fstype {
                "cgroup" => Some(Mount {
                    path: PathBuf::from(path),
                    unified: false,
                    cpuacct: options.split(',').any(|o| o == "cpuacct"),
                }),
                "cgroup2" => Some(Mount {
                    path: PathBuf::from(path),
                    unified: true,
                    cpuacct: false,
                }),
                _ => None,
            }
        })
        .collect()
}

fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default()
}

/// CPU nanoseconds in a v1 `cpuacct.usage` or a v2 `cpu.stat` file.
fn read_usage_ns(dir: &Path, unified: bool) -> Option<u64> {
    if unified {
        let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| us * 1_000)
    } else {
        std::fs::read_to_string(dir.join("cpuacct.usage"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// The parent cgroup of one run's containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCgroup {
    /// `rehearse/<pid>-<run id>`, relative to each hierarchy's root.
    relative: String,
}

impl RunCgroup {
    /// The parent for run `run_id` of this rehearse.
    pub fn new(run_id: &str) -> RunCgroup {
        let safe: String = run_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        RunCgroup {
            relative: format!("{ROOT}/{}-{safe}", std::process::id()),
        }
    }

    /// What the engine is given as `cgroup_parent`.
    pub fn parent(&self) -> String {
        format!("/{}", self.relative)
    }

    /// Where the counter is read: the v1 `cpuacct` hierarchy, else v2.
    fn counter(&self) -> Option<(PathBuf, bool)> {
        let all = mounts();
        let v1 = all.iter().find(|m| m.cpuacct);
        let v2 = all.iter().find(|m| m.unified);
        v1.or(v2).map(|m| (m.path.join(&self.relative), m.unified))
    }

    /// Whether the container `id` runs under this parent on this machine
    /// (false for a remote engine, or one that ignored the parent).
    pub fn holds(&self, id: &str) -> bool {
        self.counter().is_some_and(|(dir, _)| dir.join(id).is_dir())
    }

    /// The CPU of everything that ran under the parent so far, in ns;
    /// `None` when the parent is not visible here.
    pub fn usage_ns(&self) -> Option<u64> {
        let (dir, unified) = self.counter()?;
        read_usage_ns(&dir, unified)
    }

    /// Removes the parent from every hierarchy (it must be empty: its
    /// containers removed). A child cgroup can linger a moment after its
    /// container is removed, so an EBUSY is retried briefly.
    pub fn remove(&self) {
        for mount in mounts() {
            let dir = mount.path.join(&self.relative);
            for _ in 0..20 {
                match std::fs::remove_dir(&dir) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    _ => break,
                }
            }
            // The shared folder, once no run uses it (fails while one does).
            let _ = std::fs::remove_dir(mount.path.join(ROOT));
        }
    }

    /// Removes the empty parents that crashed earlier runs left (their
    /// rehearse pid is gone); returns their names. A parent that still
    /// holds a container is not empty, and the kernel refuses to remove it.
    pub fn remove_stale(alive: impl Fn(i32) -> bool) -> Vec<String> {
        let mut removed = Vec::new();
        for mount in mounts() {
            let Ok(entries) = std::fs::read_dir(mount.path.join(ROOT)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let pid = name
                    .split_once('-')
                    .and_then(|(p, _)| p.parse::<i32>().ok());
                if pid.is_none_or(&alive) || !entry.path().is_dir() {
                    continue;
                }
                if std::fs::remove_dir(entry.path()).is_ok() && !removed.contains(&name) {
                    removed.push(name);
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_mounts_are_read_from_mountinfo() {
        let text = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 30 0:28 / /proc rw - proc proc rw";
        assert_eq!(
            parse_mounts(text),
            vec![
                Mount {
                    path: "/sys/fs/cgroup/unified".into(),
                    unified: true,
                    cpuacct: false
                },
                Mount {
                    path: "/sys/fs/cgroup/cpu,cpuacct".into(),
                    unified: false,
                    cpuacct: true
                },
                Mount {
                    path: "/sys/fs/cgroup/memory".into(),
                    unified: false,
                    cpuacct: false
                },
            ]
        );
    }

    #[test]
    fn usage_is_read_from_either_version() {
        let dir = std::env::temp_dir().join(format!("rehearse-cgroup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpuacct.usage"), "1234567890\n").unwrap();
        std::fs::write(
            dir.join("cpu.stat"),
            "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
        )
        .unwrap();
        assert_eq!(read_usage_ns(&dir, false), Some(1_234_567_890));
        assert_eq!(read_usage_ns(&dir, true), Some(2_500_000));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read_usage_ns(&dir, false), None);
    }

    #[test]
    fn a_run_parent_names_its_rehearse_pid() {
        let cg = RunCgroup::new("20261201T1150Z-ee2c458");
        assert_eq!(
            cg.parent(),
            format!("/rehearse/{}-20261201T1150Z_ee2c458", std::process::id())
        );
    }
}
