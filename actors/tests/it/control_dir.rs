//! Integration tests for the control directory (`steadfast_actors::control_dir`)
//! and the store lock (`steadfast_actors::store`) over real files, locks and
//! processes in temp dirs.
//!
//! Each test cites the DESIGN.md rule it checks ("Control directory",
//! "Durability rules"). Cross-process tests re-run this test binary as the
//! other process: the `child_*` tests do nothing unless their environment
//! variable names a data dir, in which case they take a lock, print
//! `LOCKED_TOKEN` and hold it until their stdin closes.

use crate::support::nz;
use std::fs;
use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use steadfast_actors::control_dir::{
    ControlDir, ControlDirError, Identity, MarkerRead, PreviousRun, Recovery, RunMarker,
};
use steadfast_actors::fsx::UnsafePath;
use steadfast_actors::protocol::journal::{self, Record};
use steadfast_actors::protocol::lifecycle::StoreOutcome;
use steadfast_actors::store::{StoreError, StoreLock};

const HOLD_STORE_ENV: &str = "STEADFAST_TEST_HOLD_STORE";
const HOLD_CONTROL_DIR_ENV: &str = "STEADFAST_TEST_HOLD_CONTROL_DIR";
/// What a holder child prints once it holds its lock.
const LOCKED_TOKEN: &str = "steadfast-test-holder-locked";

fn record(n: u32) -> Record {
    Record::PhaseStarted {
        attempt: nz(n),
        phase: format!("phase-{n}"),
        index: n,
        total: 10,
        at_ms: u64::from(n) * 1000,
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A journal of `n` records written through the API; returns its bytes.
fn journal_with(data: &Path, n: u32) -> Vec<u8> {
    let cd = ControlDir::open(data).unwrap();
    let (mut j, records, recovery) = cd.open_journal().unwrap();
    assert!(records.is_empty());
    assert_eq!(recovery, Recovery::Fresh);
    let records: Vec<Record> = (1..=n).map(record).collect();
    j.append(&records).unwrap();
    fs::read(cd.journal_path()).unwrap()
}

/// A child holding a lock, and its stdout (kept open so the child's harness
/// can still print its result).
struct Holder {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

/// Run this test binary's `child_*` test `name` holding a lock on `data`;
/// returns once the child says it holds it.
fn spawn_holder(name: &str, env: &str, data: &Path) -> Holder {
    let name = crate::support::test_name(module_path!(), name);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(env, data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = stdout
            .next()
            .expect("child exited before it held the lock")
            .unwrap();
        // libtest prints the test's name on the same line, before it.
        if line.contains(LOCKED_TOKEN) {
            break;
        }
    }
    Holder { child, stdout }
}

/// Close the holder's stdin (it releases and exits) and wait for it.
fn release_holder(mut holder: Holder) {
    drop(holder.child.stdin.take());
    for line in holder.stdout.by_ref() {
        line.unwrap();
    }
    let status = holder.child.wait().unwrap();
    assert!(status.success(), "holder child failed: {status}");
}

fn hold_until_stdin_closes() {
    println!("{LOCKED_TOKEN}");
    std::io::stdout().flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// Not a test on its own: the store-lock holder for
/// `probe_sees_a_holder_in_another_process`.
#[test]
fn child_holds_store_lock() {
    let Some(dir) = std::env::var_os(HOLD_STORE_ENV) else {
        return;
    };
    let _lock = StoreLock::acquire(Path::new(&dir)).unwrap();
    hold_until_stdin_closes();
}

/// Not a test on its own: the control-dir holder for
/// `another_process_holding_the_control_dir_locks_it_out`.
#[test]
fn child_holds_control_dir() {
    let Some(dir) = std::env::var_os(HOLD_CONTROL_DIR_ENV) else {
        return;
    };
    let _cd = ControlDir::open(Path::new(&dir)).unwrap();
    hold_until_stdin_closes();
}

/// DESIGN.md, Control directory, `lock`: one daemon per data dir.
#[test]
fn second_open_is_locked_until_the_first_is_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let first = ControlDir::open(&data).unwrap();
    match ControlDir::open(&data) {
        Err(ControlDirError::Locked(path)) => {
            assert_eq!(path, first.lock_path());
            let msg = ControlDirError::Locked(path).to_string();
            assert!(msg.contains(".steadfast/lock"), "{msg}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(first);
    ControlDir::open(&data).unwrap();
}

/// (`cargo test --workspace`): a child forked by another thread
/// holds a copy of the lock's descriptor until its exec; a reopen meanwhile
/// must wait that copy out, not say `Locked`. The copy here is a `dup`
/// (the same open file description, as a fork's copy is), closed 50 ms
/// after the first holder is dropped. Before the fix: `Locked` at once
/// (and, under `cargo test`, reopens in this file failed intermittently
/// with `Locked` whenever another test spawned a process).
#[test]
fn a_transient_copy_of_the_lock_is_waited_out() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let first = ControlDir::open(&data).unwrap();
    let copy = first.lock_file().try_clone().unwrap();
    drop(first);
    let closer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(copy);
    });
    ControlDir::open(&data).expect("the transient holder is waited out");
    closer.join().unwrap();
}

/// The journal writer keeps the lock: no writer outlives it.
#[test]
fn a_journal_file_keeps_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (j, _, _) = cd.open_journal().unwrap();
    assert!(matches!(
        cd.open_journal(),
        Err(ControlDirError::JournalAlreadyOpen { .. })
    ));
    // Once the writer is gone the journal can be reopened (a restarted
    // Journal actor), and the new writer is again the only one.
    drop(j);
    let (j, _, _) = cd.open_journal().unwrap();
    assert!(matches!(
        cd.open_journal(),
        Err(ControlDirError::JournalAlreadyOpen { .. })
    ));
    drop(cd);
    assert!(matches!(
        ControlDir::open(tmp.path()),
        Err(ControlDirError::Locked(_))
    ));
    drop(j);
    ControlDir::open(tmp.path()).unwrap();
}

/// DESIGN.md, Control directory, `lock`: a second daemon (a process) gets
/// `Locked`.
#[test]
fn another_process_holding_the_control_dir_locks_it_out() {
    let tmp = tempfile::tempdir().unwrap();
    let child = spawn_holder("child_holds_control_dir", HOLD_CONTROL_DIR_ENV, tmp.path());
    assert!(matches!(
        ControlDir::open(tmp.path()),
        Err(ControlDirError::Locked(_))
    ));
    release_holder(child);
    ControlDir::open(tmp.path()).unwrap();
}

/// DESIGN.md, Durability rules: child processes never inherit the lock.
#[test]
fn the_lock_is_not_inherited_by_a_child() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (_j, _, _) = cd.open_journal().unwrap();
    let out = Command::new("sh")
        .args(["-c", "ls -l /proc/$$/fd"])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let listing = String::from_utf8(out.stdout).unwrap();
    // Positive control: the listing shows the child's own fds (stdout is our pipe).
    assert!(listing.contains("pipe:"), "{listing}");
    assert!(listing.contains("/dev/null"), "{listing}");
    let control = cd.path().to_str().unwrap();
    assert!(
        !listing.contains(control),
        "child inherited a control-dir fd:\n{listing}"
    );
}

/// DESIGN.md, Control directory: the dir is private, `control.sock` 0600 (the
/// socket is bound elsewhere); markers and journal are 0600.
#[test]
fn control_dir_is_0700_and_files_are_0600() {
    let tmp = tempfile::tempdir().unwrap();
    // An existing, too-open control dir is tightened.
    fs::create_dir_all(tmp.path().join(".steadfast")).unwrap();
    fs::set_permissions(
        tmp.path().join(".steadfast"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(cd.path(), ControlDir::under(tmp.path()));
    assert_eq!(mode(cd.path()), 0o700);
    let _j = cd.open_journal().unwrap();
    cd.write_run(&RunMarker::Holding { pid: 1, attempt: 1 })
        .unwrap();
    cd.set_hold().unwrap();
    cd.ensure_identity(1).unwrap();
    for path in [
        cd.lock_path(),
        cd.journal_path(),
        cd.run_path(),
        cd.hold_path(),
        cd.identity_path(),
    ] {
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
    assert_eq!(cd.socket_path(), cd.path().join("control.sock"));

    let fresh = tempfile::tempdir().unwrap();
    let nested = fresh.path().join("a/b/data");
    let cd = ControlDir::open(&nested).unwrap();
    assert_eq!(mode(cd.path()), 0o700);
}

/// DESIGN.md, Control directory, `journal`: append-only records come back.
#[test]
fn journal_round_trips_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (mut j, records, recovery) = cd.open_journal().unwrap();
    assert_eq!((records, recovery), (vec![], Recovery::Fresh));
    assert_eq!(j.len(), journal::HEADER_LEN as u64);
    let all: Vec<Record> = (1..=5).map(record).collect();
    j.append(&all[..2]).unwrap();
    j.append(&all[2..]).unwrap();
    j.append(&[]).unwrap();
    assert_eq!(j.len(), fs::metadata(cd.journal_path()).unwrap().len());
    drop((j, cd));

    let cd = ControlDir::open(tmp.path()).unwrap();
    let (mut j, records, recovery) = cd.open_journal().unwrap();
    assert_eq!(recovery, Recovery::Clean);
    assert_eq!(records, all);
    j.append(&[record(6)]).unwrap();
    drop((j, cd));
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (_, records, _) = cd.open_journal().unwrap();
    assert_eq!(records.len(), 6);
    assert_eq!(records.last(), Some(&record(6)));
}

/// DESIGN.md, Durability rules: a bad last record is a torn tail — keep a
/// `.broken` copy, truncate to the last good record, fsync.
#[test]
fn torn_tail_is_repaired_with_a_broken_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let full = journal_with(tmp.path(), 10);
    let last_frame = journal::encode_record(&record(10)).unwrap().len();
    let good_len = full.len() - last_frame;
    let cut = &full[..full.len() - last_frame / 2];
    let journal_path = ControlDir::under(tmp.path()).join("journal");
    fs::write(&journal_path, cut).unwrap();

    let cd = ControlDir::open(tmp.path()).unwrap();
    let (mut j, records, recovery) = cd.open_journal().unwrap();
    let broken = cd.path().join("journal.broken");
    assert_eq!(
        recovery,
        Recovery::RepairedTornTail {
            offset: good_len,
            broken_copy: broken.clone()
        }
    );
    assert_eq!(records, (1..=9).map(record).collect::<Vec<_>>());
    assert_eq!(fs::read(&broken).unwrap(), cut, "the copy is the original");
    assert_eq!(mode(&broken), 0o600);
    assert_eq!(fs::read(&journal_path).unwrap(), &full[..good_len]);
    assert_eq!(j.len(), good_len as u64);

    j.append(&[record(11)]).unwrap();
    drop((j, cd));
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (_, records, recovery) = cd.open_journal().unwrap();
    assert_eq!(recovery, Recovery::Clean);
    assert_eq!(records.len(), 10);
    assert_eq!(records.last(), Some(&record(11)));

    // A second repair never overwrites the first copy.
    drop(cd);
    let mut torn_again = fs::read(&journal_path).unwrap();
    torn_again.extend_from_slice(&[1, 0, 0]);
    fs::write(&journal_path, &torn_again).unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (_, _, recovery) = cd.open_journal().unwrap();
    let second = cd.path().join("journal.broken.1");
    assert!(matches!(
        recovery,
        Recovery::RepairedTornTail { ref broken_copy, .. } if *broken_copy == second
    ));
    assert_eq!(fs::read(&second).unwrap(), torn_again);
    assert_eq!(fs::read(&broken).unwrap(), cut);
}

/// A torn header (a crash while writing the first header) starts over.
#[test]
fn torn_header_is_repaired_to_a_fresh_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ControlDir::under(tmp.path());
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("journal"), b"STFDJ").unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    let (mut j, records, recovery) = cd.open_journal().unwrap();
    assert!(records.is_empty());
    assert!(matches!(
        recovery,
        Recovery::RepairedTornTail { offset: 0, .. }
    ));
    assert_eq!(
        fs::read(cd.journal_path()).unwrap(),
        journal::encode_header()
    );
    j.append(&[record(1)]).unwrap();
}

