//! kvd's compaction of `store.log` into `store.snapshot` and a fresh log
//! (`examples/kvd/main.rs`, module doc "Compaction"), through real kvd
//! processes, real files and real fsyncs:
//!
//! - `every_acknowledged_set_survives_a_kill_at_each_step_of_a_compaction`:
//!   kvd built with the cargo feature `failpoints` is killed with `SIGKILL`
//!   at each step of a compaction (its first, and its second), relaunched
//!   over the same data dir, and must answer every acknowledged `SET` with
//!   its latest value (or the one `SET` in flight at the kill, never
//!   anything else); it then compacts again from what the kill left, and a
//!   third launch reads the same.
//! - `replay_after_compaction_is_bounded`: after many `SET`s over few keys,
//!   `store.log` holds at most the threshold's lines and the snapshot one
//!   entry per key, both private; a relaunch reads them back.
//! - `a_failed_compaction_leaves_the_store_serving_and_is_tried_again`: a
//!   directory planted at the snapshot's temp name fails every compaction;
//!   kvd serves on, and compacts once it is gone.
//! - `compactions_during_an_overlap_replacement_lose_no_write`: the
//!   incumbent and its candidate share the log while both serve, each
//!   compacting every few writes; the one that did not compact follows the
//!   other's seal (no write refused, none lost).
//! - `a_compaction_threshold_of_zero_is_held_naming_the_leaf` and
//!   `a_store_snapshot_symlink_is_refused`: bad input is refused, clearly.

use crate::support::processes;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use processes::{PATIENCE, ctl, free_port, kv, until, wait_exit};

/// Every failpoint of kvd's compaction, in the order a compaction reaches
/// them (`examples/kvd/main.rs`, `write_snapshot`, `compact_once`,
/// `Store::start_new_log_locked`).
const POINTS: &[&str] = &[
    // Half of the snapshot's temp file written.
    "kvd.compact.snapshot_mid_write",
    // The temp file written, not fsynced.
    "kvd.compact.snapshot_before_fsync",
    // Fsynced, not renamed to `store.snapshot`.
    "kvd.compact.snapshot_before_rename",
    // Renamed, the dir not fsynced.
    "kvd.compact.snapshot_before_dir_fsync",
    // The snapshot durable, the fresh log not begun.
    "kvd.compact.before_new_log",
    // The fresh log's temp file written, not fsynced.
    "kvd.compact.log_before_fsync",
    // Fsynced, the old log not sealed.
    "kvd.compact.log_before_seal",
    // Sealed, the fresh log not renamed over `store.log`.
    "kvd.compact.log_before_rename",
    // Renamed, the dir not fsynced.
    "kvd.compact.log_before_dir_fsync",
    // All done.
    "kvd.compact.done",
];

/// The compaction threshold of the crash test: a compaction every few
/// `SET`s.
const THRESHOLD: u64 = 8;

fn running(s: &serde_json::Value) -> bool {
    s["lifecycle"]["state"] == "running"
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("the file exists")
        .permissions()
        .mode()
        & 0o777
}

/// A kvd process over `dir/data`, its stderr in `dir/kvd-<run>.log`.
struct Kvd {
    dir: PathBuf,
    child: Child,
    run: u32,
}

impl Kvd {
    /// `binary` on `dir/data` with `compact_after_records = threshold`,
    /// running (`crash_at` arms a failpoint: `STEADFAST_CRASH_AT`).
    fn start(
        binary: &Path,
        dir: &Path,
        run: u32,
        port: u16,
        threshold: u64,
        crash_at: Option<&str>,
    ) -> Self {
        let data = dir.join("data");
        let config = dir.join("kvd.toml");
        std::fs::write(
            &config,
            format!("listen_addr = \"127.0.0.1:{port}\"\ncompact_after_records = {threshold}\n"),
        )
        .expect("config");
        let log = std::fs::File::create(dir.join(format!("kvd-{run}.log"))).expect("log");
        let mut command = Command::new(binary);
        command
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .env_remove(steadfast_actors::failpoint::ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if let Some(point) = crash_at {
            command.env(steadfast_actors::failpoint::ENV, point);
        }
        let child = command.spawn().expect("kvd starts");
        until(&data, "running", running);
        Self {
            dir: dir.to_path_buf(),
            child,
            run,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("kvd-{}.log", self.run))).unwrap_or_default()
    }

