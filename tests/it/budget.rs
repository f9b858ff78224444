//! The restart budget through the real binaries (`protocol/spec/lifecycle.md`,
//! "Restart budget"): a kvd whose port is taken fails every boot with class
//! backoff; at the default budget's fifth failed automatic boot (1 + 2 + 4 +
//! 8 s of backoff, about 15 s) it is held instead of retrying forever, and
//! `steadfastctl status` says so; an operator's `steadfastctl retry` gets
//! through once the port is free.
//!
//! `a_crash_looping_kvd_is_held_after_five_failed_boots_and_retry_resumes`.

use crate::support::processes;

use std::process::Stdio;

#[test]
fn a_crash_looping_kvd_is_held_after_five_failed_boots_and_retry_resumes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr");
    let config = tmp.path().join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"{addr}\"\n")).expect("config");
    let data = tmp.path().join("data");
    let mut child = processes::kvd(&data, &config, Stdio::null());

    let held = processes::until(&data, "the budget spent", |s| {
        !s["lifecycle"]["budget_spent"].is_null()
    });
    let lifecycle = &held["lifecycle"];
    assert_eq!(lifecycle["state"], "failed");
    assert_eq!(lifecycle["attempt"], 5);
    assert_eq!(lifecycle["retry"], serde_json::json!({"class": "hold"}));
    assert_eq!(lifecycle["budget_spent"]["failures"], 5);
    assert_eq!(lifecycle["budget_spent"]["window_ms"], 600_000);
    assert_eq!(
        held["budget"],
        serde_json::json!({"max_failures": 5, "window_ms": 600_000, "failures": 5})
    );
    // The status carries the current attempt; the history is the journal's.
    let history = processes::ctl(&data, &["status", "--json", "--history", "10"]);
    let history: serde_json::Value = serde_json::from_slice(&history.stdout).expect("json");
    let attempts = history["history"].as_array().expect("history");
    assert_eq!(attempts.len(), 5, "five boots, no sixth");

    let status = processes::ctl(&data, &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(3), "failed: not running: {text}");
    assert!(
        text.contains("Budget: 5 of 5 failed automatic restarts within 600 s — spent"),
        "{text}"
    );
    assert!(
        text.contains("restart budget spent: 5 automatic restarts failed within 600000 ms"),
        "{text}"
    );

    drop(squatter);
    let retry = processes::ctl(&data, &["retry"]);
    assert_eq!(
        retry.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&retry.stderr)
    );
    let up = processes::until(&data, "running after the retry", |s| {
        s["lifecycle"]["state"] == "running"
    });
    assert_eq!(up["budget"]["failures"], 0, "the retry emptied the count");
    let exit = processes::ctl(&data, &["exit"]);
    assert_eq!(exit.status.code(), Some(0));
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}
