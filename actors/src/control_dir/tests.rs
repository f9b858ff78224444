//! The control directory's unit tests: the journal writer over failing
//! sinks, the markers' encoding, the settling of a launch.

use super::markers::decode_marker;
use super::settle::{SettleJob, SettleRetry};
use super::*;
use crate::nz;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

/// The header length the sinks below pretend to start with.
const HEADER: u64 = 12;

/// A sink that records what was written (after a pretend header of
/// [`HEADER`] bytes) and can fail writes, fsyncs or cut-backs. A failing
/// write is a short write of half the buffer, then ENOSPC, as a full
/// disk gives.
#[derive(Clone, Default)]
struct FailingSink {
    written: Arc<Mutex<Vec<u8>>>,
    writes: Arc<AtomicUsize>,
    syncs: Arc<AtomicUsize>,
    cuts: Arc<Mutex<Vec<u64>>>,
    fail_write: Arc<AtomicBool>,
    fail_sync: Arc<AtomicBool>,
    fail_cut: Arc<AtomicBool>,
    /// Set once the failing write's first half went in.
    short_written: Arc<AtomicBool>,
}

impl FailingSink {
    fn failing(flag: impl Fn(&Self) -> &Arc<AtomicBool>) -> Self {
        let sink = Self::default();
        flag(&sink).store(true, Ordering::SeqCst);
        sink
    }

    fn written(&self) -> Vec<u8> {
        self.written.lock().unwrap().clone()
    }
}

