//! The status record (`.steadfast/status`, `spec/control-dir.md`, "The
//! status record") through real processes: kvd writes it, the real
//! `steadfastctl` reads it (`steadfastctl/src/record.rs`), and every record
//! it must not trust sends it to the control plane instead
//! (`STEADFASTCTL_NO_RECORD` forces that path, for the comparison).
//!
//! - `status_from_the_record_is_what_the_control_plane_answers`: `--json
//!   status`, `status` and `probe ready` give the same bytes and exit codes
//!   both ways (but for `now`); a SIGSTOPped daemon is still read from its
//!   record (so the record path is the one taken); record reads never
//!   connect (the daemon's `steadfast_control_connections_total` does not
//!   move) and make the daemon log no warning.
//! - `a_killed_daemons_record_is_never_shown_running`: after `kill -9` the
//!   record (naming the socket file, still in place) is still on disk, and
//!   `status` says what the control plane says (no daemon, exit 4), both
//!   while the killed daemon is a zombie and once it is reaped; the
//!   relaunched daemon's answers all carry its own pid.
//! - `a_tampered_record_is_not_trusted`: a forged record is shown only when
//!   it passes every rule (the control case); as a link, with a second
//!   link, writable by others, naming another pid, a writer start time that
//!   is not the live pid's, another socket file or none, torn, garbage,
//!   or (as root) owned by another uid, the answer is the daemon's own.
//! - `a_record_whose_socket_file_was_replaced_is_not_trusted`: the daemon's
//!   socket file moved aside and a dead socket put in its place: the
//!   record (still naming the moved file) is not trusted, and `status`
//!   says "not running" as the control plane does; moved back, the record
//!   is read again.
//! - `no_daemon_to_dial_is_answered_without_a_runtime`: no data dir, no
//!   control dir, no socket, a control dir others may write in: `status`,
//!   `--json status` and `probe ready` (`-v` or not) say the dial's own
//!   error and exit code, and say it even with no file descriptor to spare
//!   for a runtime (`prlimit --nofile=4`).

use crate::support::processes;
use crate::support::processes::text;

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use steadfast::protocol::status_record;

/// kvd over `tmp/data`, its stderr in `tmp/kvd.log`, running.
fn running_kvd(tmp: &Path) -> (Child, PathBuf) {
    let data = tmp.join("data");
    let config = tmp.join("kvd.toml");
    std::fs::write(
        &config,
        format!("listen_addr = \"127.0.0.1:{}\"\n", processes::free_port()),
    )
    .expect("config");
    let log = File::create(tmp.join("kvd.log")).expect("log");
    let child = processes::kvd(&data, &config, Stdio::from(log));
    processes::until(&data, "kvd running", |s| {
        s["lifecycle"]["state"] == "running"
    });
    (child, data)
}

/// `steadfastctl --data-dir DATA ARGS…`, from the record (`rpc` false) or
/// the control plane.
fn ctl(data: &Path, args: &[&str], rpc: bool) -> Output {
    let mut command = Command::new(processes::steadfastctl());
    ctl_args(&mut command, data, args, rpc);
    command.output().expect("steadfastctl runs")
}

/// `--data-dir DATA ARGS…`, and the environment that picks the path.
fn ctl_args(command: &mut Command, data: &Path, args: &[&str], rpc: bool) {
    command.arg("--data-dir").arg(data).args(args);
    command.env_remove("STEADFASTCTL_NO_RECORD");
    if rpc {
        command.env("STEADFASTCTL_NO_RECORD", "1");
    }
}

/// `--json status`'s JSON without `now`.
fn without_now(out: &Output) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    let now = value
        .as_object_mut()
        .and_then(|fields| fields.remove("now"));
    assert!(now.is_some_and(|now| now.is_u64()), "`now` is stamped");
    value
}

/// `status`'s text with the relative times ("(2.0 s ago)") cut out.
fn without_ago(out: &Output) -> String {
    text(&out.stdout)
        .split('(')
        .map(|piece| match piece.split_once(" ago)") {
            Some((_, rest)) => format!("(…){rest}"),
            None => format!("({piece}"),
        })
        .collect()
}

