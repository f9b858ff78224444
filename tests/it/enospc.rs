//! A full disk, through real processes and real files:
//! kvd runs with its data dir on a small tmpfs of its own, a filler file
//! takes every free page, and the tests check what a full disk may and may
//! not do: a write that could not be made durable is answered `ERR` (never
//! `OK`), the next write after space returns starts from a clean record
//! boundary, every `OK` reads back after a relaunch, a key answered `ERR`
//! never holds garbage, and the daemon recovers without a relaunch.
//!
//! The tmpfs is mounted by the test (`mount -t tmpfs`, which needs root, as
//! these tests run here) and unmounted by a drop guard. A tmpfs gives
//! ENOSPC exactly where a real disk does for these writes: a write that
//! needs a page the file system no longer has gets as far as the pages it
//! has (a short write) and then fails with ENOSPC. tmpfs's fsync never
//! fails, so the failed-fsync path is checked by the `control_dir` unit
//! tests (`JournalFile` over a sink that fails on purpose). If the mount is
//! refused (not root, no tmpfs), each test falls back to a file-size limit
//! for the child (`sh -c 'trap "" XFSZ; ulimit -f N; exec kvd …'`), where
//! "space returns" is a smaller write that fits under the limit once the
//! failed write's fragment is cut back.
//!
//! Tests:
//! - `an_acknowledged_set_survives_a_full_disk_and_a_relaunch`: kvd's
//!   `store.log`. Before the fix: the `SET` after the failed one was
//!   answered `OK` and read back `NOT_FOUND` after a relaunch (1 of 10
//!   acknowledged writes lost), and the `ERR` key held garbage; after: 0
//!   of 10.
//! - `a_fragment_mid_log_is_never_read_as_a_record`: kvd's replay of a
//!   hand-made log. Before the fix: the fragment and the line after it read
//!   as one record (the `ERR` key held `xxx…S k2 v2`, `k2` was
//!   `NOT_FOUND`).
//! - `a_real_journal_on_a_full_disk_keeps_exactly_its_acknowledged_records`:
//!   `JournalFile` over a real file. Before the fix: every append after the
//!   first failure was refused (poisoned).
//! - `a_journal_append_that_hit_enospc_recovers_without_a_relaunch`: the
//!   control directory's journal. Before the fix: once an append failed,
//!   every later command was refused (`journal … is poisoned`) until the
//!   process was relaunched, and a `stop` answered `not durable` had been
//!   carried out anyway (running → stopped).
//! - `an_override_write_error_clears_at_the_next_write`: the snapshot's
//!   `error` (`spec/control.md`, "The snapshot's error"). Before the fix:
//!   the override tier's ENOSPC stayed through every later successful
//!   `config set` / `unset`, stop/start and reload, until a relaunch.
//! - `a_config_error_clears_once_the_file_is_restored`: before the fix, a
//!   declared file that did not resolve while running left its error
//!   after the file was restored and the runtime booted again with it.

use crate::support::processes;

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use processes::{PATIENCE, ctl, free_port, kv, status, until};

/// Where the data dir lives: a tmpfs of its own, or (fallback) an ordinary
/// directory with a file-size limit on the child.
struct Disk {
    _tmp: tempfile::TempDir,
    /// The test's own directory (config, logs): never on the small disk.
    dir: PathBuf,
    /// The mount point (or, in the fallback, a plain directory).
    mnt: PathBuf,
    /// Whether `mnt` is a tmpfs this guard unmounts.
    mounted: bool,
}

