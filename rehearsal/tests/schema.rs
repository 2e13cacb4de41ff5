//! Schema equivalence against a real PostgreSQL: a database upgraded the
//! way a fleet's is (the 0.6 schema first, the expand migration later,
//! then the flip) against a fresh install of this build on the same
//! server, through the catalog comparison `schema_matches_fresh` runs.
//!
//! The planted omission is a test-only copy of the v3 expand migration
//! without one of its indexes, applied here in place of the real one: the
//! comparison must name that index, and reconciliation must turn it into
//! a `schema_drift` finding.

pub mod common;

use std::time::Instant;

use awa_harness::pgtemp::Cluster;
use awa_runtime::schema::{MIGRATIONS, MigrateOptions};
use common::database::on_06_schema;
use common::matrix::{PREVIOUS_AND_CURRENT, matrix};
use rehearsal::matrix::{FindingRule, IntendedDifference};
use rehearsal::observe::{Observations, SchemaCheck};
use rehearsal::schema::{self, Difference, Judged, ObjectKind};
use tokio_postgres::Client;

/// The statement of v3 that the planted omission leaves out.
const PLANTED: &str =
    "CREATE INDEX IF NOT EXISTS claim_batches_deadline ON awa.claim_batches (deadline_at);";

/// v3 as shipped, or the test-only copy without the `claim_batches_deadline` index.
fn expand_migration(omit_index: bool) -> String {
    let v3 = MIGRATIONS.iter().find(|m| m.version == 3).unwrap().sql;
    if !omit_index {
        return v3.to_owned();
    }
    assert!(
        v3.contains(PLANTED),
        "v3 no longer creates the planted index"
    );
    v3.replace(PLANTED, "")
}

/// A database on the 0.6 schema (v1, v2), expanded later by `v3`, flipped
/// when `flip` (no runtime is live, so the flip needs no force).
async fn upgraded(cluster: &Cluster, name: &str, v3: &str, flip: bool) -> Client {
    let mut client = on_06_schema(cluster, name).await;
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(v3).await.unwrap();
    tx.execute("INSERT INTO awa.schema_version (version) VALUES (3)", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    if flip {
        awa_runtime::store::authority::flip(&mut client, 1_500.0, false)
            .await
            .unwrap();
    }
    client
}

/// A fresh install of this build (ledger authority, the fence active).
async fn fresh(cluster: &Cluster, name: &str) -> Client {
    cluster.create_database(name).await.unwrap();
    let mut client = cluster.connect(name).await.unwrap();
    awa_runtime::schema::migrate(&mut client, &MigrateOptions::default())
        .await
        .unwrap();
    client
}

async fn compare(upgraded: &Client, fresh: &Client) -> Vec<Difference> {
    let a = schema::introspect(upgraded).await.unwrap();
    let b = schema::introspect(fresh).await.unwrap();
    assert!(a.len() > 100, "only {} objects read", a.len());
    schema::diff(&a, &b)
}

fn declared(kind: ObjectKind, name: &str) -> IntendedDifference {
    IntendedDifference {
        kind,
        name: name.into(),
        reason: "until the flip the fence is installed inactive".into(),
    }
}

#[tokio::test]
async fn a_clean_upgrade_shows_only_the_declared_differences() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    // REHEARSE_PG_BINDIR picks the major (the catalogs differ: 18 keeps NOT NULL constraints).
    eprintln!("PostgreSQL {}", cluster.server_version().await.unwrap());
    let reference = fresh(&cluster, "fresh").await;
    // Before the flip the one difference is the fence, installed inactive:
    // declared, it is intended and nothing else differs.
    let before = upgraded(&cluster, "before_flip", &expand_migration(false), false).await;
    let fence = [declared(ObjectKind::Trigger, "awa.*.ring_cursor_fence")];
    let judged = schema::judge(compare(&before, &reference).await, &fence);
    assert_eq!(judged.undeclared, vec![], "{:#?}", judged.undeclared);
    assert_eq!(judged.stale, Vec::<String>::new());
    let intended: Vec<String> = judged.intended.iter().map(|(d, _)| d.to_string()).collect();
    assert_eq!(intended.len(), 6, "{intended:#?}");
    for d in &intended {
        assert!(
            d.contains("[disabled]`, fresh install `") && d.ends_with("[enabled]`"),
            "{d}"
        );
    }
    // Left undeclared, the same differences are each named.
    let undeclared = schema::judge(compare(&before, &reference).await, &[]).undeclared;
    assert_eq!(undeclared.len(), 6);
    assert!(undeclared.iter().all(|d| d.kind == ObjectKind::Trigger));
    // After the flip the upgrade equals a fresh install, and the
    // declaration that no longer matches anything is reported stale.
    let started = Instant::now();
    let after = upgraded(&cluster, "after_flip", &expand_migration(false), true).await;
    let judged = schema::judge(compare(&after, &reference).await, &fence);
    eprintln!(
        "upgrade, flip and comparison took {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(judged.undeclared, vec![], "{:#?}", judged.undeclared);
    assert!(judged.intended.is_empty());
    assert_eq!(judged.stale, ["trigger awa.*.ring_cursor_fence"]);
}

#[tokio::test]
async fn a_migration_that_forgets_an_index_is_schema_drift_naming_it() {
    let cluster = Cluster::start().await.expect("start throwaway PostgreSQL");
    let reference = fresh(&cluster, "fresh").await;
    let planted = upgraded(&cluster, "planted", &expand_migration(true), true).await;
    let judged = schema::judge(compare(&planted, &reference).await, &[]);
    let found: Vec<String> = judged.undeclared.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        found,
        [
            "index awa.claim_batches_deadline is missing from the upgraded database (a fresh install has: CREATE INDEX claim_batches_deadline ON awa.claim_batches USING btree (deadline_at))"
        ]
    );
    // Reconciliation turns the comparison into a named finding.
    let matrix = rehearsal::matrix::parse("matrix.toml", &one_cell_matrix())
        .unwrap_or_else(|d| panic!("{d}"));
    let selection = rehearsal::plan::Selection {
        matrix: None,
        cells: vec!["schema".into()],
    };
    let plan = rehearsal::plan::Request {
        selection,
        seed: 1,
        ..rehearsal::plan::Request::default()
    }
    .expand(&matrix)
    .unwrap();
    let obs = Observations {
        schema_checks: vec![SchemaCheck {
            step: 3,
            fresh_by: "current 0.7.0".into(),
            judged: Judged {
                undeclared: judged.undeclared.clone(),
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    };
    let findings = rehearsal::reconcile::reconcile(&planted, &plan.cells[0], &obs)
        .await
        .unwrap();
    let drift: Vec<_> = findings
        .iter()
        .filter(|f| f.rule == FindingRule::SchemaDrift)
        .collect();
    assert_eq!(drift.len(), 1, "{findings:#?}");
    assert!(
        drift[0]
            .message
            .contains("index awa.claim_batches_deadline is missing from the upgraded database"),
        "{}",
        drift[0].message
    );
}

/// A one-cell matrix that asserts the schema, for a plan to reconcile against.
fn one_cell_matrix() -> String {
    let cells = r#"
[[cell]]
name = "schema"
about = "migrate, flip, compare"
steps = [
  { migrate = "current" },
  { flip = "manual" },
  { assert = "schema_matches_fresh" },
]
"#;
    matrix(
        PREVIOUS_AND_CURRENT,
        "rate_per_s = 10\nmix = { complete = 1 }",
        "60s",
        cells,
    )
}