/// DESIGN.md, Durability rules: a bad record followed by good ones is
/// corruption — refuse with a clear error, never truncate.
#[test]
fn a_flipped_byte_mid_journal_is_refused_and_left_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let full = journal_with(tmp.path(), 10);
    let frame_len = |n| journal::encode_record(&record(n)).unwrap().len();
    let fifth = journal::HEADER_LEN + (1..=4).map(frame_len).sum::<usize>();
    let mut bad = full.clone();
    bad[fifth + journal::FRAME_HEADER_LEN + 2] ^= 0x40;
    let journal_path = ControlDir::under(tmp.path()).join("journal");
    fs::write(&journal_path, &bad).unwrap();

    let cd = ControlDir::open(tmp.path()).unwrap();
    match cd.open_journal() {
        Err(ControlDirError::CorruptJournal { path, offset }) => {
            assert_eq!(path, journal_path);
            assert_eq!(offset, fifth);
            let msg = ControlDirError::CorruptJournal { path, offset }.to_string();
            assert!(msg.contains(journal_path.to_str().unwrap()), "{msg}");
            assert!(msg.contains(&fifth.to_string()), "{msg}");
        }
        other => panic!("expected CorruptJournal, got {other:?}"),
    }
    assert_eq!(fs::read(&journal_path).unwrap(), bad, "left untouched");
    assert!(!cd.path().join("journal.broken").exists());
    // Refusing does not use up the one writer: it refuses again.
    assert!(matches!(
        cd.open_journal(),
        Err(ControlDirError::CorruptJournal { .. })
    ));
}

/// A file that is not a steadfast journal (or a future version) is refused,
/// naming the file.
#[test]
fn a_bad_header_is_refused_naming_the_file() {
    for header in [&b"NOTAJRNL\x01\0\0\0"[..], &b"STFDJRNL\x09\0\0\0"[..]] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = ControlDir::under(tmp.path());
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("journal"), header).unwrap();
        let cd = ControlDir::open(tmp.path()).unwrap();
        let err = cd.open_journal().unwrap_err();
        assert!(
            matches!(err, ControlDirError::BadJournalHeader { .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(dir.join("journal").to_str().unwrap()),
            "{err}"
        );
        assert_eq!(fs::read(dir.join("journal")).unwrap(), header);
    }
}

