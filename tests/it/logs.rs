//! What kvd prints, with real kvd children: `RUST_LOG`
//! and the configured `log_level` change it, the configured level in place
//! (no restart), a control socket that cannot be served is logged as an
//! error, and under journald (`JOURNAL_STREAM` naming stderr) every line
//! carries its syslog priority. Text from outside (a config value in an
//! error, a client's request line) is escaped: one record is one line, and
//! no control character reaches the log. The environment is the child's
//! only (`Command::env`), never this process's.

use crate::support::processes;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A kvd child whose stderr goes to a file the test reads as it grows.
struct Kvd {
    child: Child,
    log: PathBuf,
    data: PathBuf,
    port: u16,
}

impl Kvd {
    /// kvd on a fresh port, `extra` appended to its config file, `env` set
    /// for the child only (`RUST_LOG` and `JOURNAL_STREAM` removed first).
    fn spawn(dir: &Path, extra: &str, env: &[(&str, String)]) -> Self {
        Self::spawn_with(dir, extra, env, |_| Vec::new())
    }

    /// As [`Self::spawn`], with more arguments.
    fn spawn_args(dir: &Path, extra: &str, env: &[(&str, String)], args: &[&str]) -> Self {
        Self::build(dir, extra, env, |_| Vec::new(), args)
    }

