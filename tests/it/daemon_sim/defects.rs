//! Defects the daemon simulation found, as scripted sequences of the real
//! supervisor over the simulated disk (each failed before its fix).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use steadfast::config::{ConfigSource, ResolvedConfig};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::supervisor::Timings;
use steadfast::{ExitIntent, Hold, Supervisor, SupervisorHandle};
use tokio::sync::Semaphore;

use super::fs::{Faults, SimFileSystem};
use super::rng::Rng;

use crate::support::common::Gated;

/// The seams a scripted run installs on its thread, removed on drop.
struct Simulated;

impl Simulated {
    fn install(disk: &SimFileSystem) -> Self {
        steadfast_actors::device::run_inline_on_this_thread(true);
        steadfast_actors::fsx::sim::simulate_on_this_thread(Some(Arc::new(disk.clone())));
        Self
    }
}

impl Drop for Simulated {
    fn drop(&mut self) {
        steadfast_actors::device::run_inline_on_this_thread(false);
        steadfast_actors::fsx::sim::simulate_on_this_thread(None);
    }
}

/// A current-thread runtime on paused (virtual) time.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// A supervisor of one [`Gated`] step over `data_dir`, with an empty
/// config and `timings`.
fn supervise(
    data_dir: &Path,
    gate: Arc<Semaphore>,
    timings: Timings,
) -> (Supervisor, SupervisorHandle) {
    launch(data_dir, gate, timings).expect("the supervisor starts")
}

/// [`supervise`], or why the launch failed.
fn launch(
    data_dir: &Path,
    gate: Arc<Semaphore>,
    timings: Timings,
) -> Result<(Supervisor, SupervisorHandle), steadfast::SupervisorError> {
    Supervisor::builder(data_dir, Gated(gate))
        .config(ConfigSource::new(|| {
            Ok(ResolvedConfig::untracked(toml::Table::new()))
        }))
        .timings(timings)
        .build()
}

/// A journal a predecessor left at `data_dir`'s control dir (made
/// durable, as if there before): `bytes` written, fsynced if `synced`.
fn a_journal_left_behind(
    disk: &SimFileSystem,
    data_dir: &Path,
    bytes: &[u8],
    synced: bool,
) -> std::path::PathBuf {
    use steadfast_actors::fsx::sim::SimFs as _;
    let control = data_dir.join(".steadfast");
    let journal = control.join("journal");
    disk.create_dir_all_durable(&control)
        .expect("the control dir");
    let file = disk
        .open(&journal, steadfast_actors::fsx::Access::AppendCreateNew)
        .expect("the journal");
    file.write(bytes).expect("written");
    if synced {
        file.sync(true).expect("durable");
    }
    journal
}

/// The last attempt of the last run the journal on `disk` holds, as a
/// relaunch would replay it.
fn last_journaled_attempt(disk: &SimFileSystem, data_dir: &Path) -> u32 {
    let bytes = disk
        .read(data_dir.join(".steadfast").join("journal"))
        .expect("a journal");
    let records = steadfast::protocol::journal::decode(&bytes)
        .expect("the journal decodes")
        .records;
    let attempts = steadfast::protocol::history::attempts(&records, usize::MAX);
    let last_run = attempts.iter().map(|a| a.run).max();
    attempts
        .iter()
        .filter(|a| Some(a.run) == last_run)
        .map(|a| a.attempt.attempt.get())
        .max()
        .unwrap_or(0)
}

async fn until(handle: &SupervisorHandle, pred: impl Fn(&LifecycleState) -> bool) {
    let mut rx = handle.watch();
    tokio::time::timeout(Duration::from_secs(3_600), async {
        while !pred(&rx.borrow_and_update().lifecycle) {
            rx.changed().await.expect("the supervisor runs");
        }
    })
    .await
    .expect("reached within an hour of virtual time");
}

fn running(attempt: u32) -> impl Fn(&LifecycleState) -> bool {
    move |state| matches!(state, LifecycleState::Running { attempt: a, .. } if a.get() == attempt)
}

