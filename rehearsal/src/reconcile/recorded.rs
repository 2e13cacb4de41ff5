//! The exactly-once rules re-applied to a recorded [`History`], without
//! the database: `rehearse verify`'s half of reconciliation.
//!
//! Each rule here is the SQL of `awa_runtime::store::audit` restated over
//! the recorded rows (the job audit's `facts -> planned -> judged ->
//! flagged`, the terminal mismatch check, the stuck read, the cron
//! audit), with the same designed terminals (`Mode::designed_terminal`
//! and the audit's own first-attempt contract). The answers go through
//! `rules::findings`, the very function that names the live audit's
//! answers, so a finding made here and one made on the live database read
//! alike and compare field by field.

use std::collections::{BTreeMap, BTreeSet};

use awa_runtime::store::audit::{
    CronFault, JobAudit, MAX_IDS, Offenders, Stuck, first_attempt_differs, first_attempt_raises_max,
};
use awa_runtime::workload::Mode;

use super::history::{CANCELLED, CRON, History, UNCERTAIN};
use super::rules;
use super::storage::Storage;
use crate::matrix::FindingRule;
use crate::observe::{Finding, Observations};

/// The rules a recorded history is enough to judge.
pub const RECORDED_RULES: [FindingRule; 8] = [
    FindingRule::Lost,
    FindingRule::Duplicate,
    FindingRule::WrongState,
    FindingRule::WrongAttempt,
    FindingRule::Stuck,
    FindingRule::DoubleExecution,
    FindingRule::TerminalMismatch,
    FindingRule::CronMissedFire,
];

/// Whether `rule` is judged from the recorded history ([`RECORDED_RULES`]
/// and the cron double fire, judged with the missed one).
pub fn is_recorded(rule: FindingRule) -> bool {
    RECORDED_RULES.contains(&rule) || rule == FindingRule::CronDoubleFire
}

/// Every finding of the exactly-once rules on `history`, in the order
/// reconciliation makes them.
pub fn findings(history: &History) -> Vec<Finding> {
    let storage = Storage {
        jobs: job_audit(history),
        stuck: stuck(history),
        mismatched: mismatches(history),
        cron: cron_faults(history),
        ..Storage::default()
    };
    // No rescue is recorded, so no stale_after is needed to judge one.
    let mut found: Vec<Finding> = rules::findings(&storage, &Observations::default(), 0)
        .into_iter()
        .filter(|f| is_recorded(f.rule))
        .collect();
    found.sort_by_key(|f| f.rule);
    found
}

/// Ids in order, the first [`MAX_IDS`] kept, with the first one's account.
struct Gather {
    count: i64,
    ids: Vec<i64>,
    example: Option<String>,
}

impl Gather {
    fn new() -> Gather {
        Gather {
            count: 0,
            ids: Vec::new(),
            example: None,
        }
    }

    /// Add `id` (called in ascending id order); `example` is asked for once.
    fn add(&mut self, id: i64, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.ids.len() < MAX_IDS {
            self.ids.push(id);
        }
        if self.example.is_none() {
            self.example = Some(example());
        }
    }

    fn done(self) -> Offenders {
        Offenders {
            count: self.count,
            ids: self.ids,
            example: self.example,
        }
    }
}

/// One job's recorded facts (the audit's `facts` row).
#[derive(Default)]
struct Facts<'h> {
    audited: bool,
    uncertain: bool,
    cron: bool,
    /// Cancelled by an operator while live: not judged by its mode.
    op_cancelled: bool,
    mode: Option<&'h str>,
    max_attempts: i32,
    live: bool,
    runs: i32,
    completions: i32,
    interrupted: i32,
    released: i32,
    stale: i32,
    first_interrupted: bool,
    /// Runs numbered otherwise than the run before them leaves them, and
    /// the first one's account.
    misnumbered: i32,
    misnumbered_how: Option<String>,
    records: i32,
    state: Option<&'h str>,
    attempt: i32,
}

