//! kvd's metrics, read the two ways an operator reads them — `steadfastctl
//! metrics` through the control plane and `GET /metrics` on the daemon
//! helper's endpoint — and parsed by a real OpenMetrics parser (Python's
//! `prometheus_client.openmetrics.parser`, installed by `.ci/run`), across a
//! real stop / start / fail sequence of a real kvd child
//! (`spec/control.md`, "Metrics").

use crate::support::processes;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The parser: OpenMetrics text on stdin, its samples on stdout as JSON
/// `[name, {labels}, value]`. A text it does not accept fails the script.
const PARSE: &str = r"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
";

/// The samples of `text`, as the real parser reads them.
fn parse(text: &str) -> Vec<(String, serde_json::Map<String, serde_json::Value>, f64)> {
    let samples: Vec<(String, serde_json::Map<String, serde_json::Value>, f64)> =
        serde_json::from_value(processes::python_json(PARSE, text)).expect("samples");
    assert!(!samples.is_empty(), "{text}");
    samples
}

/// One sample's value; `None` when absent.
fn value(
    samples: &[(String, serde_json::Map<String, serde_json::Value>, f64)],
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).and_then(|x| x.as_str()) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

fn metrics(data: &Path) -> Vec<(String, serde_json::Map<String, serde_json::Value>, f64)> {
    let out = processes::ctl(data, &["metrics"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.ends_with("# EOF\n"), "{text}");
    parse(&text)
}

fn state_is(data: &Path, state: &str) -> serde_json::Value {
    processes::until(data, state, |s| s["lifecycle"]["state"] == state)
}

struct Kvd(Child);

impl Drop for Kvd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kvd(dir: &Path, port: u16, extra: &[&str]) -> Kvd {
    let config = dir.join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    Kvd(Command::new(processes::example("kvd"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--config")
        .arg(&config)
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kvd starts"))
}

/// Running, a refused `retry`, `stop`, `start`, then a boot that fails
/// (its port taken): each step moves the state gauge, the attempt, the
/// boot, drain, failure and refusal counters as it should, and the journal,
/// fsync, phase and connection metrics fill. Parsed by the real parser
/// every time.
#[test]
fn the_metrics_follow_a_stop_start_fail_sequence() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut child = kvd(tmp.path(), processes::free_port(), &[]);
    state_is(&data, "running");

    let m = metrics(&data);
    let running = [("state", "running")];
    assert_eq!(value(&m, "steadfast_state", &running), Some(1.0));
    assert_eq!(
        value(&m, "steadfast_state", &[("state", "stopped")]),
        Some(0.0)
    );
    assert_eq!(value(&m, "steadfast_boots_total", &[]), Some(1.0));
    assert_eq!(value(&m, "steadfast_attempt", &[]), Some(1.0));
    assert_eq!(value(&m, "steadfast_streak", &[]), Some(0.0));
    assert_eq!(
        value(&m, "steadfast_next_retry_timestamp_seconds", &[]),
        Some(0.0)
    );
    let epoch = value(&m, "steadfast_epoch", &[]).expect("epoch");
    assert!(value(&m, "steadfast_time_in_state_seconds", &[]).is_some_and(|t| t >= 0.0));
    assert!(value(&m, "steadfast_journal_records_total", &[]).is_some_and(|r| r >= 1.0));
    assert!(value(&m, "steadfast_journal_size_bytes", &[]).is_some_and(|b| b > 0.0));
    assert!(
        value(&m, "steadfast_journal_fsync_duration_seconds_count", &[]).is_some_and(|c| c >= 1.0)
    );
    for phase in [
        "resolve_config",
        "open_store",
        "replay_log",
        "bind_listener",
    ] {
        assert_eq!(
            value(
                &m,
                "steadfast_phase_duration_seconds_count",
                &[("phase", phase)]
            ),
            Some(1.0),
            "{phase}: {m:?}"
        );
    }
    assert!(
        value(
            &m,
            "steadfast_control_connections_total",
            &[("transport", "unix")]
        )
        .is_some_and(|c| c >= 1.0)
    );
    let records_before = value(&m, "steadfast_journal_records_total", &[]).expect("records");

    // A refused command, by its reason.
    let retry = processes::ctl(&data, &["retry"]);
    assert_eq!(retry.status.code(), Some(3), "{retry:?}");
    let m = metrics(&data);
    assert_eq!(
        value(
            &m,
            "steadfast_refusals_total",
            &[("command", "retry"), ("reason", "runtime_not_failed")]
        ),
        Some(1.0),
        "{m:?}"
    );

    // stop: one drain, state stopped.
    let stop = processes::ctl(&data, &["stop"]);
    assert_eq!(stop.status.code(), Some(0), "{stop:?}");
    state_is(&data, "stopped");
    let m = metrics(&data);
    assert_eq!(
        value(&m, "steadfast_state", &[("state", "stopped")]),
        Some(1.0)
    );
    assert_eq!(value(&m, "steadfast_state", &running), Some(0.0));
    assert_eq!(
        value(&m, "steadfast_drains_total", &[("then", "stop")]),
        Some(1.0)
    );
    assert!(
        value(&m, "steadfast_journal_records_total", &[]).is_some_and(|r| r > records_before),
        "the stop was journaled: {m:?}"
    );

    // start: a second boot, attempt 2.
    let start = processes::ctl(&data, &["start"]);
    assert_eq!(start.status.code(), Some(0), "{start:?}");
    state_is(&data, "running");
    let m = metrics(&data);
    assert_eq!(value(&m, "steadfast_state", &running), Some(1.0));
    assert_eq!(value(&m, "steadfast_boots_total", &[]), Some(2.0));
    assert_eq!(value(&m, "steadfast_attempt", &[]), Some(2.0));
    assert_eq!(
        value(&m, "steadfast_epoch", &[]),
        Some(epoch + 1.0),
        "the stop released the store: one epoch more"
    );

    // fail: the new port is taken, so bind_listener fails with a backoff.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let set = processes::ctl(
        &data,
        &["config", "set", "listen_addr", &format!("127.0.0.1:{port}")],
    );
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    // The restart waits for the boot it started, which fails: exit 3.
    let restart = processes::ctl(&data, &["restart", "--force"]);
    assert_eq!(restart.status.code(), Some(3), "{restart:?}");
    state_is(&data, "failed");
    let m = metrics(&data);
    assert_eq!(
        value(&m, "steadfast_state", &[("state", "failed")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "steadfast_drains_total", &[("then", "restart")]),
        Some(1.0)
    );
    assert!(
        value(
            &m,
            "steadfast_boot_failures_total",
            &[("phase", "bind_listener"), ("class", "backoff")]
        )
        .is_some_and(|f| f >= 1.0),
        "{m:?}"
    );
    assert!(value(&m, "steadfast_streak", &[]).is_some_and(|s| s >= 1.0));
    assert!(
        value(&m, "steadfast_next_retry_timestamp_seconds", &[]).is_some_and(|t| t > 1.0e9),
        "a retry is scheduled: {m:?}"
    );
    assert!(value(&m, "steadfast_boots_total", &[]).is_some_and(|b| b >= 3.0));

    drop(taken);
    let out = processes::ctl(&data, &["exit"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        processes::wait_exit(&mut child.0),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// One HTTP request to `port`: the status line, the headers and the body.
fn http_get(port: u16, target: &str) -> (String, String, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(processes::PATIENCE))
        .expect("timeout");
    write!(stream, "GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

/// `kvd --metrics-addr 127.0.0.1:PORT` serves `GET /metrics` as OpenMetrics
/// text the real parser reads, with the same values as `steadfastctl
/// metrics`; any other path is 404.
#[test]
fn the_http_endpoint_serves_openmetrics() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let metrics_port = processes::free_port();
    let addr = format!("127.0.0.1:{metrics_port}");
    let mut child = kvd(
        tmp.path(),
        processes::free_port(),
        &["--metrics-addr", &addr],
    );
    state_is(&data, "running");
    let (status, headers, body) = http_get(metrics_port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{headers}");
    assert!(
        headers.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{headers}"
    );
    let m = parse(&body);
    assert_eq!(
        value(&m, "steadfast_state", &[("state", "running")]),
        Some(1.0)
    );
    assert_eq!(value(&m, "steadfast_boots_total", &[]), Some(1.0));
    let (status, _, _) = http_get(metrics_port, "/");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let out = processes::ctl(&data, &["exit"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        processes::wait_exit(&mut child.0),
        Some(steadfast::daemon::EXIT_HALT)
    );
}