/// A daemon on `data_dir` over `disk` (after `refused` launches that
/// must fail on the disk's faults) reaches running and acknowledges a held
/// stop; then the machine loses its power. What survives is on `disk`.
fn a_held_stop_then_a_power_cut(disk: &SimFileSystem, data_dir: &Path, refused: u32) {
    let _seams = Simulated::install(disk);
    let runtime = paused_runtime();
    runtime.block_on(async {
        let build = || launch(data_dir, Arc::new(Semaphore::new(1)), Timings::default());
        for n in 0..refused {
            assert!(build().is_err(), "launch {n} fails on the disk's fault");
        }
        let (supervisor, handle) = build().expect("the launch");
        let _daemon = tokio::spawn(supervisor.run());
        until(&handle, running(1)).await;
        let stopped = handle.stop(Hold::AcrossRelaunch).await;
        assert!(
            stopped.is_ok(),
            "the held stop is acknowledged: {stopped:?}"
        );
    });
    drop(runtime);
    disk.crash();
}

/// A boot is written ahead of its fsync; the fsync fails and its records
/// are cut back while the boot runs on. Once the disk recovers, the
/// daemon reports the boot's attempt running, so the journal must hold
/// that attempt: a crash now must replay it. The records cut back were
/// never written again, so a relaunch replayed the attempt before.
#[test]
fn a_boot_whose_written_ahead_record_was_cut_back_is_journaled_once_the_disk_recovers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let disk = SimFileSystem::new(Rng::new(1), Faults::NONE);
    let _seams = Simulated::install(&disk);
    let runtime = paused_runtime();
    runtime.block_on(async {
        let gate = Arc::new(Semaphore::new(1));
        let (supervisor, handle) = supervise(
            &data_dir,
            Arc::clone(&gate),
            Timings {
                commit_window: Duration::from_millis(50),
                drain_grace: Duration::from_secs(2),
                ..Timings::default()
            },
        );
        let daemon = tokio::spawn(supervisor.run());
        until(&handle, running(1)).await;
        assert_eq!(last_journaled_attempt(&disk, &data_dir), 1);

        // The next boot's step waits; the journal's next fsync fails.
        let held = Arc::clone(&gate).acquire_owned().await.expect("permit");
        disk.fail_next_fsyncs_of(data_dir.join(".steadfast").join("journal"), 1);
        let restart = tokio::spawn({
            let handle = handle.clone();
            async move { handle.restart().await }
        });
        until(
            &handle,
            |state| matches!(state, LifecycleState::Booting { attempt, .. } if attempt.get() == 2),
        )
        .await;
        // The commit window passes: the fsync fails, the records written
        // ahead are cut back, and the restart is answered with the error.
        let answer = restart.await.expect("the restart's task");
        assert!(
            answer.is_err(),
            "a restart whose record's fsync failed is not answered Ok: {answer:?}"
        );

        // The disk is healthy again: the boot ends, its outcome is
        // appended, and attempt 2 is reported running with no error.
        drop(held);
        until(&handle, running(2)).await;
        let snapshot = handle.snapshot();
        assert_eq!(snapshot.error, None, "the journal error cleared");
        assert_eq!(
            last_journaled_attempt(&disk, &data_dir),
            2,
            "the attempt reported running is the one a relaunch replays"
        );
        handle.exit(ExitIntent::Halt).await.expect("exit");
        daemon.await.expect("the supervisor's task");
    });
}

