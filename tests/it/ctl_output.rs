//! What `steadfastctl` prints and what it reads, through the real binary
//! against real kvd processes (`steadfastctl/src/out.rs`, `spec/control.md`,
//! "steadfastctl"):
//! - a daemon's text (an error quoting a config value with newlines and
//!   ESC) forges no line of `status`, `watch`, `journal` or `config show`,
//!   and no control character reaches the terminal
//!   (`a_daemon_s_text_cannot_forge_a_line_or_reach_the_terminal`);
//! - a closed stdout ends any command quietly: no panic, no backtrace, the
//!   command's own exit code (`a_closed_stdout_ends_the_command_quietly`);
//! - the files the command line names (inventory, client config, token)
//!   are read as the daemon reads its config: a FIFO does not hang the
//!   command, a device or a huge file does not grow it, and each refusal
//!   names the file and why (`the_ctl_refuses_files_it_cannot_read_safely`).

use crate::support::processes;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use processes::{PATIENCE, ctl, free_port, steadfastctl, text, until, wait_exit};

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

/// `child`'s output once it exits; killed and failed when it has not
/// exited within [`PATIENCE`] (a hang).
fn finish(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `steadfastctl ARGS…` with `env`, stdout and stderr read, within
/// [`PATIENCE`].
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(steadfastctl());
    command
        .args(args)
        .env_remove("STEADFAST_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    finish(command.spawn().expect("steadfastctl runs"), &args.join(" "))
}

/// A listen address that is no address: every boot fails in
/// `bind_listener`, with an error that quotes it — newlines, a forged
/// record and a forged status header, ESC and a C1 CSI included.
const FORGING: &str = "listen_addr = \"x\\n<0>ERROR forged\\n\u{25cf} steadfast daemon (pid 1) \
                       \u{2014} running\\u001b[2J\\u009b31m\"\n";

/// A line a forging value would make: one that starts as the forged
/// record or header does.
fn forged(line: &str) -> bool {
    line.starts_with("<0>") || line.starts_with("\u{25cf} steadfast daemon (pid 1)")
}

/// kvd whose error quotes a hostile config value: `status` (from the
/// status record and over the control socket, human and JSON), `status
/// --history`, `journal`, `watch` and `config show LEAF` print it escaped —
/// no control character but the line breaks of the output itself, and no
/// line that starts as a forged one. Before, the value's newline began a
/// line of `status` of its own and its ESC went to the terminal raw.
/// (`config show` of the whole config prints it as TOML, where a string
/// with newlines is a multi-line string: its lines are the value's, and
/// its control characters are escaped all the same.)
#[test]
fn a_daemon_s_text_cannot_forge_a_line_or_reach_the_terminal() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::fs::write(&config, FORGING).expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let failed = until(&data, "a failed boot", |s| state(s) == "failed");
    let error = failed["lifecycle"]["report"]["error"]
        .as_str()
        .expect("an error");
    assert!(error.contains("\n<0>ERROR forged"), "{error:?}");
    let data_dir = data.to_str().expect("utf-8 path");
    let no_record = [("STEADFASTCTL_NO_RECORD", "1")];
    for (args, env) in [
        (&["status"][..], &[][..]),
        (&["status"], &no_record[..]),
        (&["status", "--json"], &[]),
        (&["status", "--history", "3"], &[]),
        (&["journal"], &[]),
        (&["watch", "--timeout", "1"], &[]),
        (&["config", "show"], &[]),
        (&["config", "show", "listen_addr"], &[]),
    ] {
        let toml = args == ["config", "show"];
        let mut line = vec!["--data-dir", data_dir];
        line.extend_from_slice(args);
        let out = run(&line, env);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            stdout.contains("forged"),
            "{args:?} shows the error: {stdout}{stderr}"
        );
        for (name, stream) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert!(
                !stream.chars().any(|c| c.is_control() && c != '\n'),
                "{args:?}: a control character on {name}: {stream:?}"
            );
            for line in stream.lines().filter(|_| !toml) {
                assert!(!forged(line), "{args:?}: a forged line: {line:?}\n{stream}");
            }
        }
        if args.contains(&"--json") {
            let value: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
            assert_eq!(value["lifecycle"]["report"]["error"], error, "{stdout}");
        }
    }
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// `steadfastctl ARGS…` with its stdout a pipe whose reader is gone: the
/// first write fails with `EPIPE`.
fn with_stdout_closed(args: &[&str], env: &[(&str, &str)]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut command = Command::new(steadfastctl());
    command
        .args(args)
        .env_remove("STEADFAST_DATA_DIR")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    finish(command.spawn().expect("steadfastctl runs"), &args.join(" "))
}

