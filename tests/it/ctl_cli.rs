//! `steadfastctl` as the command lines operators know behave
//! (`spec/control.md`, "steadfastctl"), the real binary against real
//! daemons: kvd (a child process) and in-process supervisors served over
//! real loopback TLS, with certificates made here (rcgen).
//! - `config set` says in one line whether the change was applied in
//!   place, or takes effect at the next restart and for which leaves;
//! - `watch` lines carry their wall-clock time (`14:03:07.123`);
//! - `--tls HOST:PORT` takes a host name, resolved, the certificate
//!   checked for that name; one that does not resolve is said so;
//! - `--client-config FILE`'s relative paths are the file's directory's;
//! - `completions SHELL` and `man` come from the clap definition.

#[cfg(feature = "tls")]
use crate::support::common;
#[cfg(feature = "tls")]
use crate::support::pki;
use crate::support::processes;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[cfg(feature = "tls")]
use common::*;
#[cfg(feature = "tls")]
use pki::Ca;
use processes::{ctl, free_port, text, wait_exit};
#[cfg(feature = "tls")]
use steadfast::ExitIntent;
#[cfg(feature = "tls")]
use steadfast::control::{Role, TlsServerConfig, serve_tls};

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

/// A kvd config listening on `port`.
fn kvd_config(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("kvd.toml");
    std::fs::write(&path, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    path
}

/// `steadfastctl ARGS…` with `cwd` as its working directory.
fn ctl_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(processes::steadfastctl())
        .args(args)
        .current_dir(cwd)
        .env_remove("STEADFAST_DATA_DIR")
        .output()
        .expect("steadfastctl runs")
}