/// A restart's drain is written ahead of its fsync; the boot it starts
/// is written next, and that write fails (nothing lands), so the boot's
/// records are staged for the next append while the boot runs on. The
/// fsync that settles the restart then succeeds, as it covers only what
/// was written: the daemon must not report the boot's attempt with the
/// journal healthy while the journal lacks it (a power cut would lose
/// it). The sync cleared the journal error.
#[test]
fn a_boot_whose_write_failed_is_not_reported_journaled_until_it_is() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let journal = data_dir.join(".steadfast").join("journal");
    let disk = SimFileSystem::new(Rng::new(5), Faults::NONE);
    let _seams = Simulated::install(&disk);
    let runtime = paused_runtime();
    runtime.block_on(async {
        let gate = Arc::new(Semaphore::new(1));
        let (supervisor, handle) = supervise(
            &data_dir,
            Arc::clone(&gate),
            Timings {
                commit_window: Duration::from_millis(50),
                ..Timings::default()
            },
        );
        let daemon = tokio::spawn(supervisor.run());
        until(&handle, running(1)).await;

        // The next boot's step waits. The restart writes its drain (one
        // write), the drain ends at once, and the boot's write fails.
        let held = Arc::clone(&gate).acquire_owned().await.expect("permit");
        disk.fail_a_write_of(&journal, 1);
        let restart = handle.restart().await;
        assert!(restart.is_ok(), "the drain is durable: {restart:?}");
        let snapshot = handle.snapshot();
        assert!(
            matches!(snapshot.lifecycle, LifecycleState::Booting { attempt, .. } if attempt.get() == 2),
            "{:?}",
            snapshot.lifecycle
        );
        assert_eq!(
            last_journaled_attempt(&disk, &data_dir),
            1,
            "the boot's records were not written"
        );
        assert!(
            snapshot
                .error
                .as_deref()
                .is_some_and(|error| error.contains("journal")),
            "attempt 2 is shown while the journal lacks it: the journal's error must stand: {:?}",
            snapshot.error
        );

        // The boot ends; its outcome's append writes the staged records
        // first: attempt 2 is journaled and the error clears.
        drop(held);
        until(&handle, running(2)).await;
        assert_eq!(handle.snapshot().error, None, "the journal error cleared");
        assert_eq!(last_journaled_attempt(&disk, &data_dir), 2);
        handle.exit(ExitIntent::Halt).await.expect("exit");
        daemon.await.expect("the supervisor's task");
    });
}

/// A launch created `.steadfast` and was killed (or failed on a disk
/// fault) before any fsync of the data dir made that name durable. The
/// next launch found the directory there and took its name for durable:
/// it fsynced the control dir, never the data dir, and a power cut took
/// the whole control dir with every acknowledged record in it.
#[test]
fn a_control_dir_a_predecessor_left_unsynced_is_made_durable() {
    use steadfast_actors::fsx::sim::SimFs as _;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let disk = SimFileSystem::new(Rng::new(6), Faults::NONE);
    disk.create_dir_all_durable(&data_dir)
        .expect("the data dir");
    // The predecessor's mkdir: in the page cache, not yet durable.
    assert!(
        disk.create_dir(&data_dir.join(".steadfast"))
            .expect("mkdir")
    );
    a_held_stop_then_a_power_cut(&disk, &data_dir, 0);
    assert!(
        disk.exists(data_dir.join(".steadfast").join("journal")),
        "the control dir holding an acknowledged stop survives a power cut"
    );
    assert_eq!(last_journaled_attempt(&disk, &data_dir), 1);
}

/// A journal left with a torn header (a launch's first write cut short):
/// the next launch writes a fresh header and its fsync fails, so that
/// launch fails; the header stayed readable though no fsync wrote it, and
/// the launch tried next took it for durable (its own fsync at open
/// succeeds: the failed one marked the pages clean). A power cut then left
/// a journal that no longer opened (bad magic) before the records it had
/// acknowledged.
#[test]
fn a_fresh_header_whose_fsync_failed_at_open_is_not_trusted_by_the_next_launch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let disk = SimFileSystem::new(Rng::new(7), Faults::NONE);
    let torn = &steadfast::protocol::journal::encode_header()[..3];
    let journal = a_journal_left_behind(&disk, &data_dir, torn, true);
    disk.fail_next_fsyncs_of(&journal, 1);
    a_held_stop_then_a_power_cut(&disk, &data_dir, 1);
    assert_eq!(
        last_journaled_attempt(&disk, &data_dir),
        1,
        "the journal opens after the power cut"
    );
}