    /// As [`Self::spawn`], with more env computed from the log file.
    fn spawn_with(
        dir: &Path,
        extra: &str,
        env: &[(&str, String)],
        from_log: impl Fn(&Path) -> Vec<(&'static str, String)>,
    ) -> Self {
        Self::build(dir, extra, env, from_log, &[])
    }

    fn build(
        dir: &Path,
        extra: &str,
        env: &[(&str, String)],
        from_log: impl Fn(&Path) -> Vec<(&'static str, String)>,
        args: &[&str],
    ) -> Self {
        let data = dir.join("data");
        let port = processes::free_port();
        let config = dir.join("kvd.toml");
        std::fs::write(
            &config,
            format!("listen_addr = \"127.0.0.1:{port}\"\n{extra}"),
        )
        .expect("config");
        let log = dir.join("kvd.stderr");
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(processes::example("kvd"));
        command
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file));
        for (key, value) in env {
            command.env(key, value);
        }
        for (key, value) in from_log(&log) {
            command.env(key, value);
        }
        let child = command.spawn().expect("kvd starts");
        Self {
            child,
            log,
            data,
            port,
        }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until the log holds `needle`; the log.
    fn wait_for(&self, needle: &str) -> String {
        processes::logged(needle, || self.text())
    }

    fn running(&self) -> serde_json::Value {
        processes::until(&self.data, "running", |s| {
            s["lifecycle"]["state"] == "running"
        })
    }

    /// A request, and a marker request after it: once the marker's debug
    /// line would be there, so would the first's.
    fn request(&self, key: &str) {
        assert_eq!(processes::kv(self.port, &format!("GET {key}")), "NOT_FOUND");
    }

    fn exit(mut self) {
        let out = processes::ctl(&self.data, &["exit"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(
            processes::wait_exit(&mut self.child),
            Some(steadfast::daemon::EXIT_HALT)
        );
    }
}

impl Drop for Kvd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The debug line kvd writes for a request of `key`.
fn request_line(key: &str) -> String {
    format!("request=GET {key}")
}

/// Without `RUST_LOG` kvd logs at info: no request lines. With
/// `RUST_LOG=debug` the same request is a debug line, and so are the boot's
/// phases.
#[test]
fn rust_log_changes_what_kvd_prints() {
    let quiet = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(quiet.path(), "", &[]);
    kvd.running();
    kvd.request("quiet");
    let text = kvd.wait_for("state=\"running\" attempt=1");
    assert!(text.contains(" INFO "), "info lines: {text}");
    kvd.exit();
    let text = std::fs::read_to_string(quiet.path().join("kvd.stderr")).expect("log");
    assert!(!text.contains(" DEBUG "), "no debug line at info: {text}");
    assert!(!text.contains(&request_line("quiet")), "{text}");

    let loud = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(loud.path(), "", &[("RUST_LOG", "debug".into())]);
    kvd.running();
    kvd.request("loud");
    let text = kvd.wait_for(&request_line("loud"));
    assert!(text.contains(" DEBUG "), "{text}");
    assert!(text.contains("boot phase"), "the phases at debug: {text}");
    kvd.exit();

    // A level from RUST_LOG that is no filter is said, not dropped: the
    // daemon does not start (never works) and says why.
    let bad = tempfile::tempdir().expect("tempdir");
    let mut kvd = Kvd::spawn(bad.path(), "", &[("RUST_LOG", "kvd=loudest".into())]);
    assert_eq!(
        processes::wait_exit(&mut kvd.child),
        Some(steadfast::daemon::EXIT_NEVER_WORKS)
    );
    let text = kvd.text();
    assert!(
        text.contains("RUST_LOG: invalid log level") && text.contains("kvd=loudest"),
        "{text}"
    );
}

/// `log_level` in the config file filters from the boot on, and `config set
/// log_level …` changes the filter in place: the same process, the same
/// attempt, and the next request's debug line appears (then disappears
/// again at `warn`). `config unset` goes back to `RUST_LOG`. A level that
/// is no filter is refused with the reason and changes nothing. Before the
/// fix, `log_level` was stored and controlled nothing.
#[test]
fn the_configured_level_applies_in_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(tmp.path(), "", &[]);
    let before = kvd.running();
    kvd.request("before");

    let set = processes::ctl(&kvd.data, &["config", "set", "log_level", "debug"]);
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    kvd.wait_for("log level set level=debug");
    kvd.request("debugging");
    let text = kvd.wait_for(&request_line("debugging"));
    assert!(!text.contains(&request_line("before")), "{text}");
    let after = kvd.running();
    assert_eq!(after["pid"], before["pid"], "the same process");
    assert_eq!(
        after["lifecycle"]["attempt"], before["lifecycle"]["attempt"],
        "no restart: {after:#}"
    );

    let refused = processes::ctl(&kvd.data, &["config", "set", "log_level", "kvd=loudest"]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("invalid log level"), "{stderr}");

    let set = processes::ctl(&kvd.data, &["config", "set", "log_level", "warn"]);
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    // The set itself is said at info before the filter drops info: poll
    // with a request whose line must not come, after one that shows the
    // change has landed (the snapshot's pending apply settled).
    processes::until(&kvd.data, "in sync", |s| s["pending"]["kind"] == "in_sync");
    kvd.request("warned");
    kvd.request("warned-again");
    let unset = processes::ctl(&kvd.data, &["config", "unset", "log_level"]);
    assert_eq!(unset.status.code(), Some(0), "{unset:?}");
    kvd.wait_for("log level set level=info");
    let text = kvd.text();
    assert!(!text.contains(&request_line("warned")), "{text}");
    kvd.exit();

    // From the file: debug from the first boot.
    let file = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(file.path(), "log_level = \"debug\"\n", &[]);
    kvd.running();
    kvd.request("from-file");
    kvd.wait_for(&request_line("from-file"));
    kvd.exit();
}

/// A control socket that cannot be served (a regular file where it goes)
/// is logged once, as an error, with the path and the fix, before kvd exits
/// 78 (never works as configured). Before the fix it was silent unless the
/// application printed it.
#[test]
fn a_failed_control_socket_bind_is_logged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let control = data.join(".steadfast");
    std::fs::create_dir_all(&control).expect("mkdir");
    for dir in [&data, &control] {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
    }
    let path = control.join("control.sock");
    std::fs::write(&path, b"not a socket").expect("plant");
    let mut kvd = Kvd::spawn(tmp.path(), "", &[]);
    assert_eq!(
        processes::wait_exit(&mut kvd.child),
        Some(steadfast::daemon::EXIT_NEVER_WORKS)
    );
    let text = kvd.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("the control socket is not served"))
        .collect();
    assert_eq!(lines.len(), 1, "logged once: {text}");
    assert!(lines[0].contains("ERROR"), "{text}");
    assert!(
        lines[0].contains(&format!("path={}", path.display())),
        "{text}"
    );
    assert!(lines[0].contains("move it away"), "{text}");
}

