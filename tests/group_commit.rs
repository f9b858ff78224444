//! Group commit (issue 16, item 2): how many journal fsyncs a stop, a
//! start, a stop+start and a restart of a real kvd cost, counted from its
//! own metrics (`steadfast_journal_fsync_duration_seconds_count`, one
//! observation per journal write + fsync) read through `steadfastctl
//! metrics`. A count, not a timing: each operation is run to its settled
//! state before the count is read, so the figure is deterministic.
//! `spec/control-dir.md`, "Writing".

mod processes;

use std::path::Path;
use std::process::{Child, Command, Stdio};

struct Kvd(Child);

impl Drop for Kvd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kvd(dir: &Path, port: u16) -> Kvd {
    let config = dir.join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    Kvd(Command::new(processes::example("kvd"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--config")
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kvd starts"))
}

/// The daemon's samples named in `names`, from its OpenMetrics text.
fn samples<const N: usize>(data: &Path, names: [&str; N]) -> [u64; N] {
    let out = processes::ctl(data, &["metrics"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    names.map(|name| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {name} in {text}")) as u64
    })
}

/// `(fsyncs, records)` so far: the journal's fsync count and records
/// written, from the daemon's OpenMetrics text.
fn counts(data: &Path) -> (u64, u64) {
    let [fsyncs, records] = samples(
        data,
        [
            "steadfast_journal_fsync_duration_seconds_count",
            "steadfast_journal_records_total",
        ],
    );
    (fsyncs, records)
}

fn state_is(data: &Path, state: &str, attempt: u64) {
    processes::until(data, state, |s| {
        s["lifecycle"]["state"] == state
            && (state != "running" || s["lifecycle"]["attempt"].as_u64() == Some(attempt))
    });
}

fn ctl_ok(data: &Path, args: &[&str]) {
    let out = processes::ctl(data, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
}

#[test]
fn fsyncs_per_stop_start_and_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let _kvd = kvd(tmp.path(), processes::free_port());
    state_is(&data, "running", 1);
    let mut last = counts(&data);
    let mut cost = |what: &str| {
        let now = counts(&data);
        let cost = (now.0 - last.0, now.1 - last.1);
        eprintln!("{what}: {} fsyncs, {} records", cost.0, cost.1);
        last = now;
        cost.0
    };

    ctl_ok(&data, &["stop"]);
    state_is(&data, "stopped", 1);
    let stop = cost("stop");
    ctl_ok(&data, &["start"]);
    state_is(&data, "running", 2);
    let start = cost("start");
    ctl_ok(&data, &["stop"]);
    state_is(&data, "stopped", 2);
    ctl_ok(&data, &["start"]);
    state_is(&data, "running", 3);
    let stop_start = cost("stop+start");
    ctl_ok(&data, &["restart"]);
    state_is(&data, "running", 4);
    let restart = cost("restart");
    // Before group commit: 3, 6, 9 and 8. A stop is its `stop` record,
    // then the drain's progress, its cleared checkpoints, the runtime's
    // task ending while it is shut down (staged: it changes nothing) and
    // the `drained` transition in one append. A start is its `start`
    // record, one append per checkpoint a later step waits on (kvd's
    // `open_store`, `replay_log`, `bind_listener`), then the last step's
    // checkpoint with the `booted` transition.
    assert_eq!(
        (stop, start, stop_start, restart),
        (2, 5, 7, 6),
        "fsyncs per stop, start, stop+start, restart"
    );
}

/// Launch (issue 16, item 3): the fsyncs a fresh kvd makes before it is
/// running, counted from its metrics. `spec/control-dir.md`, "Opening":
/// the control dir's name (in the data dir) 1, the `holding` marker 2 (its
/// temp file, then the control dir, which also makes the `lock` and
/// `journal` names durable), the identity 2 (written beside the `booted`
/// append); the journal's header is made durable by its first append.
/// Before: 8 (the control dir and the journal header and its directory
/// entry each had an fsync of their own). Journal appends: `resolving →
/// booting` with `AttemptStarted`, the checkpoints of `open_store`,
/// `replay_log` and `bind_listener`, the last with `booted`.
#[test]
fn fsyncs_at_launch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let _kvd = kvd(tmp.path(), processes::free_port());
    state_is(&data, "running", 1);
    let [dir, journal] = samples(
        &data,
        [
            "steadfast_control_dir_fsyncs_total",
            "steadfast_journal_fsync_duration_seconds_count",
        ],
    );
    assert_eq!(
        (dir, journal),
        (5, 5),
        "control-dir fsyncs and journal appends of a fresh launch"
    );
}
