//! `secret_printed`: a runtime of the release under test printed a
//! secret; `target_hidden`: it printed the DSN it was handed with more
//! than the password masked.
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
//! The fleet also knows how a redaction that hides the password and
//! nothing else prints each handed DSN, and flags a line that names the
//! DSN's server and database without it (`target_hidden`).
//!
//! Timing cannot make a correct runtime print either, so both rules stand
//! in a starved cell. Runtimes of earlier releases are not judged (0.6's
//! redaction knew URLs only, and the driver gives them no password).

use super::release_line::flip_aware;
use super::rules::{RECONCILE, phase_at};
use crate::matrix::FindingRule;
use crate::observe::{Finding, Observations, ProcessRecord, SecretLine, count, duration};

/// What one of this module's findings counts in a process record.
struct Printed {
    rule: FindingRule,
    lines: fn(&ProcessRecord) -> u64,
    first: fn(&ProcessRecord) -> Option<&SecretLine>,
    /// What the process did, after its name: "printed a secret".
    did: &'static str,
    /// The count's noun, after the number: "with a secret".
    lines_are: &'static str,
}

const KINDS: [Printed; 2] = [
    Printed {
        rule: FindingRule::SecretPrinted,
        lines: |p| p.secret_lines,
        first: |p| p.first_secret_line.as_ref(),
        did: "printed a secret",
        lines_are: "with a secret",
    },
    // `target_hidden`: the same promise seen from the other side. A
    // redaction that hides the password and some of the text around it
    // (the user's last letter, the colon) shows no secret, but an operator
    // can no longer tell which server or role a connection error is about,
    // and a cut in the wrong place is one DSN away from showing the secret.
    // The fleet knows the DSN it handed, so it knows exactly what a correct
    // redaction prints (`credential`'s target).
    Printed {
        rule: FindingRule::TargetHidden,
        lines: |p| p.target_hidden_lines,
        first: |p| p.first_target_hidden_line.as_ref(),
        did: "printed its DSN with more than the password hidden",
        lines_are: "hiding more than the password",
    },
];

/// Every finding of this module: per kind, one, naming each process that
/// printed such a line and the first of them (redacted).
pub(super) fn findings(obs: &Observations) -> Vec<Finding> {
    KINDS.iter().filter_map(|kind| finding(kind, obs)).collect()
}

fn finding(kind: &Printed, obs: &Observations) -> Option<Finding> {
    let printed: Vec<(&ProcessRecord, &SecretLine)> = obs
        .processes
        .iter()
        .filter(|p| flip_aware(&p.version) && (kind.lines)(p) > 0)
        .filter_map(|p| (kind.first)(p).map(|line| (p, line)))
        .collect();
    let &(first, line) = printed.iter().min_by_key(|(_, line)| line.at_ms)?;
    let lines: u64 = printed.iter().map(|(p, _)| (kind.lines)(p)).sum();
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
    Some(Finding {
        rule: kind.rule,
        phase: phase_at(obs, line.at_ms).unwrap_or(RECONCILE).into(),
        message: format!(
            "{} ({}) {} on {} at {}: \"{}\" (hidden here and in its log {}){others}; \
             {} {} in all",
            first.name,
            first.version,
            kind.did,
            if line.stderr { "stderr" } else { "stdout" },
            duration(line.at_ms),
            line.line,
            first.log,
            count(lines, "line"),
            kind.lines_are,
        ),
        ids: vec![],
        count: lines,
        at_ms: Some(line.at_ms),
    })
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
    fn a_runtime_under_test_that_hid_its_target_is_found_apart_from_secrets() {
        let mut hid = printed("current-worker-1", OWN, 0, 0);
        hid.target_hidden_lines = 2;
        hid.first_target_hidden_line = Some(SecretLine {
            at_ms: 4_500,
            stderr: true,
            line: "cannot connect to postgres://postgre***@127.0.0.1:5433/c".into(),
        });
        let mut old = hid.clone();
        old.name = "previous-worker-1".into();
        old.version = "0.6.2".into();
        let found = findings(&obs(vec![hid.clone(), old]));
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f.rule, FindingRule::TargetHidden);
        assert_eq!(
            (f.count, f.at_ms, f.phase.as_str()),
            (2, Some(4_500), "pg_crash")
        );
        assert!(
            f.message.starts_with(&format!(
                "current-worker-1 ({OWN}) printed its DSN with more than the password hidden on stderr at 4.5s"
            )),
            "{}",
            f.message
        );
        assert!(
            f.message
                .ends_with("2 lines hiding more than the password in all"),
            "{}",
            f.message
        );
        // A process that printed both is found for both, each on its own.
        hid.secret_lines = 1;
        hid.first_secret_line = hid.first_target_hidden_line.clone();
        let rules: Vec<FindingRule> = findings(&obs(vec![hid])).iter().map(|f| f.rule).collect();
        assert_eq!(
            rules,
            [FindingRule::SecretPrinted, FindingRule::TargetHidden]
        );
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
