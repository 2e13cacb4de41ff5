//! Bad input gets one clear line naming the problem and the fix, a
//! non-zero exit, no panic, and nothing written.

mod common;

use common::*;

fn one_line_without_panic(err: &str) {
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line expected: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_wrong_role_and_bad_flags() {
    let (code, _, err) = run(
        awa_bin(),
        "postgres://postgres@127.0.0.1:1/none",
        &["worker"],
        &[],
    )
    .await;
    assert_eq!(code, 1);
    one_line_without_panic(&err);
    assert!(
        err.contains("cannot connect") && err.contains("AWA_DATABASE_URL"),
        "{err}"
    );

    let db = Db::empty("badinput").await;
    let wrong_role = db.url.replace("postgres@", "nosuchrole@");
    let (code, _, err) = run(awa_bin(), &wrong_role, &["migrate"], &[]).await;
    assert_eq!(code, 1);
    one_line_without_panic(&err);
    assert!(
        err.contains("nosuchrole") && err.contains("does not exist"),
        "{err}"
    );

    let (code, _, err) = run(
        awa_bin(),
        &db.url,
        &["produce", "--mix", "complete=1,bogus=2"],
        &[],
    )
    .await;
    assert_eq!(code, 2);
    one_line_without_panic(&err);
    assert!(
        err.contains("unknown mode \"bogus\"") && err.contains("expected one of complete"),
        "{err}"
    );

    let (code, _, err) = run(awa_bin(), &db.url, &["worker", "--no-such-flag"], &[]).await;
    assert_eq!(code, 2);
    assert!(err.contains("--no-such-flag"), "{err}");

    let (code, _, err) = run(
        awa_bin(),
        &db.url,
        &["worker", "--heartbeat-interval", "5 parsecs"],
        &[],
    )
    .await;
    assert_eq!(code, 2);
    assert!(err.contains("invalid duration"), "{err}");

    // A worker on a database without the schema refuses (exit 2, a
    // `refused` event) and writes nothing.
    let (code, out, err) = run(awa_bin(), &db.url, &["worker"], &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        out.contains("\"event\":\"refused\"") && err.contains("run `awa migrate`"),
        "{out} {err}"
    );
    let client = db.client().await;
    let schemas: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'awa'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schemas, 0, "a refused worker created the schema");
}