fn record_path(data: &Path) -> PathBuf {
    data.join(".steadfast").join("status")
}

fn stop_kvd(mut child: Child, data: &Path) {
    let _ = ctl(data, &["exit"], true);
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT),
        "kvd exits 80 (halt)"
    );
}

#[test]
fn status_from_the_record_is_what_the_control_plane_answers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (child, data) = running_kvd(tmp.path());

    let from_record = ctl(&data, &["--json", "status"], false);
    let from_rpc = ctl(&data, &["--json", "status"], true);
    assert_eq!(
        from_record.status.code(),
        Some(0),
        "{}",
        text(&from_record.stderr)
    );
    assert_eq!(from_record.status.code(), from_rpc.status.code());
    assert_eq!(without_now(&from_record), without_now(&from_rpc));
    // Byte for byte, once `now` is the same.
    let strip = |out: &Output| -> String {
        text(&out.stdout)
            .lines()
            .filter(|line| !line.trim_start().starts_with("\"now\":"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&from_record), strip(&from_rpc));

    for utc in [false, true] {
        let args: &[&str] = if utc {
            &["--utc", "status"]
        } else {
            &["status"]
        };
        let (record, rpc) = (ctl(&data, args, false), ctl(&data, args, true));
        assert_eq!(record.status.code(), Some(0));
        assert_eq!(record.status.code(), rpc.status.code());
        assert_eq!(without_ago(&record), without_ago(&rpc));
        assert!(text(&record.stdout).contains("State: running"));
    }
    let (record, rpc) = (
        ctl(&data, &["probe", "ready", "-v"], false),
        ctl(&data, &["probe", "ready", "-v"], true),
    );
    assert_eq!(record.status.code(), Some(0));
    assert_eq!(record.status.code(), rpc.status.code());
    assert_eq!(text(&record.stderr), text(&rpc.stderr));

    // The record path is the one taken: a stopped daemon answers nothing
    // over the control plane, and is still read from its record.
    processes::signal(&child, rustix::process::Signal::STOP);
    let stopped = ctl(&data, &["--json", "status"], false);
    let unanswered = ctl(&data, &["--timeout", "1", "--json", "status"], true);
    processes::signal(&child, rustix::process::Signal::CONT);
    assert_eq!(stopped.status.code(), Some(0), "{}", text(&stopped.stderr));
    assert_eq!(without_now(&stopped), without_now(&from_rpc));
    assert_eq!(
        unanswered.status.code(),
        Some(4),
        "the control plane timed out"
    );

    // Many record reads: none connects (the daemon admits only the two
    // `metrics` calls around them), and the daemon logs nothing about them.
    let before = unix_connections(&data);
    for _ in 0..50 {
        assert_eq!(
            ctl(&data, &["probe", "ready"], false).status.code(),
            Some(0)
        );
        assert_eq!(ctl(&data, &["status"], false).status.code(), Some(0));
    }
    assert_eq!(
        unix_connections(&data),
        before + 1,
        "only the second `metrics` call connected"
    );
    assert_eq!(ctl(&data, &["status"], true).status.code(), Some(0));
    stop_kvd(child, &data);
    let log = std::fs::read_to_string(tmp.path().join("kvd.log")).expect("log");
    let loud: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect();
    assert!(loud.is_empty(), "the daemon complained: {loud:#?}");
    assert!(
        !record_path(&data).exists(),
        "a clean exit removes the record"
    );
}

/// The daemon's admitted Unix control connections
/// (`steadfast_control_connections_total{transport="unix"}`), read with a
/// `metrics` call (which is one).
fn unix_connections(data: &Path) -> u64 {
    let out = ctl(data, &["metrics"], true);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .find_map(|line| {
            line.strip_prefix("steadfast_control_connections_total{transport=\"unix\"} ")
        })
        .and_then(|n| n.trim().parse::<f64>().ok())
        .map(|n| n as u64)
        .unwrap_or_else(|| panic!("no unix connection count in {}", text(&out.stdout)))
}