    /// `steadfastctl exit`: kvd drains and exits 80.
    fn exit(mut self) {
        let _ = ctl(&self.dir.join("data"), &["exit"]);
        assert_eq!(
            wait_exit(&mut self.child),
            Some(steadfast::daemon::EXIT_HALT),
            "kvd exits 80 (halt): {}",
            self.stderr()
        );
    }
}

impl Drop for Kvd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One request; `None` if kvd cannot be reached or closes unanswered (it
/// died).
fn try_kv(port: u16, line: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(PATIENCE)).ok()?;
    stream.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).ok()?;
    (!answer.is_empty()).then(|| answer.trim_end().to_owned())
}

/// What the client knows: the last acknowledged value of each key, and the
/// one `SET` sent but never answered (it may or may not be durable).
#[derive(Default)]
struct Known {
    acked: BTreeMap<String, String>,
    in_flight: Option<(String, String)>,
}

impl Known {
    /// `SET`s `k0`…`k4` in turn, values counting from `first`, until `count`
    /// were answered `OK` or kvd stops answering; `false` then.
    fn sets(&mut self, port: u16, first: u32, count: u32) -> bool {
        for i in first..first + count {
            let (key, value) = (format!("k{}", i % 5), format!("v{i}"));
            match try_kv(port, &format!("SET {key} {value}")).as_deref() {
                Some("OK") => {
                    self.acked.insert(key, value);
                }
                Some(other) => panic!("SET {key} {value} answered {other:?}"),
                None => {
                    self.in_flight = Some((key, value));
                    return false;
                }
            }
        }
        true
    }

    /// Every key reads back as acknowledged, or as the `SET` in flight at
    /// the kill; a key never acknowledged reads as that `SET` or not at all.
    fn check(&self, port: u16, what: &str) {
        for key in (0..5).map(|k| format!("k{k}")) {
            let got = kv(port, &format!("GET {key}"));
            let acked = self.acked.get(&key).map_or("NOT_FOUND", String::as_str);
            let in_flight = self
                .in_flight
                .as_ref()
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str());
            assert!(
                got == acked || Some(got.as_str()) == in_flight,
                "[{what}] GET {key} = {got:?}: acknowledged {acked:?}, in flight {in_flight:?}"
            );
        }
    }
}