/// `config set` on a running kvd says what became of the change: a leaf
/// kvd takes in place (`log_level`) "applied in place"; one it cannot
/// (`listen_addr`) "takes effect at the next restart (restart needed:
/// listen_addr)", and `--json` the same as `change`; on a stopped runtime,
/// at its next boot; an unset of a leaf not set, unchanged. Before, each printed
/// the whole status, whose `Pending:` did not yet show the change.
#[test]
fn config_set_says_whether_it_applied_or_needs_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &kvd_config(tmp.path(), free_port()), Stdio::null());
    processes::until(&data, "running", |s| state(s) == "running");

    let out = ctl(&data, &["config", "set", "log_level", "debug"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "log_level: set; applied in place\n");
    let out = ctl(&data, &["config", "set", "log_level", "info", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["schema"], steadfast::protocol::snapshot::SCHEMA);
    assert_eq!(state(&answer), "running", "still the snapshot: {answer:#}");
    assert_eq!(answer["change"]["leaf"], "log_level", "{answer:#}");
    assert_eq!(answer["change"]["applied"], "in_place", "{answer:#}");
    assert_eq!(
        answer["change"]["restart_needed"],
        serde_json::json!([]),
        "{answer:#}"
    );

    let other = format!("127.0.0.1:{}", free_port());
    let out = ctl(&data, &["config", "set", "listen_addr", &other]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "listen_addr: set; takes effect at the next restart (restart needed: listen_addr)\n"
    );
    let out = ctl(&data, &["config", "set", "listen_addr", &other, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["change"]["applied"], "at_restart", "{answer:#}");
    assert_eq!(
        answer["change"]["restart_needed"],
        serde_json::json!(["listen_addr"]),
        "{answer:#}"
    );
    assert_eq!(answer["pending"]["kind"], "restart_needed", "{answer:#}");
    // A later change applied in place does not forget the restart the
    // address still needs: the runtime still listens where it booted.
    let out = ctl(&data, &["config", "set", "log_level", "debug", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["change"]["applied"], "in_place", "{answer:#}");
    assert_eq!(answer["pending"]["kind"], "restart_needed", "{answer:#}");
    assert_eq!(
        answer["pending"]["leaves"],
        serde_json::json!(["listen_addr"]),
        "{answer:#}"
    );

    // Removing a leaf the override tier does not set changes nothing.
    let out = ctl(&data, &["config", "unset", "max_connections"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "max_connections: unchanged (the override tier does not set it)\n"
    );

    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));
    let out = ctl(&data, &["config", "set", "max_connections", "8"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "max_connections: set; the runtime is stopped: takes effect when it next boots\n"
    );

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// Whether `line` starts with a wall-clock time, `HH:MM:SS.mmm `.
fn stamped(line: &str) -> Option<&str> {
    let (time, _) = line.split_at_checked(13)?;
    let b = time.as_bytes();
    let digits = [0, 1, 3, 4, 6, 7, 9, 10, 11];
    (digits.iter().all(|&i| b[i].is_ascii_digit())
        && b[2] == b':'
        && b[5] == b':'
        && b[8] == b'.'
        && b[12] == b' ')
        .then_some(&time[..12])
}

/// `HH:MM:SS.mmm` of `ms` since the epoch, in UTC.
fn utc_clock(ms: u64) -> String {
    let day = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

/// `watch` prints each line after the wall-clock time it happened, as
/// `journalctl -o short` does (`--utc`: in UTC): the transition to running
/// at the state's `since`. Continuation lines stay under the text. `--json`
/// is one snapshot a line, as before.
#[test]
fn watch_lines_carry_their_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = processes::kvd(&data, &kvd_config(tmp.path(), free_port()), Stdio::null());
    processes::until(&data, "running", |s| state(s) == "running");
    assert_eq!(ctl(&data, &["stop"]).status.code(), Some(0));

    let mut watcher = Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(&data)
        .args(["watch", "--until", "running", "--utc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch runs");
    let stdout = watcher.stdout.take().expect("stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok);
    let mut seen: Vec<String> = Vec::new();
    for line in lines.by_ref() {
        let stopped = line.contains("→ stopped");
        seen.push(line);
        if stopped {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains("→ stopped")),
        "{seen:?}"
    );
    assert_eq!(ctl(&data, &["start"]).status.code(), Some(0));
    seen.extend(lines);
    assert_eq!(wait_exit(&mut watcher), Some(0), "{seen:?}");
    for line in &seen {
        assert!(
            stamped(line).is_some() || line.starts_with(&" ".repeat(17)),
            "a line without its time: {line:?} in {seen:#?}"
        );
    }
    let running = seen
        .iter()
        .find(|l| l.contains("→ running"))
        .expect("the transition to running");
    let status = processes::until(&data, "running", |s| state(s) == "running");
    let since = status["lifecycle"]["since"].as_u64().expect("since, ms");
    assert_eq!(
        stamped(running),
        Some(utc_clock(since).as_str()),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| stamped(l).is_some() && l.contains("phase") && l.contains("completed in")),
        "{seen:#?}"
    );

    // Local time (no --utc) has the same shape.
    let out = ctl(&data, &["watch", "--until", "running"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let local = text(&out.stdout);
    assert!(
        local
            .lines()
            .any(|l| stamped(l).is_some() && l.contains("→ running")),
        "{local}"
    );
    // `--json`: one JSON snapshot a line, no time before it.
    let out = ctl(&data, &["watch", "--until", "running", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for line in text(&out.stdout).lines() {
        let snapshot: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(state(&snapshot), "running");
    }

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

/// A CA, and a certificate it signs, written under `dir` as
/// `<name>.ca.pem`, `<name>.pem`, `<name>.key`.
#[cfg(feature = "tls")]
fn issue(dir: &Path, name: &str, server: bool) -> (Ca, PathBuf, PathBuf, PathBuf) {
    let ca = Ca::new(dir, name);
    let (cert, key) = ca.leaf(dir, name, server, false);
    let pem = ca.pem.clone();
    (ca, pem, cert, key)
}

/// `--tls localhost:PORT` (before: refused by the parser, an IP:PORT
/// only) reaches the daemon, its certificate checked for `localhost`;
/// `--server-name` still names another; an IP still works; a name that does
/// not resolve is said so (status: 4, unknown). And a `--client-config`
/// file's relative paths are the file's directory's, from any working
/// directory (before: the working directory's).
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_takes_a_host_name_and_a_client_config_its_own_paths() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = tmp.path().join("conf").join("pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    let (_server_ca, server_ca, server_cert, server_key) = issue(&pki, "daemon", true);
    let (_client_ca, client_ca, operator_cert, operator_key) = issue(&pki, "operator", false);
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let (run, handle) = supervise(&data, Switch::new(Some(good())).source(), None);
    let config =
        TlsServerConfig::new(&server_cert, &server_key).client_ca(&client_ca, Role::Operate);
    let server =
        serve_tls(handle.clone(), "127.0.0.1:0".parse().expect("addr"), config).expect("serves");
    until(&handle, "running", running).await;
    let port = server.local_addr().port();
    let s = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let tls = |addr: String, rest: &[&str]| {
        let mut args = vec![
            "--tls".to_owned(),
            addr,
            "--ca".to_owned(),
            s(&server_ca),
            "--cert".to_owned(),
            s(&operator_cert),
            "--key".to_owned(),
            s(&operator_key),
        ];
        args.extend(rest.iter().map(|&a| a.to_owned()));
        args
    };

    for addr in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let out = processes::ctl_async(tls(addr.clone(), &["status", "--json"])).await;
        assert_eq!(out.status.code(), Some(0), "{addr}: {out:?}");
        let snapshot: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(state(&snapshot), "running");
    }
    // The certificate is checked for the name given.
    let out = processes::ctl_async(tls(
        format!("localhost:{port}"),
        &["--server-name", "elsewhere.example", "status"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(text(&out.stderr).contains("not trusted"), "{out:?}");
    // A name that does not resolve.
    let out = processes::ctl_async(tls(
        format!("nosuch.invalid:{port}"),
        &["--timeout", "30", "status"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("nosuch.invalid") && stderr.contains("resolve"),
        "{stderr}"
    );
    // Not HOST:PORT: a usage error.
    let out = processes::ctl_async(tls("localhost".to_owned(), &["status"])).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A client config with paths relative to its own directory, used from
    // another working directory.
    let file = tmp.path().join("conf").join("client.toml");
    std::fs::write(
        &file,
        format!(
            "tls = \"localhost:{port}\"\nca = \"pki/daemon.ca.pem\"\n\
             cert = \"pki/operator.pem\"\nkey = \"pki/operator.key\"\n"
        ),
    )
    .expect("write");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("a working directory");
    let file_arg = s(&file);
    let out = tokio::task::spawn_blocking(move || {
        ctl_in(
            &elsewhere,
            &["--client-config", &file_arg, "status", "--json"],
        )
    })
    .await
    .expect("task");
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    drop(server);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// `completions SHELL` prints a completion script made from the command's
/// definition (bash's names every subcommand); `man` prints a manual page
/// that groff reads without a warning and that lists the subcommands, and
/// `man COMMAND` the page of one.
#[test]
fn completions_and_the_manual_page_come_from_the_definition() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let subcommands = [
        "status",
        "start",
        "stop",
        "restart",
        "retry",
        "exit",
        "watch",
        "reload",
        "probe",
        "metrics",
        "journal",
        "config",
        "reinit",
        "replace",
        "completions",
        "man",
    ];
    let out = ctl_in(tmp.path(), &["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let bash = text(&out.stdout);
    assert!(bash.contains("complete -F _steadfastctl"), "{bash}");
    let top = bash
        .lines()
        .find(|l| l.trim_start().starts_with("opts=\"") && l.contains("status"))
        .expect("the top level's words");
    for name in subcommands {
        assert!(
            top.split(['"', ' ']).any(|w| w == name),
            "{name} is not completed: {top}"
        );
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = ctl_in(tmp.path(), &["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {out:?}");
        assert!(text(&out.stdout).contains("steadfastctl"), "{shell}");
    }
    let out = ctl_in(tmp.path(), &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    let out = ctl_in(tmp.path(), &["man"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let page = out.stdout;
    let roff = text(&page);
    assert!(
        roff.lines().any(|l| l.starts_with(".TH steadfastctl 1")),
        "{roff}"
    );
    // groff, as `man` runs it (`-k`: its input is UTF-8), with every
    // warning on: none.
    let groff = |args: &[&str]| {
        let mut child = Command::new("groff")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("groff runs (Debian's groff-base; .ci/run installs it)");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&page)
            .expect("write");
        child.wait_with_output().expect("groff")
    };
    let checked = groff(&["-k", "-man", "-Tutf8", "-ww", "-z"]);
    assert!(checked.status.success(), "{checked:?}");
    assert_eq!(text(&checked.stderr), "", "groff's warnings");
    let shown = groff(&["-k", "-man", "-Tascii", "-P", "-cbou"]);
    assert!(shown.status.success(), "{shown:?}");
    let shown = text(&shown.stdout);
    assert!(
        shown.contains("NAME") && shown.contains("SYNOPSIS") && shown.contains("SUBCOMMANDS"),
        "{shown}"
    );
    for name in subcommands {
        assert!(
            shown.contains(&format!("steadfastctl-{name}(1)")),
            "{name} is not in the page:\n{shown}"
        );
    }
    // A subcommand's own page, as the main page names it.
    let out = ctl_in(tmp.path(), &["man", "start"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let start = text(&out.stdout);
    assert!(
        start
            .lines()
            .any(|l| l.starts_with(".TH steadfastctl-start 1")),
        "{start}"
    );
    assert!(start.contains("strict"), "{start}");
    let out = ctl_in(tmp.path(), &["man", "nosuch"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
