//! Supervised children through the real binaries: `examples/workers.rs`
//! (three groups, one per strategy) run as a daemon, a child made to fail
//! with `--fail NAME:MS`, watched and driven with the real `steadfastctl`.
//!
//! - `a_failing_child_is_restarted_with_its_later_siblings_and_an_operator_restarts_one`:
//!   rest_for_one restarts `index` and `publish`, never `ingest`; the
//!   runtime stays on its first attempt; the journal names the restarts;
//!   `child restart` restarts one child alone, and a `child start` of a
//!   running child or a `child restart` of an unknown one is refused (exit 3).
//! - `a_meltdown_ends_the_runtime_spends_the_budget_and_retry_resumes`.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::support::processes;

fn workers(data_dir: &Path, fail: &str) -> Child {
    // Built before the daemon starts, so the first poll is not a build.
    processes::steadfastctl();
    Command::new(processes::example("workers"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--fail")
        .arg(fail)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("workers starts")
}

/// Child `name` in a `status --json`.
fn child<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["children"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("child {name} listed: {status:#}"))
}

fn incarnation(status: &serde_json::Value, name: &str) -> u64 {
    child(status, name)["incarnation"]
        .as_u64()
        .expect("a number")
}

fn stop(mut daemon: Child) {
    processes::signal(&daemon, rustix::process::Signal::TERM);
    assert_eq!(processes::wait_exit(&mut daemon), Some(0));
}

#[test]
fn a_failing_child_is_restarted_with_its_later_siblings_and_an_operator_restarts_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = workers(&data, "index:1500");
    let restarted = processes::until(&data, "index restarted", |s| {
        s["children"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["name"] == "index" && c["incarnation"].as_u64() >= Some(2))
        })
    });
    assert_eq!(restarted["lifecycle"]["state"], "running");
    assert_eq!(
        restarted["lifecycle"]["attempt"], 1,
        "the runtime was not restarted"
    );
    assert_eq!(
        incarnation(&restarted, "ingest"),
        1,
        "an earlier sibling is spared"
    );
    assert!(
        incarnation(&restarted, "publish") >= 2,
        "a later sibling is restarted"
    );
    for untouched in ["ticker", "cache", "left", "right"] {
        assert_eq!(incarnation(&restarted, untouched), 1, "{untouched}");
        assert_eq!(child(&restarted, untouched)["state"]["state"], "running");
    }
    assert_eq!(child(&restarted, "cache")["kind"], "actor");
    assert_eq!(child(&restarted, "index")["restart"], "permanent");

    let text = processes::ctl(&data, &["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Children:"), "{text}");
    assert!(text.contains("index"), "{text}");

    // One child, by name; nothing else moves.
    let before = processes::status(&data).expect("status");
    let out = processes::ctl(&data, &["child", "restart", "ticker", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("child ticker: running (incarnation 2)"),
        "{out:?}"
    );
    let after = processes::status(&data).expect("status");
    assert_eq!(incarnation(&after, "ticker"), 2);
    for untouched in ["cache", "ingest", "left", "right"] {
        assert_eq!(
            incarnation(&after, untouched),
            incarnation(&before, untouched)
        );
    }
    let refused = processes::ctl(&data, &["child", "start", "ticker"]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("already running"),
        "{refused:?}"
    );
    let unknown = processes::ctl(&data, &["child", "restart", "nope"]);
    assert_eq!(unknown.status.code(), Some(3), "{unknown:?}");
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no child is named \"nope\""),
        "{unknown:?}"
    );

    // The journal keeps each restart with its reason.
    let journal = processes::ctl(&data, &["journal"]);
    let journal = String::from_utf8_lossy(&journal.stdout);
    assert!(
        journal.contains("child index restarted (incarnation 2): failed: index failed on purpose"),
        "{journal}"
    );
    assert!(
        journal
            .contains("child publish restarted (incarnation 2): rest_for_one restarted with index"),
        "{journal}"
    );
    assert!(
        journal.contains("child ticker restarted (incarnation 2): operator restart"),
        "{journal}"
    );
    stop(daemon);
}

#[test]
fn a_meltdown_ends_the_runtime_spends_the_budget_and_retry_resumes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = workers(&data, "left:100");
    // Each boot succeeds; each runtime melts down at `left`'s fourth
    // failure within 10 s; backoff 1, 2, 4, 8 s; the fifth is held.
    let held = processes::until(&data, "the budget spent", |s| {
        !s["lifecycle"]["budget_spent"].is_null()
    });
    let lifecycle = &held["lifecycle"];
    assert_eq!(lifecycle["state"], "failed");
    assert_eq!(lifecycle["attempt"], 5);
    assert_eq!(lifecycle["report"]["phase"], "run");
    let error = lifecycle["report"]["error"].as_str().expect("an error");
    assert_eq!(
        error,
        "the runtime ended: 4 restarts within 10 s, one more than the group allows: \
         child left failed: left failed on purpose"
    );
    let text = processes::ctl(&data, &["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("State: failed: the runtime ended:"), "{text}");
    assert!(!text.contains("failed in run"), "{text}");
    assert!(text.contains("failed automatic restarts"), "{text}");
    // The boot itself went well; the runtime it made failed.
    assert!(text.contains("#5 booted"), "{text}");
    assert!(!text.contains("succeeded"), "{text}");
    // Every attempt's meltdown is in the journal, durable before the
    // runtime ended.
    let journal = processes::ctl(&data, &["journal", "--json"]);
    let journal: serde_json::Value = serde_json::from_slice(&journal.stdout).expect("json");
    let meltdowns = journal["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .filter(|a| {
            a["children"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|e| e["meltdown"] == true && e["child"] == "left")
            })
        })
        .count();
    assert_eq!(meltdowns, 5, "{journal:#}");

    let retry = processes::ctl(&data, &["retry"]);
    assert_eq!(retry.status.code(), Some(0), "{retry:?}");
    processes::until(&data, "a sixth boot", |s| s["lifecycle"]["attempt"] == 6);
    stop(daemon);
}

/// kvd's compactor is a supervised child: restarting it (as a failing one
/// would be) keeps the store open and an open connection served; the
/// runtime stays on its first attempt.
#[test]
fn restarting_kvds_compactor_keeps_its_connections_and_store() {
    use std::io::{BufRead, BufReader, Write};
    processes::steadfastctl();
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = processes::free_port();
    let config = tmp.path().join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let data = tmp.path().join("data");
    let daemon = processes::kvd(&data, &config, Stdio::null());
    let running = processes::until(&data, "kvd running with its compactor", |s| {
        s["children"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "compactor"))
    });
    assert_eq!(child(&running, "compactor")["restart"], "transient");

    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(processes::PATIENCE))
        .expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut ask = |line: &str| {
        (&stream)
            .write_all(format!("{line}\n").as_bytes())
            .expect("send");
        let mut answer = String::new();
        reader.read_line(&mut answer).expect("an answer");
        answer.trim_end().to_owned()
    };
    assert_eq!(ask("SET k 1"), "OK");

    let out = processes::ctl(&data, &["child", "restart", "compactor"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let after = processes::status(&data).expect("status");
    assert_eq!(incarnation(&after, "compactor"), 2);
    assert_eq!(
        after["lifecycle"]["attempt"], 1,
        "the runtime was not restarted"
    );
    // The same connection, still served, over the same store.
    assert_eq!(ask("GET k"), "1");
    assert_eq!(ask("SET k 2"), "OK");
    assert_eq!(processes::kv(port, "GET k"), "2");
    stop(daemon);
}