/// DESIGN.md, Control directory: `run`, `hold`, `identity` round trip.
#[test]
fn markers_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(cd.read_run().unwrap(), MarkerRead::Missing);
    for marker in [
        RunMarker::Holding {
            pid: 4242,
            attempt: 7,
        },
        RunMarker::Released {
            at_ms: 1_700_000_000_000,
            epoch: 3,
        },
    ] {
        cd.write_run(&marker).unwrap();
        assert_eq!(cd.read_run().unwrap(), MarkerRead::Valid(marker));
    }
    // No temp file is left behind.
    let names: Vec<String> = fs::read_dir(cd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

/// DESIGN.md, Durability rules: an unreadable run marker reads as crashed.
#[test]
fn a_flipped_byte_in_the_run_marker_reads_as_crashed() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    cd.write_run(&RunMarker::Released { at_ms: 5, epoch: 1 })
        .unwrap();
    let run = cd.run_path();
    drop(cd);
    let mut bytes = fs::read(&run).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    fs::write(&run, &bytes).unwrap();

    let cd = ControlDir::open(tmp.path()).unwrap();
    assert!(matches!(cd.read_run().unwrap(), MarkerRead::Unreadable(_)));
    assert_eq!(
        *cd.previous_run(),
        PreviousRun::Crashed {
            pid: None,
            attempt: None
        }
    );
    // Garbage of any size is unreadable too, not a panic.
    drop(cd);
    fs::write(&run, vec![0xAB; 100_000]).unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert!(matches!(cd.read_run().unwrap(), MarkerRead::Unreadable(_)));
}

/// DESIGN.md, Control directory, `run`: tells the next daemon first-ever /
/// clean stop / crashed.
#[test]
fn previous_run_follows_the_run_marker() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(*cd.previous_run(), PreviousRun::FirstEver);
    cd.write_run(&RunMarker::Holding {
        pid: 99,
        attempt: 2,
    })
    .unwrap();
    // previous_run is what was found at open, not what this daemon wrote.
    assert_eq!(*cd.previous_run(), PreviousRun::FirstEver);
    drop(cd);

    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(
        *cd.previous_run(),
        PreviousRun::Crashed {
            pid: Some(99),
            attempt: Some(2)
        }
    );
    cd.write_run(&RunMarker::Released {
        at_ms: 123,
        epoch: 4,
    })
    .unwrap();
    drop(cd);

    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(
        *cd.previous_run(),
        PreviousRun::CleanStop {
            at: steadfast_protocol::Timestamp(123),
            epoch: 4
        }
    );
}

/// DESIGN.md, Control directory, `hold`: present ⇒ held; start removes it.
#[test]
fn hold_set_and_clear() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert!(!cd.is_held().unwrap());
    cd.clear_hold().unwrap();
    cd.set_hold().unwrap();
    cd.set_hold().unwrap();
    assert!(cd.is_held().unwrap());
    drop(cd);
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert!(cd.is_held().unwrap(), "a hold survives relaunch");
    cd.clear_hold().unwrap();
    assert!(!cd.is_held().unwrap());
    assert!(!cd.hold_path().exists());
}

/// DESIGN.md, Control directory, `identity`: created once, outlives the
/// process.
#[test]
fn identity_is_written_once_and_stable_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(cd.identity().unwrap(), None);
    let first: Identity = cd.ensure_identity(1000).unwrap();
    assert_eq!(first.id.len(), 32);
    assert!(first.id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(first.created_at_ms, 1000);
    assert_eq!(cd.ensure_identity(2000).unwrap(), first);
    drop(cd);

    let cd = ControlDir::open(tmp.path()).unwrap();
    assert_eq!(cd.identity().unwrap(), Some(first.clone()));
    assert_eq!(cd.ensure_identity(3000).unwrap(), first);

    // Another data dir gets another identity.
    let other = tempfile::tempdir().unwrap();
    let other_id = ControlDir::open(other.path())
        .unwrap()
        .ensure_identity(1000)
        .unwrap();
    assert_ne!(other_id.id, first.id);

    // A damaged identity is reported, never replaced.
    let mut bytes = fs::read(cd.identity_path()).unwrap();
    bytes[20] ^= 0xFF;
    fs::write(cd.identity_path(), &bytes).unwrap();
    assert!(matches!(
        cd.ensure_identity(4000),
        Err(ControlDirError::BadMarker { .. })
    ));
    assert_eq!(fs::read(cd.identity_path()).unwrap(), bytes);
}

/// The store lock is exclusive and released on drop.
#[test]
fn store_lock_is_exclusive_and_released_on_drop() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StoreLock::acquire(tmp.path()).unwrap();
    assert_eq!(lock.path(), tmp.path().join("store.lock"));
    match StoreLock::acquire(tmp.path()) {
        Err(StoreError::Held(path)) => assert_eq!(path, tmp.path().join("store.lock")),
        other => panic!("expected Held, got {other:?}"),
    }
    drop(lock);
    let _again = StoreLock::acquire(tmp.path()).unwrap();
}

/// ARCHITECTURE.md: the store outcome is observed — the probe sees a holder
/// in its own process (flock locks belong to open file descriptions).
#[test]
fn probe_sees_a_holder_in_this_process() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StoreLock::acquire(tmp.path()).unwrap();
    match StoreLock::probe(tmp.path()) {
        StoreOutcome::Held { cause } => {
            assert!(cause.contains("store.lock"), "{cause}");
            assert!(cause.contains("is locked by another holder"), "{cause}");
        }
        StoreOutcome::Released => panic!("probe missed the holder"),
    }
    // The probe itself never keeps the lock: probing twice, still held.
    assert!(matches!(
        StoreLock::probe(tmp.path()),
        StoreOutcome::Held { .. }
    ));
    drop(lock);
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
    // A winning probe released the lock at once.
    let _lock = StoreLock::acquire(tmp.path()).unwrap();
}

/// The probe sees a holder in another process, and its release.
#[test]
fn probe_sees_a_holder_in_another_process() {
    let tmp = tempfile::tempdir().unwrap();
    let child = spawn_holder("child_holds_store_lock", HOLD_STORE_ENV, tmp.path());
    assert!(matches!(
        StoreLock::probe(tmp.path()),
        StoreOutcome::Held { .. }
    ));
    assert!(matches!(
        StoreLock::acquire(tmp.path()),
        Err(StoreError::Held(_))
    ));
    release_holder(child);
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
}

/// No lock file: nothing ever held the store.
#[test]
fn probe_of_a_missing_lock_file_is_released() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
    assert!(
        !tmp.path().join("store.lock").exists(),
        "probe creates nothing"
    );
}

/// The override tier is a marker like the others: written atomically
/// (0600), read back, removed when empty; a damaged one is refused naming
/// the file, never dropped ("Durability rules": nothing an operator set is
/// silently lost).
#[test]
fn the_override_tier_round_trips_and_a_damaged_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let control = ControlDir::open(tmp.path()).unwrap();
    assert!(control.read_overrides().unwrap().is_empty());
    let leaves = vec![
        ("limits.max".to_owned(), "8".to_owned()),
        ("log_level".to_owned(), "\"debug\"".to_owned()),
    ];
    control.write_overrides(&leaves).unwrap();
    assert_eq!(mode(&control.overrides_path()), 0o600);
    assert_eq!(control.read_overrides().unwrap(), leaves);

    let too_big = vec![("big".to_owned(), "x".repeat(8 * 1024))];
    assert!(matches!(
        control.write_overrides(&too_big),
        Err(ControlDirError::BadMarker { .. })
    ));
    assert_eq!(control.read_overrides().unwrap(), leaves, "unchanged");

    let mut bytes = fs::read(control.overrides_path()).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(control.overrides_path(), &bytes).unwrap();
    match control.read_overrides() {
        Err(ControlDirError::BadMarker { path, .. }) => {
            assert_eq!(path, control.overrides_path());
        }
        other => panic!("a damaged tier must be refused, got {other:?}"),
    }

    control.write_overrides(&[]).unwrap();
    assert!(!control.overrides_path().exists());
}