/// The designed terminal of `mode` at `max_attempts`, as the audit's
/// `designed` table has it: `(state, attempt_base, attempt_per_max,
/// first_differs, raises_max)`; an unknown mode has none.
fn designed(mode: Option<&str>) -> Option<(&'static str, i32, i32, bool, bool)> {
    const PROBE: i32 = 1_000;
    let mode = Mode::parse(mode?)?;
    let (state, at_probe) = mode.designed_terminal(PROBE);
    let per_max = mode.designed_terminal(PROBE + 1).1 - at_probe;
    Some((
        state,
        at_probe - per_max * PROBE,
        per_max,
        first_attempt_differs(mode),
        first_attempt_raises_max(mode),
    ))
}

/// The job audit (`audit::JOB_AUDIT`) over the recorded rows: the facts
/// of each job gathered, then counted and judged one job at a time.
fn job_audit(h: &History) -> JobAudit {
    let mut facts = audited_jobs(h);
    count_executions(h, &mut facts);
    count_terminals(h, &mut facts);
    let mut out = JobAudit::default();
    let mut offences = Offences::new();
    for (&id, f) in &facts {
        count_job(&mut out, f);
        offences.judge(id, f);
    }
    offences.into_audit(&mut out);
    out
}

/// The audited jobs' own facts (flags, mode, cap), and which are live.
fn audited_jobs(h: &History) -> BTreeMap<i64, Facts<'_>> {
    let mut facts: BTreeMap<i64, Facts<'_>> = BTreeMap::new();
    let j = &h.jobs;
    for (i, &id) in j.id.iter().enumerate() {
        facts.insert(
            id,
            Facts {
                audited: true,
                uncertain: j.flags[i] & UNCERTAIN != 0,
                cron: j.flags[i] & CRON != 0,
                op_cancelled: j.flags[i] & CANCELLED != 0,
                mode: Some(h.text(j.mode[i])),
                max_attempts: j.max_attempts[i],
                ..Facts::default()
            },
        );
    }
    for &id in &h.live.job {
        if let Some(f) = facts.get_mut(&id) {
            f.live = true;
        }
    }
    facts
}

/// Each audited job's runs by how they ended, and the runs numbered
/// otherwise than the run before them leaves them.
fn count_executions<'h>(h: &'h History, facts: &mut BTreeMap<i64, Facts<'h>>) {
    let e = &h.executions;
    for (i, id) in e.job.iter().enumerate() {
        // Only audited jobs' executions are counted, as the audit joins them.
        let Some(f) = facts.get_mut(id) else { continue };
        let outcome = e.outcome[i].map(|o| h.text(o));
        // The run before, in the recorded order (job, run lease).
        if i > 0 && e.job[i - 1] == *id && e.lease[i - 1] == e.lease[i] - 1 {
            let prev = e.outcome[i - 1].map(|o| h.text(o));
            let due = e.attempt[i - 1] + 1 - i32::from(prev == Some("released"));
            if e.attempt[i] != due {
                f.misnumbered += 1;
                f.misnumbered_how.get_or_insert_with(|| {
                    format!(
                        "run lease {} ran attempt {} after run lease {} ended {} on attempt {}, so it was due attempt {due}",
                        e.lease[i],
                        e.attempt[i],
                        e.lease[i - 1],
                        prev.unwrap_or("never"),
                        e.attempt[i - 1]
                    )
                });
            }
        }
        let interrupted = outcome.is_none_or(|o| o.starts_with("rescued_"));
        f.runs += 1;
        f.completions += i32::from(outcome == Some("completed"));
        f.interrupted += i32::from(interrupted);
        f.released += i32::from(outcome == Some("released"));
        f.stale += i32::from(outcome == Some("stale"));
        f.first_interrupted |= e.attempt[i] == 1 && interrupted;
    }
}

/// Every job's terminal records (an unaudited job's too): how many, the
/// least state and the highest attempt.
fn count_terminals<'h>(h: &'h History, facts: &mut BTreeMap<i64, Facts<'h>>) {
    let t = &h.terminals;
    for (i, &id) in t.job.iter().enumerate() {
        let f = facts.entry(id).or_default();
        let state = h.text(t.state[i]);
        f.records += 1;
        f.state = Some(f.state.map_or(state, |s| s.min(state)));
        f.attempt = if f.records == 1 {
            t.attempt[i]
        } else {
            f.attempt.max(t.attempt[i])
        };
    }
}

