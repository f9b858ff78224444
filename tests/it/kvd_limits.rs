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

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

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

/// How long the server took to close `stream` (end of file, or a reset),
/// waiting at most [`PATIENCE`] in all; else what the wait found instead
/// (bytes, an error, or nothing), and after how long.
///
/// A read with a timeout fails with `EINTR` when a signal handler runs on
/// its thread, even under `SA_RESTART`: that is read again, within the
/// same patience, never taken for an answer.
fn wait_closed(stream: &mut BufReader<TcpStream>) -> Result<Duration, String> {
    let start = Instant::now();
    let mut byte = [0u8; 1];
    loop {
        let left = PATIENCE.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!("still open after {:?}", start.elapsed()));
        }
        stream
            .get_ref()
            .set_read_timeout(Some(left))
            .map_err(|e| format!("set the read timeout: {e}"))?;
        let read = stream.read(&mut byte);
        let waited = start.elapsed();
        match read {
            Ok(0) => return Ok(waited),
            Ok(_) => {
                return Err(format!(
                    "read {:?} after {waited:?} instead of the end of the stream",
                    char::from(byte[0])
                ));
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Ok(waited);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(format!(
                    "still open after {waited:?} (the read timed out: {e})"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "after {waited:?} the read failed: {e} ({:?})",
                    e.kind()
                ));
            }
        }
    }
}

/// What a test says when kvd did not do what it waited for: its lifecycle,
/// the state of each of its threads (`T`: stopped; `D`: waiting on a
/// device, with the kernel function it waits in), and the end of its log
/// (`kvd-RUN.log` in `dir`).
fn kvd_report(dir: &Path, run: u32, daemon: &Child) -> String {
    let lifecycle = processes::status(&dir.join("data"))
        .map_or_else(|| "no status".to_owned(), |s| s["lifecycle"].to_string());
    let pid = daemon.id();
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .map(|task| {
                    let stat =
                        std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                    let wchan =
                        std::fs::read_to_string(task.path().join("wchan")).unwrap_or_default();
                    // `TID (NAME) STATE …`: the name may hold spaces.
                    let (name, state) = stat
                        .split_once(" (")
                        .and_then(|(_, rest)| rest.rsplit_once(") "))
                        .map_or(("?", "?"), |(name, rest)| (name, &rest[..1]));
                    format!("{name}:{state}:{wchan}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|e| format!("none ({e})"));
    let log = std::fs::read_to_string(dir.join(format!("kvd-{run}.log"))).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    format!(
        "kvd (pid {pid}): lifecycle {lifecycle}; threads (name:state:wchan) {threads}\n\
         the last lines of its log:\n{tail}"
    )
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
    if let Err(instead) = wait_closed(&mut reader) {
        panic!(
            "the connection is not closed: {instead}\n{}",
            kvd_report(tmp.path(), 1, &daemon)
        );
    }
    sending.join().expect("the sender");
    assert_eq!(kv(port, "SET after 1"), "OK");
    assert_eq!(kv(port, "GET after"), "1");
    exit(tmp.path(), daemon);
}

/// `idle_timeout_secs = 1`: a connection that asks nothing after its
/// answer, and one that sends half a line, are both closed; a busy one is
/// served. kvd logs its requests and each idle close (`kvd=debug`), so a
/// failure's report shows what kvd did and when.
#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let daemon = start(
        tmp.path(),
        1,
        port,
        "idle_timeout_secs = 1\nlog_level = \"info,kvd=debug\"\n",
    );
    let mut idle = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    idle.set_read_timeout(Some(PATIENCE)).expect("timeout");
    idle.write_all(b"SET a 1\n").expect("send");
    let mut reader = BufReader::new(idle.try_clone().expect("clone"));
    let mut answer = String::new();
    reader.read_line(&mut answer).expect("an answer");
    assert_eq!(answer, "OK\n");
    let half = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut half = BufReader::new(half);
    half.get_mut().write_all(b"SET b").expect("send");
    for (what, stream) in [("idle", &mut reader), ("half-sent request's", &mut half)] {
        if let Err(instead) = wait_closed(stream) {
            panic!(
                "the {what} connection (from {}) is not closed: {instead}\n{}",
                stream
                    .get_ref()
                    .local_addr()
                    .map_or_else(|e| e.to_string(), |a| a.to_string()),
                kvd_report(tmp.path(), 1, &daemon)
            );
        }
    }
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