/// `--log-format json`: every line is a JSON object with its level and
/// fields; a transition carries `state` and `attempt` as fields.
#[test]
fn json_lines_on_request() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn_args(tmp.path(), "", &[], &["--log-format", "json"]);
    kvd.running();
    let kvd_pid = kvd.child.id();
    let text = kvd.wait_for("\"state\":\"running\"");
    kvd.exit();
    let text = std::fs::read_to_string(tmp.path().join("kvd.stderr")).unwrap_or(text);
    let mut running = false;
    for line in text.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?} in {text}"));
        assert!(value["level"].is_string(), "{line}");
        assert_eq!(
            value["pid"], kvd_pid,
            "every line names its process: {line}"
        );
        if value["fields"]["message"] == "transition" && value["fields"]["state"] == "running" {
            assert_eq!(value["fields"]["attempt"], 1, "{line}");
            running = true;
        }
    }
    assert!(running, "{text}");
}

/// With `JOURNAL_STREAM` naming kvd's stderr (as systemd sets it), every
/// line starts with its syslog priority and carries no timestamp: `<6>` for
/// the state lines, `<4>` for a failed boot (its listen port is taken).
#[test]
fn under_journald_lines_carry_their_priority() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let kvd = Kvd::spawn_with(tmp.path(), "", &[], |log| {
        let meta = std::fs::metadata(log).expect("log file");
        vec![("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))]
    });
    kvd.running();
    let set = processes::ctl(
        &kvd.data,
        &["config", "set", "listen_addr", &format!("127.0.0.1:{port}")],
    );
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    // The forced restart waits for the boot it started: it fails (exit 3).
    let restart = processes::ctl(&kvd.data, &["restart", "--force"]);
    assert_eq!(restart.status.code(), Some(3), "{restart:?}");
    let text = kvd.wait_for("transition: the boot failed");
    for line in text.lines() {
        assert!(
            line.starts_with("<3>")
                || line.starts_with("<4>")
                || line.starts_with("<6>")
                || line.starts_with("<7>"),
            "a line without its priority: {line:?} in {text}"
        );
    }
    let failed = text
        .lines()
        .find(|l| l.contains("transition: the boot failed"))
        .expect("failed");
    assert!(failed.starts_with("<4>"), "{failed}");
    assert!(failed.contains("phase=bind_listener"), "{failed}");
    assert!(failed.contains("attempt=2"), "{failed}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("<6>") && l.contains("state=\"running\" attempt=1")),
        "{text}"
    );
    // No timestamp: the journal stamps lines itself.
    assert!(
        text.lines()
            .all(|l| !l.get(3..).unwrap_or("").starts_with("20")),
        "{text}"
    );
    // No pid either: the journal records the stream's `_PID`.
    assert!(!text.contains("kvd["), "{text}");
    drop(taken);
    kvd.exit();
}

/// Whether `line` starts as a record of kvd's does: its syslog priority
/// under journald, else its timestamp (`2026-…T…`).
fn starts_as_a_record(line: &str, journal: bool) -> bool {
    if journal {
        ["<3>", "<4>", "<6>", "<7>"]
            .iter()
            .any(|p| line.starts_with(p))
    } else {
        let b = line.as_bytes();
        b.len() > 11 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T'
    }
}