/// The lines of `data/name` (empty if missing).
fn lines(data: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(data.join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The body of a framed line (`crc32c` in hex, a space, the body).
fn body(line: &str) -> &str {
    line.get(9..).unwrap_or("")
}

/// Wait until `store.log` is of a generation past `after` (a compaction
/// ran) and holds at most `max_lines` lines; its generation.
fn until_compacted(data: &Path, after: u64, max_lines: usize, stderr: impl Fn() -> String) -> u64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let generation = generation(data);
        let log = lines(data, "store.log");
        if generation > after && log.len() <= max_lines {
            return generation;
        }
        assert!(
            Instant::now() < deadline,
            "no compaction past generation {after}: store.log is {log:?}; kvd said {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The generation `store.log` says (0 without a header).
fn generation(data: &Path) -> u64 {
    lines(data, "store.log")
        .first()
        .and_then(|line| body(line).strip_prefix("log "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn every_acknowledged_set_survives_a_kill_at_each_step_of_a_compaction() {
    let binary = processes::example_with_features("kvd", "failpoints");
    for point in POINTS {
        for nth in [1, 2] {
            let what = format!("{point}:{nth}");
            let tmp = tempfile::tempdir().expect("tempdir");
            let data = tmp.path().join("data");
            let port = free_port();
            let mut known = Known::default();

            // Written to until the failpoint kills it.
            let mut killed = Kvd::start(&binary, tmp.path(), 1, port, THRESHOLD, Some(&what));
            let answered_all = known.sets(port, 0, 40 * u32::try_from(THRESHOLD).expect("small"));
            let status = {
                let deadline = Instant::now() + PATIENCE;
                loop {
                    if let Some(status) = killed.child.try_wait().expect("wait") {
                        break status;
                    }
                    assert!(Instant::now() < deadline, "[{what}] kvd did not die");
                    std::thread::sleep(Duration::from_millis(20));
                }
            };
            assert_eq!(
                status.signal(),
                Some(9),
                "[{what}] kvd was not killed at its failpoint (all answered: {answered_all}): {}",
                killed.stderr()
            );

            // The relaunch reads every acknowledged write.
            let relaunched = Kvd::start(&binary, tmp.path(), 2, port, THRESHOLD, None);
            known.check(port, &format!("{what}, relaunched"));
            for name in [
                "store.log",
                "store.snapshot",
                "store.snapshot.tmp",
                "store.log.tmp",
            ] {
                if data.join(name).exists() {
                    assert_eq!(mode(&data.join(name)), 0o600, "[{what}] {name}");
                }
            }
            // It compacts again from what the kill left; the value in
            // flight is now overwritten or stays what it read.
            let before = generation(&data);
            if let Some((key, _)) = known.in_flight.take() {
                let got = kv(port, &format!("GET {key}"));
                if got != "NOT_FOUND" {
                    known.acked.insert(key, got);
                }
            }
            assert!(known.sets(port, 1000, 2 * u32::try_from(THRESHOLD).expect("small")));
            until_compacted(&data, before, usize::MAX, || relaunched.stderr());
            known.check(port, &format!("{what}, compacted after the relaunch"));
            relaunched.exit();

            let last = Kvd::start(&binary, tmp.path(), 3, port, THRESHOLD, None);
            known.check(port, &format!("{what}, third launch"));
            last.exit();
        }
    }
}

#[test]
fn replay_after_compaction_is_bounded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let port = free_port();
    let threshold = 10;
    let binary = processes::example("kvd");
    // A normal build holds no failpoint.
    let bytes = std::fs::read(&binary).expect("the kvd binary");
    assert!(
        !bytes.windows(12).any(|w| w == b"kvd.compact."),
        "a build without the failpoints feature holds kvd's failpoint names"
    );
    let kvd = Kvd::start(&binary, tmp.path(), 1, port, threshold, None);
    for i in 0..300 {
        assert_eq!(kv(port, &format!("SET k{} v{i}", i % 3)), "OK");
    }
    let max_lines = usize::try_from(threshold).expect("small");
    let generation = until_compacted(&data, 1, max_lines, || kvd.stderr());
    let snapshot = lines(&data, "store.snapshot");
    let mut keys: Vec<&str> = snapshot
        .iter()
        .skip(1)
        .filter_map(|line| body(line).strip_prefix("S "))
        .filter_map(|entry| entry.split_once(' ').map(|(key, _)| key))
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["k0", "k1", "k2"], "one entry per key: {snapshot:?}");
    assert!(
        body(&snapshot[0]).starts_with(&format!("snapshot {} ", generation - 1))
            && snapshot.len() == 4,
        "{snapshot:?}"
    );
    assert_eq!(mode(&data.join("store.snapshot")), 0o600);
    assert_eq!(mode(&data.join("store.log")), 0o600);
    kvd.exit();

    // The relaunch reads the snapshot and a log of at most `threshold`
    // lines, and has all of it.
    assert!(lines(&data, "store.log").len() <= max_lines);
    let kvd = Kvd::start(&binary, tmp.path(), 2, port, threshold, None);
    assert_eq!(kv(port, "GET k0"), "v297");
    assert_eq!(kv(port, "GET k1"), "v298");
    assert_eq!(kv(port, "GET k2"), "v299");
    assert_eq!(kv(port, "DEL k1"), "OK");
    kvd.exit();
    let kvd = Kvd::start(&binary, tmp.path(), 3, port, threshold, None);
    assert_eq!(kv(port, "GET k1"), "NOT_FOUND");
    assert_eq!(kv(port, "GET k2"), "v299");
    kvd.exit();
}

#[test]
fn a_failed_compaction_leaves_the_store_serving_and_is_tried_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    // The snapshot's temp name taken by a directory: every compaction
    // fails at its first file.
    let planted = data.join("store.snapshot.tmp");
    std::fs::create_dir(&planted).expect("plant a directory");
    let port = free_port();
    let binary = processes::example("kvd");
    let kvd = Kvd::start(&binary, tmp.path(), 1, port, 5, None);
    for i in 0..10 {
        assert_eq!(kv(port, &format!("SET k{} v{i}", i % 2)), "OK");
    }
    processes::logged("store.log compaction failed", || kvd.stderr());
    // Serving on, correct.
    assert_eq!(kv(port, "SET after 1"), "OK");
    assert_eq!(kv(port, "GET k0"), "v8");
    assert_eq!(kv(port, "GET k1"), "v9");
    assert!(!data.join("store.snapshot").exists());
    assert_eq!(generation(&data), 0);

    // Tried again: once the name is free, the compaction goes through.
    std::fs::remove_dir(&planted).expect("remove the planted directory");
    until_compacted(&data, 0, usize::MAX, || kvd.stderr());
    assert!(data.join("store.snapshot").exists());
    assert_eq!(kv(port, "GET after"), "1");
    kvd.exit();
    let kvd = Kvd::start(&binary, tmp.path(), 2, port, 5, None);
    assert_eq!(kv(port, "GET k0"), "v8");
    assert_eq!(kv(port, "GET k1"), "v9");
    assert_eq!(kv(port, "GET after"), "1");
    kvd.exit();
}

#[test]
fn a_compaction_threshold_of_zero_is_held_naming_the_leaf() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    let port = free_port();
    std::fs::write(
        &config,
        format!("listen_addr = \"127.0.0.1:{port}\"\ncompact_after_records = 0\n"),
    )
    .expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let status = until(&data, "held", |s| {
        s["lifecycle"]["state"] == "failed" && s["lifecycle"]["retry"]["class"] == "hold"
    });
    let _ = daemon.kill();
    let _ = daemon.wait();
    let error = status["lifecycle"]["report"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("compact_after_records") && error.contains("nonzero"),
        "names the leaf and the reason: {status:#}"
    );
}

/// `store.snapshot` planted as a link to a file outside the data dir: the
/// replay is refused, naming the link, and the target is left alone.
#[test]
fn a_store_snapshot_symlink_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"planted\n").expect("victim");
    std::os::unix::fs::symlink(&victim, data.join("store.snapshot")).expect("plant the link");
    let config = tmp.path().join("kvd.toml");
    let port = free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let refused = std::panic::catch_unwind(|| {
        until(&data, "the store.snapshot link refused", |s| {
            s.to_string().contains("store.snapshot is a symbolic link")
        })
    });
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(std::fs::read(&victim).expect("victim"), b"planted\n");
    assert!(
        refused.is_ok(),
        "kvd did not refuse the store.snapshot link"
    );
}

