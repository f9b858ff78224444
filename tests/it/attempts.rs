//! Every attempt ends exactly once, in the journal and in the snapshot,
//! including one whose boot completes just after a stop
//! moved the lifecycle to draining.
//!
//! `a_boot_that_completes_as_a_stop_lands_still_ends`: the service's last
//! step sends a stop through the handle and, blocking inside its own poll
//! (`block_in_place`), waits until the lifecycle is in `draining(stop)`,
//! then returns: the step's result is in within the poll
//! the cancel could only have interrupted at its next one, and the stop
//! was taken before the boot's `booted` report (which, since group
//! commit, follows the last step at once: its checkpoint rides with it). The machine takes `booted` in
//! `draining(stop)` (`protocol/spec/lifecycle.md`: shut the runtime down). Before the
//! fix that path journaled no `attempt_ended`: the attempt stayed "in
//! progress" in the journal and the snapshot for good. The test repeats the
//! boot until the journal shows the path was taken (it fails if it never
//! is), and checks each time that every `attempt_started` has exactly one
//! `attempt_ended` and that neither the snapshot nor `journal` shows an
//! attempt in progress once stopped.
//!
//! `a_boot_that_panics_ends_in_the_journal`: a boot whose step panics ends
//! with one `attempt_ended` (failed) too.

use crate::support::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use common::*;
use steadfast::protocol::journal::Record;
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::AttemptResult;
use steadfast::{
    ExitIntent, Hold, Plan, Resource, Service, Step, StepContext, StepError, SupervisorHandle,
};

/// How many boots the test may take to land the stop in the window.
const TRIES: usize = 20;

/// A service of two steps; while `stop_in_last_step` is set, its last step
/// sends a stop (through `handle`) and returns without waiting for it.
#[derive(Default)]
struct StopsAsItBoots {
    handle: OnceLock<SupervisorHandle>,
    stop_in_last_step: AtomicBool,
}

/// The first step: creates nothing.
struct Prepare;

impl Step for Prepare {
    const NAME: &'static str = "prepare";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, _cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        Ok(Resource::new(Self::NAME, Self::NAME, ()))
    }
}

/// The last step: sends the stop while `stop_in_last_step` is set.
struct Serve(Arc<StopsAsItBoots>);

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, _cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        if self.0.stop_in_last_step.swap(false, Ordering::SeqCst) {
            let handle = self.0.handle.get().expect("the handle is set").clone();
            let stopper = handle.clone();
            tokio::spawn(async move {
                let _ = stopper.stop(Hold::None).await;
            });
            // Blocks inside this poll on purpose (`block_in_place` hands
            // this worker's queued tasks to another thread, so the stop and
            // the Lifecycle actor run meanwhile).
            tokio::task::block_in_place(|| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while !matches!(handle.snapshot().lifecycle, LifecycleState::Draining { .. })
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
        }
        Ok(Resource::new(Self::NAME, Self::NAME, ()))
    }
}

/// The service the supervisor holds, over the switches the test shares.
struct Stopper(Arc<StopsAsItBoots>);

impl Service for Stopper {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Prepare).step(Serve(Arc::clone(&self.0)))
    }
}

fn records(data_dir: &Path) -> Vec<Record> {
    steadfast_actors::control_dir::read_journal(
        &steadfast_actors::control_dir::ControlDir::under(data_dir).join("journal"),
    )
    .expect("the journal reads")
}

/// Whether the journal shows `booted` taken while draining.
fn booted_while_draining(records: &[Record]) -> bool {
    records.iter().any(|r| {
        matches!(r, Record::Transition { from, event, .. }
            if from.starts_with("draining") && event == "booted")
    })
}

/// Every `attempt_started` has exactly one `attempt_ended`.
fn assert_each_attempt_ends_once(records: &[Record]) {
    let started: Vec<std::num::NonZeroU32> = records
        .iter()
        .filter_map(|r| match r {
            Record::AttemptStarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    for attempt in &started {
        let ended = records
            .iter()
            .filter(|r| matches!(r, Record::AttemptEnded { attempt: a, .. } if a == attempt))
            .count();
        assert_eq!(
            ended, 1,
            "attempt {attempt} has {ended} attempt_ended records: {records:#?}"
        );
    }
}

/// `protocol/spec/lifecycle.md`, `draining(stop)` × `booted`: the attempt ends.
/// The step blocks inside its poll until the stop has moved the lifecycle
/// to draining, so the race is lost the same way each time, not by luck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_that_completes_as_a_stop_lands_still_ends() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let service = Arc::new(StopsAsItBoots::default());
    service.stop_in_last_step.store(true, Ordering::SeqCst);
    let (supervisor, handle) =
        steadfast::Supervisor::builder(tmp.path(), Stopper(Arc::clone(&service)))
            .config(Switch::new(Some(good())).source())
            .timings(test_timings())
            .build()
            .expect("the supervisor starts");
    assert!(service.handle.set(handle.clone()).is_ok());
    let run = tokio::spawn(supervisor.run());

    let mut hit = false;
    for _ in 0..TRIES {
        let stopped = until(&handle, "stopped", |s| {
            matches!(s.lifecycle, LifecycleState::Stopped { .. })
        })
        .await;
        let journal = records(tmp.path());
        assert_each_attempt_ends_once(&journal);
        let in_progress: Vec<_> = stopped
            .attempts
            .iter()
            .filter(|a| a.result == AttemptResult::InProgress)
            .collect();
        assert!(
            in_progress.is_empty(),
            "stopped, yet the snapshot says in progress: {in_progress:#?}"
        );
        let told = handle.journal(100).await.expect("journal");
        assert!(
            told.iter()
                .all(|a| a.attempt.result != AttemptResult::InProgress),
            "stopped, yet the journal says in progress: {told:#?}"
        );
        if booted_while_draining(&journal) {
            hit = true;
            break;
        }
        service.stop_in_last_step.store(true, Ordering::SeqCst);
        handle.start().await.expect("start");
    }
    assert!(
        hit,
        "in {TRIES} boots the stop never landed before `booted`: the test did not test"
    );
    let last = handle.snapshot();
    assert_eq!(
        last.attempts.last().map(|a| a.result),
        Some(AttemptResult::Cancelled),
        "booted during the drain: cancelled"
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A boot whose step panics (its task reports the panic) ends too:
/// before the fix the snapshot said failed but the journal had no
/// `attempt_ended` for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_that_panics_ends_in_the_journal() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(
        tmp.path(),
        Switch::new(Some(config(
            "listen_addr = \"127.0.0.1:0\"\npanic_in = \"serve\"",
        )))
        .source(),
        None,
    );
    until(&handle, "a failed boot", failed).await;
    handle.stop(Hold::None).await.expect("stop");
    let journal = records(tmp.path());
    assert!(
        journal.iter().any(|r| matches!(
            r,
            Record::AttemptEnded {
                result: steadfast::protocol::journal::AttemptResult::Failed,
                ..
            }
        )),
        "{journal:#?}"
    );
    assert_each_attempt_ends_once(&journal);
    exit(run, &handle, ExitIntent::Halt).await;
}
