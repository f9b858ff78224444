//! Readiness under systemd: real kvd processes under a
//! fake `NOTIFY_SOCKET` — a Unix datagram socket this test binds and hands
//! to the child in its environment (never set in this process) — for every
//! way a daemon can come up, and the reload and exit conversation.
//!
//! The rules checked (`src/daemon.rs`, `examples/systemd/kvd.service`):
//! - `READY=1` follows the first *settled* state — running, stopped,
//!   failed (held or on backoff) or wedged — with a `STATUS=` naming it, so
//!   a `Type=notify` unit never times out on a daemon that is up but whose
//!   runtime is not (before, `READY=1` came only on `running`);
//! - before it, each boot step's start sends `EXTEND_TIMEOUT_USEC=` (the
//!   step's deadline);
//! - SIGHUP and `steadfastctl reload` send `RELOADING=1` with
//!   `MONOTONIC_USEC=`, then `READY=1` (`Type=notify-reload`);
//! - `STOPPING=1` is sent once;
//! - `WATCHDOG=1` only after a round trip through the Lifecycle actor: a
//!   wedged actor is not pinged;
//! - a `STATUS=` is one line whatever it quotes: a config value with
//!   newlines adds no field to the datagram.

use crate::support::processes;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use processes::{PATIENCE, ctl, free_port, until, wait_exit};

/// The fake `NOTIFY_SOCKET`: bound here, read here.
struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
    /// Every datagram received, in order.
    seen: Vec<String>,
}

impl Notify {
    fn bind(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        Self {
            socket,
            path,
            seen: Vec::new(),
        }
    }

    /// Receive what is waiting (up to one read timeout).
    fn pump(&mut self) {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            self.seen
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }

    /// Receive until a datagram satisfies `want`; its index in `seen`.
    fn until(&mut self, what: &str, want: impl Fn(&str) -> bool) -> usize {
        self.until_after(0, what, want)
    }

    /// [`Self::until`], looking at datagrams from index `from` on.
    fn until_after(&mut self, mut from: usize, what: &str, want: impl Fn(&str) -> bool) -> usize {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(i) = self.seen[from..].iter().position(|m| want(m)) {
                return from + i;
            }
            from = self.seen.len();
            assert!(
                Instant::now() < deadline,
                "{what} never came; received: {:#?}",
                self.seen
            );
            self.pump();
        }
    }

    /// How many datagrams so far hold `field` as one of their lines.
    fn count(&self, field: &str) -> usize {
        self.seen
            .iter()
            .filter(|m| m.lines().any(|l| l == field))
            .count()
    }
}

fn has(message: &str, field: &str) -> bool {
    message.lines().any(|l| l == field)
}

fn status_of(message: &str) -> Option<&str> {
    message.lines().find_map(|l| l.strip_prefix("STATUS="))
}

/// kvd under the fake socket (and `extra` environment).
fn kvd(data: &Path, config: &Path, notify: &Notify, extra: &[(&str, &str)]) -> Child {
    let mut command = Command::new(processes::example("kvd"));
    command
        .arg("--data-dir")
        .arg(data)
        .arg("--config")
        .arg(config)
        .env("NOTIFY_SOCKET", &notify.path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in extra {
        command.env(key, value);
    }
    command.spawn().expect("kvd starts")
}

/// The first `READY=1`: it carries (or follows) a `STATUS=` that satisfies
/// `want`, and nothing before it said ready.
fn ready_with(notify: &mut Notify, what: &str, want: impl Fn(&str) -> bool) -> String {
    let at = notify.until("READY=1", |m| has(m, "READY=1"));
    let status = notify.seen[..=at]
        .iter()
        .rev()
        .find_map(|m| status_of(m))
        .unwrap_or_default()
        .to_owned();
    assert!(
        want(&status),
        "READY=1 came with STATUS={status:?}, expected {what}; received: {:#?}",
        notify.seen
    );
    status
}

/// End `child` with `steadfastctl exit` and check `STOPPING=1` came once.
fn exit_once(data: &Path, child: &mut Child, notify: &mut Notify) {
    let out = ctl(data, &["exit"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Keep reading meanwhile, as systemd does.
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "kvd did not exit: {:#?}",
            notify.seen
        );
        notify.pump();
    }
    assert_eq!(wait_exit(child), Some(steadfast::daemon::EXIT_HALT));
    // The child has exited: everything it sent is in the socket.
    notify.pump();
    assert_eq!(
        notify.count("STOPPING=1"),
        1,
        "STOPPING=1 exactly once; received: {:#?}",
        notify.seen
    );
}

fn write_config(path: &Path, port: u16) {
    std::fs::write(path, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
}

/// Running: `READY=1` with `STATUS=running …`, after an
/// `EXTEND_TIMEOUT_USEC=` (the step deadline, 300 s by default) as the
/// boot's steps start: kvd's four run back to back (no fsync between
/// them), so their announcements may coalesce into fewer, never none;
/// `STOPPING=1` once on exit.
#[test]
fn ready_when_running_after_extending_the_start_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    write_config(&config, free_port());
    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    ready_with(&mut notify, "running", |s| s.starts_with("running"));
    let ready = notify
        .seen
        .iter()
        .position(|m| has(m, "READY=1"))
        .expect("ready");
    let extends = notify.seen[..ready]
        .iter()
        .filter(|m| has(m, "EXTEND_TIMEOUT_USEC=300000000"))
        .count();
    assert!(
        extends >= 1,
        "an EXTEND_TIMEOUT_USEC before READY=1: {:#?}",
        notify.seen
    );
    exit_once(&data, &mut child, &mut notify);
}

/// A bad config: kvd comes up `failed … (retry: when the config changes)`;
/// `READY=1` comes with that status, and the fixed file boots it.
#[test]
fn ready_when_held_on_a_bad_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    std::fs::write(&config, "listen_addr = [not toml\n").expect("config");
    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    ready_with(&mut notify, "failed in resolve_config (held)", |s| {
        s.starts_with("failed in resolve_config") && s.ends_with("(retry: when the config changes)")
    });
    write_config(&config, free_port());
    notify.until("STATUS=running after the fix", |m| {
        status_of(m).is_some_and(|s| s.starts_with("running"))
    });
    assert_eq!(notify.count("READY=1"), 1, "{:#?}", notify.seen);
    exit_once(&data, &mut child, &mut notify);
}

