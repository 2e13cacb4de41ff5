//! Schema equivalence: an upgraded database against a fresh install.
//!
//! An expand migration that forgets an index, a default or a trigger
//! passes every job-level check and bites later; only a comparison with
//! what a fresh install of the same build creates shows it. [`introspect`]
//! reads every object of the `awa` schema from the catalogs in one
//! statement (`catalog.sql`: tables, columns with types, nullability and
//! defaults, indexes, constraints, triggers with their enabled state,
//! functions, sequences); [`diff`] lists what differs, object by object;
//! [`judge`] holds the differences against the ones `[schema]` in
//! matrix.toml declares intended, and finds declarations that no longer
//! match anything (stale).
//!
//! ```
//! use rehearsal::schema::{Snapshot, ObjectKind, diff};
//!
//! let mut fresh = Snapshot::default();
//! fresh.insert(ObjectKind::Index, "awa.claim_batches_deadline", "CREATE INDEX ...");
//! let upgraded = Snapshot::default();
//! let found = diff(&upgraded, &fresh);
//! assert_eq!(found[0].to_string(), "index awa.claim_batches_deadline is missing from the upgraded database (a fresh install has: CREATE INDEX ...)");
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::matrix::IntendedDifference;

/// The catalog query: every object of schema `$1`.
const CATALOG: &str = include_str!("catalog.sql");

/// The schema the runtime owns.
pub const SCHEMA: &str = "awa";

pub use crate::vocab::schema::ObjectKind;

/// Every object of a schema: `(kind, qualified name)` to its definition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot(BTreeMap<(ObjectKind, String), String>);

impl Snapshot {
    /// Adds (or replaces) one object.
    pub fn insert(&mut self, kind: ObjectKind, name: &str, definition: &str) {
        self.0
            .insert((kind, name.to_owned()), definition.to_owned());
    }

    /// How many objects it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds nothing (no schema installed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Reads every object of the `awa` schema in one catalog query.
// A String: its one caller (the schema_matches_fresh step) words either failure into a harness error.
pub async fn introspect(client: &tokio_postgres::Client) -> Result<Snapshot, String> {
    let rows = client.query(CATALOG, &[&SCHEMA]).await.map_err(|e| {
        format!(
            "reading the schema from the catalogs: {}",
            crate::pg::describe(&e)
        )
    })?;
    let mut snapshot = Snapshot::default();
    for row in rows {
        let kind: String = row.get(0);
        let kind = kind
            .parse()
            .map_err(|()| format!("the catalog query returned an unknown kind {kind:?}"))?;
        let name: String = row.get(1);
        let definition: Option<String> = row.get(2);
        snapshot.insert(kind, &name, definition.as_deref().unwrap_or(""));
    }
    Ok(snapshot)
}

/// One object that is not the same in both databases.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// What kind of object.
    pub kind: ObjectKind,
    /// Its qualified name (`awa.jobs.state`, `awa.ring_cursor(ring text)`).
    pub name: String,
    /// Its definition in the upgraded database; `None`: missing there.
    pub upgraded: Option<String>,
    /// Its definition in the fresh install; `None`: only the upgrade has it.
    pub fresh: Option<String>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = (self.kind, &self.name);
        match (&self.upgraded, &self.fresh) {
            (None, Some(fresh)) => write!(
                f,
                "{kind} {name} is missing from the upgraded database (a fresh install has: {})",
                short(fresh)
            ),
            (Some(upgraded), None) => write!(
                f,
                "{kind} {name} exists only in the upgraded database ({})",
                short(upgraded)
            ),
            (Some(upgraded), Some(fresh)) => {
                let (u, x) = first_difference(upgraded, fresh);
                write!(
                    f,
                    "{kind} {name} differs: upgraded `{u}`, fresh install `{x}`"
                )
            }
            (None, None) => write!(f, "{kind} {name}"),
        }
    }
}

/// A definition on one line, cut to a readable length.
fn short(definition: &str) -> String {
    const MAX: usize = 160;
    let line = definition.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line,
    }
}

/// The first line where two definitions part (whole, when they are one line).
fn first_difference(a: &str, b: &str) -> (String, String) {
    let mut lines = a.lines().zip(b.lines());
    match lines.find(|(x, y)| x != y) {
        Some((x, y)) => (short(x), short(y)),
        None if a.lines().count() != b.lines().count() => {
            let n = a.lines().count().min(b.lines().count());
            let rest = |s: &str| short(&s.lines().skip(n).collect::<Vec<_>>().join(" "));
            (rest(a), rest(b))
        }
        None => (short(a), short(b)),
    }
}

/// Every object that differs between `upgraded` and `fresh`, by kind and name.
pub fn diff(upgraded: &Snapshot, fresh: &Snapshot) -> Vec<Difference> {
    let mut keys: Vec<&(ObjectKind, String)> = upgraded.0.keys().chain(fresh.0.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| {
            let (u, x) = (upgraded.0.get(key), fresh.0.get(key));
            (u != x).then(|| Difference {
                kind: key.0,
                name: key.1.clone(),
                upgraded: u.cloned(),
                fresh: x.cloned(),
            })
        })
        .collect()
}

