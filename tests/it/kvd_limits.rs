//! kvd as a correct small server, through a real process and real sockets
//! (`examples/kvd/main.rs`, `serve_connection` and `Store::check_lost`):
//! one connection's memory is bounded (a request line of at most 1 MiB,
//! refused past it and the connection closed), an idle connection is
//! closed after `idle_timeout_secs`, and a `store.log` removed or replaced
//! under the running daemon is noticed (the next write is refused, never
//! acknowledged, and the runtime restarts over the log the data dir holds
//! now).
//!
//! Tests:
//! - `a_line_over_the_cap_is_refused_and_closes`: before the fix the line
//!   was buffered whole (1 GiB sent: 1.06 GB resident) and a 64 MB `SET`
//!   was acknowledged.
//! - `an_idle_connection_is_closed_after_the_idle_timeout`: before the fix
//!   an idle connection held its slot for ever (64 of them refused every
//!   other client).
//! - `a_removed_or_replaced_store_log_fails_the_runtime`: before the fix
//!   the `SET`s after `rm store.log` were answered `OK` into the removed
//!   file, and all of them were gone at the next launch.

use crate::support::processes;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};

use processes::{PATIENCE, ctl, free_port, kv, until, wait_exit};

fn running(s: &serde_json::Value) -> bool {
    s["lifecycle"]["state"] == "running"
}

fn attempt(s: &serde_json::Value) -> u64 {
    s["lifecycle"]["attempt"].as_u64().unwrap_or(0)
}

/// kvd on `data` with `extra` config lines, running; its log in `dir`.
fn start(dir: &Path, run: u32, port: u16, extra: &str) -> Child {
    let data = dir.join("data");
    let config = dir.join("kvd.toml");
    std::fs::write(
        &config,
        format!("listen_addr = \"127.0.0.1:{port}\"\n{extra}"),
    )
    .expect("config");
    let log = std::fs::File::create(dir.join(format!("kvd-{run}.log"))).expect("log");
    let daemon = processes::kvd(&data, &config, Stdio::from(log));
    until(&data, "running", running);
    daemon
}

fn exit(dir: &Path, mut daemon: Child) {
    let _ = ctl(&dir.join("data"), &["exit"]);
    assert_eq!(
        wait_exit(&mut daemon),
        Some(steadfast::daemon::EXIT_HALT),
        "kvd exits 80 (halt)"
    );
}

/// One request; `None` if the connection is refused or closed unanswered.
fn try_kv(port: u16, line: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(PATIENCE)).ok()?;
    stream.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).ok()?;
    (!answer.is_empty()).then(|| answer.trim_end().to_owned())
}

/// Whether the server closed `stream` (end of file, or a reset), waiting
/// at most [`PATIENCE`].
fn closed(stream: &mut impl Read) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => matches!(
            error.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}

/// A line of 2 MiB with no newline: the first 1 MiB and a byte are read,
/// the rest never buffered; the answer is `ERR line too long` and the
/// connection is closed; kvd serves on.
#[test]
fn a_line_over_the_cap_is_refused_and_closes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let daemon = start(tmp.path(), 1, port, "");
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut sender = stream.try_clone().expect("clone");
    let sending = std::thread::spawn(move || {
        let chunk = vec![b'a'; 64 * 1024];
        for _ in 0..32 {
            if sender.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).expect("an answer");
    assert!(
        answer.starts_with("ERR line too long"),
        "answered {answer:?}"
    );
    assert!(closed(&mut reader), "the connection is closed");
    sending.join().expect("the sender");
    assert_eq!(kv(port, "SET after 1"), "OK");
    assert_eq!(kv(port, "GET after"), "1");
    exit(tmp.path(), daemon);
}

/// `idle_timeout_secs = 1`: a connection that asks nothing after its
/// answer, and one that sends half a line, are both closed; a busy one is
/// served.
#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let daemon = start(tmp.path(), 1, port, "idle_timeout_secs = 1\n");
    let mut idle = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    idle.set_read_timeout(Some(PATIENCE)).expect("timeout");
    idle.write_all(b"SET a 1\n").expect("send");
    let mut reader = BufReader::new(idle.try_clone().expect("clone"));
    let mut answer = String::new();
    reader.read_line(&mut answer).expect("an answer");
    assert_eq!(answer, "OK\n");
    let mut half = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    half.set_read_timeout(Some(PATIENCE)).expect("timeout");
    half.write_all(b"SET b").expect("send");
    assert!(closed(&mut reader), "the idle connection is closed");
    assert!(
        closed(&mut half),
        "the half-sent request's connection is closed"
    );
    assert_eq!(kv(port, "GET a"), "1");
    exit(tmp.path(), daemon);
}

/// `rm store.log`, then a `store.log` renamed over the open one: each time
/// the next `SET` is never answered `OK`, the runtime fails and boots again
/// over the log the data dir holds now, and what is acknowledged after
/// that survives a relaunch.
#[test]
fn a_removed_or_replaced_store_log_fails_the_runtime() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let port = free_port();
    let daemon = start(tmp.path(), 1, port, "");
    assert_eq!(kv(port, "SET before 1"), "OK");
    let first = until(&data, "running", running);

    // Removed.
    std::fs::remove_file(data.join("store.log")).expect("rm store.log");
    let answer = try_kv(port, "SET lost 1");
    assert_ne!(
        answer.as_deref(),
        Some("OK"),
        "a write into a removed log was acknowledged"
    );
    let second = until(&data, "a new attempt running", |s| {
        running(s) && attempt(s) > attempt(&first)
    });
    assert!(data.join("store.log").exists(), "a new log");
    assert_eq!(kv(port, "SET kept 1"), "OK");
    assert_eq!(
        kv(port, "GET before"),
        "NOT_FOUND",
        "the removed log is gone"
    );

    // Replaced: a log of one record renamed over the open one.
    let body = "S swapped 2";
    let replacement = data.join("store.log.new");
    std::fs::write(
        &replacement,
        format!("{:08x} {body}\n", crc32c::crc32c(body.as_bytes())),
    )
    .expect("a new log");
    std::fs::rename(&replacement, data.join("store.log")).expect("rename over store.log");
    let answer = try_kv(port, "SET lost2 1");
    assert_ne!(
        answer.as_deref(),
        Some("OK"),
        "a write into a replaced log was acknowledged"
    );
    until(&data, "a new attempt running", |s| {
        running(s) && attempt(s) > attempt(&second)
    });
    assert_eq!(
        kv(port, "GET swapped"),
        "2",
        "the new boot replayed the log now there"
    );
    assert_eq!(kv(port, "SET after 3"), "OK");
    let log = std::fs::read_to_string(tmp.path().join("kvd-1.log")).unwrap_or_default();
    assert!(log.contains("store.log lost"), "the loss is logged: {log}");
    exit(tmp.path(), daemon);

    // Every write acknowledged into the log now there survives a relaunch.
    let daemon = start(tmp.path(), 2, port, "");
    assert_eq!(kv(port, "GET after"), "3");
    assert_eq!(kv(port, "GET swapped"), "2");
    assert_eq!(kv(port, "GET lost"), "NOT_FOUND");
    assert_eq!(kv(port, "GET lost2"), "NOT_FOUND");
    exit(tmp.path(), daemon);
}