/// A candidate that took the data dir over from a live incumbent (a
/// replacement) opens the journal while the incumbent may be mid-append: a
/// tail that looks torn is waited out, not truncated, so the incumbent's
/// acknowledged record is not cut ("Durability rules": nothing
/// acknowledged is lost).
#[test]
fn a_handed_over_journal_waits_out_an_in_flight_append() {
    let tmp = tempfile::tempdir().unwrap();
    let incumbent = ControlDir::open(tmp.path()).unwrap();
    let (mut writer, _, _) = incumbent.open_journal().unwrap();
    writer.append(&[record(1)]).unwrap();

    // The incumbent's next frame, half on disk when the candidate opens.
    let frame = journal::encode_record(&record(2)).unwrap();
    let (first, second) = frame.split_at(frame.len() / 2);
    let path = incumbent.journal_path();
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(first).unwrap();
    let second = second.to_vec();
    let finisher = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        file.write_all(&second).unwrap();
        file.sync_all().unwrap();
    });

    let lock = incumbent.lock_file().try_clone().unwrap();
    let candidate =
        ControlDir::open_handed_over(tmp.path(), lock, Some(std::process::id())).unwrap();
    let (_writer, records, recovery) = candidate.open_journal().unwrap();
    finisher.join().unwrap();
    assert_eq!(records, vec![record(1), record(2)]);
    assert!(matches!(recovery, Recovery::Clean), "{recovery:?}");
    assert!(!candidate.path().join("journal.broken").exists());
}

/// While two processes may append (a replacement in progress, or a
/// candidate whose incumbent still lives), the journal is not compacted: a
/// rename would strand the other writer on the old file.
#[test]
fn a_shared_journal_is_not_compacted_until_it_is_ours_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let control = ControlDir::open(tmp.path()).unwrap().with_journal_keep(1);
    let (mut writer, _, _) = control.open_journal().unwrap();
    control.set_journal_shared(true);
    for attempt in 1..=5 {
        writer
            .append(&[Record::AttemptStarted {
                attempt: nz(attempt),
                at_ms: 0,
            }])
            .unwrap();
    }
    assert!(!writer.wants_compaction(), "shared: compaction waits");
    control.set_journal_shared(false);
    assert!(writer.wants_compaction(), "ours alone: it compacts");

    // A candidate whose incumbent (here: this very process) is alive.
    drop(writer);
    let lock = control.lock_file().try_clone().unwrap();
    let candidate = ControlDir::open_handed_over(tmp.path(), lock, Some(std::process::id()))
        .unwrap()
        .with_journal_keep(1);
    let (writer, records, _) = candidate.open_journal().unwrap();
    assert_eq!(records.len(), 5, "not compacted at open either");
    assert!(!writer.wants_compaction());
}

// ---------------------------------------------------------------------------
// Hostile local users. The attacker is uid/gid 65534,
// reached with `setpriv` (these tests run as root, like the daemon they
// attack). Each test plants what a user owning or able to write the data dir
// could plant, runs the daemon's open, and checks both that it is refused
// with an error naming the path and that the link's target is unchanged
// (bytes and mode).
// ---------------------------------------------------------------------------

/// The hostile user.
const NOBODY: u32 = 65534;

/// Run `sh -c script` in `dir` as uid/gid 65534, no supplementary groups.
fn as_nobody(dir: &Path, script: &str) {
    let status = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .current_dir(dir)
        .status()
        .expect("setpriv runs (the attack tests need root and setpriv)");
    assert!(
        status.success(),
        "as uid 65534 in {}: {script}",
        dir.display()
    );
}

/// A root-owned 0755 base (so uid 65534 can reach inside), the data dir
/// `data` (root, 0700), and `attacker`, a directory uid 65534 owns where its
/// link targets live.
struct Arena {
    tmp: tempfile::TempDir,
    data: std::path::PathBuf,
    attacker: std::path::PathBuf,
}

