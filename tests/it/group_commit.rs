//! Group commit: how many journal fsyncs a stop, a
//! start, a stop+start and a restart of a real kvd cost, counted from its
//! own metrics (`steadfast_journal_fsync_duration_seconds_count`, one
//! observation per journal write + fsync) read through `steadfastctl
//! metrics`. A count, not a timing: each operation is run to its settled
//! state before the count is read, so the figure is deterministic.
//! `spec/control-dir.md`, "Writing".

use crate::support::processes;

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
        // A window no outcome outlasts: every fsync counted is one an
        // outcome (or a checkpoint a later step waits on) brought.
        .args(["--commit-window-ms", "600000"])
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

/// `(control-dir fsyncs, journal fsyncs)` so far, from the daemon's
/// OpenMetrics text.
fn launch_fsyncs(data: &Path) -> (u64, u64) {
    let [dir, journal] = samples(
        data,
        [
            "steadfast_control_dir_fsyncs_total",
            "steadfast_journal_fsync_duration_seconds_count",
        ],
    );
    (dir, journal)
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
    // Before staging process-lifetime checkpoints: 1, 4, 5 and 4; before
    // writing ahead: 2, 5, 7 and 6; before group commit: 3, 6, 9 and 8. A
    // stop is its `stop` record, written ahead, then the drain's progress,
    // its cleared checkpoints, the runtime's task ending while it is shut
    // down (staged: it changes nothing) and the `drained` transition, all
    // in one append. A start is its `start` record, written ahead, then
    // the boot's progress and every step's checkpoint (kvd's steps all
    // die with the process: staged) with the `booted` transition, one
    // append. A restart is a stop and a start whose `restart` and
    // `drained` ride with that one append too.
    assert_eq!(
        (stop, start, stop_start, restart),
        (1, 1, 2, 1),
        "fsyncs per stop, start, stop+start, restart"
    );
}

/// Launch: the fsyncs a fresh kvd makes before it is
/// running, counted from its metrics. `spec/control-dir.md`, "The fsyncs
/// of a launch": the `holding` marker 4 (its temp file, the control dir,
/// which also makes the `lock` and `journal` names durable, the data dir
/// for the name `.steadfast`, and the data dir's parent for the data dir's
/// own name; on a thread of their own, joined before the first append is
/// acknowledged), the identity 2 (written beside the
/// `booted` append); the journal's header is made durable by its first
/// append.
/// Before: 8 (the control dir and the journal header and its directory
/// entry each had an fsync of their own). Journal appends: 1 (4 before
/// process-lifetime checkpoints were staged, 5 before writing ahead):
/// `resolving → booting` with `AttemptStarted`, written ahead, the boot's
/// progress and its four checkpoints, all made durable with `booted`.
#[test]
fn fsyncs_at_launch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let _kvd = kvd(tmp.path(), processes::free_port());
    state_is(&data, "running", 1);
    assert_eq!(
        launch_fsyncs(&data),
        (6, 1),
        "control-dir fsyncs and journal appends of a fresh launch"
    );
}

/// Relaunch: the fsyncs a kvd makes before it is running on a data dir a
/// clean stop left (`spec/control-dir.md`, "The fsyncs of a launch"):
/// the journal's fsync at open (the predecessor's tail made durable before
/// it is built on; no I/O after a clean stop), the `holding` marker and
/// the control dir its rename is in (a crash must read as one), and the
/// boot's one append. The data dir and its parent are not fsynced again:
/// the readable `released` marker proves their names durable.
#[test]
fn fsyncs_at_relaunch_after_a_clean_stop() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let port = processes::free_port();
    let mut first = kvd(tmp.path(), port);
    state_is(&data, "running", 1);
    let pid = rustix::process::Pid::from_child(&first.0);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    assert!(first.0.wait().expect("wait").success(), "a clean stop");
    let _again = kvd(tmp.path(), port);
    state_is(&data, "running", 1);
    assert_eq!(
        launch_fsyncs(&data),
        (3, 1),
        "control-dir fsyncs and journal appends of a relaunch after a clean stop"
    );
}

use crate::support::common;

