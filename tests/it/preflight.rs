//! The restart preflight, in the real tree: before a
//! `restart` drains a running runtime the daemon resolves the new config in
//! a task; a config that does not resolve refuses the restart
//! (`config_invalid`, with the error) and the runtime keeps serving, and
//! `restart --force` drains anyway.
//!
//! - `a_broken_config_refuses_the_restart_and_kvd_keeps_serving`: the real
//!   binaries — kvd with `--config f`, `f` broken (invalid TOML),
//!   `steadfastctl restart` exits 3 with `config_invalid` and the error
//!   naming the file, kvd still answers a real TCP `GET`, and
//!   `restart --force` drains and then fails held in `resolve_config`.
//! - `the_preflight_runs_in_a_task_and_the_actor_keeps_answering`: while a
//!   restart's resolve hangs, the Lifecycle actor answers other commands;
//!   released, the restart is refused and the runtime is the one that was
//!   running.
//! - `a_preflight_that_hangs_is_bounded_and_refuses_the_restart`: a resolve
//!   that never returns is given up at the 10 s deadline and refuses the
//!   restart (`config_invalid`, naming the deadline).

use crate::support::common;
use crate::support::processes;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use processes::{PATIENCE, ctl, kv, until, wait_exit};
use steadfast::CommandError;
use steadfast::config::{ConfigError, ConfigSource, ResolvedConfig};
use steadfast::protocol::lifecycle::{LifecycleState, RefusedBecause};

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

/// Write `text` to `path`, private (0600), replacing what was there.
fn write_private(path: &Path, text: &str) {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("open the config");
    file.write_all(text.as_bytes()).expect("write the config");
    file.sync_all().expect("fsync the config");
}

/// How many boots this process made: the current attempt's number (the
/// status carries the current attempt only).
fn attempts(s: &serde_json::Value) -> u64 {
    s["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|a| a["attempt"].as_u64())
        .unwrap_or(0)
}

#[test]
fn a_broken_config_refuses_the_restart_and_kvd_keeps_serving() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    write_private(&config, &format!("listen_addr = \"127.0.0.1:{port}\"\n"));
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let up = until(&data, "running", |s| state(s) == "running");
    assert_eq!(kv(port, "SET greeting hello"), "OK");

    // Break the file: invalid TOML.
    write_private(&config, "listen_addr = [\n");
    let refused = ctl(&data, &["restart"]);
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    println!(
        "steadfastctl restart: exit {:?}, stderr: {stderr}",
        refused.status.code()
    );
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("config_invalid"), "{stderr}");
    assert!(
        stderr.contains("kvd.toml"),
        "the error names the file: {stderr}"
    );

    // Nothing was torn down: the same attempt serves, over real TCP.
    let after = until(&data, "still running", |s| state(s) == "running");
    assert_eq!(attempts(&after), attempts(&up), "no new boot");
    assert_eq!(
        after["lifecycle"]["attempt"], up["lifecycle"]["attempt"],
        "the same runtime"
    );
    assert_eq!(kv(port, "GET greeting"), "hello");

    // --force drains anyway, and the next boot fails held in resolve_config:
    // the restart waits for it and says so (exit 3, as systemctl's).
    let forced = ctl(&data, &["restart", "--force"]);
    let stderr = String::from_utf8_lossy(&forced.stderr);
    assert_eq!(forced.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("did not reach running: failed in resolve_config"),
        "{stderr}"
    );
    let held = until(&data, "a held failure", |s| {
        state(s) == "failed" && s["lifecycle"]["retry"]["class"] == "hold"
    });
    assert_eq!(held["lifecycle"]["report"]["phase"], "resolve_config");
    assert!(attempts(&held) > attempts(&up), "the forced restart booted");

    let _ = ctl(&data, &["exit"]);
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// A source that resolves `good` until armed, then blocks each resolve
/// until released, and fails once released.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<GateState>, Condvar)>);

#[derive(Default)]
struct GateState {
    armed: bool,
    entered: bool,
    released: bool,
}

impl Gate {
    fn source(&self) -> ConfigSource {
        let gate = self.clone();
        ConfigSource::new(move || {
            let (lock, cvar) = &*gate.0;
            let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
            if !s.armed {
                return Ok(ResolvedConfig::untracked(common::good()));
            }
            s.entered = true;
            cvar.notify_all();
            while !s.released {
                s = cvar.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
            Err(ConfigError::Invalid(
                "the test's config does not resolve".into(),
            ))
        })
    }

    fn set(&self, f: impl FnOnce(&mut GateState)) {
        let (lock, cvar) = &*self.0;
        f(&mut lock.lock().unwrap_or_else(PoisonError::into_inner));
        cvar.notify_all();
    }

    /// Block (off the runtime's threads) until a resolve is held.
    async fn entered(&self) {
        let gate = self.clone();
        tokio::task::spawn_blocking(move || {
            let (lock, cvar) = &*gate.0;
            let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
            while !s.entered {
                s = cvar.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        })
        .await
        .expect("the waiter");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_preflight_runs_in_a_task_and_the_actor_keeps_answering() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gate = Gate::default();
    let (run, handle) = common::supervise(tmp.path(), gate.source(), None);
    let up = common::until(&handle, "running", common::running).await;

    gate.set(|s| s.armed = true);
    let restarting = tokio::spawn({
        let handle = handle.clone();
        async move { handle.restart().await }
    });
    gate.entered().await;

    // The resolve is held; the Lifecycle actor still steps commands.
    let answered = tokio::time::timeout(PATIENCE, handle.retry())
        .await
        .expect("the actor answers while the preflight is held");
    assert!(
        matches!(answered, Err(CommandError::Refused(ref r)) if r.reason == RefusedBecause::RuntimeNotFailed),
        "{answered:?}"
    );
    assert!(common::running(&handle.snapshot()));

    gate.set(|s| s.released = true);
    let refused = restarting.await.expect("task").expect_err("refused");
    let CommandError::Refused(refused) = refused else {
        panic!("not a refusal: {refused:?}");
    };
    assert_eq!(refused.reason, RefusedBecause::ConfigInvalid);
    assert_eq!(
        refused.detail.as_deref(),
        Some("invalid config: the test's config does not resolve"),
        "{refused}"
    );
    let now = handle.snapshot();
    assert!(
        matches!(
            (&now.lifecycle, &up.lifecycle),
            (LifecycleState::Running { attempt: a, .. }, LifecycleState::Running { attempt: b, .. }) if a == b
        ),
        "{:?}",
        now.lifecycle
    );
    common::exit(run, &handle, steadfast::ExitIntent::Halt).await;
}

/// A source that never answers: the preflight gives up at
/// `RESOLVE_DEADLINE` (10 s, real time: the blocking thread would hold a
/// paused clock still) and the restart is refused as `config_invalid`
/// naming the deadline; the runtime never stopped serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_preflight_that_hangs_is_bounded_and_refuses_the_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gate = Gate::default();
    let (run, handle) = common::supervise(tmp.path(), gate.source(), None);
    common::until(&handle, "running", common::running).await;

    gate.set(|s| s.armed = true);
    let refused = handle.restart().await.expect_err("refused");
    let CommandError::Refused(refused) = refused else {
        panic!("not a refusal: {refused:?}");
    };
    assert_eq!(refused.reason, RefusedBecause::ConfigInvalid);
    let detail = refused.detail.clone().unwrap_or_default();
    assert!(detail.contains("did not finish within 10s"), "{detail}");
    assert!(common::running(&handle.snapshot()));
    gate.set(|s| s.released = true);
    common::exit(run, &handle, steadfast::ExitIntent::Halt).await;
}
