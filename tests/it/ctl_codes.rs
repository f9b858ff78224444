//! The exit codes scripts expect (`spec/control.md`,
//! "steadfastctl"), through the real `steadfastctl` against a real kvd:
//! - `status` exits 0 running, 3 not running (stopped, failed, …), 4
//!   unknown (no daemon answered), as LSB init scripts and
//!   `systemctl status` do (before: 0 whatever the state, 1 unreachable);
//! - `watch --until STATE` says "the daemon exited" (exit 3) when it did,
//!   instead of a connect error;
//! - `--timeout` bounds `watch` and `stop` (exit 5);
//! - the data dir may come from `STEADFAST_DATA_DIR`.

use crate::support::processes;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use processes::{ctl, free_port, text, until, wait_exit};

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

fn config(dir: &Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("kvd.toml");
    std::fs::write(&path, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    path
}

#[test]
fn status_exits_0_running_3_not_running_4_unknown() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &config(tmp.path(), free_port()), Stdio::null());
    until(&data, "running", |s| state(s) == "running");
    for args in [&["status"][..], &["status", "--json"]] {
        let out = ctl(&data, args);
        assert_eq!(out.status.code(), Some(0), "{args:?} running: {out:?}");
    }

    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));
    for args in [&["status"][..], &["status", "--json"]] {
        let out = ctl(&data, args);
        assert_eq!(out.status.code(), Some(3), "{args:?} stopped: {out:?}");
        assert!(
            text(&out.stdout).contains("stopped"),
            "it still prints the state"
        );
    }

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
    let out = ctl(&data, &["status"]);
    assert_eq!(out.status.code(), Some(4), "no daemon: unknown: {out:?}");
    assert!(text(&out.stderr).contains("cannot connect"), "{out:?}");
}

