//! A drain ends everything the runtime started, through real processes: kvd
//! runs as a child, driven only by the real `steadfastctl`, and a client on
//! a real TCP connection keeps writing across `stop` → `reinit` → `start`.
//!
//! The rule checked (`steadfast_actors::service`, module `tasks`; kvd's
//! connection rules in `examples/kvd/main.rs`): once the runtime is
//! stopped, no request of the old runtime is answered, and no write that
//! was answered `OK` is lost — except what the operator's confirmed
//! `reinit` wiped, which was written before the stop.
//!
//! Test: `a_connection_opened_before_stop_is_not_served_after_it`. Before
//! the fix, the connection opened before the stop was still served while
//! its client kept asking within 500 ms (a linger renewed by every
//! request): its `SET`s were answered `OK` after the drain, after the wipe,
//! and next to the new runtime after `start`, into the old runtime's store
//! (a removed log), and were gone afterwards.

use crate::support::processes;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use processes::{PATIENCE, ctl, free_port, kv, until, wait_exit};

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

/// What the client saw.
#[derive(Debug, Default)]
struct Seen {
    /// Keys answered `OK` for a `SET` sent on the connection opened before
    /// the stop, after the stop had returned (the runtime was stopped).
    after_stop: Vec<String>,
    /// Keys answered `OK` on a connection opened after `start` was asked.
    new_runtime: Vec<String>,
    /// Keys answered `OK` before the stop (the reinit wipes them).
    before_stop: usize,
}

/// Writes `SET k<i> v<i>` every 200 ms: on the first connection for as
/// long as kvd keeps it open, then on new connections once it is back.
fn client(
    port: u16,
    stopped: Arc<AtomicBool>,
    started: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen::default();
    let connect = || {
        let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(PATIENCE)).ok()?;
        let reader = BufReader::new(stream.try_clone().ok()?);
        Some((stream, reader))
    };
    let mut connection = connect();
    assert!(connection.is_some(), "the first connection");
    let mut first = true;
    let mut i = 0u64;
    while !done.load(Ordering::SeqCst) {
        i += 1;
        std::thread::sleep(Duration::from_millis(200));
        if connection.is_none() && started.load(Ordering::SeqCst) {
            connection = connect();
            first = false;
        }
        let Some((stream, reader)) = connection.as_mut() else {
            continue;
        };
        // Read before the send: whether the runtime was already stopped
        // when this request left.
        let sent_stopped = stopped.load(Ordering::SeqCst);
        let key = format!("k{i}");
        let mut answer = String::new();
        let ok = stream
            .write_all(format!("SET {key} v{i}\n").as_bytes())
            .and_then(|()| reader.read_line(&mut answer))
            .is_ok_and(|n| n > 0 && answer.trim_end() == "OK");
        if !ok {
            connection = None;
            continue;
        }
        if !first {
            seen.new_runtime.push(key);
        } else if sent_stopped {
            seen.after_stop.push(key);
        } else {
            seen.before_stop += 1;
        }
    }
    seen
}

/// The tester's scenario, end to end.
#[test]
fn a_connection_opened_before_stop_is_not_served_after_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    let port = free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let log = std::fs::File::create(tmp.path().join("kvd.log")).expect("log");
    let mut daemon = processes::kvd(&data, &config, Stdio::from(log));
    until(&data, "running", |s| state(s) == "running");

    let (stopped, started, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let writer = {
        let (stopped, started, done) = (stopped.clone(), started.clone(), done.clone());
        std::thread::spawn(move || client(port, stopped, started, done))
    };
    // A few answered writes first.
    std::thread::sleep(Duration::from_millis(700));
    let out = ctl(&data, &["stop"]);
    assert_eq!(out.status.code(), Some(0), "stop: {out:?}");
    stopped.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(700));

    let prepared = ctl(&data, &["reinit", "--json"]);
    assert_eq!(prepared.status.code(), Some(0), "reinit: {prepared:?}");
    let prepared: serde_json::Value = serde_json::from_slice(&prepared.stdout).expect("json");
    let token = prepared["token"].as_str().expect("a token").to_owned();
    let out = ctl(&data, &["reinit", "--confirm", &token]);
    assert_eq!(out.status.code(), Some(0), "reinit --confirm: {out:?}");
    std::thread::sleep(Duration::from_millis(700));

    started.store(true, Ordering::SeqCst);
    let out = ctl(&data, &["start"]);
    assert_eq!(out.status.code(), Some(0), "start: {out:?}");
    until(&data, "running again", |s| state(s) == "running");
    std::thread::sleep(Duration::from_millis(1200));
    done.store(true, Ordering::SeqCst);
    let seen = writer.join().expect("the client");

    let lost: Vec<&String> = seen
        .after_stop
        .iter()
        .chain(&seen.new_runtime)
        .filter(|key| kv(port, &format!("GET {key}")) != format!("v{}", &key[1..]))
        .collect();
    eprintln!(
        "across stop → reinit → start: {} answered before the stop, {} answered after it on \
         the old connection, {} on the new runtime; {} acknowledged writes lost",
        seen.before_stop,
        seen.after_stop.len(),
        seen.new_runtime.len(),
        lost.len()
    );
    assert!(
        seen.before_stop > 0,
        "the client was served before the stop"
    );
    assert!(
        seen.after_stop.is_empty(),
        "requests sent after the runtime stopped were answered OK: {:?}",
        seen.after_stop
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    let _ = ctl(&data, &["exit"]);
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}