/// What the job should have ended as, (state, attempt): its mode's
/// designed terminal, moved on by its interruptions, failed past its cap.
fn expected_end(f: &Facts<'_>) -> (&'static str, i32) {
    let d = designed(f.mode);
    let designed_state = d.map_or("failed", |d| d.0);
    let planned_attempt = match d {
        Some((_, _, 1, _, _)) => f.max_attempts,
        _ => {
            d.map_or(1, |d| d.1) + f.interrupted
                - i32::from(d.is_some_and(|d| d.3) && f.first_interrupted)
        }
    };
    let cap = f.max_attempts + i32::from(d.is_some_and(|d| d.4) && !f.first_interrupted);
    let expected_state = if planned_attempt > cap {
        "failed"
    } else {
        designed_state
    };
    (expected_state, planned_attempt.min(cap))
}

/// One job's share of the audit's counts.
fn count_job(out: &mut JobAudit, f: &Facts<'_>) {
    if f.audited {
        out.audited += 1;
        out.terminal += i64::from(f.records);
        out.interrupted_runs += i64::from(f.interrupted + f.released);
        out.stale_runs += i64::from(f.stale);
    }
    out.uncertain += i64::from(f.uncertain);
    out.uncertain_found += i64::from(f.uncertain && (f.records > 0 || f.live));
    out.cron += i64::from(f.cron);
    out.live += i64::from(f.live);
}

/// The jobs each of the audit's rules flags, gathered in id order.
struct Offences {
    lost: Gather,
    duplicate: Gather,
    wrong_state: Gather,
    wrong_attempt: Gather,
    double_completion: Gather,
    excess_runs: Gather,
    unaccounted: Gather,
    misnumbered: Gather,
}

impl Offences {
    fn new() -> Offences {
        Offences {
            lost: Gather::new(),
            duplicate: Gather::new(),
            wrong_state: Gather::new(),
            wrong_attempt: Gather::new(),
            double_completion: Gather::new(),
            excess_runs: Gather::new(),
            unaccounted: Gather::new(),
            misnumbered: Gather::new(),
        }
    }

    /// Job `id` judged by every rule (called in ascending id order).
    fn judge(&mut self, id: i64, f: &Facts<'_>) {
        let mode = f.mode.unwrap_or("");
        let (expected_state, expected_attempt) = expected_end(f);
        let state = f.state.unwrap_or("");
        let account = || {
            format!(
                "job {id} ({mode}, max_attempts {}, {} interrupted attempt(s)) ended ({state}, {}), expected ({expected_state}, {expected_attempt})",
                f.max_attempts, f.interrupted, f.attempt
            )
        };
        if !f.audited {
            self.unaccounted.add(id, String::new);
        }
        if f.audited && !f.uncertain && f.records == 0 && !f.live {
            self.lost.add(id, || format!("job {id} ({mode})"));
        }
        if f.records > 1 {
            let mode = f.mode.unwrap_or("not audited");
            self.duplicate.add(id, || {
                format!("job {id} ({mode}) has {} terminal records", f.records)
            });
        }
        if f.audited && f.records == 1 && !f.op_cancelled && state != expected_state {
            self.wrong_state.add(id, account);
        } else if f.audited
            && f.records == 1
            && !f.op_cancelled
            && state == expected_state
            && f.attempt != expected_attempt
        {
            self.wrong_attempt.add(id, account);
        }
        if f.audited && f.misnumbered > 0 {
            self.misnumbered.add(id, || {
                format!(
                    "job {id} ({mode}): {}",
                    f.misnumbered_how.as_deref().unwrap_or_default()
                )
            });
        }
        if f.completions > 1 {
            let mode = f.mode.unwrap_or("not audited");
            self.double_completion.add(id, || {
                format!(
                    "job {id} ({mode}) has {} executions that completed",
                    f.completions
                )
            });
        }
        if f.audited && f.records >= 1 && f.runs > f.attempt + f.stale + f.released {
            self.excess_runs.add(id, || {
                format!(
                    "job {id} ({mode}) ran {} times but ended on attempt {} ({} released, {} stale)",
                    f.runs, f.attempt, f.released, f.stale
                )
            });
        }
    }

