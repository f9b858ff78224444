//! Defects the daemon simulation found, as scripted sequences of the real
//! supervisor over the simulated disk (each failed before its fix).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use steadfast::config::{ConfigSource, ResolvedConfig};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::supervisor::Timings;
use steadfast::{
    ExitIntent, Made, Plan, Service, Step, StepContext, StepError, Supervisor, SupervisorHandle,
};
use tokio::sync::Semaphore;

use super::fs::{Faults, SimFileSystem};
use super::rng::Rng;

/// One step that waits for a permit: a boot as slow as the test wants.
struct Gate(Arc<Semaphore>);

impl Step for Gate {
    const NAME: &'static str = "gate";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, _cx: StepContext<'_, toml::Table>) -> Result<Made<()>, StepError> {
        drop(self.0.acquire().await.map_err(StepError::backoff)?);
        Ok(Made::new("gate", "", ()))
    }
}

struct Gated(Arc<Semaphore>);

impl Service for Gated {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Gate(Arc::clone(&self.0)))
    }
}

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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let gate = Arc::new(Semaphore::new(1));
        let (supervisor, handle) = Supervisor::builder(&data_dir, Gated(Arc::clone(&gate)))
            .config(ConfigSource::new(|| {
                Ok(ResolvedConfig::untracked(toml::Table::new()))
            }))
            .timings(Timings {
                commit_window: Duration::from_millis(50),
                drain_grace: Duration::from_secs(2),
                ..Timings::default()
            })
            .build()
            .expect("the supervisor starts");
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
