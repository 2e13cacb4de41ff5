//! The frozen releases, built from their archives: the manifest's digests
//! match; on a schema newer than it knows (the real 0.7 expand migration
//! of this build), 0.6.1 shows the unsafe rewrite (ADR-041 context
//! item 1) while 0.6.2 refuses without writing, except on the expand migration
//! in `columns` authority, where it runs.

mod common;

use awa_harness::release::{self, Built};
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn build(version: &str) -> Built {
    let artifacts = repo().join("artifacts");
    let manifest = release::load_manifest(&artifacts).unwrap();
    let r = manifest.release(version, &artifacts).unwrap();
    release::build(&artifacts, r, &repo().join("target").join("releases"))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn manifest_digests_match_the_archives() {
    let artifacts = repo().join("artifacts");
    let manifest = release::load_manifest(&artifacts).unwrap();
    assert!(manifest.releases.len() >= 2);
    for r in &manifest.releases {
        release::verify(&artifacts, r).unwrap_or_else(|e| panic!("{e}"));
    }
    // A tampered copy is caught, with a message that says what to do.
    let tmp = std::env::temp_dir().join(format!("awa-tamper-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let r = &manifest.releases[0];
    let mut bytes = std::fs::read(artifacts.join(&r.archive)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(tmp.join(&r.archive), bytes).unwrap();
    let err = release::verify(&tmp, r).unwrap_err().to_string();
    assert!(
        err.contains("does not match its manifest digest") && err.contains("never edited"),
        "{err}"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
    // Unknown versions name what is listed.
    let err = manifest
        .release("0.5.9", &artifacts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("0.6.1") && err.contains("0.6.2"), "{err}");
}

/// A database migrated by the 0.6.2 release (schema v2), then, when
/// `expand`, by this build (the real 0.7 expand migration, v3, in
/// `columns` authority).
async fn prepared(name: &str, bin062: &str, expand: bool) -> Db {
    let db = Db::empty(name).await;
    let (code, _, err) = run(bin062, &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 0, "0.6.2 migrate: {err}");
    if expand {
        let mut c = db.client().await;
        awa_runtime::schema::migrate(&mut c, &Default::default())
            .await
            .unwrap();
    }
    db
}

fn dump(db: &Db) -> String {
    let out = std::process::Command::new(db.cluster.bindir().join("pg_dump"))
        .arg("--no-owner")
        .arg(&db.url)
        .output()
        .expect("pg_dump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // pg_dump marks its output with a random restrict key per run.
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_same_dump(before: &str, after: &str) {
    if let Some((a, b)) = before.lines().zip(after.lines()).find(|(a, b)| a != b) {
        panic!("0.6.2 changed the database while refusing: {a:?} became {b:?}");
    }
    assert_eq!(
        before.lines().count(),
        after.lines().count(),
        "0.6.2 changed the database while refusing"
    );
}

async fn versions(db: &Db) -> Vec<i32> {
    db.client()
        .await
        .query("SELECT version FROM awa.schema_version ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_guard_rewrites_a_newer_schema_and_the_stepping_stone_refuses_it() {
    let (v061, v062) = tokio::task::spawn_blocking(|| (build("0.6.1"), build("0.6.2")))
        .await
        .unwrap();
    let bin061 = v061.binary.to_str().unwrap().to_string();
    let bin062 = v062.binary.to_str().unwrap().to_string();
    let (_, out, _) = run(&bin061, "", &["--version"], &[]).await;
    assert!(out.contains("0.6.1"), "{out}");

    // 0.6.1 on the expand schema: the unsafe legacy rewrite.
    let db = prepared("pre_guard", &bin062, true).await;
    assert_eq!(versions(&db).await, vec![1, 2, 3]);
    let (code, out, err) = run(&bin061, &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 0, "0.6.1 does not refuse: {err}");
    assert!(err.contains("legacy"), "{err}");
    assert!(out.contains("\"legacy_rewrite\":true"), "{out}");
    assert_eq!(
        versions(&db).await,
        vec![1, 2],
        "schema_version was rewritten"
    );
    let body: String = db
        .client()
        .await
        .query_one(
            "SELECT prosrc FROM pg_proc WHERE oid = 'awa.ring_cursor(text)'::regprocedure",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        !body.contains("ring_cursor_authority"),
        "the authority-aware resolver was replaced by 0.6.1's own: {body}"
    );

    // 0.6.2 on a schema one past the expand migration: refuses, writes nothing.
    let db = prepared("guard_unknown", &bin062, true).await;
    db.client()
        .await
        .batch_execute("INSERT INTO awa.schema_version (version) VALUES (4)")
        .await
        .unwrap();
    let before = dump(&db);
    for cmd in [
        &["migrate"][..],
        &["worker"][..],
        &["produce", "--count", "5"][..],
    ] {
        let (code, out, err) = run(&bin062, &db.url, cmd, &[]).await;
        assert_eq!(code, 2, "{cmd:?}: {err}");
        assert!(out.contains("\"event\":\"refused\""), "{cmd:?}: {out}");
        assert!(
            err.contains("version 4") && err.contains("refusing before any write"),
            "{cmd:?}: {err}"
        );
    }
    assert_same_dump(&before, &dump(&db));

    // 0.6.2 on the expand migration after the flip (ledger authority): refuses.
    let db = prepared("guard_ledger", &bin062, true).await;
    let flipped = awa_runtime::store::authority::flip(&mut db.client().await, 1000.0, false)
        .await
        .unwrap();
    assert!(
        matches!(
            flipped,
            awa_runtime::store::authority::FlipOutcome::Flipped { .. }
        ),
        "{flipped:?}"
    );
    let before = dump(&db);
    for cmd in [&["migrate"][..], &["worker"][..]] {
        let (code, _, err) = run(&bin062, &db.url, cmd, &[]).await;
        assert_eq!(code, 2, "{cmd:?}: {err}");
        assert!(
            err.contains("`ledger`") && err.contains("0.7 or later"),
            "{cmd:?}: {err}"
        );
    }
    assert_same_dump(&before, &dump(&db));

    // 0.6.2 on the expand migration in columns authority: runs.
    let db = prepared("guard_columns", &bin062, true).await;
    let (code, out, err) = run(&bin062, &db.url, &["migrate"], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"ahead_compatible\":true"), "{out}");
    assert_eq!(versions(&db).await, vec![1, 2, 3], "nothing rewritten");
    let worker = spawn(&bin062, &db.url, &["worker"], &[]);
    worker
        .wait_for("ready", Duration::from_secs(10), |ev| {
            ev.iter().any(|e| e["event"] == "ready")
        })
        .await;
    let (code, _, err) = run(
        &bin062,
        &db.url,
        &["produce", "--count", "20", "--rate", "0"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    wait_count(
        &db.client().await,
        "SELECT count(*) FROM awa.claim_closures WHERE terminal",
        20,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(worker.terminate().await, 0);
}