impl Write for FailingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        if self.fail_write.load(Ordering::SeqCst) {
            let half = buf.len() / 2;
            if half > 0 && !self.short_written.swap(true, Ordering::SeqCst) {
                self.written.lock().unwrap().extend_from_slice(&buf[..half]);
                return Ok(half);
            }
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.written.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl JournalSink for FailingSink {
    fn sync_data(&mut self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if self.fail_sync.load(Ordering::SeqCst) {
            Err(io::Error::from_raw_os_error(5)) // EIO
        } else {
            Ok(())
        }
    }

    fn current_len(&mut self) -> io::Result<u64> {
        Ok(HEADER + self.written.lock().unwrap().len() as u64)
    }

    fn cut_back(&mut self, len: u64) -> io::Result<()> {
        self.cuts.lock().unwrap().push(len);
        if self.fail_cut.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        let keep = usize::try_from(len - HEADER).unwrap();
        self.written.lock().unwrap().truncate(keep);
        Ok(())
    }
}

fn record(n: u32) -> Record {
    Record::AttemptStarted {
        attempt: nz(n),
        at_ms: u64::from(n) * 1000,
    }
}

fn frames(records: &[Record]) -> Vec<u8> {
    records
        .iter()
        .flat_map(|r| journal::encode_record(r).unwrap())
        .collect()
}

#[test]
fn appends_are_one_write_then_one_fsync() {
    let sink = FailingSink::default();
    let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
    j.append(&[record(1), record(2), record(3)]).unwrap();
    assert_eq!(sink.writes.load(Ordering::SeqCst), 1);
    assert_eq!(sink.syncs.load(Ordering::SeqCst), 1);
    let expected = frames(&[record(1), record(2), record(3)]);
    assert_eq!(sink.written(), expected);
    assert_eq!(j.len(), HEADER + expected.len() as u64);
    assert!(sink.cuts.lock().unwrap().is_empty(), "nothing to cut");
}

/// `spec/control-dir.md` "Writing": a failed fsync is not acknowledged;
/// its bytes are cut back at once (a failed fsync leaves its pages clean
/// yet readable: no successor may read them, and no later fsync may cover
/// them), so the next append starts on a record boundary.
#[test]
fn failed_fsync_is_not_acknowledged_and_is_cut_back_at_once() {
    let sink = FailingSink::default();
    let mut j = JournalFile::with_sink(sink.clone(), "/cd/journal".into(), HEADER);
    j.append(&[record(1)]).unwrap();
    let acknowledged = j.len();
    sink.fail_sync.store(true, Ordering::SeqCst);
    let err = j.append(&[record(2)]).unwrap_err();
    match &err {
        ControlDirError::Io { path, source } => {
            assert_eq!(path, Path::new("/cd/journal"));
            assert_eq!(source.raw_os_error(), Some(5));
        }
        other => panic!("expected an i/o error, got {other:?}"),
    }
    assert_eq!(j.len(), acknowledged, "the failed append is not counted");
    assert_eq!(
        *sink.cuts.lock().unwrap(),
        vec![acknowledged],
        "cut back before anything else is asked"
    );
    assert!(!j.is_poisoned(), "the cut back repaired the writer");
    sink.fail_sync.store(false, Ordering::SeqCst);
    j.append(&[record(3)]).unwrap();
    assert_eq!(*sink.cuts.lock().unwrap(), vec![acknowledged], "cut once");
    assert_eq!(
        sink.written(),
        frames(&[record(1), record(3)]),
        "record 2's bytes are gone, record 3 starts on a boundary"
    );
    assert_eq!(
        j.len(),
        HEADER + frames(&[record(1), record(3)]).len() as u64
    );
}

/// A short write then ENOSPC (a full disk): no fsync, not acknowledged,
/// and the fragment is cut before the next append.
#[test]
fn a_short_write_is_cut_back_before_the_next_append() {
    let sink = FailingSink::failing(|s| &s.fail_write);
    let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
    let err = j.append(&[record(1), record(2)]).unwrap_err();
    assert!(
        matches!(&err, ControlDirError::Io { source, .. } if source.raw_os_error() == Some(28)),
        "{err:?}"
    );
    assert_eq!(
        sink.syncs.load(Ordering::SeqCst),
        0,
        "no fsync after a failed write"
    );
    assert!(
        !sink.written().is_empty(),
        "the short write left a fragment"
    );
    sink.fail_write.store(false, Ordering::SeqCst);
    j.append(&[record(3)]).unwrap();
    assert_eq!(sink.written(), frames(&[record(3)]));
    assert_eq!(sink.syncs.load(Ordering::SeqCst), 1);
}

/// A cut-back that fails keeps the writer refusing (nothing written,
/// the refusal says why and that it is tried again) until one succeeds.
#[test]
fn a_failed_cut_back_stays_poisoned_and_is_tried_again() {
    let sink = FailingSink::failing(|s| &s.fail_write);
    sink.fail_cut.store(true, Ordering::SeqCst);
    let mut j = JournalFile::with_sink(sink.clone(), "/cd/journal".into(), HEADER);
    assert!(j.append(&[record(1)]).is_err());
    sink.fail_write.store(false, Ordering::SeqCst);
    let writes = sink.writes.load(Ordering::SeqCst);
    for _ in 0..2 {
        let err = j.append(&[record(2)]).unwrap_err();
        assert!(
            matches!(err, ControlDirError::JournalPoisoned { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("/cd/journal"), "{message}");
        assert!(
            message.contains("os error 28"),
            "names the cause: {message}"
        );
        assert!(message.contains("tried again"), "says what next: {message}");
        assert!(j.is_poisoned());
    }
    assert_eq!(
        sink.writes.load(Ordering::SeqCst),
        writes,
        "nothing written"
    );
    assert_eq!(*sink.cuts.lock().unwrap(), vec![HEADER, HEADER]);
    sink.fail_cut.store(false, Ordering::SeqCst);
    j.append(&[record(2)]).unwrap();
    assert_eq!(sink.written(), frames(&[record(2)]));
}

/// While another process may append (a replacement), a failed append's
/// bytes are not cut (the cut could remove the other writer's records);
/// once the journal is this process's alone, they are.
#[test]
fn a_shared_journal_is_cut_back_only_once_it_is_ours_alone() {
    let sink = FailingSink::failing(|s| &s.fail_write);
    let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
    let shared = Arc::new(AtomicBool::new(true));
    j.shared = Some(Arc::clone(&shared));
    assert!(j.append(&[record(1)]).is_err());
    sink.fail_write.store(false, Ordering::SeqCst);
    let err = j.append(&[record(2)]).unwrap_err();
    assert!(err.to_string().contains("another process"), "{err}");
    assert!(sink.cuts.lock().unwrap().is_empty());
    shared.store(false, Ordering::SeqCst);
    j.append(&[record(2)]).unwrap();
    assert_eq!(sink.written(), frames(&[record(2)]));
}

#[test]
fn an_unencodable_record_writes_nothing_and_does_not_poison() {
    let sink = FailingSink::default();
    let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
    let huge = Record::CheckpointCleared {
        step: "x".repeat(journal::MAX_RECORD_LEN as usize + 1),
    };
    let err = j.append(&[record(1), huge]).unwrap_err();
    assert!(
        matches!(err, ControlDirError::RecordNotEncoded { .. }),
        "{err:?}"
    );
    assert_eq!(sink.writes.load(Ordering::SeqCst), 0);
    assert!(!j.is_poisoned());
    j.append(&[record(1)]).unwrap();
}

#[test]
fn marker_decoding_refuses_damage() {
    let marker = RunMarker::Holding {
        pid: 42,
        attempt: 3,
    };
    let bytes = encode_marker(RUN_MAGIC, &marker).unwrap();
    assert_eq!(decode_marker::<RunMarker>(RUN_MAGIC, &bytes), Ok(marker));
    // Every single-bit flip anywhere is refused.
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[i] ^= 1 << bit;
            assert!(
                decode_marker::<RunMarker>(RUN_MAGIC, &bad).is_err(),
                "flip of bit {bit} at {i} accepted"
            );
        }
    }
    // Every truncation and an extra byte are refused.
    for cut in 0..bytes.len() {
        assert!(decode_marker::<RunMarker>(RUN_MAGIC, &bytes[..cut]).is_err());
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(decode_marker::<RunMarker>(RUN_MAGIC, &longer).is_err());
    // Another marker kind's magic is refused.
    assert!(decode_marker::<RunMarker>(IDENTITY_MAGIC, &bytes).is_err());
    // A claimed huge length is refused before anything else.
    let mut huge = bytes;
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_marker::<RunMarker>(RUN_MAGIC, &huge).is_err());
}

#[test]
fn previous_run_from_each_marker() {
    assert_eq!(
        previous_run_from(&MarkerRead::Missing),
        PreviousRun::FirstEver
    );
    assert_eq!(
        previous_run_from(&MarkerRead::Valid(RunMarker::Released {
            at_ms: 5,
            epoch: 2
        })),
        PreviousRun::CleanStop {
            at: steadfast_protocol::Timestamp(5),
            epoch: 2
        }
    );
    assert_eq!(
        previous_run_from(&MarkerRead::Valid(RunMarker::Holding {
            pid: 9,
            attempt: 1
        })),
        PreviousRun::Crashed {
            pid: Some(9),
            attempt: Some(1)
        }
    );
    assert_eq!(
        previous_run_from(&MarkerRead::Unreadable("x".into())),
        PreviousRun::Crashed {
            pid: None,
            attempt: None
        }
    );
}

/// A data dir handed over by a replacement's incumbent reads as
/// `handed_over` with the incumbent's pid and attempt, never `crashed`; a
/// clean stop stays a clean stop.
#[test]
fn a_handed_over_run_is_not_a_crash() {
    let holding = previous_run_from(&MarkerRead::Valid(RunMarker::Holding {
        pid: 41,
        attempt: 3,
    }));
    assert_eq!(
        handed_over_run(&holding, Some(41)),
        PreviousRun::HandedOver {
            pid: 41,
            attempt: Some(3)
        }
    );
    let unreadable = previous_run_from(&MarkerRead::Unreadable("x".into()));
    assert_eq!(
        handed_over_run(&unreadable, Some(41)),
        PreviousRun::HandedOver {
            pid: 41,
            attempt: None
        }
    );
    let clean = PreviousRun::CleanStop {
        at: steadfast_protocol::Timestamp(5),
        epoch: 1,
    };
    assert_eq!(handed_over_run(&clean, Some(41)), clean);
}

/// Who ran a settling job: its thread's id, once it ran.
fn settle_recorder() -> (SettleJob, Arc<Mutex<Option<std::thread::ThreadId>>>) {
    let ran = Arc::new(Mutex::new(None));
    let into = Arc::clone(&ran);
    let job: SettleJob = Box::new(move || {
        *into.lock().unwrap() = Some(std::thread::current().id());
        Ok(())
    });
    (job, ran)
}

/// A retry a test never expects to run.
fn no_retry() -> SettleRetry {
    Arc::new(|| panic!("a settling job that did not fail is not retried"))
}

fn some_dir() -> (tempfile::TempDir, Dir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Dir::open_data_dir(tmp.path(), false).unwrap();
    (tmp, dir)
}

/// A launch's settling job queued behind another launch's, still
/// running on the settling thread, is run by its first waiter on the
/// waiter's own thread: one settling thread serves every launch of the
/// process, and no waiter waits behind another launch's fsyncs (1,000
/// launches at once would otherwise queue up one after another, or
/// cost a thread each).
#[test]
fn a_waiter_runs_a_settling_job_the_settling_thread_has_not_reached() {
    let (_tmp, dir) = some_dir();
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    let (started, is_started) = std::sync::mpsc::channel::<()>();
    let ahead = Arc::new(Settling::default());
    ahead.queue(
        Box::new(move || {
            started.send(()).unwrap();
            blocked.recv().unwrap();
            Ok(())
        }),
        no_retry(),
    );
    is_started.recv().unwrap();
    let settling = Arc::new(Settling::default());
    let (job, ran) = settle_recorder();
    settling.queue(job, no_retry());
    assert!(settling.unsettled());
    settling.wait(&dir).unwrap();
    assert_eq!(*ran.lock().unwrap(), Some(std::thread::current().id()));
    assert!(!settling.unsettled());
    assert!(ahead.unsettled(), "still running on the settling thread");
    release.send(()).unwrap();
    ahead.wait(&dir).unwrap();
    // The settling thread's turn came after: nothing ran twice.
    assert_eq!(*ran.lock().unwrap(), Some(std::thread::current().id()));
}

/// Queued with nobody waiting, the job runs on the settling thread;
/// while it (and its retry) fails, every later waiter is told.
#[test]
fn a_settling_job_runs_beside_the_launch_and_tells_its_failure() {
    let (_tmp, dir) = some_dir();
    let settling = Arc::new(Settling::default());
    let (job, ran) = settle_recorder();
    settling.queue(job, no_retry());
    // Polled, not waited for: a wait would run it here.
    while settling.unsettled() {
        std::thread::yield_now();
    }
    let by = ran.lock().unwrap().expect("it ran");
    assert_ne!(by, std::thread::current().id());
    settling.wait(&dir).unwrap();

    let settling = Arc::new(Settling::default());
    settling.queue(
        Box::new(|| Err("EIO on the marker".to_owned())),
        Arc::new(|| Err("EIO on the marker again".to_owned())),
    );
    for _ in 0..2 {
        let error = settling.wait(&dir).unwrap_err().to_string();
        assert!(error.contains("EIO on the marker"), "{error}");
    }
    assert!(settling.unsettled());
}

/// A launch's settling job that failed is done anew by the next waiter
/// (never just reported until a relaunch): while the retry fails, each
/// waiter is told, and once one succeeds the launch is settled.
#[test]
fn a_failed_settling_job_is_done_anew_by_the_next_waiter() {
    let (_tmp, dir) = some_dir();
    let retries = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = Arc::clone(&retries);
    let settling = Arc::new(Settling::default());
    settling.queue(
        Box::new(|| Err("the first fsync failed".to_owned())),
        Arc::new(move || {
            // The first retry fails too; the second succeeds.
            match counted.fetch_add(1, Ordering::SeqCst) {
                0 => Err("the retry failed".to_owned()),
                _ => Ok(()),
            }
        }),
    );
    let first = settling
        .wait(&dir)
        .expect_err("the job and its first retry failed");
    assert!(first.to_string().contains("the retry failed"), "{first}");
    assert_eq!(retries.load(Ordering::SeqCst), 1, "one retry a waiter");
    settling.wait(&dir).expect("the second retry succeeded");
    assert!(!settling.unsettled());
    settling.wait(&dir).expect("settled for good");
    assert_eq!(
        retries.load(Ordering::SeqCst),
        2,
        "not retried once settled"
    );
}