/// A journal whose last bytes no fsync wrote (a killed predecessor's):
/// the launch's fsync at open fails, losing them, and writing the journal
/// into a new file fails at its rename, so the launch fails. The bytes
/// stayed readable, and the launch tried next, whose own fsync at open
/// succeeds (the failed one marked the pages clean), took them for durable
/// and appended after them: a power cut left a journal that no longer
/// opened. It now writes the journal into a new file first.
#[test]
fn a_journal_whose_fsync_at_open_failed_is_not_trusted_by_the_next_launch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let disk = SimFileSystem::new(Rng::new(8), Faults::NONE);
    let header = steadfast::protocol::journal::encode_header();
    // In the page cache only.
    let journal = a_journal_left_behind(&disk, &data_dir, &header, false);
    disk.fail_next_fsyncs_of(&journal, 1);
    disk.fail_next_renames(1);
    a_held_stop_then_a_power_cut(&disk, &data_dir, 1);
    assert_eq!(
        last_journaled_attempt(&disk, &data_dir),
        1,
        "the journal opens after the power cut"
    );
    assert!(
        !disk.exists(data_dir.join(".steadfast").join("journal.unsure")),
        "the marker is gone"
    );
}

/// The daemon creates its data dir (and a missing parent) itself, as
/// `minimal ./dir` does on a path that does not exist yet. Nothing made
/// those names durable: a power cut after an acknowledged stop took the
/// whole data dir with the journal that held it.
#[test]
fn a_data_dir_the_daemon_created_survives_a_power_cut() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("new").join("data");
    let disk = SimFileSystem::new(Rng::new(9), Faults::NONE);
    a_held_stop_then_a_power_cut(&disk, &data_dir, 0);
    assert!(
        disk.exists(data_dir.join(".steadfast").join("hold")),
        "the data dir and the acknowledged hold survive a power cut"
    );
    assert_eq!(last_journaled_attempt(&disk, &data_dir), 1);
}

/// A fresh journal's header rides the first fsync. The first boot's
/// records are written ahead of it; a stop's write then fails, and the
/// fsync of the cut back that follows fails too, losing the header with
/// the records. The writer cut the file back to the header's end, which no
/// fsync had written, and a power cut left a journal whose header read as
/// zeros: the next launch refused to start (bad magic).
#[test]
fn a_fresh_journal_whose_header_a_failed_cut_lost_still_opens() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let journal = data_dir.join(".steadfast").join("journal");
    let disk = SimFileSystem::new(Rng::new(10), Faults::NONE);
    let _seams = Simulated::install(&disk);
    let runtime = paused_runtime();
    runtime.block_on(async {
        let gate = Arc::new(Semaphore::new(1));
        let _held = Arc::clone(&gate).acquire_owned().await.expect("permit");
        let (supervisor, handle) = supervise(
            &data_dir,
            gate,
            Timings {
                // Written-ahead records wait for an outcome, not a timer.
                commit_window: Duration::from_secs(3_600),
                ..Timings::default()
            },
        );
        let _daemon = tokio::spawn(supervisor.run());
        // The first boot is written ahead and waits at its step.
        tokio::time::sleep(Duration::from_secs(1)).await;
        disk.fail_a_write_of(&journal, 0);
        disk.fail_next_fsyncs_of(&journal, 1);
        let stopped = handle.stop(Hold::None).await;
        assert!(stopped.is_err(), "the stop's write failed: {stopped:?}");
    });
    drop(runtime);
    disk.crash();
    let relaunched = launch(&data_dir, Arc::new(Semaphore::new(1)), Timings::default());
    assert!(
        relaunched.is_ok(),
        "the journal opens after the power cut: {:?}",
        relaunched.err()
    );
}

/// The directory fsync that makes a launch's `holding` marker durable
/// fails (once; or again when the first append does it anew, and again).
/// Nothing may be acknowledged until the marker is on disk (a crash must
/// read as a crash), but the disk recovers: the daemon makes the marker
/// durable anew and goes on, rather than refusing every journal append
/// and marker write until a relaunch.
#[test]
fn a_launch_whose_marker_fsync_failed_recovers_without_a_relaunch() {
    for failures in 1..=3 {
        launch_after_failed_marker_fsyncs(failures);
    }
}

