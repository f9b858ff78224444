//! The README's walkthrough, end to end, against real processes: the `kvd`
//! example runs as a child process and is driven only through the real
//! `steadfastctl` binary (`--json`, exit codes) and kvd's TCP port. Each step
//! asserts what the README says the user will see.

mod processes;

use std::process::Stdio;
use std::time::Instant;

use processes::{ctl, kv, until, wait_exit};

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

#[test]
fn the_readme_walkthrough() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("kvd-data");
    let config = tmp.path().join("kvd.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let good = format!("listen_addr = \"127.0.0.1:{port}\"\n");
    std::fs::write(&config, &good).expect("config");

    // 1. Run kvd; `status` shows it running, first ever; set a key.
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let up = until(&data, "running", |s| state(s) == "running");
    assert_eq!(up["previous_run"]["kind"], "first_ever");
    let human = ctl(&data, &["status"]);
    assert_eq!(human.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&human.stdout).contains("running"));
    assert_eq!(kv(port, "SET greeting hello world"), "OK");
    assert_eq!(kv(port, "GET greeting"), "hello world");

    // 2. stop --hold, then exit --relaunch: the process ends with 75.
    let stopped = ctl(&data, &["stop", "--hold", "--json"]);
    assert_eq!(
        stopped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let stopped: serde_json::Value = serde_json::from_slice(&stopped.stdout).expect("json");
    assert_eq!(state(&stopped), "stopped");
    assert_eq!(stopped["hold"], true);
    let refused = ctl(&data, &["stop"]);
    assert_eq!(
        refused.status.code(),
        Some(3),
        "stopping a stopped runtime is refused"
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("runtime_not_running"));
    assert_eq!(ctl(&data, &["exit", "--relaunch"]).status.code(), Some(0));
    assert_eq!(
        wait_exit(&mut daemon),
        Some(75),
        "exit --relaunch ends the process with 75"
    );

    // 3. Start kvd again: stopped (held at startup), previous run clean_stop;
    //    `start` brings it to running, and the data is there.
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let held = until(&data, "held at startup", |s| state(s) == "stopped");
    assert_eq!(held["lifecycle"]["reason"], "held_at_startup");
    assert_eq!(held["previous_run"]["kind"], "clean_stop");
    let probe = ctl(&data, &["probe", "ready"]);
    assert_eq!(probe.status.code(), Some(1), "not ready while stopped");
    assert!(
        probe.stdout.is_empty() && probe.stderr.is_empty(),
        "probes are silent"
    );
    assert_eq!(ctl(&data, &["probe", "live"]).status.code(), Some(0));
    assert_eq!(ctl(&data, &["start"]).status.code(), Some(0));
    until(&data, "running", |s| state(s) == "running");
    assert_eq!(ctl(&data, &["probe", "ready"]).status.code(), Some(0));
    assert_eq!(kv(port, "GET greeting"), "hello world");

    // 4. kill -9 and start again: previous run crashed, data intact.
    assert_eq!(kv(port, "SET after kill"), "OK");
    daemon.kill().expect("kill -9");
    daemon.wait().expect("reaped");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let again = until(&data, "running after the crash", |s| state(s) == "running");
    assert_eq!(again["previous_run"]["kind"], "crashed");
    assert_eq!(kv(port, "GET greeting"), "hello world");
    assert_eq!(kv(port, "GET after"), "kill");

    // 5. Break the config file: a restart is refused (config_invalid) and
    //    kvd keeps serving; a forced one gives a held failure with the
    //    error shown; fix the file: it boots by itself.
    std::fs::write(&config, "listen_addr = [\n").expect("break the config");
    assert_eq!(ctl(&data, &["restart"]).status.code(), Some(3));
    assert_eq!(kv(port, "GET greeting"), "hello world");
    assert_eq!(ctl(&data, &["restart", "--force"]).status.code(), Some(0));
    let held = until(&data, "a held failure", |s| state(s) == "failed");
    assert_eq!(held["lifecycle"]["retry"]["class"], "hold");
    assert_eq!(held["lifecycle"]["report"]["phase"], "resolve_config");
    let error = held["lifecycle"]["report"]["error"].as_str().unwrap_or("");
    assert!(
        error.contains("kvd.toml"),
        "the error names the file: {error}"
    );
    let human = String::from_utf8_lossy(&ctl(&data, &["status"]).stdout).into_owned();
    assert!(
        human.contains("kvd.toml"),
        "status shows the error:\n{human}"
    );
    std::fs::write(&config, &good).expect("fix the config");
    until(&data, "running on the fixed config", |s| {
        state(s) == "running"
    });
    assert_eq!(kv(port, "GET greeting"), "hello world");

    // 6. A setting through the override tier (applied in place), the
    //    journal across the relaunches above, and a confirmed wipe.
    let set = ctl(&data, &["config", "set", "max_connections", "8"]);
    assert_eq!(
        set.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let shown = ctl(&data, &["config", "show", "max_connections", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("a config view");
    assert_eq!(shown["effective"], "8");
    until(&data, "the setting applied in place", |s| {
        state(s) == "running" && s["pending"]["kind"] == "in_sync"
    });
    let journal = ctl(&data, &["journal", "--json"]);
    let journal: serde_json::Value = serde_json::from_slice(&journal.stdout).expect("attempts");
    let runs: std::collections::BTreeSet<u64> = journal
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|a| a["run"].as_u64())
        .collect();
    assert!(runs.len() >= 3, "three processes ran: {journal}");
    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));
    let prepared = ctl(&data, &["reinit", "--json"]);
    let prepared: serde_json::Value = serde_json::from_slice(&prepared.stdout).expect("a token");
    let token = prepared["token"].as_str().expect("token").to_owned();
    assert_eq!(
        ctl(&data, &["reinit", "--confirm", &token]).status.code(),
        Some(0)
    );
    let wiped = until(&data, "re-initialized", |s| state(s) == "stopped");
    assert_eq!(wiped["lifecycle"]["reason"], "reinit_complete");
    assert_eq!(ctl(&data, &["start"]).status.code(), Some(0));
    until(&data, "running over the wiped store", |s| {
        state(s) == "running"
    });
    assert_eq!(kv(port, "GET greeting"), "NOT_FOUND");

    // Done: exit (halt) ends the process with 0.
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(0));
    assert_eq!(
        ctl(&data, &["status"]).status.code(),
        Some(4),
        "no daemon: status unknown"
    );
    eprintln!("the walkthrough took {:?}", started.elapsed());
}
