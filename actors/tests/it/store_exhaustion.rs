//! The store probe under a full descriptor table: an `EMFILE` says nothing
//! about the store, so the probe waits it out instead of reading the store
//! as held (`store.rs`, "Doubt reads as held; an error waiting cures is
//! waited out"; `spec/control-dir.md`, "The store probe").
//!
//! A full table is process-wide, and `cargo test` runs many tests in one
//! process: each test here fills the table of a process of its own (this
//! binary run again with only that test), never of the shared one.

use std::fs::File;
use std::process::Command;
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use steadfast_actors::store::{PROBE_EXHAUSTION_PATIENCE, StoreLock};
use steadfast_protocol::lifecycle::StoreOutcome;

/// Set on the re-run child only: the test it runs alone.
const ALONE_ENV: &str = "STEADFAST_ACTORS_TEST_ALONE";

/// `true` in the child that runs `name` alone (run the body); otherwise run
/// that child, fail if it failed or did not run the test, and return
/// `false`.
fn alone_in_process(name: &str) -> bool {
    let name = crate::support::test_name(module_path!(), name);
    let name = name.as_str();
    if std::env::var_os(ALONE_ENV).is_some_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE_ENV, name)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name}, run alone in its own process, failed:\n{stdout}\n{stderr}"
    );
    false
}

/// A data dir with its store lock file, released.
fn store() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    drop(StoreLock::acquire(tmp.path()).expect("the store lock"));
    tmp
}

/// Lower this process's soft descriptor limit and open `/dev/null` until
/// the table is full: the files holding it.
fn fill_the_table() -> Vec<File> {
    let limit = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(64),
            maximum: limit.maximum,
        },
    )
    .expect("lower the soft limit");
    let mut files = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(file) => files.push(file),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(Errno::MFILE.raw_os_error()), "{e}");
                return files;
            }
        }
    }
}

/// Close `files` after a moment, on a thread of their own.
fn free_later(files: Vec<File>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(files);
    })
}

/// A released store probed while the table is full: the blocking probe
/// waits until descriptors are free again and reads released, never held.
#[test]
fn a_probe_waits_out_a_full_descriptor_table() {
    if !alone_in_process("a_probe_waits_out_a_full_descriptor_table") {
        return;
    }
    let tmp = store();
    let files = fill_the_table();
    let freeing = free_later(files);
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
    freeing.join().expect("the freeing thread");
}

/// The same through `observe`, what boots and drains use.
#[test]
fn observe_waits_out_a_full_descriptor_table() {
    if !alone_in_process("observe_waits_out_a_full_descriptor_table") {
        return;
    }
    let tmp = store();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let files = fill_the_table();
    let freeing = free_later(files);
    let outcome = runtime.block_on(StoreLock::observe(tmp.path()));
    assert_eq!(outcome, StoreOutcome::Released);
    freeing.join().expect("the freeing thread");
}

/// A table that stays full: the blocking probe gives up after its patience
/// and reads held, naming the error; it does not spin forever.
#[test]
fn a_blocking_probe_gives_up_after_its_patience() {
    if !alone_in_process("a_blocking_probe_gives_up_after_its_patience") {
        return;
    }
    let tmp = store();
    let files = fill_the_table();
    let outcome = StoreLock::probe(tmp.path());
    drop(files);
    match outcome {
        StoreOutcome::Held { cause } => {
            assert!(cause.contains("Too many open files"), "{cause}");
            assert!(
                cause.contains(&format!(
                    "could not be probed for {} s",
                    PROBE_EXHAUSTION_PATIENCE.as_secs()
                )),
                "{cause}"
            );
            assert!(cause.contains(&tmp.path().display().to_string()), "{cause}");
        }
        StoreOutcome::Released => panic!("a store nobody could probe read released"),
    }
}