    /// The flagged jobs into the audit (the unaccounted ones without an example).
    fn into_audit(self, out: &mut JobAudit) {
        out.lost = self.lost.done();
        out.duplicate = self.duplicate.done();
        out.wrong_state = self.wrong_state.done();
        out.wrong_attempt = self.wrong_attempt.done();
        out.misnumbered = self.misnumbered.done();
        out.double_completion = self.double_completion.done();
        out.excess_runs = self.excess_runs.done();
        let mut unaccounted = self.unaccounted.done();
        unaccounted.example = None;
        out.unaccounted = unaccounted;
    }
}

/// Live rows and open claims (`audit::STUCK`).
fn stuck(h: &History) -> Stuck {
    let jobs: BTreeSet<i64> = h.live.job.iter().chain(&h.open_claims).copied().collect();
    let first_live = (0..h.live.job.len()).min_by_key(|&i| h.live.job[i]);
    Stuck {
        jobs: Offenders {
            count: jobs.len() as i64,
            ids: jobs.iter().copied().take(MAX_IDS).collect(),
            example: first_live.map(|i| {
                format!(
                    "job {} is still {} (attempt {})",
                    h.live.job[i],
                    h.text(h.live.state[i]),
                    h.live.attempt[i]
                )
            }),
        },
        live_rows: h.live.job.len() as i64,
        open_claims: h.open_claims.len() as i64,
    }
}

/// Terminal records that are not the outcome of the job's last run
/// (`audit::TERMINAL_MISMATCH`).
fn mismatches(h: &History) -> Offenders {
    let e = &h.executions;
    // (job, lease) -> (attempt, outcome); job -> newest lease.
    let mut runs: BTreeMap<(i64, i64), (i32, Option<&str>)> = BTreeMap::new();
    let mut last: BTreeMap<i64, i64> = BTreeMap::new();
    for i in 0..e.job.len() {
        runs.insert(
            (e.job[i], e.lease[i]),
            (e.attempt[i], e.outcome[i].map(|o| h.text(o))),
        );
        let newest = last.entry(e.job[i]).or_insert(e.lease[i]);
        *newest = (*newest).max(e.lease[i]);
    }
    // The `cancelled` record of a job an operator cancelled while live is
    // the operator's, not a run's: not judged.
    let operator: BTreeSet<i64> = (0..h.jobs.id.len())
        .filter(|&i| h.jobs.flags[i] & CANCELLED != 0)
        .map(|i| h.jobs.id[i])
        .collect();
    let d = &h.disowned_runs;
    let disowned: BTreeSet<(i64, i64)> =
        d.job.iter().copied().zip(d.lease.iter().copied()).collect();
    let t = &h.terminals;
    let mut wrong: BTreeMap<i64, String> = BTreeMap::new();
    for i in 0..t.job.len() {
        let (job, lease, attempt) = (t.job[i], t.lease[i], t.attempt[i]);
        let (state, source) = (h.text(t.state[i]), h.text(t.source[i]));
        if state == "cancelled" && operator.contains(&job) {
            continue;
        }
        let why = match runs.get(&(job, lease)) {
            None => Some(format!(
                "job {job}: its {source} record ({state}, attempt {attempt}) names run lease {lease}, which no execution of the job ran"
            )),
            Some(&(ran, _)) if ran != attempt => Some(format!(
                "job {job}: its {source} record ({state}) says attempt {attempt}, but run lease {lease} ran attempt {ran}"
            )),
            Some(_) if last.get(&job).is_some_and(|&l| l != lease) => Some(format!(
                "job {job}: its {source} record ({state}, attempt {attempt}) names run lease {lease}, but the job last ran under run lease {}",
                last[&job]
            )),
            Some(&(_, outcome)) if source != "dead_letter" && outcome != Some(state) => {
                Some(format!(
                    "job {job}: its {source} record says {state} (attempt {attempt}), but the execution of run lease {lease} ended {}",
                    outcome.unwrap_or("never")
                ))
            }
            Some(&(_, outcome))
                if disowned.contains(&(job, lease))
                    && !(source == "dead_letter"
                        && outcome.is_some_and(|o| o.starts_with("rescued_"))) =>
            {
                Some(format!(
                    "job {job}: its {source} record ({state}, attempt {attempt}) names run lease {lease}, whose own run reported that lease lost: another result closed it"
                ))
            }
            Some(_) => None,
        };
        if let Some(why) = why {
            wrong.entry(job).or_insert(why);
        }
    }
    Offenders {
        count: wrong.len() as i64,
        ids: wrong.keys().copied().take(MAX_IDS).collect(),
        example: wrong.into_values().next(),
    }
}