/// `status`, `--json status` and `probe ready` from the record say what
/// the control plane says when no daemon answers (exit 4, or 1 for the
/// probe; nothing on stdout).
fn no_daemon_either_way(data: &Path, case: &str) {
    for args in [&["status"][..], &["--json", "status"], &["probe", "ready"]] {
        let (record, rpc) = (ctl(data, args, false), ctl(data, args, true));
        let expected = if args[0] == "probe" { 1 } else { 4 };
        assert_eq!(record.status.code(), Some(expected), "{case}: {args:?}");
        assert_eq!(rpc.status.code(), Some(expected), "{case}: {args:?}");
        assert_eq!(text(&record.stdout), "", "{case}: {args:?}: nothing shown");
        assert_eq!(text(&record.stderr), text(&rpc.stderr), "{case}: {args:?}");
    }
}

#[test]
fn a_killed_daemons_record_is_never_shown_running() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut child, data) = running_kvd(tmp.path());
    let socket = data.join(".steadfast").join("control.sock");
    child.kill().expect("kill -9");
    // Not reaped yet: a zombie, whose pid still has its start time.
    // Once every thread has exited (the last one closes the files, so the
    // socket is closed too): only the leader is left, as a zombie.
    let tasks = PathBuf::from(format!("/proc/{}/task", child.id()));
    let deadline = std::time::Instant::now() + processes::PATIENCE;
    loop {
        let left: Vec<_> = std::fs::read_dir(&tasks)
            .expect("the zombie's tasks")
            .filter_map(Result::ok)
            .collect();
        let zombie = left.len() == 1
            && std::fs::read(left[0].path().join("stat"))
                .is_ok_and(|stat| status_record::exited(&stat));
        if zombie {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never a zombie");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        record_path(&data).exists(),
        "the killed daemon's record stays"
    );
    assert!(socket.exists(), "and so does its socket file");
    no_daemon_either_way(&data, "a zombie");
    let _ = child.wait();
    no_daemon_either_way(&data, "reaped");

    // Relaunched: whatever it answers, from its first answer on, is its own.
    let config = tmp.path().join("kvd.toml");
    let mut child = processes::kvd(&data, &config, Stdio::null());
    let pid = u64::from(child.id());
    let deadline = std::time::Instant::now() + processes::PATIENCE;
    loop {
        if let Some(status) = processes::status(&data) {
            assert_eq!(
                status["pid"], pid,
                "an answer of another daemon: {status:#}"
            );
            if status["lifecycle"]["state"] == "running" {
                break;
            }
        }
        assert!(std::time::Instant::now() < deadline, "kvd never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = ctl(&data, &["exit"], true);
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// The daemon's record `original` (as it wrote it: the planted forgeries
/// replace the file it names), with `epoch` (and optionally `pid`) forged,
/// and its writer block changed by `writer`.
fn forged_by(
    original: &[u8],
    pid: Option<u64>,
    writer: impl FnOnce(&mut status_record::Writer),
) -> Vec<u8> {
    let (mut by, body) = status_record::decode(original).expect("a whole record");
    let mut value: serde_json::Value = serde_json::from_slice(body).expect("a snapshot");
    value["epoch"] = 4242.into();
    if let Some(pid) = pid {
        value["pid"] = pid.into();
    }
    writer(&mut by);
    status_record::encode(&by, &serde_json::to_vec(&value).expect("json"))
}

/// The daemon's record, with `epoch` (and optionally `pid`) forged.
fn forged(original: &[u8], pid: Option<u64>) -> Vec<u8> {
    forged_by(original, pid, |_| {})
}

/// Put `bytes` in place of the record (as a file of mode `mode`, renamed
/// over it).
fn plant(data: &Path, bytes: &[u8], mode: u32) -> PathBuf {
    let planted = data.join(".steadfast").join("planted");
    std::fs::write(&planted, bytes).expect("plant");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(mode)).expect("chmod");
    std::fs::rename(&planted, record_path(data)).expect("rename");
    record_path(data)
}

/// `--json status`: exit 0, and whether it showed the forged epoch.
fn shows_forgery(data: &Path, case: &str) -> bool {
    let out = ctl(data, &["--json", "status"], false);
    assert_eq!(out.status.code(), Some(0), "{case}: {}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "{case}: nothing on stderr");
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(value["lifecycle"]["state"], "running", "{case}");
    value["epoch"] == 4242
}

#[test]
fn a_tampered_record_is_not_trusted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (child, data) = running_kvd(tmp.path());
    let pid = u64::from(child.id());
    let original = std::fs::read(record_path(&data)).expect("the record");
    let forgery = forged(&original, None);

    // The control case: a forgery that passes every rule is read (so the
    // cases below would show one that got through).
    plant(&data, &forgery, 0o600);
    assert!(shows_forgery(&data, "a well-formed record"));

    // Writable by others.
    plant(&data, &forgery, 0o666);
    assert!(!shows_forgery(&data, "mode 0666"));

    // A second link.
    let path = plant(&data, &forgery, 0o600);
    let twin = data.join(".steadfast").join("twin");
    std::fs::hard_link(&path, &twin).expect("link");
    assert!(!shows_forgery(&data, "a second link"));
    std::fs::remove_file(&twin).expect("unlink");

    // A symbolic link to a well-formed forgery.
    let target = tmp.path().join("forged-status");
    std::fs::write(&target, &forgery).expect("target");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::remove_file(record_path(&data)).expect("unlink");
    std::os::unix::fs::symlink(&target, record_path(&data)).expect("symlink");
    assert!(!shows_forgery(&data, "a symbolic link"));

    // Another pid's record.
    let other = forged(&original, Some(pid + 1));
    plant(&data, &other, 0o600);
    assert!(!shows_forgery(&data, "another pid"));

    // The writer block: the live pid's start time is not the one written
    // (its pid reused by another process), the socket is another file, or
    // none (before the bind, after a handover).
    let socket = std::fs::symlink_metadata(data.join(".steadfast").join("control.sock"))
        .expect("the socket file");
    let restarted = forged_by(&original, None, |w| w.start_time += 1);
    plant(&data, &restarted, 0o600);
    assert!(!shows_forgery(&data, "another start time"));
    for (case, other) in [
        (
            "another socket inode",
            Some((socket.dev(), socket.ino() + 1)),
        ),
        (
            "another socket device",
            Some((socket.dev() + 1, socket.ino())),
        ),
        ("no socket", None),
    ] {
        let elsewhere = forged_by(&original, None, |w| w.socket = other);
        plant(&data, &elsewhere, 0o600);
        assert!(!shows_forgery(&data, case));
    }
    // A writer that is alive as itself (this test process, with its own
    // start time) and names the socket, over a snapshot of the daemon's
    // pid: the snapshot is not the writer's.
    let own = std::fs::read("/proc/self/stat").expect("own stat");
    let own_start = status_record::start_time_of(&own).expect("own start time");
    let imposter = forged_by(&original, None, |w| {
        w.pid = std::process::id();
        w.start_time = own_start;
    });
    plant(&data, &imposter, 0o600);
    assert!(!shows_forgery(
        &data,
        "a writer that is not the snapshot's pid"
    ));

    // Torn (cut short, or its body changed under the checksum), garbage,
    // empty.
    plant(&data, &forgery[..forgery.len() - 3], 0o600);
    assert!(!shows_forgery(&data, "cut short"));
    let mut flipped = forgery.clone();
    let at = flipped.len() - 2;
    flipped[at] ^= 0x01;
    plant(&data, &flipped, 0o600);
    assert!(!shows_forgery(&data, "a flipped byte"));
    plant(&data, b"{\"epoch\":4242}", 0o600);
    assert!(!shows_forgery(&data, "garbage"));
    plant(&data, b"", 0o600);
    assert!(!shows_forgery(&data, "empty"));

    // Another uid's (as root, which may chown).
    if rustix::process::geteuid().is_root() {
        let path = plant(&data, &forgery, 0o600);
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        assert!(!shows_forgery(&data, "owned by uid 65534"));
    } else {
        eprintln!("not root: the foreign-owner case is skipped");
    }
    stop_kvd(child, &data);
}

#[test]
fn a_record_whose_socket_file_was_replaced_is_not_trusted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (child, data) = running_kvd(tmp.path());
    let socket = data.join(".steadfast").join("control.sock");
    let aside = data.join(".steadfast").join("control.sock.aside");
    assert!(shows_record(&data), "the record is read to begin with");

    // The daemon's socket file moved aside (the daemon still serves it, the
    // record still names it), and another socket, which nobody serves, put
    // in its place.
    std::fs::rename(&socket, &aside).expect("move the socket aside");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind another socket"));
    no_daemon_either_way(&data, "another socket file");
    // Moved back: the record names the file again, and is read.
    std::fs::rename(&aside, &socket).expect("move the socket back");
    assert!(shows_record(&data), "the record is read again");
    stop_kvd(child, &data);
}

/// Whether `--json status` is read from the record: with the daemon
/// stopped (SIGSTOP), only the record answers.
fn shows_record(data: &Path) -> bool {
    let pid = std::fs::read(record_path(data))
        .ok()
        .and_then(|bytes| status_record::decode(&bytes).ok().map(|(w, _)| w.pid))
        .expect("a record");
    let child_pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    rustix::process::kill_process(child_pid, rustix::process::Signal::STOP).expect("stop");
    processes::wait_stopped(pid);
    let out = ctl(data, &["--timeout", "1", "--json", "status"], false);
    rustix::process::kill_process(child_pid, rustix::process::Signal::CONT).expect("cont");
    out.status.code() == Some(0)
}

/// `steadfastctl --data-dir DATA ARGS…` from the record, allowed no more
/// file descriptors than its standard three and one (`prlimit
/// --nofile=4`, util-linux): too few for a runtime, whose start needs
/// two.
fn ctl_without_a_runtime(data: &Path, args: &[&str]) -> Output {
    let mut command = Command::new("prlimit");
    command.arg("--nofile=4").arg(processes::steadfastctl());
    ctl_args(&mut command, data, args, false);
    command
        .output()
        .expect("prlimit (util-linux) runs steadfastctl")
}

#[test]
fn no_daemon_to_dial_is_answered_without_a_runtime() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let control = data.join(".steadfast");
    let cases: [(&str, &dyn Fn()); 4] = [
        ("no data dir", &|| {}),
        ("a data dir without a control dir", &|| {
            std::fs::create_dir(&data).expect("mkdir data");
        }),
        ("a control dir without a socket", &|| {
            std::fs::create_dir(&control).expect("mkdir control");
            std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o700))
                .expect("chmod 700");
        }),
        ("a control dir others may write in", &|| {
            std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o777))
                .expect("chmod 777");
        }),
    ];
    for (case, make) in cases {
        make();
        // What the control plane's dial says, the same from the record.
        no_daemon_either_way(&data, case);
        let mut said = String::new();
        let verbose = [&["-v", "probe", "ready"][..], &["probe", "ready"]];
        for args in [&["status"][..], &["--json", "status"]]
            .into_iter()
            .chain(verbose)
        {
            let rpc = ctl(&data, args, true);
            let limited = ctl_without_a_runtime(&data, args);
            assert_eq!(limited.status.code(), rpc.status.code(), "{case}: {args:?}");
            assert_eq!(
                text(&limited.stderr),
                text(&rpc.stderr),
                "{case}: {args:?}: answered without a runtime"
            );
            assert_eq!(text(&limited.stdout), "", "{case}: {args:?}");
            if args == ["status"] {
                said = text(&limited.stderr);
            }
        }
        // The dial's error is said: it names the socket and why.
        assert!(
            said.contains("control.sock")
                && (said.contains("No such file") || said.contains("not trusted")),
            "{case}: {said}"
        );
    }
}
