//! Declared config paths that are not regular files, against real `kvd`
//! processes driven through the real `steadfastctl`.
//!
//! Every read of a declared file goes through one bounded read
//! (`steadfast_actors::config::read_config_file`: opened `O_NONBLOCK`,
//! `fstat` of the opened fd, regular files only, 1 MiB cap), and every
//! resolve runs off the actors under a deadline. What that means for a
//! daemon, one test each:
//! - `/dev/zero` as the config is a held failure naming a character device,
//!   and the process's peak RSS stays small
//!   (`a_dev_zero_config_is_held_and_memory_stays_flat`);
//! - a FIFO at launch: the control socket appears and `status` says held,
//!   naming the FIFO (`a_fifo_at_launch_is_held_with_the_reason`);
//! - a FIFO renamed over the config while running: `restart` and `stop`
//!   answer, SIGTERM ends the process
//!   (`a_fifo_swapped_in_while_running_hangs_nothing`);
//! - a 50 MB file is refused naming the cap
//!   (`a_config_over_the_cap_is_held_naming_the_cap`), a directory naming
//!   what it is (`a_directory_config_is_held`);
//! - a `--config` that names no file exits 78 (never works) naming it
//!   (`a_missing_config_file_exits_78_naming_it`);
//! - a file declared with `declared_file` that does not exist is held
//!   naming it, and boots once it is created
//!   (`a_declared_file_that_is_missing_holds_naming_it`, with `minimal`).
//!
//! A call that would hang is bounded by [`PATIENCE`] and fails the test;
//! nothing asserts how fast anything is.

use crate::support::processes;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use processes::free_port;
use processes::{PATIENCE, until, wait_exit};

/// A kvd child, killed if the test ends (or fails) without ending it.
struct Kvd(Child);

impl Drop for Kvd {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `kvd --data-dir DATA --config CONFIG`, stderr captured.
fn kvd(data_dir: &Path, config: &Path) -> Kvd {
    Kvd(processes::kvd(data_dir, config, Stdio::piped()))
}

/// `steadfastctl --data-dir DATA ARGS…`, killed and failed if it has not
/// answered within [`PATIENCE`] (a hung daemon must fail the test, not hang it).
fn ctl_answers(data_dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("steadfastctl runs");
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("steadfastctl {args:?} got no answer: the daemon hangs");
}

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

/// The status once the daemon is held on its config, with the reason.
fn held(data_dir: &Path) -> (serde_json::Value, String) {
    let s = until(data_dir, "a held failure", |s| {
        state(s) == "failed" && s["lifecycle"]["retry"]["class"] == "hold"
    });
    let reason = s["lifecycle"]["report"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (s, reason)
}

/// SIGTERM, then the exit code (0: exit halt).
fn terminate(kvd: &mut Kvd) -> Option<i32> {
    let pid = rustix::process::Pid::from_child(&kvd.0);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    wait_exit(&mut kvd.0)
}

/// `/dev/zero` behind a symlink as the config: before the fix kvd read it
/// without bound (8.5 GB RSS in the issue; 2.1 GB here under a 3 GB
/// address-space cap, then "out of memory"). Now it is a held failure that
/// names a character device, read not at all: the peak RSS (`VmHWM`) of the
/// process stays that of an idle daemon.
#[test]
fn a_dev_zero_config_is_held_and_memory_stays_flat() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::os::unix::fs::symlink("/dev/zero", &config).expect("symlink to /dev/zero");
    let mut child = kvd(&data, &config);
    let (_, reason) = held(&data);
    assert!(reason.contains("character device"), "{reason}");
    assert!(reason.contains(&config.display().to_string()), "{reason}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.0.id())).expect("status");
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    eprintln!("kvd with /dev/zero as its config: VmHWM {hwm_kb} kB");
    assert!(
        hwm_kb < 256 * 1024,
        "peak RSS {hwm_kb} kB: the config was read without bound"
    );
    assert_eq!(terminate(&mut child), Some(0));
}

/// A FIFO at launch: before the fix kvd blocked opening it, before its
/// control socket existed, printing nothing. Now the control socket
/// appears, `status` says held naming the FIFO, and SIGTERM ends it.
#[test]
fn a_fifo_at_launch_is_held_with_the_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    mkfifo(&config);
    let mut child = kvd(&data, &config);
    let (_, reason) = held(&data);
    assert!(reason.contains("is a fifo, not a regular file"), "{reason}");
    assert!(reason.contains(&config.display().to_string()), "{reason}");
    assert_eq!(terminate(&mut child), Some(0));
}

/// A FIFO renamed over the config of a running kvd: before the fix the
/// watcher's resolve blocked the Lifecycle actor in the FIFO's open, so
/// `restart` and `stop` never answered and SIGTERM was ignored. Now the
/// change is refused with the reason, `restart` and `stop` answer, and
/// SIGTERM ends the process.
#[test]
fn a_fifo_swapped_in_while_running_hangs_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::fs::write(
        &config,
        format!("listen_addr = \"127.0.0.1:{}\"\n", free_port()),
    )
    .expect("config");
    let mut child = kvd(&data, &config);
    until(&data, "running", |s| state(s) == "running");
    let fifo = tmp.path().join("kvd.fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, &config).expect("rename the fifo over the config");
    let s = until(&data, "the change refused", |s| {
        s["error"].as_str().is_some_and(|e| e.contains("fifo"))
    });
    assert_eq!(state(&s), "running", "a refused change keeps it running");

    // The restart's preflight meets the FIFO too (bounded, in a task):
    // refused, still running; a forced restart drains into the held
    // failure, and waits for it: exit 3, naming it.
    let restart = ctl_answers(&data, &["restart"]);
    let stderr = String::from_utf8_lossy(&restart.stderr);
    assert_eq!(restart.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("config_invalid"), "{stderr}");
    assert!(stderr.contains("is a fifo"), "{stderr}");
    let restart = ctl_answers(&data, &["restart", "--force"]);
    let stderr = String::from_utf8_lossy(&restart.stderr);
    assert_eq!(restart.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("did not reach running"), "{stderr}");
    let (_, reason) = held(&data);
    assert!(reason.contains("is a fifo"), "{reason}");
    let stop = ctl_answers(&data, &["stop"]);
    assert_eq!(
        stop.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert_eq!(terminate(&mut child), Some(0));
}

/// A 50 MB (sparse) config: before the fix it was read whole. Now it is a
/// held failure that names the 1 MiB cap and the file's size.
#[test]
fn a_config_over_the_cap_is_held_naming_the_cap() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::fs::File::create(&config)
        .and_then(|f| f.set_len(50 * 1024 * 1024))
        .expect("a 50 MB file");
    let mut child = kvd(&data, &config);
    let (_, reason) = held(&data);
    assert!(reason.contains("1048576-byte (1 MiB) limit"), "{reason}");
    assert!(reason.contains("52428800 bytes"), "{reason}");
    assert_eq!(terminate(&mut child), Some(0));
}

/// A directory as the config is a held failure naming it.
#[test]
fn a_directory_config_is_held() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::fs::create_dir(&config).expect("a directory");
    let mut child = kvd(&data, &config);
    let (_, reason) = held(&data);
    assert!(
        reason.contains("is a directory, not a regular file"),
        "{reason}"
    );
    assert_eq!(terminate(&mut child), Some(0));
}

