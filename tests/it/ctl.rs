//! `steadfastctl`, the real binary, against a real in-process supervisor
//! served on its control socket: output shapes, exit codes (0 accepted,
//! 1 cannot connect, 3 refused; `status`: 0 running, 3 not, 4 unknown) and
//! the probes (`spec/control.md`,
//! "steadfastctl").

use crate::support::common;
use crate::support::processes;
use crate::support::processes::text;

use std::path::Path;
use std::process::Output;

use common::*;
use steadfast::control::serve_unix;
use steadfast::protocol::snapshot::Snapshot;
use steadfast::{ExitIntent, Hold};

/// Run `steadfastctl --data-dir DIR ARGS…` off the runtime's threads.
async fn ctl(data_dir: &Path, args: &[&str]) -> Output {
    processes::ctl_async_at("--data-dir", data_dir, args).await
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
        steadfast_actors::control_dir::ControlDir::under(data_dir).join("control.sock"),
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
        "Current attempt:",
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

    // `start` of a running runtime is accepted (already running); with
    // `--strict`, the lifecycle's refusal.
    let already = ctl(tmp.path(), &["start"]).await;
    assert_eq!(already.status.code(), Some(0), "{}", text(&already.stderr));
    let refused = ctl(tmp.path(), &["start", "--strict"]).await;
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
async fn no_daemon_status_is_unknown_and_probes_fail_silently() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let status = ctl(tmp.path(), &["status"]).await;
    assert_eq!(status.status.code(), Some(4), "status: unknown (LSB)");
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

    // The watcher's lines as they come, so the start waits until it has
    // printed `stopped` (before, a fixed 300 ms sleep that a loaded machine
    // could outlast).
    let mut watcher = std::process::Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(tmp.path())
        .args(["watch", "--until", "running"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("watch runs");
    let stdout = watcher.stdout.take().expect("stdout");
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // What it prints of the snapshot it found: the last attempt's phases,
    // then the state.
    let (first, lines) = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        while let Ok(line) = lines.recv_timeout(PATIENCE) {
            let stopped = line.contains("→ stopped");
            seen.push(line);
            if stopped {
                break;
            }
        }
        (seen.join("\n"), lines)
    })
    .await
    .expect("task");
    assert!(
        first.contains("→ stopped"),
        "the watcher saw stopped first: {first}"
    );
    handle.start().await.expect("start");
    let (status, rest) = tokio::task::spawn_blocking(move || {
        let rest: Vec<String> = std::iter::from_fn(|| lines.recv_timeout(PATIENCE).ok()).collect();
        (watcher.wait().expect("watch exits"), rest)
    })
    .await
    .expect("task");
    let stdout = rest.join("\n");
    assert_eq!(status.code(), Some(0), "{first}\n{stdout}");
    assert!(stdout.contains("→ running (attempt 2)"), "{stdout}");
    assert!(
        stdout.contains("attempt 2 phase") && stdout.contains("bind_listener: completed in"),
        "{stdout}"
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn journal_config_and_reinit_from_the_command_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise_toml(tmp.path(), "listen_addr = \"127.0.0.1:0\"");
    let _server = serve_unix(
        handle.clone(),
        steadfast_actors::control_dir::ControlDir::under(tmp.path()).join("control.sock"),
    )
    .expect("serves");
    until(&handle, "running", running).await;

    let journal = ctl(tmp.path(), &["journal", "--json"]).await;
    assert_eq!(journal.status.code(), Some(0), "{}", text(&journal.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&journal.stdout).expect("json");
    assert_eq!(answer["schema"], steadfast::protocol::snapshot::SCHEMA);
    assert_eq!(answer["offline"], false);
    let attempts: Vec<steadfast::protocol::history::JournalAttempt> =
        serde_json::from_value(answer["attempts"].clone()).expect("a list of attempts");
    assert_eq!(attempts.len(), 1);
    let human = text(&ctl(tmp.path(), &["journal"]).await.stdout);
    assert!(
        human.contains("Run 1:") && human.contains("bind_listener"),
        "{human}"
    );

    let set = ctl(tmp.path(), &["config", "set", "log_level", "debug"]).await;
    assert_eq!(set.status.code(), Some(0), "{}", text(&set.stderr));
    let show = ctl(tmp.path(), &["config", "show", "log_level", "--json"]).await;
    let view: steadfast::protocol::snapshot::ConfigView =
        serde_json::from_slice(&show.stdout).expect("a view");
    assert_eq!(view.effective.as_deref(), Some("\"debug\""));
    let show = text(&ctl(tmp.path(), &["config", "show"]).await.stdout);
    assert!(show.contains("log_level = \"debug\""), "{show}");
    let bad = ctl(tmp.path(), &["config", "set", "a..b", "1"]).await;
    assert_eq!(bad.status.code(), Some(3));
    assert!(
        text(&bad.stderr).contains("invalid"),
        "{}",
        text(&bad.stderr)
    );

    // reinit: refused while running, then prepared, confirmed, spent.
    let early = ctl(tmp.path(), &["reinit"]).await;
    assert_eq!(early.status.code(), Some(3));
    assert!(text(&early.stderr).contains("runtime_not_stopped"));
    assert_eq!(ctl(tmp.path(), &["stop"]).await.status.code(), Some(0));
    let prepared = ctl(tmp.path(), &["reinit", "--json"]).await;
    assert_eq!(
        prepared.status.code(),
        Some(0),
        "{}",
        text(&prepared.stderr)
    );
    let prepared: serde_json::Value = serde_json::from_slice(&prepared.stdout).expect("json");
    let token = prepared["token"].as_str().expect("a token").to_owned();
    let human = text(&ctl(tmp.path(), &["reinit"]).await.stdout);
    // The printed line carries the flags that reached this daemon, so it
    // runs as printed (it said `steadfastctl reinit --confirm …` alone).
    assert!(
        human.contains(&format!(
            "steadfastctl --data-dir {} reinit --confirm {token}",
            tmp.path().display()
        )),
        "{human}"
    );
    let bogus = ctl(tmp.path(), &["reinit", "--confirm", "reinit-1-00000000"]).await;
    assert_eq!(bogus.status.code(), Some(3));
    assert!(text(&bogus.stderr).contains("stale_confirmation"));
    let done = ctl(tmp.path(), &["reinit", "--confirm", &token]).await;
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(text(&done.stdout).contains("stopped (reinit_complete)"));
    let spent = ctl(tmp.path(), &["reinit", "--confirm", &token]).await;
    assert_eq!(spent.status.code(), Some(3));
    exit(run, &handle, ExitIntent::Halt).await;
}
