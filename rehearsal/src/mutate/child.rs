//! A build's cells run as child `rehearse run --cell NAME` processes, up
//! to `--jobs` at once: started in the order given, each stopped past its
//! budget, and, once one outcome settles the build (a mutant killed), the
//! ones still running stopped and the rest never started.
//!
//! Each child is a whole run (its own throwaway cluster, fleet and report
//! folder); this module only starts, watches, stops and reads them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::run_error::RunError;
use super::stop::Stop;
use crate::observe::Verdict;

/// How often a running child is looked at.
const POLL: Duration = Duration::from_millis(200);

/// How long a stopped child has to clean up (its cell's fleet and
/// cluster) after SIGTERM before SIGKILL, which would leave its throwaway
/// cluster behind: generous, since siblings are stopped on every kill and
/// a busy machine makes their cleanup slow.
const STOP_GRACE: Duration = Duration::from_secs(120);

/// What one child run came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellVerdict {
    /// The cell passed.
    Pass,
    /// The cell failed: a kill.
    Fail,
    /// The harness could not judge it (not a kill).
    Inconclusive,
    /// It ran past its budget.
    Timeout,
    /// The run stopped before any cell: the build was refused.
    Error,
    /// Stopped because another cell had already settled the build.
    Stopped,
}

impl CellVerdict {
    /// The word the reports use.
    pub fn word(self) -> &'static str {
        match self {
            CellVerdict::Pass => "pass",
            CellVerdict::Fail => "fail",
            CellVerdict::Inconclusive => "inconclusive",
            CellVerdict::Timeout => "timeout",
            CellVerdict::Error => "error",
            CellVerdict::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for CellVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// How one cell went for one build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellOutcome {
    /// The cell.
    pub cell: String,
    /// What the child run came to.
    pub verdict: CellVerdict,
    /// The first rule or step failure, when it failed.
    pub rule: Option<String>,
    /// Wall time of the child run, ms (with its artifacts and cluster).
    pub elapsed_ms: u64,
    /// The cell's own time as its report gives it, ms (0 without a report).
    #[serde(default)]
    pub cell_ms: u64,
    /// The child's report folder (relative to the mutate folder), if it made one.
    pub report: Option<String>,
}

/// One cell to run: its name, the folder its run goes under, its budget.
#[derive(Clone, Debug)]
pub struct Job {
    /// The cell.
    pub cell: String,
    /// Where the child's report folder and `rehearse.log` go.
    pub under: PathBuf,
    /// Stopped past this (a timeout); `None`: never.
    pub budget: Option<Duration>,
}

/// A child run under way.
struct Running {
    job: Job,
    child: Child,
    started: Instant,
    /// Set once it was sent SIGTERM.
    stopping: Option<Stopping>,
}

/// A child sent SIGTERM: why, and when SIGKILL follows if it has not
/// exited by then.
#[derive(Clone, Copy, Debug)]
struct Stopping {
    why: Ended,
    kill_at: Instant,
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Exited,
    TimedOut,
    Stopped,
}

/// Runs `jobs` as children made by `command` (given the job, with its
/// output already pointed at the job's `rehearse.log`), up to `at_once`
/// at a time in the order given (a child being stopped keeps its place
/// until it is gone: it still holds its cluster). After each outcome,
/// `settles` says whether the build is decided: once a pass over the
/// children has looked at every one (so siblings that ended together
/// each keep their own verdict), those still running are stopped (their
/// outcomes say `stopped`) and the jobs not yet started are left out. A
/// child past its budget is sent SIGTERM and the others go on meanwhile;
/// its `timeout` comes when it is gone. `seen` is told each outcome as it
/// comes. Outcomes come back in the order they ended. When `stop` is
/// asked for, every child is stopped and waited for, and the result is
/// [`RunError::Interrupted`]. On an error no child is left running.
pub fn run_all(
    jobs: &[Job],
    at_once: u32,
    dir: &Path,
    command: &dyn Fn(&Job) -> Result<Command, RunError>,
    settles: &dyn Fn(&CellOutcome) -> bool,
    seen: &mut dyn FnMut(&CellOutcome),
    stop: &Stop,
) -> Result<Vec<CellOutcome>, RunError> {
    let at_once = at_once.max(1) as usize;
    let mut waiting = jobs.iter();
    let mut running: Vec<Running> = Vec::new();
    let mut done = Vec::new();
    let result = (|| {
        loop {
            stop.check()?;
            while running.len() < at_once {
                let Some(job) = waiting.next() else { break };
                running.push(start(job, command)?);
            }
            if running.is_empty() {
                return Ok(());
            }
            let mut decided = false;
            let mut i = 0;
            while i < running.len() {
                match poll(&mut running[i])? {
                    None => i += 1,
                    Some(ended) => {
                        let outcome = outcome(running.swap_remove(i), ended, dir)?;
                        seen(&outcome);
                        decided |= settles(&outcome);
                        done.push(outcome);
                    }
                }
            }
            if decided {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    })();
    // Settled, stopped or an error: whatever still runs is stopped and
    // reaped, all at once; one that exited before its SIGTERM keeps its
    // own verdict.
    let now = Instant::now();
    for r in &mut running {
        if r.stopping.is_none() && !matches!(r.child.try_wait(), Ok(Some(_))) {
            terminate(&r.child);
            r.stopping = Some(Stopping {
                why: Ended::Stopped,
                kill_at: now + STOP_GRACE,
            });
        }
    }
    reap_all(&mut running);
    if result.is_ok() {
        for r in running {
            let ended = r.stopping.map_or(Ended::Exited, |s| s.why);
            let o = outcome(r, ended, dir)?;
            seen(&o);
            done.push(o);
        }
    }
    result.map(|()| done)
}

/// Starts `job`'s child.
fn start(
    job: &Job,
    command: &dyn Fn(&Job) -> Result<Command, RunError>,
) -> Result<Running, RunError> {
    let fail = |detail: String| RunError::Cell {
        cell: job.cell.clone(),
        detail,
    };
    std::fs::create_dir_all(&job.under)
        .map_err(|e| fail(format!("could not create {}: {e}", job.under.display())))?;
    let log =
        std::fs::File::create(job.under.join("rehearse.log")).map_err(|e| fail(e.to_string()))?;
    let log2 = log.try_clone().map_err(|e| fail(e.to_string()))?;
    let mut cmd = command(job)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2);
    let child = cmd.spawn().map_err(|e| {
        fail(format!(
            "could not start {}: {e}",
            cmd.get_program().to_string_lossy()
        ))
    })?;
    Ok(Running {
        job: job.clone(),
        child,
        started: Instant::now(),
        stopping: None,
    })
}

/// Whether `r` has ended (exited, or, being stopped, gone), without
/// waiting: one past its budget is sent SIGTERM and looked at again on
/// the next pass, SIGKILLed once its grace is over.
fn poll(r: &mut Running) -> Result<Option<Ended>, RunError> {
    let ended = r.stopping.map_or(Ended::Exited, |s| s.why);
    match r.child.try_wait() {
        Ok(Some(_)) => return Ok(Some(ended)),
        Ok(None) => {}
        Err(e) => {
            return Err(RunError::Cell {
                cell: r.job.cell.clone(),
                detail: format!("waiting for the child run: {e}"),
            });
        }
    }
    match (r.stopping, r.job.budget) {
        (Some(s), _) if Instant::now() >= s.kill_at => {
            let _ = r.child.kill();
            let _ = r.child.wait();
            Ok(Some(ended))
        }
        (None, Some(budget)) if r.started.elapsed() > budget => {
            terminate(&r.child);
            r.stopping = Some(Stopping {
                why: Ended::TimedOut,
                kill_at: Instant::now() + STOP_GRACE,
            });
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// SIGTERM: rehearse stops its cell and cleans up.
fn terminate(child: &Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}

/// Waits for every child of `running` to be gone: each stopping one
/// SIGKILLed once its grace is over.
fn reap_all(running: &mut [Running]) {
    loop {
        let mut left = 0;
        for r in running.iter_mut() {
            if let Ok(Some(_)) = r.child.try_wait() {
                continue;
            }
            match r.stopping {
                Some(s) if Instant::now() >= s.kill_at => {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                }
                _ => left += 1,
            }
        }
        if left == 0 {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// What an ended child came to, from its report (or its log's last line
/// when it made none).
fn outcome(r: Running, ended: Ended, dir: &Path) -> Result<CellOutcome, RunError> {
    let elapsed_ms = ms(r.started.elapsed());
    let cell = r.job.cell;
    let report_dir = newest_report(&r.job.under);
    let report = report_dir
        .as_ref()
        .and_then(|d| d.strip_prefix(dir).ok())
        .map(|p| p.display().to_string());
    let bare = |verdict, rule| CellOutcome {
        cell: cell.clone(),
        verdict,
        rule,
        elapsed_ms,
        cell_ms: 0,
        report: report.clone(),
    };
    match ended {
        Ended::TimedOut => return Ok(bare(CellVerdict::Timeout, None)),
        Ended::Stopped => return Ok(bare(CellVerdict::Stopped, None)),
        Ended::Exited => {}
    }
    let Some(report_dir) = report_dir else {
        // No report: the run stopped before any cell (the build would
        // not even say its version, or the harness failed).
        let text = std::fs::read_to_string(r.job.under.join("rehearse.log")).unwrap_or_default();
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_owned();
        return Ok(bare(CellVerdict::Error, Some(last)));
    };
    let read =
        crate::report::read_json(&report_dir.join("report.json")).map_err(|e| RunError::Cell {
            cell: cell.clone(),
            detail: awa_runtime::error::chain(&e),
        })?;
    let Some(c) = read.cells.first() else {
        return Err(RunError::Cell {
            cell: cell.clone(),
            detail: format!("{} has no cell", report_dir.display()),
        });
    };
    let rule = c
        .findings
        .first()
        .map(|f| format!("{}: {}", f.rule.name(), f.message))
        .or_else(|| c.step_failures.first().cloned())
        .or_else(|| Some(c.verdict_reason.clone()).filter(|_| c.verdict != Verdict::Pass));
    let verdict = match c.verdict {
        Verdict::Pass => CellVerdict::Pass,
        Verdict::Fail => CellVerdict::Fail,
        Verdict::Inconclusive => CellVerdict::Inconclusive,
    };
    Ok(CellOutcome {
        verdict,
        rule,
        cell_ms: c.elapsed_ms,
        ..bare(verdict, None)
    })
}

/// The run folder a child made under `under` (the one holding report.json).
fn newest_report(under: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(under)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("report.json").is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Milliseconds, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder for one test, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p =
                std::env::temp_dir().join(format!("rehearse-child-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A job whose child is `sh -c SCRIPT` (no report: its verdict is
    /// `error` with the log's last line, unless stopped or timed out).
    fn sh(dir: &Path, cell: &str, budget: Option<Duration>) -> Job {
        Job {
            cell: cell.to_owned(),
            under: dir.join(cell),
            budget,
        }
    }

    fn script(job: &Job) -> Result<Command, RunError> {
        let body = match job.cell.as_str() {
            "quick" => "echo refused by the quick one; exit 1",
            _ => "exec sleep 30",
        };
        let mut c = Command::new("sh");
        c.args(["-c", body]);
        Ok(c)
    }

    #[test]
    fn a_settling_outcome_stops_the_running_cells_and_starts_no_more() {
        let dir = Scratch::new("settle");
        let jobs = [
            sh(dir.path(), "slow", None),
            sh(dir.path(), "quick", None),
            sh(dir.path(), "never", None),
        ];
        let mut seen = Vec::new();
        let started = Instant::now();
        let out = run_all(
            &jobs,
            2,
            dir.path(),
            &script,
            &|o| o.verdict == CellVerdict::Error,
            &mut |o| seen.push(o.cell.clone()),
            &Stop::new(),
        )
        .unwrap();
        let got: Vec<(&str, CellVerdict)> =
            out.iter().map(|o| (o.cell.as_str(), o.verdict)).collect();
        assert_eq!(
            got,
            [
                ("quick", CellVerdict::Error),
                ("slow", CellVerdict::Stopped)
            ]
        );
        assert_eq!(out[0].rule.as_deref(), Some("refused by the quick one"));
        assert_eq!(seen, ["quick", "slow"]);
        assert!(!dir.path().join("never").exists(), "a third cell started");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the slow cell was waited for"
        );
    }

    /// Children that each say whether another was running beside them.
    fn overlaps(at_once: u32, tag: &str) -> Vec<String> {
        let dir = Scratch::new(tag);
        let jobs: Vec<Job> = ["a", "b", "c"]
            .iter()
            .map(|c| sh(dir.path(), c, None))
            .collect();
        let command = |job: &Job| -> Result<Command, RunError> {
            let mut c = Command::new("sh");
            c.args([
                "-c",
                "touch running; sleep 0.3; o=alone; for f in ../*/running; do [ \"$f\" != ../$(basename \"$PWD\")/running ] && [ -e \"$f\" ] && o=beside; done; sleep 0.3; rm running; echo $o; exit 1",
            ])
            .current_dir(&job.under);
            Ok(c)
        };
        let out = run_all(
            &jobs,
            at_once,
            dir.path(),
            &command,
            &|_| false,
            &mut |_| {},
            &Stop::new(),
        )
        .unwrap();
        assert_eq!(out.len(), 3, "every cell runs when none settles");
        out.into_iter()
            .map(|o| o.rule.unwrap_or_default())
            .collect()
    }

    #[test]
    fn when_nothing_settles_every_cell_runs_and_never_more_than_at_once() {
        assert_eq!(overlaps(1, "one"), ["alone"; 3]);
        assert!(overlaps(3, "three").iter().any(|o| o == "beside"));
    }

    #[test]
    fn a_cell_past_its_budget_is_a_timeout() {
        let dir = Scratch::new("budget");
        let jobs = [sh(dir.path(), "slow", Some(Duration::from_millis(300)))];
        let started = Instant::now();
        let out = run_all(
            &jobs,
            4,
            dir.path(),
            &script,
            &|_| false,
            &mut |_| {},
            &Stop::new(),
        )
        .unwrap();
        assert_eq!(out[0].verdict, CellVerdict::Timeout);
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_child_that_cannot_start_is_an_error_and_leaves_nothing_running() {
        let dir = Scratch::new("start");
        let jobs = [
            sh(dir.path(), "slow", None),
            sh(dir.path(), "missing", None),
        ];
        let command = |job: &Job| -> Result<Command, RunError> {
            if job.cell == "missing" {
                return Ok(Command::new(dir.path().join("no-such-binary")));
            }
            script(job)
        };
        let started = Instant::now();
        let err = run_all(
            &jobs,
            2,
            dir.path(),
            &command,
            &|_| false,
            &mut |_| {},
            &Stop::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("could not start"), "{err}");
        // The slow child was stopped, not left to run its 30 s.
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    /// A child that cleans up on SIGTERM as `rehearse run` does, taking
    /// `cleanup` seconds and leaving a `cleaned` file behind when done;
    /// before that, `body`.
    fn cleans_up(job: &Job, body: &str, cleanup: &str) -> Command {
        let mut c = Command::new("sh");
        c.args([
            "-c",
            &format!(
                "trap 'kill $! 2>/dev/null; sleep {cleanup}; echo cleaned > cleaned; exit 143' TERM; {body}"
            ),
        ])
        .current_dir(&job.under);
        c
    }

    #[test]
    fn a_child_being_stopped_for_its_budget_holds_up_none_of_the_others() {
        let dir = Scratch::new("reap");
        // "stubborn" overruns its budget and takes 2 s to clean up; "quick"
        // ends meanwhile, and "next" starts and ends in its place.
        let jobs = [
            sh(dir.path(), "stubborn", Some(Duration::from_millis(300))),
            sh(dir.path(), "quick", None),
            sh(dir.path(), "next", None),
        ];
        let command = |job: &Job| -> Result<Command, RunError> {
            Ok(match job.cell.as_str() {
                "stubborn" => cleans_up(job, "sleep 30 & wait", "2"),
                "quick" => cleans_up(job, "sleep 1; echo quick done; exit 1", "0"),
                _ => cleans_up(job, "echo next done; exit 1", "0"),
            })
        };
        let out = run_all(
            &jobs,
            2,
            dir.path(),
            &command,
            &|_| false,
            &mut |_| {},
            &Stop::new(),
        )
        .unwrap();
        let got: Vec<(&str, CellVerdict)> =
            out.iter().map(|o| (o.cell.as_str(), o.verdict)).collect();
        assert_eq!(
            got,
            [
                ("quick", CellVerdict::Error),
                ("next", CellVerdict::Error),
                ("stubborn", CellVerdict::Timeout)
            ]
        );
        assert!(
            dir.path().join("stubborn/cleaned").exists(),
            "not left to clean up"
        );
    }

    #[test]
    fn a_sibling_that_ended_beside_the_settling_cell_keeps_its_own_verdict() {
        let dir = Scratch::new("sibling");
        let jobs = [
            sh(dir.path(), "killer", None),
            sh(dir.path(), "sibling", None),
            sh(dir.path(), "slow", None),
        ];
        // Both end together, between two passes; "slow" runs on.
        let command = |job: &Job| -> Result<Command, RunError> {
            Ok(match job.cell.as_str() {
                "slow" => cleans_up(job, "sleep 30 & wait", "0"),
                cell => cleans_up(job, &format!("sleep 0.3; echo {cell} failed; exit 1"), "0"),
            })
        };
        let out = run_all(
            &jobs,
            3,
            dir.path(),
            &command,
            &|o| o.cell == "killer",
            &mut |_| {},
            &Stop::new(),
        )
        .unwrap();
        let mut got: Vec<(&str, CellVerdict, Option<&str>)> = out
            .iter()
            .map(|o| (o.cell.as_str(), o.verdict, o.rule.as_deref()))
            .collect();
        // The two that ended come first, in whichever order they were seen.
        got[..2].sort_by_key(|(cell, _, _)| *cell);
        assert_eq!(
            got,
            [
                ("killer", CellVerdict::Error, Some("killer failed")),
                ("sibling", CellVerdict::Error, Some("sibling failed")),
                ("slow", CellVerdict::Stopped, None)
            ]
        );
    }

    #[test]
    fn a_stop_is_passed_to_every_child_and_waited_for() {
        let dir = Scratch::new("stop");
        let jobs = [
            sh(dir.path(), "a", None),
            sh(dir.path(), "b", None),
            sh(dir.path(), "c", None),
        ];
        let command = |job: &Job| Ok(cleans_up(job, "sleep 30 & wait", "0.5"));
        let stop = Stop::new();
        let asks = stop.clone();
        let asker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            asks.request();
        });
        let started = Instant::now();
        let mut seen = Vec::new();
        let err = run_all(
            &jobs,
            2,
            dir.path(),
            &command,
            &|_| false,
            &mut |o| seen.push(o.cell.clone()),
            &stop,
        )
        .unwrap_err();
        asker.join().unwrap();
        assert!(
            matches!(err, RunError::Interrupted { signal: "SIGTERM" }),
            "{err}"
        );
        // Each running child got SIGTERM and was waited for until it had
        // cleaned up; the third never started; no outcome was made up.
        for cell in ["a", "b"] {
            assert!(dir.path().join(cell).join("cleaned").exists(), "{cell}");
        }
        assert!(!dir.path().join("c").exists());
        assert!(seen.is_empty(), "{seen:?}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_stop_asked_before_the_first_cell_starts_none() {
        let dir = Scratch::new("early");
        let jobs = [sh(dir.path(), "a", None)];
        let stop = Stop::new();
        stop.request();
        let err = run_all(
            &jobs,
            1,
            dir.path(),
            &script,
            &|_| false,
            &mut |_| {},
            &stop,
        )
        .unwrap_err();
        assert!(matches!(err, RunError::Interrupted { .. }), "{err}");
        assert!(!dir.path().join("a").exists());
    }
}