fn launch_after_failed_marker_fsyncs(failures: u32) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let control = data_dir.join(".steadfast");
    let disk = SimFileSystem::new(Rng::new(2), Faults::NONE);
    disk.create_dir_all_durable(&control)
        .expect("the control dir");
    disk.fail_next_fsyncs_of(&control, failures);
    let _seams = Simulated::install(&disk);
    let launch = |disk: &SimFileSystem| {
        let runtime = paused_runtime();
        let snapshot = runtime.block_on(async {
            let gate = Arc::new(Semaphore::new(1));
            let (supervisor, handle) = supervise(&data_dir, gate, Timings::default());
            let _daemon = tokio::spawn(supervisor.run());
            until(&handle, |state| {
                matches!(state, LifecycleState::Running { .. })
            })
            .await;
            // The disk is healthy again: commands are acknowledged.
            let stopped = handle.stop(Hold::None).await;
            assert!(stopped.is_ok(), "{failures} failures: stop: {stopped:?}");
            let started = handle.start().await;
            assert!(started.is_ok(), "{failures} failures: start: {started:?}");
            until(&handle, |state| {
                matches!(state, LifecycleState::Running { .. })
            })
            .await;
            assert_eq!(
                handle.snapshot().error,
                None,
                "{failures} failures: nothing left unsaid"
            );
            handle.snapshot()
        });
        // The process dies with its runtime; the machine loses its power.
        drop(runtime);
        disk.crash();
        snapshot
    };
    let first = launch(&disk);
    let LifecycleState::Running { attempt, .. } = first.lifecycle else {
        panic!("{failures} failures: not running: {:?}", first.lifecycle);
    };
    assert_eq!(
        last_journaled_attempt(&disk, &data_dir),
        attempt.get(),
        "{failures} failures: the running attempt is durable"
    );
    let second = launch(&disk);
    assert!(
        matches!(
            second.previous_run,
            steadfast::protocol::snapshot::PreviousRun::Crashed { .. }
        ),
        "{failures} failures: a power cut after the launch reads as a crash: {:?}",
        second.previous_run
    );
}

/// A `config set` whose override file was renamed into place but whose
/// directory fsync failed is answered `not durable`, and the live tier
/// keeps the leaf unset; yet the rename may reach the disk. An `unset` of
/// that leaf then changed nothing in the live tier and was answered `Ok`
/// without a write, and the next process read the leaf back as set.
#[test]
fn an_unset_after_a_set_answered_not_durable_is_durable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let control = data_dir.join(".steadfast");
    let disk = SimFileSystem::new(Rng::new(3), Faults::NONE);
    disk.create_dir_all_durable(&control)
        .expect("the control dir");
    let _seams = Simulated::install(&disk);
    let launch = |disk: &SimFileSystem, fault: bool| {
        let runtime = paused_runtime();
        let tag = runtime.block_on(async {
            let (supervisor, handle) =
                supervise(&data_dir, Arc::new(Semaphore::new(1)), Timings::default());
            let _daemon = tokio::spawn(supervisor.run());
            until(&handle, running(1)).await;
            if fault {
                // The control directory's next fsync (the override file's
                // rename) fails; the rename itself is in the page cache.
                disk.fail_next_fsyncs_of(&control, 1);
                let set = handle.config_set("tag", 1.into()).await;
                assert!(set.is_err(), "the set is not durable: {set:?}");
                let unset = handle.config_unset("tag").await;
                assert!(unset.is_ok(), "the unset is acknowledged: {unset:?}");
            }
            let view = handle.config_show(Some("tag")).await.expect("config show");
            view.overrides
                .iter()
                .find(|(leaf, _)| leaf == "tag")
                .map(|(_, value)| value.clone())
        });
        // The process is killed: what it wrote stays in the page cache,
        // the rename the failed fsync did not vouch for included.
        drop(runtime);
        tag
    };
    assert_eq!(launch(&disk, true), None, "unset, as acknowledged");
    assert_eq!(
        launch(&disk, false),
        None,
        "the acknowledged unset survives the process"
    );
}