/// Fire times that did not yield exactly one job, terminal at most once
/// (`audit::CRON_AUDIT`).
fn cron_faults(h: &History) -> Vec<CronFault> {
    let mut due: BTreeSet<(&str, i64)> = BTreeSet::new();
    for w in &h.cron_windows {
        if w.every_ms <= 0 {
            continue;
        }
        let mut t = (w.from_ms.div_euclid(w.every_ms) + 1) * w.every_ms;
        let last = w.to_ms.div_euclid(w.every_ms) * w.every_ms;
        while t <= last {
            due.insert((w.name.as_str(), t));
            t += w.every_ms;
        }
    }
    let mut records: BTreeMap<i64, i64> = BTreeMap::new();
    for &job in &h.terminals.job {
        *records.entry(job).or_default() += 1;
    }
    let c = &h.cron_claims;
    let mut claims: BTreeMap<(&str, i64), BTreeSet<i64>> = BTreeMap::new();
    for i in 0..c.job.len() {
        claims
            .entry((h.text(c.name[i]), c.fire_ms[i]))
            .or_default()
            .insert(c.job[i]);
    }
    due.into_iter()
        .filter_map(|(name, fire_ms)| {
            let job_ids: Vec<i64> = claims
                .get(&(name, fire_ms))
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default();
            let max_records = job_ids
                .iter()
                .map(|j| records.get(j).copied().unwrap_or(0))
                .max()
                .unwrap_or(0);
            (job_ids.len() != 1 || max_records > 1).then(|| CronFault {
                name: name.to_owned(),
                fire_ms,
                job_ids,
                max_records,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::history::{Executions, Jobs, Live, Terminals};

    /// A history builder: jobs by mode, runs, terminal records.
    struct Build(History);

    impl Build {
        fn new() -> Build {
            Build(History::new("cell"))
        }
        fn job(mut self, id: i64, mode: &str, flags: u8) -> Build {
            let m = self.0.word(mode).unwrap();
            let j: &mut Jobs = &mut self.0.jobs;
            j.id.push(id);
            j.mode.push(m);
            j.max_attempts.push(3);
            j.flags.push(flags);
            self
        }
        fn ran(mut self, id: i64, lease: i64, attempt: i32, outcome: Option<&str>) -> Build {
            let o = outcome.map(|o| self.0.word(o).unwrap());
            let e: &mut Executions = &mut self.0.executions;
            e.job.push(id);
            e.lease.push(lease);
            e.attempt.push(attempt);
            e.outcome.push(o);
            self
        }
        fn ended(mut self, id: i64, lease: i64, attempt: i32, state: &str, source: &str) -> Build {
            let (s, src) = (self.0.word(state).unwrap(), self.0.word(source).unwrap());
            let t: &mut Terminals = &mut self.0.terminals;
            t.job.push(id);
            t.lease.push(lease);
            t.attempt.push(attempt);
            t.state.push(s);
            t.source.push(src);
            self
        }
        /// A job that completed once, as designed.
        fn done(self, id: i64) -> Build {
            self.job(id, "complete", 0)
                .ran(id, 1, 1, Some("completed"))
                .ended(id, 1, 1, "completed", "ring")
        }
    }

    fn found(h: &History) -> Vec<(FindingRule, Vec<i64>)> {
        findings(h).into_iter().map(|f| (f.rule, f.ids)).collect()
    }

    #[test]
    fn a_clean_history_finds_nothing() {
        let h = Build::new()
            .done(1)
            .done(2)
            .job(3, "retry_once", 0)
            .ran(3, 1, 1, Some("retry"))
            .ran(3, 2, 2, Some("completed"))
            .ended(3, 2, 2, "completed", "archive")
            .job(4, "exhaust_retries", 0)
            .ran(4, 1, 1, Some("retry"))
            .ran(4, 2, 2, Some("retry"))
            .ran(4, 3, 3, Some("dead_lettered"))
            .ended(4, 3, 3, "failed", "dead_letter")
            // Uncertain and never committed: not lost.
            .job(5, "complete", UNCERTAIN)
            .0;
        assert_eq!(found(&h), []);
        assert!(
            awa_runtime::store::audit::designed_values()
                .contains("'exhaust_retries', 'failed', 0, 1")
        );
    }

    #[test]
    fn lost_a_job_without_a_terminal_record_or_live_row() {
        let h = Build::new().done(1).job(2, "complete", 0).0;
        assert_eq!(found(&h), [(FindingRule::Lost, vec![2])]);
        let mut live = Build::new().job(2, "complete", 0).0;
        let w = live.word("running").unwrap();
        live.live = Live {
            job: vec![2],
            state: vec![w],
            attempt: vec![1],
        };
        assert_eq!(
            found(&live),
            [(FindingRule::Stuck, vec![2])],
            "a live row is stuck, not lost"
        );
    }

    #[test]
    fn duplicate_two_terminal_records() {
        let h = Build::new()
            .done(1)
            .ended(1, 1, 1, "completed", "archive")
            .0;
        assert_eq!(found(&h), [(FindingRule::Duplicate, vec![1])]);
    }

    #[test]
    fn wrong_state_and_wrong_attempt() {
        let h = Build::new()
            .job(1, "fail_terminal", 0)
            .ran(1, 1, 1, Some("completed"))
            .ended(1, 1, 1, "completed", "ring")
            .job(2, "retry_once", 0)
            .ran(2, 1, 1, Some("completed"))
            .ended(2, 1, 1, "completed", "ring")
            .0;
        assert_eq!(
            found(&h),
            [
                (FindingRule::WrongState, vec![1]),
                (FindingRule::WrongAttempt, vec![2])
            ]
        );
        let f = findings(&h);
        assert!(
            f[0].message
                .ends_with("ended (completed, 1), expected (failed, 1)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_rescued_first_attempt_moves_the_expected_attempt() {
        let h = Build::new()
            .job(1, "complete", 0)
            .ran(1, 1, 1, Some("rescued_kill"))
            .ran(1, 2, 2, Some("completed"))
            .ended(1, 2, 2, "completed", "ring")
            .0;
        assert_eq!(found(&h), []);
    }

    #[test]
    fn a_released_attempt_runs_again_under_its_number() {
        let clean = Build::new()
            .job(1, "exhaust_retries", 0)
            .ran(1, 1, 1, Some("released"))
            .ran(1, 2, 1, Some("retry"))
            .ran(1, 3, 2, Some("retry"))
            .ran(1, 4, 3, Some("dead_lettered"))
            .ended(1, 4, 3, "failed", "dead_letter")
            .0;
        assert_eq!(found(&clean), []);
        // The release spent its number: the job still ends at its cap, one
        // run short, and only its runs show it.
        let spent = Build::new()
            .job(1, "exhaust_retries", 0)
            .ran(1, 1, 1, Some("released"))
            .ran(1, 2, 2, Some("retry"))
            .ran(1, 3, 3, Some("dead_lettered"))
            .ended(1, 3, 3, "failed", "dead_letter")
            .0;
        let f = findings(&spent);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].rule, f[0].ids.as_slice()),
            (FindingRule::WrongAttempt, &[1][..])
        );
        assert!(
            f[0].message.ends_with(
                "first: job 1 (exhaust_retries): run lease 2 ran attempt 2 after run lease 1 \
                 ended released on attempt 1, so it was due attempt 1"
            ),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn double_execution_two_completions_or_excess_runs() {
        let h = Build::new().done(1).ran(1, 2, 1, Some("completed")).0;
        let rules: Vec<FindingRule> = found(&h).into_iter().map(|f| f.0).collect();
        assert!(rules.contains(&FindingRule::DoubleExecution), "{rules:?}");
        let h = Build::new().done(1).ran(1, 0, 1, Some("retry")).0;
        assert_eq!(found(&h), [(FindingRule::DoubleExecution, vec![1])]);
    }

    #[test]
    fn terminal_mismatch_a_record_of_an_older_lease() {
        let h = Build::new()
            .job(1, "complete", 0)
            .ran(1, 1, 1, Some("rescued_kill"))
            .ran(1, 2, 2, Some("completed"))
            .ended(1, 1, 2, "completed", "ring")
            .0;
        let f = findings(&h);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].rule, f[0].ids.as_slice()),
            (FindingRule::TerminalMismatch, &[1][..])
        );
        assert!(
            f[0].message.contains("run lease 1 ran attempt 1"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_record_its_own_run_disowned_is_a_mismatch() {
        // Job 1's attempt 1 was rescued; its late result closed attempt 2
        // and wrote attempt 2's lease, whose own run then said it lost it.
        let late = |disowned: &[(i64, i64)]| {
            let mut h = Build::new()
                .job(1, "complete", 0)
                .ran(1, 1, 1, Some("rescued_heartbeat"))
                .ran(1, 2, 2, Some("completed"))
                .ended(1, 2, 2, "completed", "ring")
                // A rescue's dead letter names the lease its run lost.
                .job(2, "complete", 0)
                .ran(2, 1, 1, Some("rescued_crash"))
                .ran(2, 2, 2, Some("rescued_crash"))
                .ran(2, 3, 3, Some("rescued_crash"))
                .ended(2, 3, 3, "failed", "dead_letter")
                .0;
            h.disowned_runs = crate::reconcile::history::Runs {
                job: disowned.iter().map(|d| d.0).collect(),
                lease: disowned.iter().map(|d| d.1).collect(),
            };
            h
        };
        assert_eq!(found(&late(&[(1, 1), (2, 3)])), []);
        let f = findings(&late(&[(1, 1), (1, 2), (2, 3)]));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].rule, f[0].ids.as_slice()),
            (FindingRule::TerminalMismatch, &[1][..])
        );
        assert!(
            f[0].message.ends_with(
                "first: job 1: its ring record (completed, attempt 2) names run lease 2, whose own \
                 run reported that lease lost: another result closed it"
            ),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn an_operator_cancel_is_not_judged_by_the_mode() {
        let h = Build::new()
            .job(1, "complete", CANCELLED)
            .ran(1, 1, 1, Some("stale"))
            .ended(1, 2, 1, "cancelled", "ring")
            .0;
        assert_eq!(found(&h), []);
        let mut h = h;
        h.jobs.flags = vec![0];
        let rules: Vec<FindingRule> = found(&h).into_iter().map(|f| f.0).collect();
        assert_eq!(
            rules,
            [FindingRule::WrongState, FindingRule::TerminalMismatch]
        );
    }

    #[test]
    fn stuck_an_open_claim() {
        let mut h = Build::new().done(1).0;
        h.open_claims = vec![1];
        assert_eq!(found(&h), [(FindingRule::Stuck, vec![1])]);
    }

    #[test]
    fn cron_missed_and_double_fires() {
        let mut h = Build::new()
            .job(10, "complete", CRON)
            .ran(10, 1, 1, Some("completed"))
            .ended(10, 1, 1, "completed", "ring")
            .job(11, "complete", CRON)
            .ran(11, 1, 1, Some("completed"))
            .ended(11, 1, 1, "completed", "ring")
            .job(12, "complete", CRON)
            .ran(12, 1, 1, Some("completed"))
            .ended(12, 1, 1, "completed", "ring")
            .0;
        h.cron_windows = vec![crate::observe::CronWindow {
            name: "tick".into(),
            every_ms: 1_000,
            from_ms: 500,
            to_ms: 3_000,
        }];
        let tick = h.word("tick").unwrap();
        // 1000 by job 10; 2000 by 11 and 12; 3000 by nobody.
        h.cron_claims = crate::reconcile::history::CronClaims {
            name: vec![tick; 3],
            fire_ms: vec![1_000, 2_000, 2_000],
            job: vec![10, 11, 12],
        };
        assert_eq!(
            found(&h),
            [
                (FindingRule::CronDoubleFire, vec![11, 12]),
                (FindingRule::CronMissedFire, vec![3_000]),
            ]
        );
    }
}
