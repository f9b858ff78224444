//! `steadfastctl`, the real binary, against a real in-process supervisor
//! served on its control socket: output shapes, exit codes (0 accepted,
//! 1 cannot connect, 3 refused) and the probes (`spec/control.md`,
//! "steadfastctl").

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use steadfast::control::serve_unix;
use steadfast::{ExitIntent, Hold, LifecycleState, Snapshot};

/// Run `steadfastctl --data-dir DIR ARGS…` off the runtime's threads.
async fn ctl(data_dir: &Path, args: &[&str]) -> Output {
    let data_dir = data_dir.to_owned();
    let args: Vec<String> = args.iter().map(|&a| a.to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_steadfastctl"))
            .arg("--data-dir")
            .arg(&data_dir)
            .args(&args)
            .output()
            .expect("steadfastctl runs")
    })
    .await
    .expect("task")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A supervisor over `data_dir`, running, with its control socket served.
async fn running_with_socket(
    data_dir: &Path,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    steadfast::SupervisorHandle,
    steadfast::control::ServerGuard,
) {
    let (run, handle) = supervise(data_dir, Switch::new(Some(good())).source(), None);
    let server = serve_unix(
        handle.clone(),
        steadfast::ControlDir::under(data_dir).join("control.sock"),
    )
    .expect("serves");
    until(&handle, "running", running).await;
    (run, handle, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_json_parses_and_status_reads_like_systemctl() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_with_socket(tmp.path()).await;

    let json = ctl(tmp.path(), &["status", "--json"]).await;
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    let snapshot: Snapshot = serde_json::from_slice(&json.stdout).expect("the JSON is a snapshot");
    assert!(running(&snapshot));
    assert_eq!(snapshot.pid, std::process::id());

    let human = ctl(tmp.path(), &["status"]).await;
    assert_eq!(human.status.code(), Some(0));
    let out = text(&human.stdout);
    for needle in [
        "— running",
        "State: running (attempt 1)",
        "Previous: first ever",
        "Recent attempts:",
        "open_store",
        "bind_listener",
        "serve",
    ] {
        assert!(out.contains(needle), "{needle:?} missing from:\n{out}");
    }
    exit(run, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_command_exits_3_with_the_reason_and_accepted_ones_0() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_with_socket(tmp.path()).await;

    let refused = ctl(tmp.path(), &["start"]).await;
    assert_eq!(refused.status.code(), Some(3));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("runtime_running"), "{stderr}");

    let stopped = ctl(tmp.path(), &["stop", "--hold"]).await;
    assert_eq!(stopped.status.code(), Some(0), "{}", text(&stopped.stderr));
    assert!(handle.snapshot().hold);
    assert!(text(&stopped.stdout).contains("— stopped"));

    let started = ctl(tmp.path(), &["start"]).await;
    assert_eq!(started.status.code(), Some(0), "{}", text(&started.stderr));
    until(&handle, "running again", running).await;

    let exited = ctl(tmp.path(), &["exit", "--relaunch"]).await;
    assert_eq!(exited.status.code(), Some(0), "{}", text(&exited.stderr));
    let ended = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("ends")
        .expect("task");
    assert_eq!(ended, ExitIntent::Relaunch);
}

#[tokio::test]
async fn no_daemon_exits_1_and_probes_fail_silently() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let status = ctl(tmp.path(), &["status"]).await;
    assert_eq!(status.status.code(), Some(1));
    assert!(text(&status.stderr).contains("cannot connect"));
    for probe in ["ready", "live"] {
        let out = ctl(tmp.path(), &["probe", probe]).await;
        assert_eq!(out.status.code(), Some(1));
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "probe is silent"
        );
    }
    let verbose = ctl(tmp.path(), &["probe", "live", "--verbose"]).await;
    assert_eq!(verbose.status.code(), Some(1));
    assert!(!verbose.stderr.is_empty());
    let usage = ctl(tmp.path(), &["frobnicate"]).await;
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn probe_ready_follows_running_and_live_follows_the_daemon() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_with_socket(tmp.path()).await;

    let ready = ctl(tmp.path(), &["probe", "ready"]).await;
    assert_eq!(ready.status.code(), Some(0));
    assert!(ready.stdout.is_empty() && ready.stderr.is_empty());

    handle.stop(Hold::None).await.expect("stop");
    let ready = ctl(tmp.path(), &["probe", "ready"]).await;
    assert_eq!(ready.status.code(), Some(1));
    let live = ctl(tmp.path(), &["probe", "live"]).await;
    assert_eq!(live.status.code(), Some(0));
    exit(run, &handle, ExitIntent::Halt).await;
}

/// `watch --until running` prints the transitions and each boot phase with
/// its duration as they arrive, and returns once running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_prints_transitions_and_phases_until_running() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_with_socket(tmp.path()).await;
    handle.stop(Hold::None).await.expect("stop");

    let watcher = {
        let dir = tmp.path().to_owned();
        tokio::spawn(async move { ctl(&dir, &["watch", "--until", "running"]).await })
    };
    // Let the watcher see `stopped` first.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(matches!(
        handle.snapshot().lifecycle,
        LifecycleState::Stopped { .. }
    ));
    handle.start().await.expect("start");
    let out = tokio::time::timeout(PATIENCE, watcher)
        .await
        .expect("watch returns")
        .expect("task");
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("→ stopped"), "{stdout}");
    assert!(stdout.contains("→ running (attempt 2)"), "{stdout}");
    assert!(
        stdout.contains("attempt 2 phase") && stdout.contains("bind_listener: completed in"),
        "{stdout}"
    );
    exit(run, &handle, ExitIntent::Halt).await;
}