/// A `stop --hold` whose hold marker was renamed into place but whose
/// directory fsync failed is answered `not durable` and not adopted (the
/// runtime is not held); yet the marker is in the page cache. A later
/// `stop` and `start` were acknowledged without touching the marker (the
/// live state held nothing to clear), so the next process came up held:
/// stopped, the acknowledged start undone.
#[test]
fn a_start_after_a_hold_answered_not_durable_is_not_undone_by_the_marker() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let control = data_dir.join(".steadfast");
    let disk = SimFileSystem::new(Rng::new(4), Faults::NONE);
    disk.create_dir_all_durable(&control)
        .expect("the control dir");
    let _seams = Simulated::install(&disk);
    let launch = |fault: bool| {
        let runtime = paused_runtime();
        let first = runtime.block_on(async {
            let (supervisor, handle) =
                supervise(&data_dir, Arc::new(Semaphore::new(1)), Timings::default());
            let first = handle.snapshot();
            let _daemon = tokio::spawn(supervisor.run());
            if fault {
                until(&handle, running(1)).await;
                // The control directory's next fsync (the hold marker's
                // rename) fails; the rename itself is in the page cache.
                disk.fail_next_fsyncs_of(&control, 1);
                let held = handle.stop(Hold::AcrossRelaunch).await;
                assert!(held.is_err(), "the held stop is not durable: {held:?}");
                let stopped = handle.stop(Hold::None).await;
                assert!(stopped.is_ok(), "a plain stop: {stopped:?}");
                let started = handle.start().await;
                assert!(started.is_ok(), "the start: {started:?}");
                until(&handle, running(2)).await;
            }
            first
        });
        // The process is killed: what it wrote stays in the page cache.
        drop(runtime);
        first
    };
    launch(true);
    let relaunched = launch(false);
    assert!(
        !relaunched.hold,
        "the next process is not held: the acknowledged start stands ({:?})",
        relaunched.lifecycle
    );
}

