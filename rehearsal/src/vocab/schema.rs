//! The kinds of schema object, as matrix.toml's `[schema]` declares
//! intended differences and the schema comparison reports them; reading
//! and comparing schemas is `schema`'s work.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What kind of schema object a difference is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// A table or partition (its partitioning and persistence).
    Table,
    /// A column: type, nullability, identity, default.
    Column,
    /// An index, by its definition.
    Index,
    /// A constraint (primary key, check, unique, foreign key, not null).
    Constraint,
    /// A trigger, with its enabled state.
    Trigger,
    /// A function or procedure, by its full definition.
    Function,
    /// A sequence: type, bounds, increment.
    Sequence,
}

impl ObjectKind {
    /// Every kind, in the order differences are listed.
    pub const ALL: [ObjectKind; 7] = [
        ObjectKind::Table,
        ObjectKind::Column,
        ObjectKind::Index,
        ObjectKind::Constraint,
        ObjectKind::Trigger,
        ObjectKind::Function,
        ObjectKind::Sequence,
    ];

    /// The word used in matrix.toml and messages.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Table => "table",
            ObjectKind::Column => "column",
            ObjectKind::Index => "index",
            ObjectKind::Constraint => "constraint",
            ObjectKind::Trigger => "trigger",
            ObjectKind::Function => "function",
            ObjectKind::Sequence => "sequence",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ObjectKind {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ObjectKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or(())
    }
}