/// `stop --hold`, then a new process: it comes up
/// `stopped (held_at_startup)` and says `READY=1` with it.
#[test]
fn ready_when_held_at_startup() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    write_config(&config, free_port());
    let mut first = processes::kvd(&data, &config, Stdio::null());
    until(&data, "running", |s| s["lifecycle"]["state"] == "running");
    assert_eq!(ctl(&data, &["stop", "--hold"]).status.code(), Some(0));
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut first), Some(steadfast::daemon::EXIT_HALT));

    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    ready_with(&mut notify, "stopped (held_at_startup)", |s| {
        s == "stopped (held_at_startup)"
    });
    exit_once(&data, &mut child, &mut notify);
}

/// Another holder has the store lock: the boot fails and the probe
/// finds the store held, so kvd comes up `wedged` — and says `READY=1`
/// with it (the daemon answers; its runtime needs an operator).
#[test]
fn ready_when_wedged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    write_config(&config, free_port());
    std::fs::create_dir(&data).expect("data dir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        // The lock file as kvd makes it (0600), so kvd finds it usable and
        // only busy.
        let lock = std::fs::File::create(data.join("store.lock")).expect("store.lock");
        lock.set_permissions(std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
    }
    // This process holds it (an exclusive flock, O_CLOEXEC: no child of
    // ours inherits it), as another daemon would.
    let holder = std::fs::File::options()
        .read(true)
        .write(true)
        .open(data.join("store.lock"))
        .expect("open store.lock");
    holder.lock().expect("hold the store lock");
    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    ready_with(&mut notify, "wedged", |s| s.starts_with("wedged"));
    exit_once(&data, &mut child, &mut notify);
    drop(holder);
}

/// The listen address is taken: every boot fails `bind_listener` and is
/// retried on backoff; `READY=1` comes with the first
/// `failed in bind_listener … (retry: in N ms)`, and only once however
/// often it fails again.
#[test]
fn ready_when_boots_fail_on_backoff() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    write_config(&config, taken.local_addr().expect("addr").port());
    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    ready_with(&mut notify, "failed in bind_listener on backoff", |s| {
        s.starts_with("failed in bind_listener") && s.contains("(retry: in ")
    });
    // A second failed boot: no second READY=1.
    let first = notify
        .seen
        .iter()
        .position(|m| has(m, "READY=1"))
        .expect("ready");
    // (A boot that fails within its commit window is never published as
    // `booting`: its `start` was written ahead and settled with the
    // failure. The failures are what every boot publishes.)
    notify.until_after(first + 1, "a second failed boot", |m| {
        status_of(m).is_some_and(|s| s.starts_with("failed in bind_listener")) && !has(m, "READY=1")
    });
    assert!(notify.seen.len() > first);
    assert_eq!(notify.count("READY=1"), 1, "{:#?}", notify.seen);
    exit_once(&data, &mut child, &mut notify);
    drop(taken);
}