fn arena() -> Arena {
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let data = tmp.path().join("data");
    fs::create_dir(&data).unwrap();
    fs::set_permissions(&data, fs::Permissions::from_mode(0o700)).unwrap();
    let attacker = tmp.path().join("attacker");
    fs::create_dir(&attacker).unwrap();
    std::os::unix::fs::chown(&attacker, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::set_permissions(&attacker, fs::Permissions::from_mode(0o755)).unwrap();
    Arena {
        tmp,
        data,
        attacker,
    }
}

/// Let the attacker write `dir` while it plants (as if `dir` were world
/// writable for a while), then give the directory back 0700: what was
/// planted stays.
fn plant(dir: &Path, script: &str) {
    let before = fs::metadata(dir).unwrap().permissions().mode() & 0o7777;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
    as_nobody(dir, script);
    fs::set_permissions(dir, fs::Permissions::from_mode(before)).unwrap();
}

/// What a path is, without following a link at it: its mode and, for a
/// file, its bytes; for a directory, its sorted entries. `None` if missing.
fn state_of(path: &Path) -> Option<(u32, Vec<u8>, Vec<String>)> {
    let meta = fs::symlink_metadata(path).ok()?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() {
        let mut names: Vec<String> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Some((mode, Vec::new(), names))
    } else {
        Some((mode, fs::read(path).unwrap_or_default(), Vec::new()))
    }
}

/// The daemon's open of a data dir, as far as it gets: the control dir, the
/// journal, a run marker. The first error, rendered.
fn daemon_open(data: &Path) -> Result<(), String> {
    let cd = ControlDir::open(data).map_err(|e| e.to_string())?;
    let (mut journal, _, _) = cd.open_journal().map_err(|e| e.to_string())?;
    journal.append(&[record(1)]).map_err(|e| e.to_string())?;
    cd.write_run(&RunMarker::Holding { pid: 1, attempt: 1 })
        .map_err(|e| e.to_string())
}

/// A `.steadfast` planted as a link to a directory the attacker owns: it
/// was followed (the target chmodded 0700 and filled with `lock`,
/// `journal`, `run`). Now refused, naming the link; the target is as it was.
#[test]
fn a_control_dir_symlink_is_refused_and_its_target_untouched() {
    let a = arena();
    as_nobody(&a.attacker, "mkdir -m 0755 evil && echo keep > evil/file");
    let target = a.attacker.join("evil");
    let before = state_of(&target);
    plant(&a.data, &format!("ln -s {} .steadfast", target.display()));

    let result = daemon_open(&a.data);
    assert_eq!(state_of(&target), before, "the link's target was changed");
    let error = result.expect_err("a .steadfast link is refused");
    assert!(
        error.contains(&a.data.join(".steadfast").display().to_string()),
        "{error}"
    );
    assert!(error.contains("symbolic link"), "{error}");
    // The typed error, naming the link.
    match ControlDir::open(&a.data) {
        Err(ControlDirError::Unsafe(UnsafePath::Symlink { path })) => {
            assert_eq!(path, a.data.join(".steadfast"));
        }
        other => panic!("expected an unsafe-path refusal, got {other:?}"),
    }
    assert_eq!(state_of(&target), before);
}

/// `lock` planted as a link to a path that does not exist yet, in the
/// attacker's directory: the daemon created it (root-owned) through the
/// link. Now refused; nothing created.
#[test]
fn a_planted_lock_symlink_is_refused() {
    let a = arena();
    drop(ControlDir::open(&a.data).unwrap());
    let cd = ControlDir::under(&a.data);
    fs::remove_file(cd.join("lock")).unwrap();
    let target = a.attacker.join("made-by-root");
    plant(&cd, &format!("ln -s {} lock", target.display()));
    let result = daemon_open(&a.data);
    assert_eq!(
        state_of(&target),
        None,
        "a file was created through the lock link"
    );
    let error = result.expect_err("a lock link is refused");
    assert!(
        error.contains(&cd.join("lock").display().to_string()),
        "{error}"
    );
    assert!(error.contains("symbolic link"), "{error}");
}

/// `journal` planted as a link to an existing root file (empty, 0644) the
/// attacker cannot write: the daemon appended its header and records to it.
/// Now refused; the target keeps its bytes and mode.
#[test]
fn a_planted_journal_symlink_is_refused() {
    let b = arena();
    drop(ControlDir::open(&b.data).unwrap());
    let cd = ControlDir::under(&b.data);
    let victim = b.tmp.path().join("victim");
    fs::write(&victim, b"").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    let before = state_of(&victim);
    plant(&cd, &format!("ln -s {} journal", victim.display()));
    let result = daemon_open(&b.data);
    assert_eq!(
        state_of(&victim),
        before,
        "the journal link's target was written"
    );
    let error = result.expect_err("a journal link is refused");
    assert!(
        error.contains(&cd.join("journal").display().to_string()),
        "{error}"
    );
    assert!(error.contains("symbolic link"), "{error}");
}

/// `upgrade.lock` planted as a link: a replacement created its target
/// through it. Now refused naming it.
#[test]
fn a_planted_upgrade_lock_symlink_is_refused() {
    let a = arena();
    drop(ControlDir::open(&a.data).unwrap());
    let cd = ControlDir::under(&a.data);
    let target = a.attacker.join("upgrade-target");
    plant(&cd, &format!("ln -s {} upgrade.lock", target.display()));
    let result = steadfast_actors::replacement::try_upgrade_lock(&a.data);
    assert_eq!(
        state_of(&target),
        None,
        "a file was created through the link"
    );
    let error = result
        .expect_err("an upgrade.lock link is refused")
        .to_string();
    assert!(
        error.contains(&cd.join("upgrade.lock").display().to_string()),
        "{error}"
    );
    assert!(error.contains("symbolic link"), "{error}");
}

/// `store.lock` planted as a link in the data dir: the store's open step
/// created the target (0644, root). Now refused, and the probe reads held
/// (doubt), naming the file.
#[test]
fn a_store_lock_symlink_is_refused() {
    let a = arena();
    let target = a.attacker.join("store-target");
    plant(&a.data, &format!("ln -s {} store.lock", target.display()));
    let result = StoreLock::acquire(&a.data);
    assert_eq!(
        state_of(&target),
        None,
        "a file was created through the link"
    );
    let error = result
        .expect_err("a store.lock link is refused")
        .to_string();
    assert!(
        error.contains(&a.data.join("store.lock").display().to_string()),
        "{error}"
    );
    assert!(error.contains("symbolic link"), "{error}");
    match StoreLock::probe(&a.data) {
        StoreOutcome::Held { cause } => assert!(cause.contains("symbolic link"), "{cause}"),
        StoreOutcome::Released => panic!("a probe through a link reads released"),
    }
    assert_eq!(state_of(&target), None);
}

/// A journal with a second name (a hard link to a file elsewhere): appends
/// went to that file too. Now refused before a byte is written.
#[test]
fn a_hard_linked_journal_is_refused() {
    let a = arena();
    drop(ControlDir::open(&a.data).unwrap());
    let cd = ControlDir::under(&a.data);
    let victim = a.tmp.path().join("victim");
    fs::write(&victim, b"").unwrap();
    fs::hard_link(&victim, cd.join("journal")).unwrap();
    let result = daemon_open(&a.data);
    assert_eq!(
        fs::read(&victim).unwrap(),
        b"",
        "the other name was written"
    );
    let error = result.expect_err("a hard-linked journal is refused");
    assert!(error.contains("hard links"), "{error}");
    assert!(
        error.contains(&cd.join("journal").display().to_string()),
        "{error}"
    );
}

/// A 0777 data dir: anyone could plant links in it. It is refused naming
/// the path and the fix, creating nothing.
#[test]
fn a_world_writable_data_dir_is_refused() {
    let a = arena();
    fs::set_permissions(&a.data, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        ControlDir::open(&a.data),
        Err(ControlDirError::Unsafe(UnsafePath::WritableByOthers {
            mode: 0o777,
            ..
        }))
    ));
    let error = daemon_open(&a.data).expect_err("a 0777 data dir is refused");
    assert!(error.contains(&a.data.display().to_string()), "{error}");
    assert!(
        error.contains("0777") && error.contains("chmod go-w"),
        "{error}"
    );
    assert_eq!(
        state_of(&a.data).map(|(_, _, names)| names),
        Some(Vec::new()),
        "nothing was created in it"
    );
    let error = StoreLock::acquire(&a.data)
        .expect_err("the store lock too")
        .to_string();
    assert!(error.contains("chmod go-w"), "{error}");
}

/// A sticky directory everyone may write (`mkdir -m1777 /srv/s`), where
/// another user planted `data` as a link to a private directory of root's:
/// the daemon followed it and made `.steadfast`, the lock and the journal
/// in the private directory. Now the link (another user's, in a directory
/// others write) is refused naming it, and the private directory is as it
/// was.
#[test]
fn a_link_another_user_planted_above_the_data_dir_is_refused() {
    let a = arena();
    let shared = a.tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let private = a.tmp.path().join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    as_nobody(&shared, &format!("ln -s {} data", private.display()));
    let before = state_of(&private);

    let planted = shared.join("data");
    let result = daemon_open(&planted);
    assert_eq!(state_of(&private), before, "the link was followed");
    assert!(matches!(
        ControlDir::open(&planted),
        Err(ControlDirError::Unsafe(UnsafePath::ForeignEntry {
            owner: NOBODY,
            ..
        }))
    ));
    let error = result.expect_err("another user's link is refused");
    assert!(error.contains(&planted.display().to_string()), "{error}");
    assert!(error.contains("owned by uid 65534"), "{error}");
    assert!(
        StoreLock::acquire(&planted).is_err(),
        "the store lock is refused too"
    );
    assert_eq!(state_of(&private), before);

    // The same link made by root (the operator's own) is followed: the
    // private directory becomes the data dir.
    fs::remove_file(&planted).unwrap();
    std::os::unix::fs::symlink(&private, &planted).unwrap();
    daemon_open(&planted).expect("a link of our own in a sticky directory is followed");
    assert!(private.join(".steadfast").is_dir());
}

