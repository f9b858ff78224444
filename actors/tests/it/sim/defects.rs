//! The defects the simulations found, as scripted sequences on the
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

/// Record 1 written ahead, then an awaited append of record 2 whose fsync
/// fails: where several defects began.
fn an_append_whose_fsync_failed() -> (SimDisk, JournalFile<SimFile>) {
    let (disk, mut writer) = fresh();
    writer.write(&[record(1)]).expect("written ahead");
    disk.fail_next_fsyncs(1);
    writer
        .append(&[record(2)])
        .expect_err("the append's fsync fails");
    (disk, writer)
}

/// Record 1 written ahead, then a failed write of record 2, then a cut
/// back whose fsync fails.
fn a_cut_back_whose_fsync_failed() -> (SimDisk, JournalFile<SimFile>) {
    let (disk, mut writer) = fresh();
    writer.write(&[record(1)]).expect("written ahead");
    disk.fail_next_write();
    writer.write(&[record(2)]).expect_err("the write fails");
    disk.fail_next_fsyncs(1);
    writer.sync().expect_err("the cut back's fsync fails");
    (disk, writer)
}

/// The records a successor launched now (no crash, the page cache as it
/// is) reads from the journal.
fn what_a_successor_reads(disk: &SimDisk) -> Vec<Record> {
    use steadfast_actors::control_dir::JournalDir as _;
    let read = disk.read_journal().expect("readable").expect("the journal");
    journal::decode(&read).expect("decodes").records
}

/// A transition written ahead, then an awaited append whose fsync fails:
/// the cut that follows takes the written-ahead record too, so the sync
/// the Lifecycle actor makes next must not answer `Ok` for it (it did:
/// nothing was left to sync).
#[test]
fn a_failed_append_fsync_leaves_what_was_written_ahead_unacknowledged() {
    let (disk, mut writer) = an_append_whose_fsync_failed();
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
    let (disk, mut writer) = a_cut_back_whose_fsync_failed();
    writer
        .append(&[record(3)])
        .expect("the next append cuts back and goes on");
    assert_eq!(after_crash(&disk), vec![record(3)]);
}

/// The same failure, and the process is killed before its next append:
/// the cut back whose fsync failed took the file back only to where the
/// failed write began, so the written-ahead record its failure lost was
/// still readable in the page cache; the successor built on it, and a
/// power cut turned it into zeros before the successor's own records (a
/// journal that no longer opened). It is cut at once too.
#[test]
fn a_failed_cut_back_leaves_no_lost_record_for_a_successor_to_read() {
    let (disk, _writer) = a_cut_back_whose_fsync_failed();
    // The process is killed here: what its successor reads.
    let records = what_a_successor_reads(&disk);
    assert!(
        records.is_empty(),
        "a record the failed fsync lost is still there to read: {records:?}"
    );
}

/// The same failure, through the Journal actor's calls (its sync is an
/// empty append): the first answer after the cut is the error, once, and
/// the appends after it go on (they were refused until a relaunch).
#[test]
fn after_a_failed_append_fsync_the_journal_answers_the_cut_once_and_goes_on() {
    let (disk, mut writer) = an_append_whose_fsync_failed();
    writer
        .append(&[])
        .expect_err("the actor's sync answers for the cut record");
    writer
        .append(&[record(3)])
        .expect("the append after that answer goes on");
    assert_eq!(after_crash(&disk), vec![record(3)]);
}

/// A failed fsync leaves its pages clean yet readable: the writer cuts
/// them at once, so a daemon killed before its next append leaves its
/// successor no record that no fsync wrote (it read them as journal
/// records, and a power cut later turned them into zeros before its own:
/// a journal that no longer opens).
#[test]
fn a_failed_fsync_is_cut_back_at_once_not_at_the_next_append() {
    let (disk, _writer) = an_append_whose_fsync_failed();
    // The process is killed here: what its successor reads.
    let records = what_a_successor_reads(&disk);
    assert!(
        records.is_empty(),
        "records no fsync wrote are still there to read: {records:?}"
    );
}

/// A fresh journal's header rides its first append's fsync. When that
/// fsync fails it may lose the header too: the cut back then writes the
/// header again, so the stop acknowledged next is not left behind a
/// header of zeros after a power cut (the journal did not open: "bad
/// magic").
#[test]
fn a_fresh_journal_whose_first_fsync_failed_keeps_its_header() {
    use std::sync::Arc;
    use steadfast_actors::control_dir::ControlDir;
    use steadfast_actors::fsx::sim::simulate_on_this_thread;

    use super::fs::{Faults, SimFileSystem};

    let tmp = tempfile::tempdir().expect("a temp dir");
    let disk = SimFileSystem::new(Rng::new(11), Faults::NONE);
    steadfast_actors::device::run_inline_on_this_thread(true);
    simulate_on_this_thread(Some(Arc::new(disk.clone())));
    let reopened = std::panic::catch_unwind(|| {
        let control = ControlDir::open(tmp.path()).expect("the control dir");
        let (mut writer, _, _) = control.open_journal().expect("a fresh journal");
        disk.set_faults(Faults {
            fsync_error: 1000,
            ..Faults::NONE
        });
        writer
            .append(&[record(1)])
            .expect_err("the first append's fsync fails");
        disk.set_faults(Faults::NONE);
        writer.append(&[record(2)]).expect("the next append");
        drop(writer);
        drop(control);
        disk.crash();
        let control = ControlDir::open(tmp.path()).expect("the control dir reopens");
        control.open_journal().map(|(_, records, _)| records)
    });
    simulate_on_this_thread(None);
    steadfast_actors::device::run_inline_on_this_thread(false);
    let records = reopened
        .expect("no panic")
        .expect("the journal reopens after the power cut");
    assert_eq!(records, vec![record(2)]);
    assert!(
        std::fs::read_dir(tmp.path())
            .expect("the OS dir")
            .next()
            .is_none(),
        "the control dir went through the file-system seam, not to the OS"
    );
}

/// The writer tells its caller which written-ahead records a failure cut
/// back, so they can be written again: a failed fsync dooms every byte
/// not yet durable; a failed write only its own, unless the cut back that
/// follows fails too.
#[test]
fn the_writer_says_which_written_ahead_records_a_failure_cut_back() {
    let (disk, mut writer) = fresh();
    let first = writer
        .write(&[record(1)])
        .expect("written ahead")
        .expect("bytes written");
    assert_eq!(writer.take_cut_from(), None, "nothing cut yet");
    disk.fail_next_fsyncs(1);
    writer.sync().expect_err("the fsync fails");
    assert_eq!(
        writer.take_cut_from(),
        Some(first),
        "the failed fsync cut the written-ahead record back"
    );
    assert_eq!(writer.take_cut_from(), None, "said once");
    assert!(writer.all_durable(), "cut back at once");

    // A failed write of another record dooms only its own bytes: the
    // record written ahead before it is made durable by the cut back.
    let second = writer
        .write(&[record(1)])
        .expect("written again")
        .expect("bytes written");
    disk.fail_next_write();
    writer.write(&[record(2)]).expect_err("the write fails");
    let cut = writer.take_cut_from().expect("the failed write's bytes");
    assert!(cut > second, "{cut} must be past the record at {second}");
    writer
        .sync()
        .expect("the cut back makes the record durable");
    assert!(writer.all_durable());
    assert_eq!(after_crash(&disk), vec![record(1)]);
}
