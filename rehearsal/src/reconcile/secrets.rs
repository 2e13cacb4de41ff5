//! `secret_printed`: a runtime of the release under test printed a
//! secret.
//!
//! The runtime promises that no secret it is given reaches a log, an
//! error or the terminal. On a server rehearsal started, every process of
//! the release under test carries a password in its DSN, each in turn in
//! another shape (the driver's `credential`), and the fleet watches each
//! line it prints for either of the password's two random words: a line
//! that holds one printed the password, whole or in part. The cells'
//! faults make runtimes print their target (a PostgreSQL crash ends every
//! session, and a runtime reconnecting while the server recovers names
//! the server it could not reach), so a masking that misses one shape, or
//! stops short of the whole password, shows.
//!
//! Timing cannot make a correct runtime print a secret, so the rule stands
//! in a starved cell. Runtimes of earlier releases are not judged (0.6's
//! redaction knew URLs only, and the driver gives them no password).

use super::release_line::flip_aware;
use super::rules::{RECONCILE, phase_at};
use crate::matrix::FindingRule;
use crate::observe::{Finding, Observations, ProcessRecord, SecretLine, count, duration};

/// Every finding of this module: one, naming each process that printed a
/// secret and the first such line (redacted).
pub(super) fn findings(obs: &Observations) -> Vec<Finding> {
    let printed: Vec<(&ProcessRecord, &SecretLine)> = obs
        .processes
        .iter()
        .filter(|p| flip_aware(&p.version) && p.secret_lines > 0)
        .filter_map(|p| p.first_secret_line.as_ref().map(|line| (p, line)))
        .collect();
    let Some(&(first, line)) = printed.iter().min_by_key(|(_, line)| line.at_ms) else {
        return vec![];
    };
    let lines: u64 = printed.iter().map(|(p, _)| p.secret_lines).sum();
    let others = match printed.len() {
        1 => String::new(),
        n => format!(
            "; {} too ({})",
            count(n as u64 - 1, "other process"),
            printed
                .iter()
                .filter(|(p, _)| p.name != first.name)
                .map(|(p, _)| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    vec![Finding {
        rule: FindingRule::SecretPrinted,
        phase: phase_at(obs, line.at_ms).unwrap_or(RECONCILE).into(),
        message: format!(
            "{} ({}) printed a secret on {} at {}: \"{}\" (hidden here and in its log {}){others}; \
             {} with a secret in all",
            first.name,
            first.version,
            if line.stderr { "stderr" } else { "stdout" },
            duration(line.at_ms),
            line.line,
            first.log,
            count(lines, "line"),
        ),
        ids: vec![],
        count: lines,
        at_ms: Some(line.at_ms),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{Phase, StepOutcome};
    use crate::report::fixture::worker_process;

    const OWN: &str = awa_runtime::version::VERSION;

    fn printed(name: &str, version: &str, at_ms: u64, lines: u64) -> ProcessRecord {
        let mut p = worker_process(name, "current", version, None);
        p.log = format!("logs/cell/{name}.log");
        p.secret_lines = lines;
        p.first_secret_line = (lines > 0).then(|| SecretLine {
            at_ms,
            stderr: true,
            line: "awa: claiming failed, retrying after reconnecting: cannot connect to \
                   postgres://postgres:***@127.0.0.1:5433/c: connection refused"
                .into(),
        });
        p
    }

    fn obs(processes: Vec<ProcessRecord>) -> Observations {
        Observations {
            processes,
            phases: vec![Phase {
                step: 4,
                name: "pg_crash".into(),
                detail: String::new(),
                start_ms: 4_000,
                end_ms: 6_000,
                outcome: StepOutcome::Ok,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_runtime_under_test_that_printed_a_secret_is_found_with_its_first_line() {
        let found = findings(&obs(vec![
            printed("current-worker-1", OWN, 0, 0),
            printed("current-worker-2", OWN, 5_200, 3),
            printed("current-producer-1", OWN, 5_900, 1),
        ]));
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f.rule, FindingRule::SecretPrinted);
        assert_eq!(f.phase, "pg_crash");
        assert_eq!(f.count, 4);
        assert_eq!(f.at_ms, Some(5_200));
        assert!(f.message.starts_with("current-worker-2 ("), "{}", f.message);
        assert!(f.message.contains("stderr at 5.2s"), "{}", f.message);
        assert!(
            f.message.contains("logs/cell/current-worker-2.log"),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("1 other process too (current-producer-1)"),
            "{}",
            f.message
        );
        assert!(
            f.message.ends_with("4 lines with a secret in all"),
            "{}",
            f.message
        );
        assert!(f.message.contains("postgres:***@"), "{}", f.message);
    }

    #[test]
    fn clean_output_and_earlier_releases_are_not_findings() {
        assert!(findings(&obs(vec![printed("current-worker-1", OWN, 0, 0)])).is_empty());
        assert!(findings(&obs(vec![printed("previous-worker-1", "0.6.2", 5_000, 2)])).is_empty());
        assert!(findings(&obs(vec![])).is_empty());
    }
}
