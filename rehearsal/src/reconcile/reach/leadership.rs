//! `leader_frozen_across_flip` and `leader_takeover`: what the
//! maintenance leader did around a flip, a kill or a suspension.

use super::list;
use crate::observe::{Observations, duration};

/// A flip that ran while the leader was held stopped.
pub(super) fn frozen_across_flip(obs: &Observations) -> (bool, String) {
    let leaders: Vec<_> = obs.suspensions.iter().filter(|s| s.leader).collect();
    for flip in &obs.flips {
        if let Some(s) = leaders
            .iter()
            .find(|s| s.from_ms <= flip.at_ms && s.to_ms.is_none_or(|to| flip.at_ms <= to))
        {
            let until = s.to_ms.map_or("the end".to_owned(), duration);
            return (
                true,
                format!(
                    "the flip at {} ran while {} ({}, the leader) was stopped, from {} to {until}",
                    duration(flip.at_ms),
                    s.process,
                    s.version,
                    duration(s.from_ms)
                ),
            );
        }
    }
    let seen = match (leaders.is_empty(), obs.flips.is_empty()) {
        (true, _) => "no leader was held stopped".to_owned(),
        (false, true) => "no flip ran".to_owned(),
        (false, false) => format!(
            "flips at {} and the leader stopped {}",
            list(obs.flips.iter().map(|f| duration(f.at_ms))),
            list(leaders.iter().map(|s| format!(
                "from {} to {}",
                duration(s.from_ms),
                s.to_ms.map_or("the end".to_owned(), duration)
            )))
        ),
    };
    (false, seen)
}

/// Another runtime reported leadership after the leader was killed or
/// suspended.
pub(super) fn takeover(obs: &Observations) -> (bool, String) {
    // (victim, when) of every kill or suspension of the leader.
    let faults: Vec<(&str, u64)> = obs
        .kills
        .iter()
        .filter(|k| k.role == "leader")
        .map(|k| (k.process.as_str(), k.at_ms))
        .chain(
            obs.suspensions
                .iter()
                .filter(|s| s.leader)
                .map(|s| (s.process.as_str(), s.from_ms)),
        )
        .collect();
    if faults.is_empty() {
        return (false, "no leader was killed or suspended".into());
    }
    for (victim, at) in &faults {
        if let Some(p) = obs
            .processes
            .iter()
            .find(|p| p.name != *victim && p.leader_at_ms.is_some_and(|t| t > *at))
        {
            return (
                true,
                format!(
                    "{} ({}) led from {}, after {victim} was stopped at {}",
                    p.name,
                    p.version,
                    duration(p.leader_at_ms.unwrap_or_default()),
                    duration(*at)
                ),
            );
        }
    }
    (
        false,
        format!(
            "no other runtime reported leadership after {}",
            list(
                faults
                    .iter()
                    .map(|(v, at)| format!("{v} at {}", duration(*at)))
            )
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{flip, one, process};
    use super::super::unreached;
    use crate::matrix::Reach;
    use crate::observe::{KillRecord, Observations, SuspensionRecord};

    fn suspended(leader: bool, from_ms: u64, to_ms: Option<u64>) -> SuspensionRecord {
        SuspensionRecord {
            process: "previous-worker-1".into(),
            version: "0.6.2".into(),
            leader,
            from_ms,
            to_ms,
        }
    }

    #[test]
    fn a_flip_after_the_leader_was_let_go_is_not_a_flip_under_a_frozen_leader() {
        let mut obs = Observations {
            flips: vec![flip(12_000)],
            suspensions: vec![suspended(true, 5_000, Some(9_000))],
            ..Observations::default()
        };
        let r = one(Reach::LeaderFrozenAcrossFlip, &obs, &[]);
        assert!(!r.reached);
        assert_eq!(
            r.evidence,
            "flips at 12.0s and the leader stopped from 5.0s to 9.0s"
        );
        obs.suspensions = vec![suspended(true, 5_000, Some(14_000))];
        let r = one(Reach::LeaderFrozenAcrossFlip, &obs, &[]);
        assert!(r.reached, "{r:?}");
        // A stopped worker that did not lead does not count.
        obs.suspensions = vec![suspended(false, 5_000, None)];
        assert!(!one(Reach::LeaderFrozenAcrossFlip, &obs, &[]).reached);
        assert_eq!(
            unreached(&[Reach::LeaderFrozenAcrossFlip], &obs, &[]).as_deref(),
            Some(
                "the cell did not reach what it exists for: leader_frozen_across_flip (no leader was held stopped)"
            )
        );
    }

    #[test]
    fn a_takeover_is_another_runtime_leading_after_the_leader_was_stopped() {
        let mut obs = Observations {
            kills: vec![KillRecord {
                process: "previous-worker-1".into(),
                version: "0.6.2".into(),
                role: "leader".into(),
                at_ms: 6_000,
                in_flight: vec![],
            }],
            processes: vec![
                process("previous-worker-1", "previous", "0.6.2", Some(1_000)),
                process("current-worker-1", "current", "0.7.0", Some(2_000)),
            ],
            ..Observations::default()
        };
        assert!(!one(Reach::LeaderTakeover, &obs, &[]).reached);
        obs.processes[1].leader_at_ms = Some(8_000);
        assert!(one(Reach::LeaderTakeover, &obs, &[]).reached);
        assert!(!one(Reach::LeaderTakeover, &Observations::default(), &[]).reached);
    }
}