/// In process: a one-step service under a commit window long enough never
/// to pass, so every fsync is one an outcome brought (deterministic).
mod in_process {
    use std::sync::Arc;
    use std::time::Duration;

    use steadfast::config::{ConfigSource, ResolvedConfig};
    use steadfast::protocol::lifecycle::LifecycleState;
    use steadfast::protocol::snapshot::Snapshot;
    use steadfast::supervisor::Timings;
    use steadfast::{ExitIntent, Hold, Supervisor, SupervisorHandle};
    use tokio::sync::Semaphore;

    use super::common::{Gated, until};

    fn source() -> ConfigSource {
        ConfigSource::new(|| Ok(ResolvedConfig::untracked(toml::Table::new())))
    }

    fn supervise(
        dir: &std::path::Path,
        gate: &Arc<Semaphore>,
        window: Duration,
    ) -> (tokio::task::JoinHandle<ExitIntent>, SupervisorHandle) {
        let (supervisor, handle) = Supervisor::builder(dir, Gated(Arc::clone(gate)))
            .config(source())
            .timings(Timings {
                commit_window: window,
                ..super::common::test_timings()
            })
            .build()
            .expect("starts");
        (tokio::spawn(supervisor.run()), handle)
    }

    /// The journal's fsyncs so far, from the supervisor's own metrics.
    fn fsyncs(handle: &SupervisorHandle) -> u64 {
        let text = handle.metrics();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("steadfast_journal_fsync_duration_seconds_count ")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no fsync count in {text}")) as u64
    }

    fn running(s: &Snapshot) -> bool {
        matches!(s.lifecycle, LifecycleState::Running { .. })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_and_a_start_cost_one_fsync_each() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let gate = Arc::new(Semaphore::new(1));
        let (run, handle) = supervise(tmp.path(), &gate, Duration::from_secs(3600));
        until(&handle, "running", running).await;
        let mut last = fsyncs(&handle);
        let mut cost = || {
            let now = fsyncs(&handle);
            let cost = now - last;
            last = now;
            cost
        };

        let stopped = handle.stop(Hold::None).await.expect("stop");
        assert!(
            matches!(stopped.lifecycle, LifecycleState::Stopped { .. }),
            "a stop is answered once stopped: {:?}",
            stopped.lifecycle
        );
        let stop = cost();
        let started = handle.start().await.expect("start");
        // Answered once its record is durable: with the boot's outcome.
        assert!(running(&started), "{:?}", started.lifecycle);
        let start = cost();
        let restarted = handle.restart().await.expect("restart");
        assert!(running(&restarted), "{:?}", restarted.lifecycle);
        let restart = cost();
        // Before writing ahead: 2, 2 and 3 (each transition into a drain or
        // a boot had an fsync of its own before its effect began).
        assert_eq!(
            (stop, start, restart),
            (1, 1, 1),
            "fsyncs per stop, start and restart of a one-step service"
        );
        handle.exit(ExitIntent::Halt).await.expect("exit");
        run.await.expect("run");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_boot_is_published_when_its_window_passes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let gate = Arc::new(Semaphore::new(1));
        let (run, handle) = supervise(tmp.path(), &gate, Duration::from_millis(2));
        until(&handle, "running", running).await;
        handle.stop(Hold::None).await.expect("stop");
        // The boot's one step now waits until the test lets it go.
        let held = Arc::clone(&gate).acquire_owned().await.expect("permit");
        let started = handle.start().await.expect("start");
        assert!(
            matches!(started.lifecycle, LifecycleState::Booting { .. }),
            "answered while the step still runs: {:?}",
            started.lifecycle
        );
        // What was answered is on disk: the journal holds the start.
        let journal = steadfast_actors::control_dir::read_journal(
            &tmp.path().join(".steadfast").join("journal"),
        )
        .expect("journal reads");
        let starts = journal
            .iter()
            .filter(|r| {
                matches!(r, steadfast::protocol::journal::Record::Transition { event, .. } if event == "start")
            })
            .count();
        assert!(
            starts >= 2,
            "the answered start is in the journal: {journal:?}"
        );
        drop(held);
        until(&handle, "running after the step", running).await;
        handle.exit(ExitIntent::Halt).await.expect("exit");
        run.await.expect("run");
    }
}