/// The differences held against what `[schema]` declares intended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judged {
    /// Differences no declaration covers: each a `schema_drift`.
    pub undeclared: Vec<Difference>,
    /// Differences a declaration covers, with the declaration's reason.
    pub intended: Vec<(Difference, String)>,
    /// Declarations that cover no difference any more (`kind name`).
    pub stale: Vec<String>,
}

/// Splits `differences` by `declared`; a declaration that covers none is stale.
pub fn judge(differences: Vec<Difference>, declared: &[IntendedDifference]) -> Judged {
    let mut judged = Judged::default();
    let mut used = vec![false; declared.len()];
    for d in differences {
        match declared.iter().position(|i| i.covers(d.kind, &d.name)) {
            Some(at) => {
                used[at] = true;
                judged.intended.push((d, declared[at].reason.clone()));
            }
            None => judged.undeclared.push(d),
        }
    }
    judged.stale = declared
        .iter()
        .zip(used)
        .filter(|(_, used)| !used)
        .map(|(i, _)| i.to_string())
        .collect();
    judged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(objects: &[(ObjectKind, &str, &str)]) -> Snapshot {
        let mut s = Snapshot::default();
        for (kind, name, def) in objects {
            s.insert(*kind, name, def);
        }
        s
    }

    fn intended(kind: ObjectKind, name: &str) -> IntendedDifference {
        IntendedDifference {
            kind,
            name: name.into(),
            reason: "kept until 0.8".into(),
        }
    }

    #[test]
    fn equal_schemas_have_no_difference() {
        let a = snapshot(&[(ObjectKind::Table, "awa.jobs", "table")]);
        assert_eq!(diff(&a, &a.clone()), vec![]);
    }

    #[test]
    fn missing_extra_and_changed_objects_are_each_named() {
        let upgraded = snapshot(&[
            (ObjectKind::Column, "awa.jobs.extra", "bigint"),
            (
                ObjectKind::Trigger,
                "awa.queue_ring_state.ring_cursor_fence",
                "CREATE TRIGGER ring_cursor_fence ... [disabled]",
            ),
        ]);
        let fresh = snapshot(&[
            (
                ObjectKind::Index,
                "awa.claim_batches_deadline",
                "CREATE INDEX claim_batches_deadline ON awa.claim_batches USING btree (deadline_at)",
            ),
            (
                ObjectKind::Trigger,
                "awa.queue_ring_state.ring_cursor_fence",
                "CREATE TRIGGER ring_cursor_fence ... [enabled]",
            ),
        ]);
        let found: Vec<String> = diff(&upgraded, &fresh)
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert_eq!(
            found,
            [
                "column awa.jobs.extra exists only in the upgraded database (bigint)",
                "index awa.claim_batches_deadline is missing from the upgraded database (a fresh install has: CREATE INDEX claim_batches_deadline ON awa.claim_batches USING btree (deadline_at))",
                "trigger awa.queue_ring_state.ring_cursor_fence differs: upgraded `CREATE TRIGGER ring_cursor_fence ... [disabled]`, fresh install `CREATE TRIGGER ring_cursor_fence ... [enabled]`",
            ]
        );
    }

    #[test]
    fn a_long_definition_shows_the_first_line_that_differs() {
        let upgraded = snapshot(&[(ObjectKind::Function, "awa.f()", "BEGIN\n  RETURN 1;\nEND")]);
        let fresh = snapshot(&[(ObjectKind::Function, "awa.f()", "BEGIN\n  RETURN 2;\nEND")]);
        assert_eq!(
            diff(&upgraded, &fresh)[0].to_string(),
            "function awa.f() differs: upgraded `RETURN 1;`, fresh install `RETURN 2;`"
        );
    }

    #[test]
    fn declared_differences_are_intended_and_unused_declarations_stale() {
        let upgraded = snapshot(&[
            (
                ObjectKind::Column,
                "awa.queue_ring_state.current_slot",
                "integer",
            ),
            (
                ObjectKind::Column,
                "awa.claim_ring_state.current_slot",
                "integer",
            ),
            (ObjectKind::Index, "awa.jobs_extra", "CREATE INDEX"),
        ]);
        let declared = [
            intended(ObjectKind::Column, "awa.*_ring_state.current_slot"),
            intended(ObjectKind::Column, "awa.*_ring_slots.generation"),
            // The right name but the wrong kind covers nothing.
            intended(ObjectKind::Column, "awa.jobs_extra"),
        ];
        let judged = judge(diff(&upgraded, &Snapshot::default()), &declared);
        let names = |ds: &[Difference]| ds.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&judged.undeclared), ["awa.jobs_extra"]);
        let intended: Vec<Difference> = judged.intended.iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(
            names(&intended),
            [
                "awa.claim_ring_state.current_slot",
                "awa.queue_ring_state.current_slot"
            ]
        );
        assert_eq!(judged.intended[0].1, "kept until 0.8");
        assert_eq!(
            judged.stale,
            [
                "column awa.*_ring_slots.generation",
                "column awa.jobs_extra"
            ]
        );
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in ObjectKind::ALL {
            assert_eq!(kind.name().parse(), Ok(kind));
        }
        assert_eq!("view".parse::<ObjectKind>(), Err(()));
    }
}