/// A data dir under a directory another user owns (`--data-dir
/// /home/nobody/sub`): its owner could rename `sub` away and put a link in
/// its place, which the next launch followed. Refused before anything is
/// created, naming the ancestor; the same for a directory above that
/// group or others can write.
#[test]
fn a_data_dir_under_another_users_directory_is_refused() {
    let a = arena();
    let sub = a.attacker.join("sub");
    let error = daemon_open(&sub).expect_err("a data dir under another user's directory");
    assert!(
        matches!(
            ControlDir::open(&sub),
            Err(ControlDirError::Unsafe(UnsafePath::UntrustedAncestor {
                owner: NOBODY,
                ..
            }))
        ),
        "{error}"
    );
    assert!(
        error.contains(&a.attacker.display().to_string())
            && error.contains(&sub.display().to_string())
            && error.contains("owned by uid 65534"),
        "{error}"
    );
    assert_eq!(state_of(&sub), None, "nothing was created");
    // Made there earlier (by an older version): still refused.
    fs::create_dir(&sub).unwrap();
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o700)).unwrap();
    assert!(daemon_open(&sub).is_err());
    assert_eq!(state_of(&sub.join(".steadfast")), None);

    let open = a.tmp.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let below = open.join("data");
    let error = daemon_open(&below).expect_err("a data dir under a 0777 directory");
    assert!(
        error.contains(&open.display().to_string()) && error.contains("0777"),
        "{error}"
    );
    assert_eq!(state_of(&below), None, "nothing was created");

    // A directory only the daemon's own group may write (a Kubernetes
    // volume under `fsGroup`, 2775 with the daemon's `runAsGroup`) is
    // closed to others; the same directory with another group is not.
    let volume = a.tmp.path().join("volume");
    fs::create_dir(&volume).unwrap();
    fs::set_permissions(&volume, fs::Permissions::from_mode(0o2775)).unwrap();
    let egid = rustix::process::getegid().as_raw();
    std::os::unix::fs::chown(&volume, None, Some(egid)).unwrap();
    daemon_open(&volume.join("data")).expect("a volume of the daemon's own group");
    std::os::unix::fs::chown(&volume, None, Some(NOBODY)).unwrap();
    let error = daemon_open(&volume.join("data")).expect_err("another group may write it");
    assert!(
        error.contains(&volume.display().to_string()) && error.contains("2775"),
        "{error}"
    );
}

/// A data dir another user owns: they could swap `.steadfast` at will. It
/// is refused naming the owner and the fix.
#[test]
fn a_data_dir_owned_by_another_user_is_refused() {
    let a = arena();
    std::os::unix::fs::chown(&a.data, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::set_permissions(&a.data, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(matches!(
        ControlDir::open(&a.data),
        Err(ControlDirError::Unsafe(UnsafePath::ForeignOwner {
            owner: NOBODY,
            ..
        }))
    ));
    let error = daemon_open(&a.data).expect_err("another user's data dir is refused");
    assert!(error.contains(&a.data.display().to_string()), "{error}");
    assert!(
        error.contains("owned by uid 65534") && error.contains("chown"),
        "{error}"
    );
    assert_eq!(state_of(&a.data.join(".steadfast")), None);
}

/// A `.steadfast` another user made (in a data dir that was open to them):
/// the daemon chmodded it 0700 and used it, files and all. Now refused; its
/// mode and entries are as they were.
#[test]
fn a_control_dir_owned_by_another_user_is_refused() {
    let a = arena();
    plant(&a.data, "mkdir -m 0755 .steadfast");
    let cd = ControlDir::under(&a.data);
    let before = state_of(&cd);
    let result = daemon_open(&a.data);
    assert_eq!(
        state_of(&cd),
        before,
        "the other user's directory was changed"
    );
    let error = result.expect_err("another user's control dir is refused");
    assert!(error.contains(&cd.display().to_string()), "{error}");
    assert!(error.contains("owned by uid 65534"), "{error}");
}

/// A control dir of ours left 0777 is tightened to 0700 through its
/// descriptor before anything in it is opened (as before the descriptor
/// mechanism: this one guards the behaviour, it did not fail before).
#[test]
fn a_loose_control_dir_of_ours_is_tightened() {
    let a = arena();
    drop(ControlDir::open(&a.data).unwrap());
    let cd = ControlDir::under(&a.data);
    fs::set_permissions(&cd, fs::Permissions::from_mode(0o777)).unwrap();
    daemon_open(&a.data).unwrap();
    assert_eq!(mode(&cd), 0o700);
}

// ---------------------------------------------------------------------------
// Item 9: the false wedge and the removed lock.
// ---------------------------------------------------------------------------

/// A child process that holds a copy of the store lock's open file (as a
/// child forked by any thread of the daemon does until it execs): after the
/// store is dropped, a probe read `Held` — a wedge. It now waits the
/// transient holder out (bounded by `PROBE_PATIENCE`) and reads `Released`.
#[test]
fn probe_waits_out_a_child_holding_a_copy_of_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StoreLock::acquire(tmp.path()).unwrap();
    let copy = lock.file().try_clone().unwrap();
    let mut child = Command::new("sleep")
        .arg("0.2")
        .stdin(Stdio::from(copy.into_os().expect("an OS file")))
        .spawn()
        .unwrap();
    drop(lock);
    let probed = StoreLock::probe(tmp.path());
    child.wait().unwrap();
    assert_eq!(probed, StoreOutcome::Released);
}

/// A holder that keeps the lock past the probe's patience still reads
/// `Held`: the wait is bounded, a real holder is not waited out.
#[test]
fn probe_reads_held_for_a_holder_past_its_patience() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StoreLock::acquire(tmp.path()).unwrap();
    let copy = lock.file().try_clone().unwrap();
    let mut child = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::from(copy.into_os().expect("an OS file")))
        .spawn()
        .unwrap();
    drop(lock);
    let probed = StoreLock::probe(tmp.path());
    child.kill().unwrap();
    child.wait().unwrap();
    match probed {
        StoreOutcome::Held { cause } => assert!(cause.contains("store.lock"), "{cause}"),
        StoreOutcome::Released => panic!("a real holder was waited out"),
    }
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
}

/// `rm -rf` of a running daemon's data dir: its lock belongs to a deleted
/// file, so a second daemon can open the same path. The first one's journal
/// went on acknowledging appends; now it refuses them, saying the lock was
/// lost.
#[test]
fn a_removed_data_dir_loses_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cd = ControlDir::open(&data).unwrap();
    let (mut journal, _, _) = cd.open_journal().unwrap();
    journal.append(&[record(1)]).unwrap();
    fs::remove_dir_all(&data).unwrap();
    let second = ControlDir::open(&data).expect("the path is free again: why the check exists");
    let error = journal
        .append(&[record(2)])
        .expect_err("no append after the lock is lost");
    assert!(
        matches!(error, ControlDirError::LockLost { .. }),
        "{error:?}"
    );
    assert!(matches!(
        cd.check_lock(),
        Err(ControlDirError::LockLost { .. })
    ));
    let error = error.to_string();
    assert!(error.contains("was lost"), "{error}");
    assert!(
        error.contains(&cd.lock_path().display().to_string()),
        "{error}"
    );
    drop(second);
}

/// The data dir renamed away under a running daemon: the path is free for
/// another daemon. The journal refuses to append.
#[test]
fn a_moved_data_dir_loses_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cd = ControlDir::open(&data).unwrap();
    let (mut journal, _, _) = cd.open_journal().unwrap();
    journal.append(&[record(1)]).unwrap();
    fs::rename(&data, tmp.path().join("elsewhere")).unwrap();
    let error = journal
        .append(&[record(2)])
        .expect_err("no append after the lock is lost");
    assert!(error.to_string().contains("was lost"), "{error}");
}