/// An overlap replacement under a stream of writes, compacting every 3
/// records: while both kvds serve, one compacts under the other, which
/// must follow the seal to the fresh log rather than take it for a
/// replaced one (a write answered `ERR`, the runtime failed). No write is
/// refused, every acknowledged one is there after the handover and after
/// a relaunch.
#[test]
fn compactions_during_an_overlap_replacement_lose_no_write() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let port = free_port();
    let incumbent = crate::replace::stamped_kvd(tmp.path(), "kvd-1", "1.0.0-incumbent");
    let candidate = crate::replace::stamped_kvd(tmp.path(), "kvd-2", "2.0.0-candidate");
    let mut kvd = Kvd::start(&incumbent, tmp.path(), 1, port, 3, None);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || {
            let (mut acked, mut refused) = (Vec::new(), Vec::new());
            let mut n = 0u32;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                match try_kv(port, &format!("SET w{n} v{n}")).as_deref() {
                    Some("OK") => acked.push(n),
                    Some(other) => refused.push(format!("w{n}: {other}")),
                    // Not yet listening, or the retiring incumbent's
                    // close: not acknowledged, nothing to check.
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            (acked, refused)
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let out = ctl(
        &data,
        &[
            "replace",
            "--binary",
            candidate.to_str().expect("utf-8"),
            "--mode",
            "overlap",
            "--setup-budget",
            "30",
            "--drain-budget",
            "30",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "replace: {} {}; kvd said {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        kvd.stderr()
    );
    assert_eq!(wait_exit(&mut kvd.child), Some(0), "{}", kvd.stderr());
    until(&data, "the candidate running", running);
    // Some writes to the candidate alone too.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let (acked, refused) = writer.join().expect("the writer");
    let log = kvd.stderr();
    assert!(
        refused.is_empty(),
        "writes refused: {refused:?}; kvd said {log}"
    );
    assert!(!log.contains("store.log lost"), "{log}");
    assert!(log.contains("store.log compacted"), "no compaction: {log}");
    eprintln!(
        "{} writes acknowledged; a kvd followed the other's compaction {} times",
        acked.len(),
        log.matches("compacted by another kvd").count()
    );
    for n in &acked {
        assert_eq!(kv(port, &format!("GET w{n}")), format!("v{n}"));
    }
    let _ = ctl(&data, &["exit"]);
    let deadline = Instant::now() + PATIENCE;
    while processes::status(&data).is_some() {
        assert!(Instant::now() < deadline, "the candidate did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }

    let relaunched = Kvd::start(&incumbent, tmp.path(), 2, port, 3, None);
    for n in &acked {
        assert_eq!(kv(port, &format!("GET w{n}")), format!("v{n}"));
    }
    relaunched.exit();
}