/// A config leaf whose name holds newlines, a forged emergency record and
/// ESC holds the boot with an error that quotes it, logged at each
/// transition: in the plain format and the journal's, every line of kvd's
/// stderr starts as a record does, and none holds a control character.
/// Before, each quote of it forged a `<0>` (emergency) line under journald
/// and an `ERROR` line in plain text.
#[test]
fn a_config_value_cannot_forge_a_log_line() {
    let hostile = "\"x\\n<0>ERROR forged\\r\\u001b[2J\\u009b2K\" = 1\n";
    for journal in [false, true] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let kvd = Kvd::spawn_with(tmp.path(), hostile, &[], |log| {
            if !journal {
                return Vec::new();
            }
            let meta = std::fs::metadata(log).expect("log file");
            vec![("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))]
        });
        processes::until(&kvd.data, "a held boot", |s| {
            s["lifecycle"]["state"] == "failed"
        });
        kvd.wait_for("forged");
        kvd.exit();
        let text = std::fs::read_to_string(tmp.path().join("kvd.stderr")).expect("log");
        assert!(
            text.contains("unknown leaf x\\n<0>ERROR forged\\r\\x1b[2J\\u{9b}2K"),
            "the value, escaped: {text}"
        );
        for line in text.lines() {
            assert!(
                starts_as_a_record(line, journal),
                "a forged line (journal: {journal}): {line:?} in {text}"
            );
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }
}

/// A client's request line is logged at debug (`request=`): a carriage
/// return and ESC in it are escaped, not written to the log raw.
#[test]
fn a_request_line_cannot_reach_the_log_raw() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(tmp.path(), "", &[("RUST_LOG", "debug".into())]);
    kvd.running();
    processes::kv(kvd.port, "GET a\r<0>ERROR forged\u{1b}[2J");
    kvd.request("after");
    let text = kvd.wait_for(&request_line("after"));
    assert!(
        text.contains("request=GET a\\r<0>ERROR forged\\x1b[2J"),
        "{text}"
    );
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    kvd.exit();
}

/// The lines of `text` a library target wrote at debug (tarpc's
/// `ReceiveRequest`, …): `DEBUG`, then a span or not, then the target.
fn library_debug_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains(" DEBUG "))
        .filter(|l| {
            steadfast::daemon::LIBRARY_TARGETS
                .iter()
                .any(|t| l.contains(&format!(" {t}::")) || l.contains(&format!(": {t}:")))
        })
        .collect()
}