/// The lock file alone unlinked, or replaced by another file of the same
/// name, under a running daemon: a second daemon could lock the new file.
/// Each is a lost lock, named for what was found.
#[test]
fn an_unlinked_or_replaced_lock_file_loses_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(&tmp.path().join("data")).unwrap();
    cd.check_lock().expect("a fresh lock guards its data dir");
    let lock = cd.lock_path();
    let aside = lock.with_file_name("lock.aside");
    fs::rename(&lock, &aside).unwrap();
    let error = cd.check_lock().expect_err("no file named lock").to_string();
    assert!(error.contains("no longer exists"), "{error}");
    fs::write(&lock, b"").unwrap();
    let error = cd
        .check_lock()
        .expect_err("lock names a new file")
        .to_string();
    assert!(error.contains("now names another file"), "{error}");
    fs::remove_file(&lock).unwrap();
    fs::rename(&aside, &lock).unwrap();
    cd.check_lock()
        .expect("the locked file back under its name guards the data dir again");
}

/// Two writers of the run marker in one process (the Journal actor's
/// attempt note and a replacement's hand-over marker) share its one temp
/// file name: neither may unlink or rename the other's half-written temp
/// file. Unserialized, writers racing like this fail (`rename`: no such
/// file) or leave a marker of the other's bytes.
#[test]
fn concurrent_run_marker_writes_never_fail_or_tear() {
    let tmp = tempfile::tempdir().unwrap();
    let cd = std::sync::Arc::new(ControlDir::open(tmp.path()).unwrap());
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let cd = std::sync::Arc::clone(&cd);
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for attempt in 0..300 {
                    let marker = RunMarker::Holding {
                        pid: 1000 + w,
                        attempt,
                    };
                    let written = if w % 2 == 0 {
                        cd.write_run(&marker)
                    } else {
                        cd.note_run(&marker)
                    };
                    if let Err(error) = written {
                        failures.push(error.to_string());
                    }
                    match cd.read_run() {
                        Ok(MarkerRead::Valid(_)) => {}
                        other => failures.push(format!("read back {other:?}")),
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of 1,200 marker writes failed or read back torn, e.g. {:?}",
        failures.len(),
        failures.first()
    );
}

/// The per-attempt run marker is rewritten in place (one `pwrite`, the same
/// file: no rename, which frees blocks and costs a discard per boot), and
/// through a new file when its encoding grows.
#[test]
fn the_attempt_note_rewrites_the_run_marker_in_place() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(tmp.path()).unwrap();
    let run = tmp.path().join(".steadfast").join("run");
    cd.write_run(&RunMarker::Holding { pid: 7, attempt: 0 })
        .unwrap();
    let inode = fs::metadata(&run).unwrap().ino();
    cd.note_run(&RunMarker::Holding { pid: 7, attempt: 1 })
        .unwrap();
    assert_eq!(
        fs::metadata(&run).unwrap().ino(),
        inode,
        "rewritten in place"
    );
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 7, attempt: 1 })
    ));
    // A longer encoding (a wider attempt) cannot overwrite in place.
    cd.note_run(&RunMarker::Holding {
        pid: 7,
        attempt: 70_000,
    })
    .unwrap();
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding {
            pid: 7,
            attempt: 70_000
        })
    ));
    assert_eq!(mode(&run) & 0o777, 0o600);
}

/// The Journal actor notes an attempt on its own thread only when that is
/// one `pwrite` and no other marker write is under way: with no marker, or
/// one the note cannot overwrite in place, `note_run_in_place` does nothing
/// and says so (`None`: the caller goes to `note_run` on a blocking
/// thread); while another writer holds the marker turn it does not wait for
/// it (`None` again, nothing written).
#[test]
fn the_in_place_note_never_waits_and_never_writes_a_new_file() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let cd = std::sync::Arc::new(ControlDir::open(tmp.path()).unwrap());
    let run = tmp.path().join(".steadfast").join("run");
    let note = |attempt| RunMarker::Holding { pid: 7, attempt };
    assert!(cd.note_run_in_place(&note(1)).is_none(), "no marker yet");
    assert!(!run.exists(), "nothing written");
    cd.write_run(&note(0)).unwrap();
    let inode = fs::metadata(&run).unwrap().ino();
    assert!(matches!(cd.note_run_in_place(&note(1)), Some(Ok(()))));
    assert_eq!(fs::metadata(&run).unwrap().ino(), inode, "in place");
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 7, attempt: 1 })
    ));
    assert!(
        cd.note_run_in_place(&note(70_000)).is_none(),
        "a longer encoding is not written in place"
    );
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 7, attempt: 1 })
    ));
    // Another writer's turn: a thread writing markers as fast as it can
    // while this one tries in place. Every try either wrote in place or
    // declined; none failed, none waited for the other (a decline is
    // seen at least once over the run, or the writers never overlapped).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (cd, stop) = (std::sync::Arc::clone(&cd), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cd.write_run(&RunMarker::Holding {
                    pid: 7,
                    attempt: 2 + n % 5,
                })
                .unwrap();
                n += 1;
            }
        })
    };
    let (mut declined, mut tries) = (0, 0u32);
    let started = std::time::Instant::now();
    while (declined == 0 || tries < 200) && started.elapsed() < std::time::Duration::from_secs(60) {
        match cd.note_run_in_place(&note(tries % 9)) {
            None => declined += 1,
            Some(written) => written.unwrap(),
        }
        tries += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(declined > 0, "never saw the other writer's turn");
    assert!(matches!(cd.read_run().unwrap(), MarkerRead::Valid(_)));
}

/// DESIGN.md "Durability rules" and `spec/control-dir.md` "The fsyncs of a
/// launch": a fresh control dir fsyncs nothing at open, and the journal's
/// header is not fsynced on its own. The `holding` marker's directory
/// fsync makes the new names (`lock`, `journal`) durable, then the data
/// dir's fsync the name `.steadfast` and its parent's the data dir's own
/// name, so the first append after it fsyncs nothing more than itself; a
/// journal appended to before any fsync of the directory fsyncs the
/// control dir, the data dir and its parent once, with its first append.
/// Counted by `ControlDir::fsyncs` (outside the appends' own
/// `sync_data`).
#[test]
fn a_fresh_launch_defers_the_journal_and_directory_fsyncs() {
    use std::sync::atomic::Ordering;
    // A daemon's order: open, journal, `holding` marker, appends.
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(&tmp.path().join("data")).unwrap();
    let fsyncs = cd.fsyncs();
    assert_eq!(fsyncs.load(Ordering::Relaxed), 0, "nothing at open");
    let (mut journal, records, recovery) = cd.open_journal().unwrap();
    assert!(records.is_empty());
    assert_eq!(recovery, Recovery::Fresh);
    assert_eq!(fsyncs.load(Ordering::Relaxed), 0, "no fsync of the header");
    cd.write_run(&RunMarker::Holding { pid: 1, attempt: 0 })
        .unwrap();
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        4,
        "the marker, the control dir, the data dir and its parent"
    );
    journal.append(&[record(1)]).unwrap();
    journal.append(&[record(2)]).unwrap();
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        4,
        "the marker's dir fsyncs covered the journal's name"
    );
    drop(journal);
    drop(cd);
    // The header and both records are there for the next open.
    let cd = ControlDir::open(&tmp.path().join("data")).unwrap();
    assert_eq!(cd.fsyncs().load(Ordering::Relaxed), 0, "an existing dir");
    let (_journal, records, recovery) = cd.open_journal().unwrap();
    assert_eq!(recovery, Recovery::Clean);
    assert_eq!(records, vec![record(1), record(2)]);

    // No marker before the first append: that append fsyncs the directories.
    let tmp = tempfile::tempdir().unwrap();
    let cd = ControlDir::open(&tmp.path().join("data")).unwrap();
    let fsyncs = cd.fsyncs();
    let (mut journal, _, _) = cd.open_journal().unwrap();
    journal.append(&[record(1)]).unwrap();
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        3,
        "the control dir, then the data dir and its parent"
    );
    journal.append(&[record(2)]).unwrap();
    assert_eq!(fsyncs.load(Ordering::Relaxed), 3, "once");
}

