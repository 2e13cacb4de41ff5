//! The named checks an `assert` step can run, read and written by name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The named checks an `assert` step can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// The expand migration has been applied.
    SchemaExpanded,
    /// Ring-cursor authority is `columns`.
    AuthorityColumns,
    /// Ring-cursor authority is `ledger`.
    AuthorityLedger,
    /// The old-binary fence trigger is active and the cursor columns poisoned.
    FenceActive,
    /// Workers of both versions have claimed jobs.
    MixedFleetClaimed,
    /// Deadline-overrun claims are waiting for a flip-aware leader to rescue them.
    DeadlineRescuePending,
    /// Those deadline-overrun claims have been rescued.
    DeadlineRescued,
    /// The maintenance leader runs this artifact.
    LeaderIs(String),
    /// Once the workload's jobs are all done, every ring rotates and
    /// prunes away each row written before then, within a wrap and a few
    /// rotations (the check waits; a ring that does not is `ring_stalled`).
    RingsPrunedBack,
    /// The schema equals a fresh install of the current build on the same
    /// server, but for the differences `[schema]` declares intended (any
    /// other is `schema_drift`).
    SchemaMatchesFresh,
}

/// Check names without an argument, in documentation order.
pub const CHECK_NAMES: [&str; 9] = [
    "schema_expanded",
    "authority_columns",
    "authority_ledger",
    "fence_active",
    "mixed_fleet_claimed",
    "deadline_rescue_pending",
    "deadline_rescued",
    "rings_pruned_back",
    "schema_matches_fresh",
];

/// The prefix of the one check that takes an argument.
pub const LEADER_IS: &str = "leader_is:";

impl FromStr for Check {
    type Err = ();

    /// Parses a check name; the artifact of `leader_is:` is not checked here.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "schema_expanded" => Check::SchemaExpanded,
            "authority_columns" => Check::AuthorityColumns,
            "authority_ledger" => Check::AuthorityLedger,
            "fence_active" => Check::FenceActive,
            "mixed_fleet_claimed" => Check::MixedFleetClaimed,
            "deadline_rescue_pending" => Check::DeadlineRescuePending,
            "deadline_rescued" => Check::DeadlineRescued,
            "rings_pruned_back" => Check::RingsPrunedBack,
            "schema_matches_fresh" => Check::SchemaMatchesFresh,
            _ => match s.strip_prefix(LEADER_IS) {
                Some(artifact) if !artifact.is_empty() => Check::LeaderIs(artifact.to_owned()),
                _ => return Err(()),
            },
        })
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Check::SchemaExpanded => CHECK_NAMES[0],
            Check::AuthorityColumns => CHECK_NAMES[1],
            Check::AuthorityLedger => CHECK_NAMES[2],
            Check::FenceActive => CHECK_NAMES[3],
            Check::MixedFleetClaimed => CHECK_NAMES[4],
            Check::DeadlineRescuePending => CHECK_NAMES[5],
            Check::DeadlineRescued => CHECK_NAMES[6],
            Check::RingsPrunedBack => CHECK_NAMES[7],
            Check::SchemaMatchesFresh => CHECK_NAMES[8],
            Check::LeaderIs(artifact) => return write!(f, "{LEADER_IS}{artifact}"),
        };
        f.write_str(name)
    }
}

impl Serialize for Check {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse()
            .map_err(|()| serde::de::Error::custom(format!("unknown check \"{name}\"")))
    }
}
