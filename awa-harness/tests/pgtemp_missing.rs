//! Discovery failure when AWA_PG_BINDIR points nowhere. In its own test
//! binary because environment variables are process-global and the other
//! pgtemp tests must not see this one.

use awa_harness::pgtemp::{Cluster, PgError, find_bindir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bindir_env_is_reported_with_install_hint() {
    // SAFETY: this is the only test in this binary, so no other thread reads
    // the environment concurrently.
    unsafe { std::env::set_var("AWA_PG_BINDIR", "/nonexistent") };

    let err = find_bindir().expect_err("discovery must fail");
    assert!(matches!(err, PgError::NotInstalled(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("apt-get install postgresql"), "{msg}");
    assert!(msg.contains("AWA_PG_BINDIR=/nonexistent"), "{msg}");
    assert!(msg.contains("initdb") && msg.contains("postgres"), "{msg}");

    let err = Cluster::start().await.expect_err("start must fail");
    assert!(
        err.to_string().contains("apt-get install postgresql"),
        "{err}"
    );
}