/// `steadfastctl status | head -1` and the like: every command that prints
/// (status from the record and over the socket, JSON, the fleet's table,
/// journal, config show, and `watch`, which streams) exits quietly with
/// its own code when its reader has gone away. Before, each panicked
/// ("failed printing to stdout: Broken pipe"), exit 101, with a backtrace.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::fs::write(
        &config,
        format!("listen_addr = \"127.0.0.1:{}\"\n", free_port()),
    )
    .expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    until(&data, "running", |s| state(s) == "running");
    let inventory = tmp.path().join("fleet.toml");
    std::fs::write(
        &inventory,
        format!("[[daemon]]\nname = \"a\"\ndata_dir = {:?}\n", data),
    )
    .expect("inventory");
    let data_dir = data.to_str().expect("utf-8 path");
    let no_record = [("STEADFASTCTL_NO_RECORD", "1")];
    for (args, env) in [
        (&["--data-dir", data_dir, "status"][..], &[][..]),
        (&["--data-dir", data_dir, "status"], &no_record[..]),
        (&["--data-dir", data_dir, "status", "--json"], &[]),
        (&["--data-dir", data_dir, "journal"], &[]),
        (&["--data-dir", data_dir, "config", "show"], &[]),
        (&["--data-dir", data_dir, "watch"], &[]),
        (&["--data-dir", data_dir, "watch", "--json"], &[]),
        (
            &["--inventory", inventory.to_str().expect("utf-8"), "status"],
            &[],
        ),
    ] {
        let out = with_stdout_closed(args, env);
        let stderr = text(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }

    // A runtime that is not running: `status` keeps its own answer, 3.
    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));
    for env in [&[][..], &no_record[..]] {
        let out = with_stdout_closed(&["--data-dir", data_dir, "status"], env);
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(out.status.code(), Some(3), "{stderr}");
    }
    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// A FIFO at `path` (nobody ever opens its write end).
fn fifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

/// The files the command line names are regular files of bounded size,
/// opened without waiting: `--inventory /dev/zero` is refused (before: it
/// read until memory ran out), a FIFO as `--client-config` or
/// `--token-file` is refused at once (before: the open waited for a writer
/// forever, whatever `--timeout` said), and a token or inventory file too
/// large is refused unread, each with the file and why.
#[test]
fn the_ctl_refuses_files_it_cannot_read_safely() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pipe = tmp.path().join("fifo");
    fifo(&pipe);
    let pipe = pipe.to_str().expect("utf-8 path");
    let token = tmp.path().join("token");
    std::fs::write(&token, "0".repeat(300)).expect("token");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let token = token.to_str().expect("utf-8 path");
    let big = tmp.path().join("big.toml");
    let file = std::fs::File::create(&big).expect("big");
    file.set_len(2 << 20).expect("grow");
    let big = big.to_str().expect("utf-8 path");

    let tcp = ["--tcp", "127.0.0.1:1", "--timeout", "1", "--token-file"];
    for (args, code, says) in [
        (
            vec!["--inventory", "/dev/zero", "status"],
            2,
            &["/dev/zero", "character device, not a regular file"][..],
        ),
        (
            vec!["--inventory", big, "status"],
            2,
            &[big, "holds 2097152 bytes, over the 1048576-byte"],
        ),
        (
            vec!["--client-config", pipe, "--timeout", "1", "status"],
            2,
            &[pipe, "fifo, not a regular file"],
        ),
        (
            [&tcp[..], &[pipe, "status"]].concat(),
            4,
            &[pipe, "not a regular file"],
        ),
        (
            [&tcp[..], &[token, "status"]].concat(),
            4,
            &[token, "holds 300 bytes, over the 256-byte limit"],
        ),
    ] {
        let out = run(&args, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        for needle in says {
            assert!(stderr.contains(needle), "{args:?}: {needle:?} in {stderr}");
        }
    }
}