impl Disk {
    /// A tmpfs of `size` bytes, or the fallback if mounting is refused.
    fn new(size: u64) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mnt = dir.join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0700"))
            .arg("tmpfs")
            .arg(&mnt)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("mount -t tmpfs was refused: falling back to a file-size limit");
        }
        Self {
            _tmp: tmp,
            dir,
            mnt,
            mounted,
        }
    }

    /// Take every free page: a filler file written until ENOSPC. Returns
    /// the filler's path (remove it to free the space). A no-op in the
    /// fallback (the limit is per file).
    fn fill(&self) -> PathBuf {
        let path = self.mnt.join("filler");
        if !self.mounted {
            return path;
        }
        let mut file = File::create(&path).expect("filler");
        for chunk in [1 << 16, 4096, 1] {
            let bytes = vec![0u8; chunk];
            while file.write_all(&bytes).is_ok() {}
        }
        path
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// A kvd child, killed (if still running) on drop.
struct Kvd {
    child: Child,
    data: PathBuf,
}

impl Drop for Kvd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In the fallback, no file of kvd may grow past this many 512-byte blocks.
const FSIZE_BLOCKS: u64 = 64;

/// kvd on `disk`'s data dir, serving `port`, running.
fn start_kvd(disk: &Disk, port: u16, run: u32) -> Kvd {
    let kvd = spawn_kvd(disk, port, run);
    until(&kvd.data, "kvd running", |s| {
        s["lifecycle"]["state"] == "running"
    });
    kvd
}

/// kvd on `disk`'s data dir, serving `port`, as soon as it is spawned.
fn spawn_kvd(disk: &Disk, port: u16, run: u32) -> Kvd {
    let data = disk.mnt.join("data");
    let config = disk.dir.join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let kvd = processes::example("kvd");
    let log = File::create(disk.dir.join(format!("kvd-{run}.log"))).expect("log");
    let mut command = if disk.mounted {
        Command::new(&kvd)
    } else {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(format!(
                "trap '' XFSZ; ulimit -f {FSIZE_BLOCKS}; exec \"$0\" \"$@\""
            ))
            .arg(&kvd);
        sh
    };
    command
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let child = command.spawn().expect("kvd starts");
    Kvd { child, data }
}

/// Ask kvd to exit and wait for it.
fn exit(mut kvd: Kvd) {
    let _ = ctl(&kvd.data, &["exit"]);
    assert_eq!(
        processes::wait_exit(&mut kvd.child),
        Some(steadfast::daemon::EXIT_HALT),
        "kvd exits 80 (halt)"
    );
}

/// kvd's `Store` invariants (`examples/kvd/main.rs`): a `SET` that
/// hits a full disk is answered `ERR` and leaves no fragment the next `SET`
/// is appended after; once space returns `SET` is answered `OK` again
/// (without a relaunch), and after a relaunch every `OK` reads back and the
/// `ERR` key is absent or holds exactly what was sent, never garbage.
#[test]
fn an_acknowledged_set_survives_a_full_disk_and_a_relaunch() {
    let disk = Disk::new(1 << 20);
    let port = free_port();
    let kvd = start_kvd(&disk, port, 1);
    // (key, value, answer) of every write, in order.
    let mut writes: Vec<(String, String, String)> = Vec::new();
    let mut set = |key: String, value: String| {
        let answer = kv(port, &format!("SET {key} {value}"));
        writes.push((key, value, answer.clone()));
        answer
    };
    for n in 0..5 {
        assert_eq!(set(format!("before-{n}"), format!("v{n}")), "OK");
    }
    let filler = disk.fill();
    // Larger than the free room of the log's last page (tmpfs) or than the
    // file-size limit (fallback): a short write, then ENOSPC (or EFBIG).
    let big = "x".repeat(if disk.mounted { 12_000 } else { 40_000 });
    let failed = set("full".into(), big);
    assert!(
        failed.starts_with("ERR"),
        "a write to a full disk: {failed}"
    );
    let _ = std::fs::remove_file(&filler);
    // Space is back: the next writes are durable and acknowledged, with no
    // relaunch.
    for n in 0..5 {
        let answer = set(format!("after-{n}"), format!("w{n}"));
        assert_eq!(answer, "OK", "a write after space returned");
    }
    let running: Vec<String> = writes
        .iter()
        .map(|(key, _, _)| kv(port, &format!("GET {key}")))
        .collect();
    exit(kvd);

    let kvd = start_kvd(&disk, port, 2);
    let (mut lost, mut garbage) = (0, 0);
    for ((key, value, answer), before) in writes.iter().zip(&running) {
        let read = kv(port, &format!("GET {key}"));
        if answer == "OK" {
            if read != *value {
                lost += 1;
                eprintln!(
                    "acknowledged {key} reads back {read:.40} (before the relaunch: {before:.40})"
                );
            }
        } else if read != "NOT_FOUND" && read != *value {
            garbage += 1;
            eprintln!("{key}, answered {answer:.60}, holds garbage: {read:.60}");
        }
    }
    let acknowledged = writes.iter().filter(|(_, _, a)| a == "OK").count();
    eprintln!(
        "acknowledged writes lost after ENOSPC: {lost} of {acknowledged}; refused keys holding garbage: {garbage}"
    );
    assert_eq!(lost, 0, "acknowledged writes lost after ENOSPC");
    assert_eq!(garbage, 0, "keys answered ERR holding garbage");
    exit(kvd);
}

/// A fragment in the middle of `store.log` (a write that
/// failed part-way, then a good line appended after it, as kvd did before
/// it cut fragments back) is never read as a record, and the record after
/// it is kept; a line of the older unframed format still reads; a damaged
/// line that holds no whole record refuses the replay (held, naming the
/// file and the byte offset) and leaves the file alone.
#[test]
fn a_fragment_mid_log_is_never_read_as_a_record() {
    let disk = Disk::new(1 << 20);
    let port = free_port();
    let kvd = start_kvd(&disk, port, 1);
    assert_eq!(kv(port, &format!("SET k1 {}", "x".repeat(100))), "OK");
    assert_eq!(kv(port, "SET k2 v2"), "OK");
    exit(kvd);
    let log = disk.mnt.join("data").join("store.log");
    let text = std::fs::read(&log).expect("store.log");
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    let [first, second] = lines[..] else {
        panic!("two lines: {:?}", String::from_utf8_lossy(&text));
    };
    let mut damaged = first[..first.len() / 2].to_vec();
    damaged.extend_from_slice(second);
    damaged.extend_from_slice(b"S k3 v3\n");
    std::fs::write(&log, &damaged).expect("write the log");

    let kvd = start_kvd(&disk, port, 2);
    let k1 = kv(port, "GET k1");
    assert_eq!(k1, "NOT_FOUND", "the fragment was read as a record");
    assert_eq!(kv(port, "GET k2"), "v2", "the record after the fragment");
    assert_eq!(kv(port, "GET k3"), "v3", "a line of the older format");
    exit(kvd);

    // A flipped byte in the framed line, with no whole record in it.
    let mut flipped = second.to_vec();
    let at = flipped.len() - 2;
    flipped[at] ^= 0x01;
    std::fs::write(&log, &flipped).expect("write the log");
    let kvd = spawn_kvd(&disk, port, 3);
    let s = until(&kvd.data, "the replay refused", |s| {
        s["lifecycle"]["state"] == "failed"
    });
    let shown = s.to_string();
    assert!(
        shown.contains("store.log") && shown.contains("at byte 0 is damaged"),
        "the refusal names the file and the offset: {shown}"
    );
    assert_eq!(
        s["lifecycle"]["retry"]["class"], "hold",
        "held, not retried: {shown}"
    );
    assert_eq!(std::fs::read(&log).expect("log"), flipped, "left as it is");
    exit(kvd);
}

/// `spec/control-dir.md` "Writing", on a real file: appends to the journal
/// on a full disk fail (a short write, then ENOSPC) and are not counted;
/// once space returns the next append cuts the fragment back and succeeds,
/// and a reopen finds exactly the acknowledged records and a clean end (no
/// torn tail to repair, nothing corrupt).
#[test]
fn a_real_journal_on_a_full_disk_keeps_exactly_its_acknowledged_records() {
    use steadfast::protocol::journal::Record;
    use steadfast_actors::control_dir::{ControlDir, Recovery};
    let disk = Disk::new(1 << 20);
    if !disk.mounted {
        eprintln!("no tmpfs: space cannot return under a file-size limit; skipped");
        return;
    }
    let data = disk.mnt.join("data");
    let control = ControlDir::open(&data).expect("open the control dir");
    let (mut journal, _, _) = control.open_journal().expect("open the journal");
    let record = |n: u32| Record::CheckpointCleared {
        step: format!("step-{n}-{}", "s".repeat(200)),
    };
    let mut acknowledged = Vec::new();
    for n in 0..3 {
        journal.append(&[record(n)]).expect("an append with space");
        acknowledged.push(record(n));
    }
    let filler = disk.fill();
    let mut failures = 0;
    for n in 3..100 {
        match journal.append(&[record(n)]) {
            Ok(()) => acknowledged.push(record(n)),
            Err(_) => failures += 1,
        }
    }
    assert!(failures > 0, "the full disk refused an append");
    std::fs::remove_file(&filler).expect("free the space");
    journal
        .append(&[record(100)])
        .expect("an append after space returned");
    acknowledged.push(record(100));
    assert!(!journal.is_poisoned());
    drop(journal);
    drop(control);

    let control = ControlDir::open(&data).expect("reopen the control dir");
    let (_, records, recovery) = control.open_journal().expect("reopen the journal");
    assert_eq!(recovery, Recovery::Clean, "no fragment was left to repair");
    assert_eq!(records, acknowledged, "exactly the acknowledged records");
    eprintln!(
        "{} appends acknowledged, {failures} refused on the full disk",
        acknowledged.len()
    );
}

/// `spec/control-dir.md` "Writing": a command whose
/// journal append hits a full disk is refused with a durability error (and
/// not adopted); once space returns, the next commands succeed in the same
/// process, the runtime comes back, and the snapshot's `error` clears.
#[test]
fn a_journal_append_that_hit_enospc_recovers_without_a_relaunch() {
    let disk = Disk::new(1 << 20);
    if !disk.mounted {
        // Under a file-size limit the journal cannot grow again once at the
        // limit, so there is no "space returns" for it: nothing to check.
        eprintln!("no tmpfs: the journal's recovery needs space to return; skipped");
        return;
    }
    let port = free_port();
    let kvd = start_kvd(&disk, port, 1);
    let pid = status(&kvd.data).expect("status")["pid"].clone();
    let filler = disk.fill();
    // Each stop/start journals a few records; within a page's worth of
    // them one append needs a page the disk no longer has.
    let mut failure = None;
    for _ in 0..200 {
        for command in ["stop", "start"] {
            // Settled first (a boot or drain in flight would move the state
            // on its own).
            let before = until(&kvd.data, "a settled state", |s| {
                ["running", "stopped", "failed"]
                    .contains(&s["lifecycle"]["state"].as_str().unwrap_or_default())
            })["lifecycle"]["state"]
                .clone();
            let out = ctl(&kvd.data, &adopted_only(command));
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if !out.status.success() && stderr.contains("not durable") {
                // Not adopted: the command's transition was not fsynced
                // (`failed` may move on by its own retry timer).
                let after = status(&kvd.data).expect("status")["lifecycle"]["state"].clone();
                if before != "failed" {
                    assert_eq!(after, before, "{command} was adopted without its record");
                }
                failure = Some(stderr);
                break;
            }
        }
        if failure.is_some() {
            break;
        }
    }
    let failure = failure.expect("a command met the full disk");
    eprintln!("refused on the full disk: {}", failure.trim());
    let during = status(&kvd.data).expect("status");
    let error = during["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("No space left on device"),
        "the snapshot's error says what happened: {error:?}"
    );
    std::fs::remove_file(&filler).expect("free the space");

    // Space is back. Whatever state the refusal left, `stop` (if running)
    // then `start` bring the runtime up, in the same process.
    let deadline = Instant::now() + PATIENCE;
    let mut answers = Vec::new();
    loop {
        let s = status(&kvd.data).expect("status");
        let state = s["lifecycle"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if state == "running" && answers.iter().any(|(c, ok)| *c == "start" && *ok) {
            break;
        }
        let command = match state.as_str() {
            "running" | "failed" | "booting" => "stop",
            "draining" => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            _ => "start",
        };
        let out = ctl(&kvd.data, &adopted_only(command));
        let ok = out.status.success();
        if !ok {
            eprintln!(
                "{command} after space returned: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        answers.push((command, ok));
        assert!(
            Instant::now() < deadline && answers.len() < 20,
            "no recovery without a relaunch: {answers:?}; last status {s:#?}"
        );
        if command == "start" {
            assert!(ok, "start after space returned was refused");
            until(&kvd.data, "running again", |s| {
                s["lifecycle"]["state"] == "running"
            });
        }
    }
    let after = status(&kvd.data).expect("status");
    assert_eq!(after["pid"], pid, "the same process: no relaunch");
    assert!(
        after["error"].is_null(),
        "the error clears once repaired: {}",
        after["error"]
    );
    assert_eq!(kv(port, "SET k v"), "OK", "kvd serves again");
    eprintln!("commands after space returned: {answers:?}");
    exit(kvd);
    // The journal the process wrote across the failure reopens cleanly (a
    // fragment followed by records would be refused as corruption).
    let kvd = start_kvd(&disk, port, 2);
    let out = ctl(&kvd.data, &["journal", "--json"]);
    assert!(
        out.status.success(),
        "the journal reads back: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exit(kvd);
}

/// The status record (`actors/src/status_record.rs`) on a full disk: a
/// rewrite that needs a page the disk no longer has fails nothing. The
/// daemon keeps running and answering, the record is left unusable (empty:
/// `steadfastctl` asks the daemon instead), the failure is logged once, and
/// once space returns the next publish writes a whole record again.
#[test]
fn a_full_disk_leaves_the_status_record_unusable_not_the_daemon() {
    use steadfast::protocol::status_record;
    let disk = Disk::new(1 << 20);
    if !disk.mounted {
        eprintln!("no tmpfs: the record's rewrite is within the file-size limit; skipped");
        return;
    }
    let port = free_port();
    let kvd = start_kvd(&disk, port, 1);
    let pid = status(&kvd.data).expect("status")["pid"].clone();
    let record = kvd.data.join(".steadfast").join("status");
    let whole = |bytes: &[u8]| {
        status_record::decode(bytes)
            .ok()
            .and_then(|(_, body)| serde_json::from_slice::<serde_json::Value>(body).ok())
            .is_some_and(|snapshot| snapshot["pid"] == pid)
    };
    assert!(whole(&std::fs::read(&record).expect("the record")));
    // The record's page given back, then every free page taken: its next
    // rewrite needs a page there is none of.
    File::options()
        .write(true)
        .open(&record)
        .and_then(|file| file.set_len(0))
        .expect("empty the record");
    let filler = disk.fill();
    // Any publish rewrites it: the stop's own, or its refusal's error.
    let out = ctl(&kvd.data, &["stop"]);
    eprintln!(
        "stop on the full disk: {:?} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let bytes = std::fs::read(&record).expect("the record's name is still there");
    assert!(!whole(&bytes), "no usable record on the full disk");
    assert!(bytes.is_empty(), "left empty, {} bytes", bytes.len());
    let during = status(&kvd.data).expect("the daemon answers");
    assert_eq!(during["pid"], pid, "the same daemon, still running");

    std::fs::remove_file(&filler).expect("free the space");
    let deadline = Instant::now() + PATIENCE;
    while !whole(&std::fs::read(&record).unwrap_or_default()) {
        assert!(
            Instant::now() < deadline,
            "the record was never written again"
        );
        let s = status(&kvd.data).expect("status");
        let command = if s["lifecycle"]["state"] == "stopped" {
            "start"
        } else {
            "stop"
        };
        let _ = ctl(&kvd.data, &adopted_only(command));
        std::thread::sleep(Duration::from_millis(50));
    }
    until(&kvd.data, "a settled state", |s| {
        s["lifecycle"]["state"] != "draining"
    });
    let log = std::fs::read_to_string(disk.dir.join("kvd-1.log")).expect("log");
    let warned = log
        .lines()
        .filter(|line| line.contains("the status record could not be written"))
        .count();
    assert_eq!(warned, 1, "logged once: {log}");
    exit(kvd);
}

/// `spec/control.md`, "The snapshot's error": a `config set` whose
/// override-tier write hits a full disk is refused with the error, which
/// the snapshot shows; once space returns, the next `config set` that is
/// written clears it (and only then: a stop/start before it leaves it).
#[test]
fn an_override_write_error_clears_at_the_next_write() {
    let disk = Disk::new(1 << 20);
    if !disk.mounted {
        eprintln!("no tmpfs: the override tier's write fits under the file-size limit; skipped");
        return;
    }
    let port = free_port();
    let kvd = start_kvd(&disk, port, 1);
    let filler = disk.fill();
    let mut refused = None;
    for n in 0..50 {
        // A value long enough to need a page the disk no longer has.
        let value = format!("{}", 100 + n);
        let out = ctl(&kvd.data, &["config", "set", "max_connections", &value]);
        if !out.status.success() {
            refused = Some(String::from_utf8_lossy(&out.stderr).into_owned());
            break;
        }
    }
    let refused = refused.expect("a config set met the full disk");
    eprintln!("refused on the full disk: {}", refused.trim());
    let during = status(&kvd.data).expect("status");
    let error = during["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("override tier") && error.contains("No space left on device"),
        "the snapshot's error says what happened: {error:?}"
    );
    std::fs::remove_file(&filler).expect("free the space");
    // Other operations that succeed leave the override tier's error.
    for command in ["stop", "start"] {
        let out = ctl(&kvd.data, &[command]);
        assert!(out.status.success(), "{command} with space back");
        until(&kvd.data, "settled", |s| {
            ["running", "stopped"].contains(&s["lifecycle"]["state"].as_str().unwrap_or_default())
        });
    }
    let after_start = status(&kvd.data).expect("status");
    assert!(
        after_start["error"]
            .as_str()
            .is_some_and(|e| e.contains("override tier")),
        "not cleared by another operation: {}",
        after_start["error"]
    );
    let out = ctl(&kvd.data, &["config", "set", "max_connections", "64"]);
    assert!(
        out.status.success(),
        "config set with space back: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = status(&kvd.data).expect("status");
    assert!(
        after["error"].is_null(),
        "the next override write clears its error: {}",
        after["error"]
    );
    let out = ctl(&kvd.data, &["config", "unset", "max_connections"]);
    assert!(out.status.success(), "config unset");
    assert!(status(&kvd.data).expect("status")["error"].is_null());
    exit(kvd);
}

/// `spec/control.md`, "The snapshot's error": a declared file that does
/// not parse while kvd runs is a config change not applied (the snapshot's
/// `error`); stopped, the file restored and started again, the runtime
/// runs the restored config and the error is gone. The declared file is
/// not on the small disk (no disk is filled here).
#[test]
fn a_config_error_clears_once_the_file_is_restored() {
    let disk = Disk::new(1 << 20);
    let port = free_port();
    let kvd = start_kvd(&disk, port, 1);
    let config = disk.dir.join("kvd.toml");
    let good = std::fs::read_to_string(&config).expect("the config");
    std::fs::write(&config, "listen_addr = [unclosed\n").expect("break the config");
    let broken = until(&kvd.data, "the change not applied", |s| {
        s["error"]
            .as_str()
            .is_some_and(|e| e.contains("a config change was not applied"))
    });
    eprintln!("while broken: {}", broken["error"]);
    assert_eq!(broken["lifecycle"]["state"], "running", "kvd keeps serving");
    let out = ctl(&kvd.data, &["stop"]);
    assert!(out.status.success(), "stop");
    std::fs::write(&config, &good).expect("restore the config");
    let out = ctl(&kvd.data, &["start"]);
    assert!(out.status.success(), "start");
    let s = until(&kvd.data, "running again", |s| {
        s["lifecycle"]["state"] == "running"
    });
    assert!(
        s["error"].is_null(),
        "the runtime runs the restored file: its error is gone: {}",
        s["error"]
    );
    assert_eq!(kv(port, "SET k v"), "OK", "kvd serves");
    exit(kvd);
}

/// `command`'s arguments for a test of whether the daemon adopted it: a
/// `start` returns once taken (`--no-block`), not once its boot settled
/// (a boot on a full disk may fail, and that is not the command's answer).
fn adopted_only(command: &str) -> Vec<&str> {
    if command == "start" {
        vec![command, "--no-block"]
    } else {
        vec![command]
    }
}
