//! The two defects the simulation found, as scripted sequences on the
//! simulated disk (each failed before its fix).

use steadfast_actors::control_dir::JournalFile;
use steadfast_protocol::journal::{self, Record};

use super::disk::{Faults, SimDisk, SimFile};
use super::rng::Rng;

fn record(id: u64) -> Record {
    Record::Transition {
        at_ms: id,
        from: "running".to_owned(),
        event: "defect".to_owned(),
        to: "running".to_owned(),
    }
}

fn fresh() -> (SimDisk, JournalFile<SimFile>) {
    let disk = SimDisk::new(journal::encode_header().to_vec(), Rng::new(7), Faults::NONE);
    let writer = JournalFile::with_sink(
        disk.file(),
        "sim/journal".into(),
        journal::HEADER_LEN as u64,
    );
    (disk, writer)
}

/// What a reopen after a crash reads.
fn after_crash(disk: &SimDisk) -> Vec<Record> {
    journal::decode(&disk.crash())
        .expect("the journal reopens after the crash")
        .records
}

/// A transition written ahead, then an awaited append whose fsync fails:
/// the cut that follows takes the written-ahead record too, so the sync
/// the Lifecycle actor makes next must not answer `Ok` for it (it did:
/// nothing was left to sync).
#[test]
fn a_failed_append_fsync_leaves_what_was_written_ahead_unacknowledged() {
    let (disk, mut writer) = fresh();
    writer.write(&[record(1)]).expect("written ahead");
    disk.fail_next_fsyncs(1);
    writer
        .append(&[record(2)])
        .expect_err("the append's fsync fails");
    // The Journal actor skips a sync with nothing unsynced: this one must
    // not be skipped.
    assert!(
        writer.has_unsynced(),
        "the cut records still await an answer"
    );
    let answer = writer.sync();
    assert!(
        answer.is_err(),
        "the written-ahead record was cut back, yet the sync after the failure answered Ok"
    );
    assert!(
        !after_crash(&disk).contains(&record(1)),
        "it is not in the file"
    );
    // And the journal goes on.
    writer.append(&[record(3)]).expect("the next append");
    writer.sync().expect("nothing left to answer for");
    assert_eq!(after_crash(&disk), vec![record(3)]);
}

/// A record written ahead, then a failed write, then a cut back whose
/// fsync fails (the written-ahead record's pages are lost): the next cut
/// must go back below it, not leave its lost bytes before the next
/// records (the journal then did not reopen: a bad record followed by
/// valid ones).
#[test]
fn a_failed_cut_back_does_not_leave_lost_pages_before_new_records() {
    let (disk, mut writer) = fresh();
    writer.write(&[record(1)]).expect("written ahead");
    disk.fail_next_write();
    writer.write(&[record(2)]).expect_err("the write fails");
    disk.fail_next_fsyncs(1);
    writer.sync().expect_err("the cut back's fsync fails");
    writer
        .append(&[record(3)])
        .expect("the next append cuts back and goes on");
    assert_eq!(after_crash(&disk), vec![record(3)]);
}
