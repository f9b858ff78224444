//! The process-wide helper (`steadfast::daemon`) in a real child process:
//! the `minimal` example runs under a fake `NOTIFY_SOCKET` (a Unix datagram
//! socket this test binds), reports `READY=1`, `STATUS=` and `WATCHDOG=1`,
//! and on a real SIGTERM drains, says `STOPPING=1` and exits 0. It serves
//! its control socket (`daemon::run_with`), which the real `steadfastctl`
//! reads while it runs, and which is gone once it has exited. And
//! `run_with` with signals off, in this process, catches no signal. A
//! SIGTERM sent at once after the spawn, or a few milliseconds after, is a
//! drained exit 0, or (in the loader and runtime start, before `main`'s
//! first line) a death that touched nothing: never a death after the data
//! dir was locked and its run marker written. A control socket removed
//! or replaced while the daemon runs is bound again (logged), and one
//! that cannot be ends the daemon with 75 for a relaunch.

use crate::support::processes;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Datagrams received until one contains `want` (or the patience runs out).
fn read_until(socket: &UnixDatagram, seen: &mut Vec<String>, want: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = vec![0u8; 4096];
    while Instant::now() < deadline {
        if seen.iter().any(|m| m.contains(want)) {
            return true;
        }
        if let Ok(n) = socket.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    seen.iter().any(|m| m.contains(want))
}

#[test]
fn a_daemon_notifies_systemd_and_exits_cleanly_on_sigterm() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket_path = tmp.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = tmp.path().join("minimal.toml");
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");

    let mut child = Command::new(processes::example("minimal"))
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000")
        .stdin(Stdio::null())
        .spawn()
        .expect("the daemon starts");

    let mut seen = Vec::new();
    assert!(
        read_until(&socket, &mut seen, "READY=1"),
        "READY=1 never came: {seen:?}"
    );
    assert!(
        seen.iter().any(|m| m.contains("STATUS=running")),
        "{seen:?}"
    );
    // A status for every published state: `resolving`, then `running`
    // (a boot this short is published only once done: its `start` was
    // written ahead and made durable with `booted`, `spec/control-dir.md`).
    assert!(
        seen.iter().any(|m| m.contains("STATUS=resolving")),
        "a status for every published state: {seen:?}"
    );
    assert!(
        read_until(&socket, &mut seen, "WATCHDOG=1"),
        "no watchdog ping: {seen:?}"
    );

    // The runtime really serves.
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut greeting = String::new();
    std::io::Read::read_to_string(&mut stream, &mut greeting).ok();
    assert_eq!(greeting, "hello\n");

    // The control socket is served: steadfastctl reads the running daemon.
    let ctl = Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .args(["probe", "ready"])
        .status()
        .expect("steadfastctl runs");
    assert_eq!(ctl.code(), Some(0), "probe ready over the control socket");
    let control_socket = tmp
        .path()
        .join("data")
        .join(".steadfast")
        .join("control.sock");
    assert!(control_socket.exists());

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    assert!(
        read_until(&socket, &mut seen, "STOPPING=1"),
        "STOPPING=1 never came: {seen:?}"
    );
    let exit = child.wait().expect("the daemon ends");
    assert_eq!(exit.code(), Some(0), "SIGTERM means a drained exit: code 0");
    // The run marker says the next daemon follows a clean stop.
    let run =
        std::fs::read(tmp.path().join("data").join(".steadfast").join("run")).expect("run marker");
    assert!(!run.is_empty());
    assert!(
        !control_socket.exists(),
        "the control socket is removed at exit"
    );
}

