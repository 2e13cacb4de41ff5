//! Running the real `rehearse` binary and waiting for it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use super::scratch::Scratch;

/// The workspace checkout (artifacts are resolved from its manifest).
pub fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `rehearse` with stdin closed and stdout and stderr captured.
pub fn rehearse() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rehearse"));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `rehearse ARGS` inside the checkout (so artifacts resolve from its
/// manifest and the workspace build is this tree's), reports into
/// `reports`, on the process backend whatever the default (tests/docker.rs
/// has the other).
pub fn in_checkout(reports: &Path, args: &[&str]) -> Command {
    let mut cmd = rehearse();
    cmd.args(args)
        .current_dir(checkout())
        .env("REHEARSE_REPORTS_DIR", reports)
        .env("REHEARSE_BACKEND", "process");
    cmd
}

/// `rehearse --matrix-file MATRIX ARGS` on the scratch tree's matrix, as
/// [`in_checkout`], reports into the scratch tree.
pub fn on_scratch(scratch: &Scratch, args: &[&str]) -> Command {
    let mut cmd = in_checkout(&scratch.reports(), &[]);
    cmd.arg("--matrix-file").arg(scratch.matrix()).args(args);
    cmd
}

/// Waits for `child` at most `limit`; kills it and panics after that.
pub fn wait(child: &mut Child, limit: Duration) -> (ExitStatus, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("rehearse did not finish within {limit:?}; stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

/// Starts `cmd` and waits for it at most `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> (ExitStatus, String, String) {
    let mut child = cmd.spawn().expect("start rehearse");
    wait(&mut child, limit)
}

/// A finished command's stdout and stderr as text.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
