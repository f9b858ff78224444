//! The README's walkthrough (and its "Upgrading a running daemon" and "Logs
//! and metrics" blocks), run from the README itself: every fenced block
//! marked ` ```sh walkthrough ` is read from `README.md` and fed, in order,
//! to one real `bash` (one terminal, as the README says), with `PATH`
//! holding this test's `kvd` and `steadfastctl` (the README's second set-up
//! command does the same for a release build) and the working directory a
//! fresh temporary one. The only change made to a block is its ports:
//! `7070` (kvd's) and `9464` (its metrics endpoint) become free ones. Between blocks the test checks what the
//! README says the user sees, in the block's output and through
//! `status --json`.
//!
//! There is no second copy of the steps here: a README edit that breaks a
//! block (a command that fails under `set -euo pipefail`, a `watch` that
//! never ends) fails this test.

use crate::support::processes;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use processes::{PATIENCE, kv, status};

const DONE: &str = "::walkthrough-block-done::";

/// The README's walkthrough blocks, in order.
fn walkthrough_blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match &mut current {
            None if line.trim_end() == "```sh walkthrough" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(current.is_none(), "an unclosed walkthrough block");
    blocks
}

/// One bash, fed blocks on its stdin like a terminal, its stdout and
/// stderr read line by line.
struct Terminal {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    dir: PathBuf,
}

impl Terminal {
    fn new(dir: &Path) -> Self {
        let kvd = processes::example("kvd");
        let ctl = processes::steadfastctl();
        let bins = kvd.parent().expect("the test's bins dir").to_path_buf();
        assert_eq!(
            ctl.parent(),
            Some(bins.as_path()),
            "kvd and steadfastctl side by side"
        );
        let path = std::env::join_paths(std::iter::once(bins).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .expect("PATH");
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(dir)
            .env("PATH", path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bash starts");
        let mut stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        stdin
            .write_all(b"set -euo pipefail\nexec 2>&1\n")
            .expect("bash takes its options");
        Self {
            child,
            stdin,
            lines,
            dir: dir.to_path_buf(),
        }
    }

    /// Run `block`; its output (stdout and stderr). Fails the test if bash
    /// exits (a command failed) or the block does not finish.
    fn run(&mut self, n: usize, block: &str) -> String {
        self.stdin
            .write_all(format!("{block}echo {DONE}\n").as_bytes())
            .expect("bash reads the block");
        let mut output = String::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == DONE => {
                    eprintln!("block {n}:\n{output}");
                    return output;
                }
                Ok(line) => {
                    output.push_str(&line);
                    output.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "block {n} failed (bash exited {:?}):\n{block}\noutput:\n{output}\nkvd.log:\n{}",
                    self.child.wait().ok().and_then(|s| s.code()),
                    self.kvd_log()
                ),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "block {n} did not finish:\n{block}\noutput:\n{output}\nkvd.log:\n{}",
                    self.kvd_log()
                ),
            }
        }
    }

    fn kvd_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kvd.log")).unwrap_or_default()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A kvd a failed block left behind.
        if let Some(s) = status(&self.dir.join("kvd-data")) {
            let _ = Command::new("kill")
                .args(["-KILL", &s["pid"].to_string()])
                .status();
        }
    }
}

