//! A config change applied in place runs off the Lifecycle actor's
//! handler: while a service's `apply_config` is held (here on a barrier
//! that is never released), the supervisor still answers — a status, a
//! round trip through the Lifecycle actor (`ping`), a `stop` (which cancels
//! the apply, then drains) and an `exit`. A real supervisor over a real
//! data directory and a real declared file.

use crate::support::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{PATIENCE, exit, running, supervise_with, until};
use steadfast::ConfigChange;
use steadfast::protocol::lifecycle::{LifecycleState, StopReason, StoreOutcome};
use steadfast::service::StoreLock;
use steadfast::{ExitIntent, Hold, TomlFileSource};
use tokio::sync::Notify;

struct Nothing;

impl steadfast::Step for Nothing {
    const NAME: &'static str = "nothing";
    type Config = toml::Table;
    type Output = ();

    async fn execute(
        &self,
        _cx: steadfast::StepContext<'_, toml::Table>,
    ) -> Result<steadfast::Resource<()>, steadfast::StepError> {
        Ok(steadfast::Resource::new("nothing", "", ()))
    }
}

/// A service whose in-place apply says it started, then waits on a barrier
/// nobody releases.
#[derive(Default)]
struct HeldApply {
    entered: Notify,
    barrier: Notify,
    applies: AtomicUsize,
}

impl steadfast::Service for HeldApply {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> steadfast::Plan<toml::Table> {
        steadfast::Plan::new().step(Nothing)
    }

    fn apply_config(
        &self,
        change: ConfigChange<'_, toml::Table>,
        _runtime: &mut steadfast::Runtime,
    ) -> impl Future<Output = Vec<String>> + Send {
        let changed = change.changed.to_vec();
        async move {
            self.applies.fetch_add(1, Ordering::SeqCst);
            self.entered.notify_one();
            self.barrier.notified().await;
            changed
        }
    }
}

/// Writes `text` to the declared file, asks for a reload in a task (its
/// answer waits for the apply), and waits until the service's apply is
/// held on its barrier.
async fn held_apply(
    handle: &steadfast::SupervisorHandle,
    service: &HeldApply,
    file: &std::path::Path,
    text: &str,
) -> tokio::task::JoinHandle<Result<steadfast::protocol::snapshot::Snapshot, steadfast::CommandError>>
{
    std::fs::write(file, text).expect("write the declared file");
    let reloading = handle.clone();
    let reload = tokio::spawn(async move { reloading.reload().await });
    tokio::time::timeout(PATIENCE, service.entered.notified())
        .await
        .expect("the service's apply_config runs");
    reload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_stop_and_exit_are_answered_while_an_apply_is_held() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let file = tmp.path().join("service.toml");
    std::fs::write(&file, "step = 1\n").expect("write the declared file");
    let service = Arc::new(HeldApply::default());
    let source = TomlFileSource::new().required_file(&file).into_source();
    let (run, handle) = supervise_with(&data, source, None, Arc::clone(&service));
    until(&handle, "running", running).await;

    // A stop while the apply is held: answered, the runtime drained.
    let reload = held_apply(&handle, &service, &file, "step = 2\n").await;
    assert!(running(&handle.snapshot()), "status: still running");
    let pinged = tokio::time::timeout(PATIENCE, handle.ping())
        .await
        .expect("the Lifecycle actor answers while the apply is held")
        .expect("ping");
    assert!(running(&pinged), "{:?}", pinged.lifecycle);
    let stopped = tokio::time::timeout(PATIENCE, handle.stop(Hold::None))
        .await
        .expect("a stop is answered while the apply is held")
        .expect("the stop is accepted");
    assert!(
        matches!(
            stopped.lifecycle,
            LifecycleState::Stopped {
                reason: StopReason::OperatorRequest,
                ..
            }
        ),
        "{:?}",
        stopped.lifecycle
    );
    assert_eq!(StoreLock::probe(&data), StoreOutcome::Released);
    // The reload waited for the apply, which the stop cancelled.
    tokio::time::timeout(PATIENCE, reload)
        .await
        .expect("the reload is answered once the apply ended")
        .expect("the reload's task")
        .expect("the reload is accepted");

    // An exit while another apply is held: answered, the process ends.
    handle.start().await.expect("start");
    until(&handle, "running again", running).await;
    let _reload = held_apply(&handle, &service, &file, "step = 3\n").await;
    assert!(running(&handle.snapshot()), "status: still running");
    assert_eq!(service.applies.load(Ordering::SeqCst), 2);
    tokio::time::timeout(PATIENCE, exit(run, &handle, ExitIntent::Halt))
        .await
        .expect("an exit is answered while the apply is held");
    assert_eq!(StoreLock::probe(&data), StoreOutcome::Released);
}