/// `ControlDir::write_run_settling` (a daemon's launch): the marker is
/// written and renamed into place at once (a relaunch after a kill reads
/// `crashed` from then on), its fsync and the directories' are left to a
/// thread, and the first acknowledged append waits for that thread: once
/// `append` returned, the four fsyncs were made. A marker written next
/// goes after it (never through the same temp file at once).
#[test]
fn the_launch_marker_settles_before_the_first_acknowledgement() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cd = ControlDir::open(&data).unwrap();
    let fsyncs = cd.fsyncs();
    let (mut journal, _, _) = cd.open_journal().unwrap();
    cd.write_run_settling(&RunMarker::Holding { pid: 7, attempt: 0 })
        .unwrap();
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 7, attempt: 0 })
    ));
    journal.append(&[record(1)]).unwrap();
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        4,
        "the marker, the control dir, the data dir and its parent, once"
    );
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 7, attempt: 0 })
    ));
    assert!(
        !data.join(".steadfast/.run.tmp").exists(),
        "the temp file was renamed into place"
    );
    journal.append(&[record(2)]).unwrap();
    assert_eq!(fsyncs.load(Ordering::Relaxed), 4, "the names once");

    // A marker written right after the settling one waits for it: the
    // later one is what `run` holds.
    cd.note_run(&RunMarker::Holding { pid: 7, attempt: 1 })
        .unwrap();
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 7, attempt: 1 })
    ));
    drop(journal);
    drop(cd);
    let cd = ControlDir::open(&data).unwrap();
    assert!(matches!(
        cd.previous_run(),
        PreviousRun::Crashed {
            pid: Some(7),
            attempt: Some(1)
        }
    ));

    // Straight after the settling write, before any append: a second
    // marker write waits for the first, and the dir ends with it.
    drop(cd);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cd = ControlDir::open(&data).unwrap();
    cd.write_run_settling(&RunMarker::Holding { pid: 8, attempt: 0 })
        .unwrap();
    cd.write_run(&RunMarker::Released { at_ms: 5, epoch: 1 })
        .unwrap();
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Released { at_ms: 5, epoch: 1 })
    ));
}

/// A daemon's first run over `data`: launched (`holding`), one record
/// appended, then stopped cleanly (`released`).
fn stopped_cleanly(data: &Path) {
    let cd = ControlDir::open(data).unwrap();
    let (mut journal, _, _) = cd.open_journal().unwrap();
    cd.write_run_settling(&RunMarker::Holding { pid: 7, attempt: 0 })
        .unwrap();
    journal.append(&[record(1)]).unwrap();
    cd.write_run(&RunMarker::Released { at_ms: 5, epoch: 1 })
        .unwrap();
}

/// A relaunch after a clean stop (`released`, readable): the journal is
/// not fsynced at open (its writer made it durable before `released`),
/// and the launch marker is written over `run` in place — the same file,
/// no temp file, no rename — and made durable with one fsync, no
/// directory's. After a crash (`holding`) the journal's open fsync, the
/// rename and the directories' fsyncs are all made again.
#[test]
fn a_relaunch_after_a_clean_stop_fsyncs_its_marker_alone() {
    use std::os::unix::fs::MetadataExt as _;
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = data.join(".steadfast/run");
    stopped_cleanly(&data);
    let inode = std::fs::metadata(&run).unwrap().ino();

    let cd = ControlDir::open(&data).unwrap();
    assert!(matches!(cd.previous_run(), PreviousRun::CleanStop { .. }));
    let fsyncs = cd.fsyncs();
    let (mut journal, records, recovery) = cd.open_journal().unwrap();
    assert_eq!((records, recovery), (vec![record(1)], Recovery::Clean));
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        0,
        "no fsync of the journal at open"
    );
    cd.write_run_settling(&RunMarker::Holding { pid: 8, attempt: 0 })
        .unwrap();
    journal.append(&[record(2)]).unwrap();
    assert_eq!(fsyncs.load(Ordering::Relaxed), 1, "the marker's alone");
    assert_eq!(
        std::fs::metadata(&run).unwrap().ino(),
        inode,
        "the marker was written in place"
    );
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 8, attempt: 0 })
    ));
    drop(journal);
    drop(cd);

    // Killed while holding: the next launch trusts nothing of it.
    let cd = ControlDir::open(&data).unwrap();
    assert!(matches!(cd.previous_run(), PreviousRun::Crashed { .. }));
    let fsyncs = cd.fsyncs();
    let (mut journal, records, _) = cd.open_journal().unwrap();
    assert_eq!(records, vec![record(1), record(2)]);
    assert_eq!(fsyncs.load(Ordering::Relaxed), 1, "the journal's at open");
    cd.write_run_settling(&RunMarker::Holding { pid: 9, attempt: 0 })
        .unwrap();
    journal.append(&[record(3)]).unwrap();
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        5,
        "then the marker, the control dir, the data dir and its parent"
    );
    assert_ne!(
        std::fs::metadata(&run).unwrap().ino(),
        inode,
        "a new marker renamed over it"
    );
}

/// A relaunch after a clean stop writes its marker in place over the very
/// `released` file read at open, without reading `run` again: a `run`
/// replaced since (another file renamed over it, by hand) is not that
/// file, and gets a new marker renamed over it, fsynced with the control
/// dir, as after a crash.
#[test]
fn a_run_marker_replaced_after_open_is_not_written_in_place() {
    use std::os::unix::fs::MetadataExt as _;
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = data.join(".steadfast/run");
    stopped_cleanly(&data);
    let cd = ControlDir::open(&data).unwrap();
    assert!(matches!(cd.previous_run(), PreviousRun::CleanStop { .. }));
    let (mut journal, _, _) = cd.open_journal().unwrap();
    let same_bytes = data.join(".steadfast/run.copy");
    fs::copy(&run, &same_bytes).unwrap();
    fs::rename(&same_bytes, &run).unwrap();
    let replaced = fs::metadata(&run).unwrap().ino();
    let fsyncs = cd.fsyncs();
    cd.write_run_settling(&RunMarker::Holding { pid: 8, attempt: 0 })
        .unwrap();
    journal.append(&[record(2)]).unwrap();
    assert_eq!(
        fsyncs.load(Ordering::Relaxed),
        2,
        "the new marker and the control dir"
    );
    assert_ne!(
        fs::metadata(&run).unwrap().ino(),
        replaced,
        "a new marker renamed over it"
    );
    assert!(matches!(
        cd.read_run().unwrap(),
        MarkerRead::Valid(RunMarker::Holding { pid: 8, attempt: 0 })
    ));
}