/// A config value holding newlines (and ESC) reaches `STATUS=` through the
/// failed boot's error (`cannot bind <listen_addr>`): the status stays one
/// line with the value escaped, and adds no `MAINPID=` or
/// `WATCHDOG=trigger` line to the datagram. Before, each newline began a
/// line of its own, which systemd reads as a field.
#[test]
fn a_status_cannot_add_a_line_to_the_datagram() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    std::fs::write(
        &config,
        "listen_addr = \"x\\nMAINPID=1\\nWATCHDOG=trigger\\u001b[2J\"\n",
    )
    .expect("config");
    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    let status = ready_with(&mut notify, "failed in bind_listener", |s| {
        s.starts_with("failed in bind_listener")
    });
    assert!(
        status.contains("x\\nMAINPID=1\\nWATCHDOG=trigger\\x1b[2J"),
        "the value, escaped, in the one STATUS= line: {status:?}"
    );
    for message in &notify.seen {
        for line in message.lines() {
            let key = line.split_once('=').map_or(line, |(key, _)| key);
            assert!(
                [
                    "STATUS",
                    "READY",
                    "EXTEND_TIMEOUT_USEC",
                    "STOPPING",
                    "RELOADING",
                    "MONOTONIC_USEC",
                ]
                .contains(&key),
                "a line steadfast did not send: {line:?} in {message:?}"
            );
            assert!(!line.contains('\u{1b}'), "{message:?}");
        }
    }
    exit_once(&data, &mut child, &mut notify);
}

/// SIGHUP and `steadfastctl reload`: each `RELOADING=1` with a
/// `MONOTONIC_USEC=` in the same datagram, then `READY=1`
/// (`Type=notify-reload`).
#[test]
fn reload_by_sighup_and_by_steadfastctl_is_framed_for_notify_reload() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    write_config(&config, free_port());
    let mut notify = Notify::bind(tmp.path());
    let mut child = kvd(&data, &config, &notify, &[]);
    ready_with(&mut notify, "running", |s| s.starts_with("running"));

    // `RELOADING=1` and `MONOTONIC_USEC=` in one datagram (systemd
    // requires both), then a `READY=1`; the index after it.
    let check_reload = |notify: &mut Notify, how: &str, from: usize| {
        let at = notify.until_after(from, &format!("RELOADING=1 ({how})"), |m| {
            has(m, "RELOADING=1")
        });
        let reloading = notify.seen[at].clone();
        let usec = reloading
            .lines()
            .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
            .unwrap_or_else(|| panic!("RELOADING=1 without MONOTONIC_USEC ({how}): {reloading:?}"));
        assert!(usec.parse::<u64>().is_ok_and(|n| n > 0), "{reloading:?}");
        let ready = notify.until_after(at + 1, &format!("READY=1 after the reload ({how})"), |m| {
            has(m, "READY=1")
        });
        ready + 1
    };

    let from = notify.seen.len();
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(hup.success());
    let from = check_reload(&mut notify, "SIGHUP", from);

    let out = ctl(&data, &["reload"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    check_reload(&mut notify, "steadfastctl reload", from);
    assert_eq!(notify.count("READY=1"), 3, "{:#?}", notify.seen);
    exit_once(&data, &mut child, &mut notify);
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The watchdog proves the Lifecycle actor answers: `WATCHDOG=1` comes
/// while it runs, and stops once the actor is wedged (before, a timer in a
/// task of its own kept pinging a wedged tree). No user code runs on the
/// actor's handler, so the wedge is the stall point `lifecycle.ping` of a
/// kvd built with the `failpoints` feature: its 50th ping never returns.
#[test]
fn a_wedged_lifecycle_actor_is_not_pinged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config) = (tmp.path().join("data"), tmp.path().join("kvd.toml"));
    write_config(&config, free_port());
    let mut notify = Notify::bind(tmp.path());
    let child = Command::new(processes::example_with_features("kvd", "failpoints"))
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify.path)
        .env("WATCHDOG_USEC", "200000")
        .env(steadfast_actors::failpoint::ENV, "lifecycle.ping:50")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvd starts");
    let mut child = KillOnDrop(child);
    ready_with(&mut notify, "running", |s| s.starts_with("running"));
    // Pings sent once running (the READY=1 message) — counted in the order
    // they came, not from when this test read them: on a loaded machine it
    // may read them late, after the wedge, all at once.
    let pinged_while_running = |notify: &Notify| {
        notify
            .seen
            .iter()
            .skip_while(|message| !message.contains("READY=1"))
            .filter(|message| message.contains("WATCHDOG=1"))
            .count()
    };
    let deadline = Instant::now() + PATIENCE;
    while pinged_while_running(&notify) < 3 {
        assert!(Instant::now() < deadline, "no pings: {:#?}", notify.seen);
        notify.pump();
    }

    // The actor wedges at its 50th ping.
    let stderr = child.0.stderr.take().expect("stderr");
    let stalled = std::io::BufRead::lines(std::io::BufReader::new(stderr))
        .map_while(Result::ok)
        .any(|l| l.contains("failpoint lifecycle.ping: stalling"));
    assert!(stalled, "kvd never reached the stall point");
    // A ping answered just before the wedge may still be on its way.
    std::thread::sleep(Duration::from_millis(500));
    notify.pump();
    let wedged_at = notify.count("WATCHDOG=1");
    // Twenty watchdog periods (100 ms each) with the actor wedged.
    let quiet_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < quiet_until {
        notify.pump();
    }
    assert_eq!(
        notify.count("WATCHDOG=1"),
        wedged_at,
        "the watchdog kept pinging a wedged Lifecycle actor: {:#?}",
        notify.seen
    );
}