/// A `--config` naming no file: before the fix kvd ran on its defaults
/// without a word. Now it exits 78 (never works as configured: a service
/// manager does not restart it) at once, naming the file and the fix, and
/// creates nothing.
#[test]
fn a_missing_config_file_exits_78_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config: PathBuf = tmp.path().join("absent.toml");
    let mut child = kvd(&data, &config);
    let code = wait_exit(&mut child.0);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(code, Some(steadfast::daemon::EXIT_NEVER_WORKS), "{stderr}");
    assert!(
        stderr.contains(&format!("config file {} does not exist", config.display())),
        "{stderr}"
    );
    assert!(stderr.contains("create it"), "{stderr}");
    assert!(
        !data.exists(),
        "nothing was created for a daemon that never ran"
    );
}

/// `counter DATA FILE` declares FILE with `TomlFileSource::declared_file`
/// and nothing else: a FILE that does not exist (a typo) is a held
/// failure in `resolve_config` whose reason names the path, never a daemon
/// running on its defaults; creating the file boots it, with no one
/// asking (the declared file is watched). Before, it ran on the defaults
/// without a word.
#[test]
fn a_declared_file_that_is_missing_holds_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("typo.toml");
    let port = free_port();
    let mut child = Kvd(Command::new(processes::example("counter"))
        .arg(&data)
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("counter starts"));
    let (s, reason) = held(&data);
    assert_eq!(s["lifecycle"]["report"]["phase"], "resolve_config", "{s:#}");
    assert!(
        reason.contains(&format!("config file {} does not exist", config.display())),
        "{reason}"
    );
    std::fs::write(
        &config,
        format!("port = {port}\npath = \"count\"\nstep = 1\n"),
    )
    .expect("create");
    until(&data, "running once the file exists", |s| {
        state(s) == "running"
    });
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "it runs the file's config, not the defaults"
    );
    assert_eq!(terminate(&mut child), Some(0));
}

fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .expect("mkfifo");
}
