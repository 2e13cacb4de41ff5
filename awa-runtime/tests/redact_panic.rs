//! A panic that quotes a DSN prints it redacted once the hook is
//! installed, as `awa` and `rehearse` do first thing. The test runs
//! itself again as a child process that panics, and reads its stderr.

use std::process::Command;

const CHILD: &str = "AWA_REDACT_PANIC_CHILD";

#[test]
fn panic_messages_are_redacted() {
    if std::env::var_os(CHILD).is_some() {
        awa_runtime::redact::install_panic_hook();
        panic!("cannot use postgres://app:Pan1c-pw@db:5432/jobs");
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "panic_messages_are_redacted", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child must panic:\n{err}");
    assert!(
        err.contains("panicked at") && err.contains("postgres://app:***@db:5432/jobs"),
        "{err}"
    );
    assert!(!err.contains("Pan1c-pw"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Pan1c-pw"));
}
