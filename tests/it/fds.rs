//! Descriptor exhaustion is survivable: a real kvd child under a small
//! `RLIMIT_NOFILE` (set by `prlimit`), flooded with idle connections from
//! this process past its limit, never goes `wedged`, and once the flood ends
//! it answers `SET`/`GET` again and `steadfastctl status` says running
//! (`spec/control.md`, "Accept loops" and "Metrics";
//! `spec/control-dir.md`, "The store probe").
//!
//! - `a_descriptor_flood_never_wedges_the_daemon`: the metrics endpoint and
//!   kvd's listener flooded past a limit the daemon cannot raise (soft =
//!   hard). The control socket's and the metrics endpoint's accept loops
//!   pause on `EMFILE` instead of ending, and the store probe waits out an
//!   `EMFILE` instead of reading it as held; whatever kvd's own runtime
//!   does meanwhile, the daemon comes back to running by itself.
//! - `an_idle_metrics_flood_is_held_to_the_cap`: 300 idle connections to
//!   the metrics endpoint hold at most its cap of descriptors, and a
//!   prompt scrape behind them is answered.
//! - `the_daemon_raises_its_soft_descriptor_limit`: `daemon::run_with`
//!   raises the soft limit to the hard one (`prlimit --nofile=256:4096`
//!   → 4096).

use crate::support::processes;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// kvd's descriptor limit in the flood test, soft and hard alike so the
/// daemon cannot raise it: room for kvd's own descriptors (about 30) and
/// some connections, small enough for this process to fill at once.
const FLOODED_LIMIT: u32 = 128;
/// Idle connections opened to each flooded port: well past the limit.
const FLOOD: usize = 400;
/// How long the flood is held open. Short enough that the failed boots it
/// causes stay within kvd's restart budget (5 within 10 min, backoff 1 s
/// doubling): past the budget a daemon holds until an operator's `retry`,
/// which is not what this test is about.
const HOLD: Duration = Duration::from_secs(3);
/// The metrics endpoint's connection cap (`src/daemon/metrics_http.rs`).
const METRICS_CAP: usize = 64;

/// A kvd child, killed at drop.
struct Kvd {
    child: Child,
    data: PathBuf,
    log: PathBuf,
    kv_port: u16,
    metrics_port: u16,
}

