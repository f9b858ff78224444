//! What the tests of real processes share: the example binaries they run
//! (`kvd`, `minimal`, `crashd`), built — or brought up to date — once per
//! name per test process, and `steadfastctl` run as a child.
//!
//! Examples: `cargo test` builds examples only under hashed names, so a test
//! that ran `target/debug/examples/<name>` whenever it existed could run a
//! stale binary: not the code under test. `cargo build --example` costs
//! nothing when the binary is fresh.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a poll waits for a state.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The up-to-date binary of example `name`.
pub fn example(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let exe = std::env::current_exe().expect("current exe");
    let debug_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .to_path_buf();
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if !built.contains(name) {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", name])
            .env("CARGO_TARGET_DIR", debug_dir.parent().expect("target dir"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "the {name} example builds");
        built.insert(name.to_owned());
    }
    debug_dir.join("examples").join(name)
}

/// `steadfastctl --data-dir DATA_DIR ARGS…`, run to completion.
pub fn ctl(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_steadfastctl"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .output()
        .expect("steadfastctl runs")
}

/// `status --json`, parsed; `None` while no daemon answers.
pub fn status(data_dir: &Path) -> Option<serde_json::Value> {
    let out = ctl(data_dir, &["status", "--json"]);
    if out.status.code() != Some(0) {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Poll `status --json` until `pred` holds.
pub fn until(
    data_dir: &Path,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(s) = status(data_dir) {
            if pred(&s) {
                return s;
            }
            last = Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}; last status: {last:#?}")
}

/// Wait for `child` to exit; its exit code (`None`: killed by a signal).
/// Kills it and fails the test if it does not exit within [`PATIENCE`].
pub fn wait_exit(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("the child did not exit");
}