/// A daemon held on a bad config is not running: 3.
#[test]
fn status_of_a_held_failure_exits_3() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let bad = tmp.path().join("kvd.toml");
    std::fs::write(&bad, "listen_addr = [broken\n").expect("config");
    let mut daemon = processes::kvd(&data, &bad, Stdio::null());
    until(&data, "a held failure", |s| state(s) == "failed");
    let out = ctl(&data, &["status"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stdout).contains("failed"), "{out:?}");
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// `watch --until running` on a daemon that exits instead says so, and
/// exits 3 — not "cannot connect … No such file" with 1.
#[test]
fn watch_until_says_the_daemon_exited() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &config(tmp.path(), free_port()), Stdio::null());
    until(&data, "running", |s| state(s) == "running");
    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));

    let watcher = Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(&data)
        .args(["watch", "--until", "running"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch runs");
    // The watcher has its first snapshot once it printed `→ stopped`; an
    // exit sent before would find no daemon at all.
    let mut watcher = watcher;
    let stdout = watcher.stdout.take().expect("stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("→ stopped")),
        "the watcher saw the daemon"
    );
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
    let code = wait_exit(&mut watcher);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watcher.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("the daemon exited before it was running"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot connect"), "{stderr}");
}

/// `watch --until … --timeout` and `stop --timeout` exit 5 when the time
/// passes first. The stop is aimed at a SIGSTOPped kvd, which never says
/// its first byte: nothing is sent, and the runtime keeps running.
#[test]
fn watch_and_stop_take_a_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &config(tmp.path(), free_port()), Stdio::null());
    until(&data, "running", |s| state(s) == "running");
    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));

    let out = ctl(&data, &["watch", "--until", "running", "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(
        text(&out.stderr).contains("timed out after 1 s waiting for running"),
        "{out:?}"
    );
    assert_eq!(ctl(&data, &["start"]).status.code(), Some(0));
    until(&data, "running", |s| state(s) == "running");

    // `processes::signal` returns once every thread of kvd is stopped:
    // `kill -STOP` returns before that, and on a loaded machine a thread
    // still running could take the stop and execute it in time (seen in
    // CI: the runtime `stopped`, reason `operator_request`).
    processes::signal(&daemon, rustix::process::Signal::STOP);
    let out = ctl(&data, &["stop", "--timeout", "1"]);
    processes::signal(&daemon, rustix::process::Signal::CONT);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(text(&out.stderr).contains("timed out after 1 s"), "{out:?}");
    let after = until(&data, "an answer", |_| true);
    assert_eq!(state(&after), "running", "{after:#}");

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// `steadfastctl` run with `env` and `args` (the environment of the child
/// only).
fn ctl_env(env: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut command = Command::new(processes::steadfastctl());
    command.args(args).env_remove("STEADFAST_DATA_DIR");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("steadfastctl runs")
}

/// `STEADFAST_DATA_DIR` names the data dir when `--data-dir` does not; the
/// flag wins; set but empty is a usage error (2), not the current dir.
/// And `reload` re-reads the config (0).
#[test]
fn the_data_dir_may_come_from_the_environment() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &config(tmp.path(), free_port()), Stdio::null());
    until(&data, "running", |s| state(s) == "running");

    let out = ctl_env(&[("STEADFAST_DATA_DIR", &data)], &["status"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let elsewhere = tmp.path().join("elsewhere");
    let out = ctl_env(&[("STEADFAST_DATA_DIR", &elsewhere)], &["status"]);
    assert_eq!(out.status.code(), Some(4), "nothing there: {out:?}");
    let data_arg = data.to_str().expect("utf-8");
    let out = ctl_env(
        &[("STEADFAST_DATA_DIR", &elsewhere)],
        &["--data-dir", data_arg, "status"],
    );
    assert_eq!(out.status.code(), Some(0), "the flag wins: {out:?}");
    let out = ctl_env(&[("STEADFAST_DATA_DIR", Path::new(""))], &["status"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("STEADFAST_DATA_DIR is set but empty"));

    let out = ctl_env(&[("STEADFAST_DATA_DIR", &data)], &["reload"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("running"), "{out:?}");

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// `restart` and `start` return once the boot they started settled, in
/// the one process (as `systemctl restart` waits for its job): 0 with the
/// running snapshot, or 3 naming the failure when the boot fails (here:
/// its port is taken). `--no-block` returns the accepted snapshot at once
/// (`draining` for a restart, `booting` for a start), and `stop --no-block`
/// once the drain began; `--wait` is still accepted.
#[test]
fn restart_and_start_wait_for_the_boot_they_started() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let port = free_port();
    let mut daemon = processes::kvd(&data, &config(tmp.path(), port), Stdio::null());
    until(&data, "running", |s| state(s) == "running");

    let out = ctl(&data, &["restart", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let settled: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(state(&settled), "running", "{settled:#}");
    assert_eq!(
        settled["lifecycle"]["attempt"], 2,
        "the new boot: {settled:#}"
    );
    assert_eq!(
        processes::kv(port, "SET k v"),
        "OK",
        "serving when it returned"
    );
    let out = ctl(&data, &["restart", "--wait", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let settled: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(state(&settled), "running", "--wait as before: {settled:#}");

    // Answered once taken: the snapshot then (a kvd that drains and boots
    // quickly may already be running again), its attempt the new boot's at
    // most.
    let out = ctl(&data, &["restart", "--no-block", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answered: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        ["draining", "resolving", "booting", "running"].contains(&state(&answered)),
        "{answered:#}"
    );
    until(&data, "running again", |s| {
        state(s) == "running" && s["lifecycle"]["attempt"] == 4
    });

    let out = ctl(&data, &["stop", "--no-block", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let taken: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        ["draining", "stopped"].contains(&state(&taken)),
        "{taken:#}"
    );
    until(&data, "stopped", |s| state(s) == "stopped");

    // A boot that cannot bind: the wait ends failed, exit 3, naming why.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("take the port");
    let out = ctl(&data, &["start"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("did not reach running") && stderr.contains("bind_listener"),
        "{stderr}"
    );
    assert!(text(&out.stdout).contains("failed"), "{out:?}");

    drop(squatter);
    let out = ctl(&data, &["retry", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// `start` of a runtime already running and `stop` of one already stopped
/// are no errors (as `systemctl start` of a started unit): exit 0 and one
/// line saying so, or with `--json` the snapshot. `--strict` keeps the
/// refusal (3, with the reason). A refusal for another reason stays one:
/// `start` of a held failure, `stop --hold` of a runtime stopped without a
/// hold (the hold asked for was not taken). Before: 3 for all of them.
#[test]
fn start_when_running_and_stop_when_stopped_exit_0() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &config(tmp.path(), free_port()), Stdio::null());
    until(&data, "running", |s| state(s) == "running");

    let out = ctl(&data, &["start"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let said = text(&out.stdout);
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(said.trim_end().ends_with(": already running"), "{said}");
    let out = ctl(&data, &["start", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let snapshot: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(state(&snapshot), "running", "{snapshot:#}");
    let out = ctl(&data, &["start", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = ctl(&data, &["start", "--strict"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stderr).contains("runtime_running"), "{out:?}");

    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));
    let out = ctl(&data, &["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let said = text(&out.stdout);
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(said.trim_end().ends_with(": already stopped"), "{said}");
    let out = ctl(&data, &["stop", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let snapshot: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(state(&snapshot), "stopped", "{snapshot:#}");
    let out = ctl(&data, &["stop", "--strict"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stderr).contains("runtime_not_running"), "{out:?}");
    // A hold is taken only by a stop that stops: asked of a stopped
    // runtime without one, it is refused, and says why.
    let out = ctl(&data, &["stop", "--hold"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stderr).contains("not held"), "{out:?}");
    let after = until(&data, "an answer", |_| true);
    assert_eq!(after["hold"], false, "{after:#}");

    // Held: `stop --hold` of it is already where it was asked to be.
    assert_eq!(ctl(&data, &["start"]).status.code(), Some(0));
    until(&data, "running", |s| state(s) == "running");
    assert_eq!(ctl(&data, &["stop", "--hold"]).status.code(), Some(0));
    let out = ctl(&data, &["stop", "--hold"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("already stopped (held across relaunch)"),
        "{out:?}"
    );

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));

    // A held failure is not running, nor stopped: `start` stays refused.
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "listen_addr = [broken\n").expect("config");
    let held = tmp.path().join("held");
    let mut daemon = processes::kvd(&held, &bad, Stdio::null());
    until(&held, "a held failure", |s| state(s) == "failed");
    let out = ctl(&held, &["start"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stderr).contains("runtime_not_stopped"), "{out:?}");
    assert!(!text(&out.stdout).contains("already"), "{out:?}");
    assert_eq!(ctl(&held, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}