impl Drop for Kvd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Kvd {
    /// `prlimit --nofile=NOFILE -- kvd …` with a metrics endpoint, its log
    /// (info) in `dir/kvd.log`. `prlimit` execs kvd: the child's pid is
    /// kvd's.
    fn start(dir: &Path, nofile: &str) -> Self {
        let (kv_port, metrics_port) = (processes::free_port(), processes::free_port());
        let config = dir.join("kvd.toml");
        std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{kv_port}\"\n"))
            .expect("config");
        let data = dir.join("data");
        let log = dir.join("kvd.log");
        let child = Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg("--")
            .arg(processes::example("kvd"))
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("prlimit runs kvd");
        let kvd = Self {
            child,
            data,
            log,
            kv_port,
            metrics_port,
        };
        kvd.until_running("kvd running");
        kvd
    }

    fn until_running(&self, what: &str) {
        processes::until(&self.data, what, |s| s["lifecycle"]["state"] == "running");
    }

    fn state(&self) -> Option<String> {
        processes::status(&self.data)
            .and_then(|s| s["lifecycle"]["state"].as_str().map(str::to_owned))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Open descriptors of the kvd process.
    fn descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("kvd's descriptors")
            .count()
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `count` idle connections to each of `ports` (those that connect within
/// a moment; past a full backlog a connect times out and is left out).
fn flood(ports: &[u16], count: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..count {
        for &port in ports {
            if let Ok(stream) =
                TcpStream::connect_timeout(&loopback(port), Duration::from_millis(200))
            {
                held.push(stream);
            }
        }
    }
    held
}

/// One request on kvd's line protocol; `None` when it is not answered.
fn try_kv(port: u16, line: &str) -> Option<String> {
    use std::io::{BufRead, BufReader};
    let mut stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).ok()?;
    Some(answer.trim_end().to_owned())
}

/// `SET` then `GET` on kvd's line protocol, tried until it works; how long
/// that took.
fn until_set_and_get(kvd: &Kvd) -> Duration {
    let started = Instant::now();
    loop {
        let set = try_kv(kvd.kv_port, "SET k v");
        if set.as_deref() == Some("OK") {
            break;
        }
        assert!(
            started.elapsed() < processes::PATIENCE,
            "no SET answered: {set:?}\n{}",
            kvd.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(try_kv(kvd.kv_port, "GET k").as_deref(), Some("v"));
    started.elapsed()
}

/// The flood: the metrics endpoint and kvd's listener each get `FLOOD`
/// idle connections, held for `HOLD`, then all closed. Meanwhile `status`
/// never says wedged; afterwards the daemon is running again on its own
/// (no operator command: a wedged daemon never leaves `wedged` by itself),
/// answers `status` (the control socket's accept loop survived) and
/// `SET`/`GET`.
#[test]
fn a_descriptor_flood_never_wedges_the_daemon() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let limit = format!("{FLOODED_LIMIT}:{FLOODED_LIMIT}");
    let kvd = Kvd::start(tmp.path(), &limit);
    assert_eq!(processes::kv(kvd.kv_port, "SET before flood"), "OK");

    let held = flood(&[kvd.metrics_port, kvd.kv_port], FLOOD);
    assert!(
        held.len() > FLOODED_LIMIT as usize,
        "{} connected",
        held.len()
    );
    let mut seen = BTreeSet::new();
    let hold_until = Instant::now() + HOLD;
    while Instant::now() < hold_until {
        if let Some(state) = kvd.state() {
            seen.insert(state);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(held);
    let freed = Instant::now();

    let deadline = freed + processes::PATIENCE;
    loop {
        let state = kvd.state();
        if let Some(state) = &state {
            seen.insert(state.clone());
        }
        assert!(
            !seen.contains("wedged"),
            "the daemon wedged (states seen: {seen:?})\n{}",
            kvd.log()
        );
        if state.as_deref() == Some("running") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not running again after the flood (states seen: {seen:?})\n{}",
            kvd.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let running_after = freed.elapsed();
    let set_after = running_after + until_set_and_get(&kvd);
    let log = kvd.log();
    assert!(
        log.contains("Too many open files"),
        "the flood never filled the descriptor table:\n{log}"
    );
    assert!(!log.contains("wedged"), "{log}");
    eprintln!(
        "flood of {FLOOD} connections a port at a limit of {FLOODED_LIMIT}: states seen {seen:?}; \
         running {} ms and SET/GET answered {} ms after the flood ended",
        running_after.as_millis(),
        set_after.as_millis()
    );
}

/// One `GET /metrics` on a fresh connection: the status line.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(loopback(port)).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(processes::PATIENCE))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: kvd\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer.lines().next().unwrap_or_default().to_owned()
}

/// 300 idle connections to the metrics endpoint, then a scrape behind
/// them: the scrape is answered (the endpoint accepts in order, so every
/// idle connection was accepted before it), and at that moment kvd holds
/// at most the cap of them open (the oldest were closed to make room), not
/// one descriptor each.
#[test]
fn an_idle_metrics_flood_is_held_to_the_cap() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::start(tmp.path(), "4096:4096");
    assert_eq!(scrape(kvd.metrics_port), "HTTP/1.1 200 OK");
    let before = kvd.descriptors();
    let held = flood(&[kvd.metrics_port], 300);
    assert!(held.len() > METRICS_CAP + 100, "{} connected", held.len());
    assert_eq!(scrape(kvd.metrics_port), "HTTP/1.1 200 OK");
    let during = kvd.descriptors();
    assert!(
        during <= before + METRICS_CAP + 16,
        "{during} descriptors open under the flood, {before} before it"
    );
    drop(held);
    assert_eq!(kvd.state().as_deref(), Some("running"));
}

/// `prlimit --nofile=256:4096`: the running daemon's soft limit is 4096.
#[test]
fn the_daemon_raises_its_soft_descriptor_limit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::start(tmp.path(), "256:4096");
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", kvd.child.id())).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a descriptor limit");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[3..5], ["4096", "4096"], "{line}");
}