/// `steadfast::daemon::catch_signals` (the examples' first line): a SIGTERM
/// never kills `minimal` after it touched its data dir. Sent the moment
/// its control dir appears (the supervisor being built: the lock taken,
/// the run marker about to be written), five times: a drained exit 0 each
/// time, and the run marker says released (the next run reads
/// `clean_stop`). Sent 0 to 4 ms after the spawn, three times each: a
/// drained exit 0, or a death by SIGTERM before `main`'s first line (the
/// loader, the runtime's start) that created nothing. Before
/// `catch_signals`, the handlers came with `run_with`: a SIGTERM while the
/// supervisor was built killed the daemon by the default disposition with
/// its lock taken and its run marker written (the next run read
/// `crashed`).
#[test]
fn a_sigterm_from_the_first_moment_is_a_drained_exit_or_touches_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("minimal.toml");
    std::fs::write(&config, "listen_addr = \"127.0.0.1:0\"\n").expect("config");
    let minimal = processes::example("minimal");
    let spawn = |data: &std::path::Path| {
        Command::new(&minimal)
            .arg("--data-dir")
            .arg(data)
            .arg("--config")
            .arg(&config)
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("minimal starts")
    };
    for run in 0..5 {
        let data = tmp.path().join(format!("at-the-lock-{run}"));
        let control = data.join(".steadfast");
        let mut child = spawn(&data);
        let deadline = Instant::now() + processes::PATIENCE;
        while !control.exists() {
            assert!(Instant::now() < deadline, "no control dir was made");
            std::hint::spin_loop();
        }
        processes::signal(&child, rustix::process::Signal::TERM);
        let code = processes::wait_exit(&mut child);
        assert_eq!(
            code,
            Some(0),
            "a SIGTERM while the supervisor is built is a drained exit"
        );
        assert_not_crashed(&data, "at the lock");
    }
    let mut outcomes: Vec<(u64, bool)> = Vec::new();
    for round in 0..3 {
        for delay_ms in 0..=4u64 {
            let data = tmp.path().join(format!("after-{delay_ms}ms-{round}"));
            let control = data.join(".steadfast");
            let mut child = spawn(&data);
            if delay_ms > 0 {
                std::thread::sleep(Duration::from_millis(delay_ms));
            }
            processes::signal(&child, rustix::process::Signal::TERM);
            let code = processes::wait_exit(&mut child);
            match code {
                Some(0) => {}
                None => assert!(
                    !control.exists(),
                    "SIGTERM at {delay_ms} ms killed the daemon after it made {}",
                    control.display()
                ),
                other => panic!("SIGTERM at {delay_ms} ms: exit {other:?}"),
            }
            assert_not_crashed(&data, &format!("{delay_ms} ms"));
            outcomes.push((delay_ms, code == Some(0)));
        }
    }
    for delay_ms in 0..=4u64 {
        let at: Vec<bool> = outcomes
            .iter()
            .filter(|(d, _)| *d == delay_ms)
            .map(|(_, drained)| *drained)
            .collect();
        let drained = at.iter().filter(|d| **d).count();
        eprintln!(
            "SIGTERM at {delay_ms} ms: {drained} of {} a drained exit 0, the rest killed before main",
            at.len()
        );
    }
}

/// The run marker `data` was left with, if any, does not make the next
/// run read `crashed`.
fn assert_not_crashed(data: &std::path::Path, when: &str) {
    use steadfast::protocol::snapshot::PreviousRun;
    use steadfast_actors::control_dir::{ControlDir, previous_run_from};
    if !data.join(".steadfast").join("run").exists() {
        return;
    }
    let dir = ControlDir::open(data).expect("the control dir");
    let previous = previous_run_from(&dir.read_run().expect("the run marker"));
    assert!(
        !matches!(previous, PreviousRun::Crashed { .. }),
        "SIGTERM {when}: the next run reads {previous:?}"
    );
}