fn contains_all(output: &str, block: usize, wanted: &[&str]) {
    for want in wanted {
        assert!(
            output.contains(want),
            "block {block}: the README says the user sees {want:?}; the output was:\n{output}"
        );
    }
}

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let started = Instant::now();
    let blocks = walkthrough_blocks();
    assert_eq!(
        blocks.len(),
        8,
        "the README's walkthrough blocks (each has its checks below)"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("kvd-data");
    let port = processes::free_port();
    let metrics = processes::free_port();
    let mut terminal = Terminal::new(dir);
    let mut run = |n: usize| {
        let block = blocks[n]
            .replace("7070", &port.to_string())
            .replace("9464", &metrics.to_string());
        terminal.run(n, &block)
    };

    // 1. kvd runs, first ever; a SET is answered OK.
    let out = run(0);
    contains_all(&out, 0, &["running", "Previous: first ever", "OK"]);
    assert_eq!(kv(port, "GET greeting"), "hello");

    // 2. stop --hold, exit --relaunch: the process ends with 75.
    let out = run(1);
    contains_all(&out, 1, &["stopped", "kvd exited with 75"]);
    assert!(status(&data).is_none(), "no daemon after the exit");

    // 3. Started again: held at startup, previous clean stop; start runs it.
    let out = run(2);
    contains_all(&out, 2, &["held_at_startup", "Previous: clean stop"]);
    let s = status(&data).expect("running");
    assert_eq!(state(&s), "running");
    assert_eq!(s["previous_run"]["kind"], "clean_stop");

    // 4. kill -9 and start again: previous run crashed, data intact.
    let out = run(3);
    contains_all(
        &out,
        3,
        &[
            "kvd exited with 137",
            "Previous: crashed (pid ",
            ", attempt 1)",
            "hello",
        ],
    );

    // 5. A broken config: the restart is refused (exit 3) and kvd keeps
    //    serving; forced, it is a held failure naming the file; fixed, it
    //    boots by itself.
    let out = run(4);
    contains_all(
        &out,
        4,
        &[
            "config_invalid",
            "refused: exit 3",
            "resolve_config",
            "kvd.toml",
        ],
    );
    let s = status(&data).expect("running");
    assert_eq!(state(&s), "running");
    assert_eq!(kv(port, "GET greeting"), "hello");

    // 6. A setting applied in place, the journal, a confirmed wipe (the
    //    printed confirmation line ran as printed), and exit (halt: 80).
    let out = run(5);
    contains_all(
        &out,
        5,
        &[
            "max_connections",
            "steadfastctl --data-dir kvd-data reinit --confirm reinit-",
            "reinit_complete",
            "NOT_FOUND",
            "kvd exited with 80",
        ],
    );
    assert!(status(&data).is_none(), "no daemon after exit");

    // 7. "Upgrading a running daemon": an overlap replace completes, the
    //    old process exits 0, the new one reports it was handed over (pid,
    //    attempt), and exits when told.
    let out = run(6);
    contains_all(
        &out,
        6,
        &[
            "outcome: Complete",
            "the old kvd exited with 0",
            "Previous: handed over (by pid ",
            "on attempt 1)",
        ],
    );
    assert!(status(&data).is_none(), "no daemon after exit");

    // 8. "Logs and metrics": kvd at RUST_LOG=debug logs the request (its
    //    line naming its process), the level changes in place, the state
    //    is in the metrics over the control socket and over HTTP, and tarpc
    //    (serving those steadfastctl calls) stays at warn.
    let out = run(7);
    contains_all(
        &out,
        7,
        &[
            "NOT_FOUND",
            "request=GET greeting answer=NOT_FOUND",
            "steadfast_state{",
            "steadfast_boots",
            "kvd exited with 80",
        ],
    );
    let request = out
        .lines()
        .find(|l| l.contains("request=GET greeting"))
        .expect("the request line");
    assert!(
        request
            .split(' ')
            .nth(1)
            .is_some_and(|w| w.starts_with("kvd[") && w.ends_with(']')),
        "the line names its process: {request}"
    );
    let log = terminal_log(dir);
    assert!(
        !log.lines()
            .any(|l| l.contains(" DEBUG ") && l.contains("tarpc")),
        "tarpc at warn under RUST_LOG=debug: {log}"
    );
    assert!(status(&data).is_none(), "no daemon after exit");
    let log = terminal_log(dir);
    assert!(
        log.contains("exiting (relaunch, code 75)")
            && log.contains("exiting (halt, code 80)")
            && log.contains("exiting (handed_over, code 0)"),
        "{log}"
    );
    eprintln!("the walkthrough took {:?}", started.elapsed());
}

fn terminal_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("kvd.log")).unwrap_or_default()
}

/// The README's "Serve an axum router" block (` ```sh axum-walkthrough `),
/// run as written by one `bash -euo pipefail` with the axum example
/// (built with its feature) and `steadfastctl` on `PATH`, its port
/// (`7080`) a free one: the note posted before the restart is answered
/// `201` and listed after it, and the daemon's SIGTERM ends it drained
/// (exit 0, or `wait` fails the block).
#[test]
fn the_readme_axum_walkthrough_runs_as_written() {
    if processes::tool("curl").is_none() {
        return;
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let block: String = readme
        .split("```sh axum-walkthrough\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the README's axum walkthrough block")
        .to_owned();
    let port = processes::free_port().to_string();
    let block = block.replace("7080", &port);
    let axum = processes::example_with_features("axum", "axum");
    let ctl = processes::steadfastctl();
    let dir = tempfile::tempdir().expect("tempdir");
    let bins = tempfile::tempdir().expect("tempdir");
    processes::copy_executable(&axum, &bins.path().join("axum"));
    processes::copy_executable(&ctl, &bins.path().join("steadfastctl"));
    let path = std::env::join_paths(std::iter::once(bins.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-euo", "pipefail", "-c", &block])
        .current_dir(dir.path())
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(dir.path().join("notes.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the block failed ({:?}):\n{block}\nstdout:\n{stdout}\nstderr:\n{}\nnotes.log:\n{log}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    // The POST's answer, the worker among the children, then the listing
    // after the restart.
    assert_eq!(stdout.matches("buy milk\n").count(), 2, "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("count_notes") && l.contains("running")),
        "{stdout}"
    );
    assert!(log.contains("exiting (drained"), "{log}");
}