/// A daemon is killed with records written ahead of their fsync in the
/// page cache; its successor opens the journal, takes its whole length for
/// durable, and its first fsync fails — which on Linux marks every dirty
/// page clean, the predecessor's tail included. The successor cut back
/// only its own records, appended after that lost tail, and a power cut
/// then left zeros before valid records: a journal that no longer opens.
#[test]
fn a_predecessors_unsynced_tail_is_made_durable_before_it_is_built_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let journal = data_dir.join(".steadfast").join("journal");
    let disk = SimFileSystem::new(Rng::new(5), Faults::NONE);
    let _seams = Simulated::install(&disk);
    let runtime = || paused_runtime();
    let supervise = |gate: &Arc<Semaphore>| {
        supervise(
            &data_dir,
            Arc::clone(gate),
            Timings {
                // Written-ahead records wait for an outcome, not a timer.
                commit_window: Duration::from_secs(3_600),
                ..Timings::default()
            },
        )
    };
    // The first daemon restarts; its next boot waits, its records written
    // ahead of their fsync. Then it is killed.
    let first = runtime();
    first.block_on(async {
        let gate = Arc::new(Semaphore::new(1));
        let (supervisor, handle) = supervise(&gate);
        let _daemon = tokio::spawn(supervisor.run());
        until(&handle, running(1)).await;
        let _held = Arc::clone(&gate).acquire_owned().await.expect("permit");
        let _restart = tokio::spawn({
            let handle = handle.clone();
            async move { handle.restart().await }
        });
        // Nothing is published before the fsync: a second passes, the
        // drain and the next boot's start written ahead.
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    drop(first);
    // The successor's first fsync of the journal fails.
    disk.fail_next_fsyncs_of(&journal, 1);
    let second = runtime();
    second.block_on(async {
        let (supervisor, handle) = supervise(&Arc::new(Semaphore::new(1)));
        let _daemon = tokio::spawn(supervisor.run());
        until(&handle, |state| {
            matches!(state, LifecycleState::Running { .. })
        })
        .await;
        // And goes on: its records land after the predecessor's.
        let stopped = handle.stop(Hold::None).await;
        assert!(stopped.is_ok(), "{stopped:?}");
        let started = handle.start().await;
        assert!(started.is_ok(), "{started:?}");
    });
    // The power is cut.
    drop(second);
    disk.crash();
    let bytes = disk.read(&journal).expect("a journal");
    let decoded = steadfast::protocol::journal::decode(&bytes);
    assert!(
        decoded.is_ok(),
        "the journal opens after the power cut: {:?}",
        decoded.err()
    );
}

/// The journal is removed underneath a running daemon (by hand, by a
/// cleanup job). Appends went on into the unlinked file and were
/// acknowledged, and the next process, finding no journal, knew nothing of
/// them: an acknowledged stop came back running. Now nothing more is
/// appended, and the answer names what happened.
#[test]
fn a_journal_removed_underneath_is_not_appended_to() {
    use steadfast_actors::fsx::sim::SimFs as _;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let journal = data_dir.join(".steadfast").join("journal");
    let disk = SimFileSystem::new(Rng::new(6), Faults::NONE);
    let _seams = Simulated::install(&disk);
    let runtime = paused_runtime();
    runtime.block_on(async {
        let (supervisor, handle) =
            supervise(&data_dir, Arc::new(Semaphore::new(1)), Timings::default());
        let _daemon = tokio::spawn(supervisor.run());
        until(&handle, running(1)).await;
        assert!(
            disk.unlink(&journal).expect("unlink"),
            "the journal was there"
        );
        let stopped = handle.stop(Hold::None).await;
        let error = stopped.expect_err("a stop whose record has no journal to go to");
        assert!(
            error.to_string().contains("was removed"),
            "the answer says what happened: {error}"
        );
        assert!(
            matches!(handle.snapshot().lifecycle, LifecycleState::Running { .. }),
            "the stop was not adopted"
        );
    });
}

/// A relaunch after a clean stop writes its run marker over `released` in
/// place. A write the disk refuses there is undone and a new marker is
/// renamed over it, so the launch goes on and reads the clean stop; a
/// power cut once it runs reads a crash (the renamed marker was made
/// durable as any is).
#[test]
fn a_marker_write_refused_in_place_leaves_the_clean_stop_and_the_launch_goes_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let run = data_dir.join(".steadfast").join("run");
    let disk = SimFileSystem::new(Rng::new(7), Faults::NONE);
    let _seams = Simulated::install(&disk);
    let previous_after = |disk: &SimFileSystem, exit: bool| {
        let runtime = paused_runtime();
        let previous = runtime.block_on(async {
            let (supervisor, handle) =
                supervise(&data_dir, Arc::new(Semaphore::new(1)), Timings::default());
            let daemon = tokio::spawn(supervisor.run());
            until(&handle, running(1)).await;
            let previous = handle.snapshot().previous_run;
            if exit {
                let exited = handle.exit(ExitIntent::Relaunch).await;
                assert!(exited.is_ok(), "{exited:?}");
                assert_eq!(daemon.await.ok(), Some(ExitIntent::Relaunch));
            }
            previous
        });
        drop(runtime);
        if !exit {
            disk.crash();
        }
        previous
    };
    previous_after(&disk, true);
    // The next write into `run`, the relaunch's marker in place, fails.
    disk.fail_a_write_of(&run, 0);
    let previous = previous_after(&disk, false);
    assert!(
        matches!(
            previous,
            steadfast::protocol::snapshot::PreviousRun::CleanStop { .. }
        ),
        "{previous:?}"
    );
    let previous = previous_after(&disk, true);
    assert!(
        matches!(
            previous,
            steadfast::protocol::snapshot::PreviousRun::Crashed { .. }
        ),
        "after a power cut: {previous:?}"
    );
}