/// `control::server`'s socket watch, through `daemon::run`: the control
/// socket of a running `minimal` removed (`rm`), then replaced by a socket
/// bound by this test, is bound again within the bounded wait — `status`
/// answers the same daemon again and its log says so; then replaced by a
/// regular file, which it cannot be bound over: the daemon says so and
/// exits 75 (relaunch). Before the watch, `status` answered 4 (no daemon)
/// until the daemon was stopped by a signal.
#[test]
fn a_removed_or_replaced_control_socket_is_bound_again() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("minimal.toml");
    std::fs::write(&config, "listen_addr = \"127.0.0.1:0\"\n").expect("config");
    let data = tmp.path().join("data");
    let log_path = tmp.path().join("minimal.log");
    let mut child = Command::new(processes::example("minimal"))
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).expect("log"))
        .spawn()
        .expect("minimal starts");
    let pid =
        processes::until(&data, "running", |s| s["lifecycle"]["state"] == "running")["pid"].clone();
    let socket = data.join(".steadfast").join("control.sock");
    let log = || std::fs::read_to_string(&log_path).expect("the log");
    // Until `status` answers this daemon again and the path is no longer
    // `not_ours` (the inode of a file this test put there).
    let answers_again = |not_ours: Option<u64>| {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(20);
        loop {
            let placed = std::fs::symlink_metadata(&socket).ok().map(|m| m.ino());
            if placed.is_some()
                && placed != not_ours
                && processes::status(&data).is_some_and(|s| s["pid"] == pid)
            {
                return started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "status never answered again; log:\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    std::fs::remove_file(&socket).expect("rm control.sock");
    let took = answers_again(None);
    eprintln!("removed: status answers again after {took:?}");
    let text = log();
    assert!(
        text.contains("the control socket was removed; binding it again")
            && text.contains("the control socket is listening again"),
        "logged: {text}"
    );

    // A socket of this test's, renamed over the path.
    let planted = tmp.path().join("planted.sock");
    let listener = std::os::unix::net::UnixListener::bind(&planted).expect("bind");
    let ino = std::fs::metadata(&planted).expect("planted").ino();
    std::fs::rename(&planted, &socket).expect("replace control.sock");
    let took = answers_again(Some(ino));
    eprintln!("replaced by a socket: status answers again after {took:?}");
    assert!(log().contains("the control socket was replaced; binding it again"));
    drop(listener);

    // A regular file: nothing but a socket is replaced, so it stays and
    // the daemon ends for a relaunch.
    let file = tmp.path().join("file");
    std::fs::write(&file, "not a socket").expect("a file");
    std::fs::rename(&file, &socket).expect("replace control.sock");
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(75),
        "exits for a relaunch; log:\n{}",
        log()
    );
    assert_eq!(
        std::fs::read_to_string(&socket).expect("left alone"),
        "not a socket"
    );
    let text = log();
    assert!(
        text.contains("the control socket cannot be served again; exiting for a relaunch")
            && text.contains("not a socket"),
        "said why: {text}"
    );
}

/// The signals `/proc/self/status` says this process catches (`SigCgt`).
fn caught_signals() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .expect("SigCgt")
}

/// `DaemonOptions::signals(false)`: a daemon run inside a process shared
/// with other tests leaves the process's signal dispositions alone (a
/// tokio handler, once installed, stays for the process's life, so under
/// `cargo test` every later test in the binary would swallow SIGTERM and
/// SIGINT). Before the option, `run_with` always caught SIGTERM, SIGINT
/// and SIGHUP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_signals_off_leaves_the_dispositions_alone() {
    const SIGHUP: u64 = 1 << (1 - 1);
    const SIGINT: u64 = 1 << (2 - 1);
    const SIGTERM: u64 = 1 << (15 - 1);
    let ours = SIGHUP | SIGINT | SIGTERM;
    assert_eq!(caught_signals() & ours, 0, "nothing caught them before");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (supervisor, handle) = steadfast::Supervisor::builder(tmp.path(), Idle)
        .build()
        .expect("a supervisor");
    let options = steadfast::daemon::DaemonOptions::new().signals(false);
    let daemon = tokio::spawn(steadfast::daemon::run_with(
        supervisor,
        handle.clone(),
        options,
    ));
    let mut watch = handle.watch();
    tokio::time::timeout(
        Duration::from_secs(30),
        watch.wait_for(|s| {
            matches!(
                s.lifecycle,
                steadfast::protocol::lifecycle::LifecycleState::Running { .. }
            )
        }),
    )
    .await
    .expect("running in time")
    .expect("running");
    assert_eq!(
        caught_signals() & ours,
        0,
        "run_with(signals(false)) installed a signal handler"
    );
    handle
        .exit(steadfast::ExitIntent::Halt)
        .await
        .expect("exit");
    let intent = daemon.await.expect("task").expect("the daemon ran");
    assert_eq!(
        intent,
        steadfast::daemon::ExitReason::Halt,
        "a halt asked through the handle"
    );
}

/// A service with nothing to boot.
struct Idle;

impl steadfast::Service for Idle {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> steadfast::Plan<toml::Table> {
        steadfast::Plan::new()
    }
}