/// A request over the control socket (tarpc serves it).
fn rpc(kvd: &Kvd) {
    let out = processes::ctl(&kvd.data, &["config", "show", "max_connections"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// `RUST_LOG=debug` gives kvd's and steadfast's debug lines (a request,
/// the boot's phases) while tarpc, answering `steadfastctl`, stays at
/// `warn`; so does `config set log_level debug`. `debug,tarpc=debug` asks
/// for tarpc by name and gets its lines. Before, `debug` let every frame
/// tarpc read into the log.
#[test]
fn debug_is_ours_and_a_library_only_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(tmp.path(), "", &[("RUST_LOG", "debug".into())]);
    kvd.running();
    rpc(&kvd);
    kvd.request("ours");
    let text = kvd.wait_for(&request_line("ours"));
    assert!(
        text.contains("boot phase"),
        "steadfast's debug lines: {text}"
    );
    assert!(
        library_debug_lines(&text).is_empty(),
        "no library debug line at `debug`: {text}"
    );
    kvd.exit();

    // The configured level is filtered the same way.
    let configured = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(configured.path(), "log_level = \"trace\"\n", &[]);
    kvd.running();
    rpc(&kvd);
    kvd.request("configured");
    let text = kvd.wait_for(&request_line("configured"));
    assert!(
        !text
            .lines()
            .any(|l| l.contains(" TRACE ") && l.contains("tarpc")),
        "no tarpc trace line at `trace`: {text}"
    );
    assert!(library_debug_lines(&text).is_empty(), "{text}");
    kvd.exit();

    let named = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(
        named.path(),
        "",
        &[("RUST_LOG", "debug,tarpc=debug".into())],
    );
    kvd.running();
    rpc(&kvd);
    let text = kvd.wait_for("tarpc::server");
    assert!(
        !library_debug_lines(&text).is_empty(),
        "tarpc's debug lines, asked for by name: {text}"
    );
    kvd.request("named");
    kvd.wait_for(&request_line("named"));
    kvd.exit();
}

/// The `name[pid]` a plain line of `pid`'s carries after its timestamp:
/// the line's second word.
fn ident_of(line: &str) -> Option<&str> {
    line.split(' ').nth(1)
}

/// Every plain line carries `kvd[<pid>]` after its timestamp. Through an
/// overlap `replace`, where the old and the new process write to the same
/// stderr, each line names one of the two, and each process's own
/// transitions are under its own pid: the new one's `running` and `exiting`,
/// the old one's hand-over and drain. Before, the lines carried no pid and the two
/// processes' lines could not be told apart. (JSON lines: `pid`, in
/// `json_lines_on_request`.)
#[test]
fn every_line_names_its_process() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(tmp.path(), "", &[]);
    let old = kvd.running()["pid"].as_u64().expect("pid");
    assert_eq!(old, u64::from(kvd.child.id()));
    let binary = processes::example("kvd");
    let replace = processes::ctl(
        &kvd.data,
        &[
            "replace",
            "--binary",
            binary.to_str().expect("utf-8"),
            "--mode",
            "overlap",
        ],
    );
    assert_eq!(replace.status.code(), Some(0), "{replace:?}");
    let new = processes::until(&kvd.data, "the successor", |s| {
        s["lifecycle"]["state"] == "running" && s["pid"].as_u64() != Some(old)
    })["pid"]
        .as_u64()
        .expect("pid");
    let mut kvd = kvd;
    assert_eq!(
        processes::wait_exit(&mut kvd.child),
        Some(0),
        "the old one retires"
    );
    let old_ident = format!("kvd[{old}]");
    let new_ident = format!("kvd[{new}]");
    let out = processes::ctl(&kvd.data, &["exit"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = kvd.wait_for(&format!(
        "{new_ident}  INFO steadfast::daemon::cli: exiting"
    ));
    for line in text.lines() {
        assert!(starts_as_a_record(line, false), "{line:?} in {text}");
        let ident = ident_of(line);
        assert!(
            ident == Some(old_ident.as_str()) || ident == Some(new_ident.as_str()),
            "a line naming neither process: {line:?} in {text}"
        );
    }
    let of = |ident: &str, needle: &str| {
        text.lines()
            .any(|l| ident_of(l) == Some(ident) && l.contains(needle))
    };
    assert!(of(&old_ident, "state=\"running\" attempt=1"), "{text}");
    assert!(of(&new_ident, "state=\"running\""), "{text}");
    assert!(of(&old_ident, "handed over to the successor"), "{text}");
    assert!(of(&old_ident, "state=\"stopped\""), "{text}");
    assert!(of(&new_ident, "state=\"exiting\""), "{text}");
}

/// A `stop` and a `start` log one line per transition: running →
/// draining(stop) → stopped, stopped → booting → running, each said once
/// (by the supervisor's `transition` line). Before, kvd said each state
/// again in a line of its own (`kvd: stopped (operator_request)`).
#[test]
fn one_line_per_transition() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = Kvd::spawn(tmp.path(), "", &[]);
    kvd.running();
    for command in ["stop", "start"] {
        let out = processes::ctl(&kvd.data, &[command]);
        assert_eq!(out.status.code(), Some(0), "{command}: {out:?}");
    }
    processes::until(&kvd.data, "running again", |s| {
        s["lifecycle"]["state"] == "running" && s["lifecycle"]["attempt"] == 2
    });
    kvd.wait_for("state=\"running\" attempt=2");
    kvd.exit();
    let text = std::fs::read_to_string(tmp.path().join("kvd.stderr")).expect("log");
    let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(count("operator_request"), 1, "stopped, once: {text}");
    assert_eq!(count("state=\"stopped\""), 1, "{text}");
    assert_eq!(count("stopped ("), 0, "{text}");
    assert_eq!(count("draining(stop)"), 2, "into the drain and out: {text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("running") && !l.contains("from=running"))
            .count(),
        2,
        "running, once for each attempt: {text}"
    );
    assert_eq!(count("event=\"start\""), 2, "two boots: {text}");
}

/// Under journald a replacement's successor (started with
/// `STEADFAST_HANDOVER` set) writes on the stream its predecessor opened,
/// which the journal attributes to the predecessor's pid: its lines name
/// `kvd[<its pid>]` after the priority. (A handover socket that is gone
/// starts it as an ordinary daemon, which is enough here.)
#[test]
fn under_journald_a_successor_names_its_pid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gone = tmp.path().join("no-handover.sock");
    let kvd = Kvd::spawn_with(
        tmp.path(),
        "",
        &[("STEADFAST_HANDOVER", gone.display().to_string())],
        |log| {
            let meta = std::fs::metadata(log).expect("log file");
            vec![("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))]
        },
    );
    kvd.running();
    let ident = format!("kvd[{}] ", kvd.child.id());
    let text = kvd.wait_for("state=\"running\"");
    for line in text.lines() {
        let rest = line.get(3..).unwrap_or("");
        assert!(
            line.starts_with('<') && rest.starts_with(&ident),
            "priority, then the process: {line:?} in {text}"
        );
    }
    kvd.exit();
}
