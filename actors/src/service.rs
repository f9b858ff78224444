//! What an embedding application implements: its runtime as an ordered plan
//! of steps (the shape of seed 003), and the live [`Runtime`] those steps
//! build.
//!
//! A boot runs `resolve_config` (the supervisor's own first phase), then
//! [`Service::plan`]'s steps in order. Each step executes and yields a
//! [`ResourceRecord`] that names what it created; the live objects (an open
//! store, a bound listener) go into the [`Runtime`], a typed map the later
//! steps read. A step that serves spawns its tasks with [`Runtime::spawn`]; a
//! task that returns or panics while the runtime is running is the lifecycle's
//! `runtime_ended`. A drain destroys the checkpoints in reverse order and
//! confirms each destruction with [`Service::observe`], never by the absence of
//! an error.
//!
//! Invariant: a [`Runtime`] that is dropped (a boot that panicked, a
//! supervisor that ended) cancels its shutdown token and aborts its tasks, so
//! nothing it spawned outlives it. Checked by
//! `service::tests::dropping_a_runtime_stops_its_tasks`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use steadfast_protocol::journal::ResourceRecord;
use steadfast_protocol::lifecycle::FailureClass;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
pub use tokio_util::sync::CancellationToken;

/// A boxed, sendable future: what [`Service`]'s methods return, so the trait
/// stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A step that failed, and whether waiting can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StepError {
    /// The error, rendered.
    pub message: String,
    /// Backoff (retry on a timer) or hold (retry when the config changes).
    pub class: FailureClass,
}

impl StepError {
    /// A failure that waiting can fix (a port still taken).
    pub fn backoff(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            class: FailureClass::Backoff,
        }
    }

    /// A failure that only a config change or an operator fixes.
    pub fn hold(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            class: FailureClass::Hold,
        }
    }
}

/// Whether a checkpointed resource is really there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// It is.
    Present,
    /// It is not.
    Gone,
}

/// A completed step and the record of what it created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The step's name.
    pub step: String,
    /// Its position in the plan, from 2 (`resolve_config` is 1).
    pub index: u32,
    /// What it created.
    pub resource: ResourceRecord,
}

/// What a step is handed.
pub struct StepContext<'a> {
    /// Which boot of this daemon.
    pub attempt: u32,
    /// The effective config this boot resolved.
    pub config: &'a toml::Table,
    /// The data directory (fixed for the life of the daemon).
    pub data_dir: &'a Path,
    /// The live runtime the earlier steps built.
    pub runtime: &'a mut Runtime,
    /// The checkpoints of the earlier steps of this boot.
    pub prior: &'a [Checkpoint],
    /// The step's deadline: [`StepProgress::report`] pushes it back by
    /// `Timings::step_deadline`; a step that passes it fails with class
    /// backoff.
    pub progress: &'a StepProgress,
}

/// The embedding application's runtime, described as a plan of steps.
pub trait Service: Send + Sync + 'static {
    /// The steps a boot runs after `resolve_config`, in order, for this
    /// config. Names are the phases operators see (`open_store`,
    /// `bind_listener`, `serve`).
    fn plan(&self, config: &toml::Table) -> Vec<String>;

    /// Run one step; return the record of what it created.
    fn execute<'a>(
        &'a self,
        step: &'a str,
        cx: StepContext<'a>,
    ) -> BoxFuture<'a, Result<ResourceRecord, StepError>>;

    /// Whether a checkpointed resource is really there. Decides both the
    /// resume (a present resource is not recreated) and the drain (a
    /// destruction counts only once this says gone).
    fn observe<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        runtime: &'a Runtime,
    ) -> BoxFuture<'a, Observation>;

    /// Remove a resource.
    fn destroy<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Result<(), StepError>>;

    /// Apply a changed config to the running runtime in place; return the
    /// dotted leaves it could not take (they need a restart). By default
    /// nothing is taken in place.
    fn apply_config<'a>(
        &'a self,
        old: &'a toml::Table,
        new: &'a toml::Table,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Vec<String>> {
        let _ = runtime;
        Box::pin(async move { crate::config::changed_leaves(old, new) })
    }

    /// Destroy the stopped runtime's data, for a confirmed re-initialization
    /// (`steadfastctl reinit`): the store is released when this runs, and
    /// the next start boots over what it leaves. `config` is the effective
    /// config, when it resolves. By default a service has no wipe step and
    /// the re-initialization fails, naming that.
    fn wipe<'a>(
        &'a self,
        data_dir: &'a std::path::Path,
        config: Option<&'a toml::Table>,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        let _ = (data_dir, config);
        Box::pin(async { Err(StepError::hold("this service has no wipe step")) })
    }
}

/// How a runtime task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnded {
    /// The task's name.
    pub task: String,
    /// Why, rendered ("returned", its error, or its panic).
    pub error: String,
}

struct TaskSlot {
    name: String,
    abort: AbortHandle,
    monitor: JoinHandle<()>,
}

/// The live runtime a boot builds: the objects its steps created, keyed by
/// type, and the tasks that serve.
pub struct Runtime {
    items: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    tasks: Vec<TaskSlot>,
    shutdown: CancellationToken,
    ended_tx: mpsc::UnboundedSender<TaskEnded>,
    ended_rx: Option<mpsc::UnboundedReceiver<TaskEnded>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("items", &self.items.len())
            .field(
                "tasks",
                &self
                    .tasks
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

impl Runtime {
    /// An empty runtime.
    #[must_use]
    pub fn new() -> Self {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        Self {
            items: HashMap::new(),
            tasks: Vec::new(),
            shutdown: CancellationToken::new(),
            ended_tx,
            ended_rx: Some(ended_rx),
        }
    }

    /// Keep `value` (one per type); returns the one it replaces.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) -> Option<T> {
        self.items
            .insert(TypeId::of::<T>(), Box::new(value))
            .and_then(|old| old.downcast().ok().map(|b| *b))
    }

    /// The kept value of type `T`.
    #[must_use]
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.items
            .get(&TypeId::of::<T>())
            .and_then(|b| b.downcast_ref())
    }

    /// The kept value of type `T`, mutably.
    pub fn get_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        self.items
            .get_mut(&TypeId::of::<T>())
            .and_then(|b| b.downcast_mut())
    }

    /// Take the kept value of type `T` out (dropping it releases what it
    /// holds).
    pub fn remove<T: Any + Send + Sync>(&mut self) -> Option<T> {
        self.items
            .remove(&TypeId::of::<T>())
            .and_then(|b| b.downcast().ok().map(|b| *b))
    }

    /// Cancelled when the runtime is being shut down: serving tasks select on
    /// it and finish their in-flight work.
    #[must_use]
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Spawn a serving task. If it returns (either way) or panics while the
    /// runtime is running, the runtime has ended.
    pub fn spawn<F>(&mut self, name: impl Into<String>, task: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        let name = name.into();
        let inner = tokio::spawn(task);
        let abort = inner.abort_handle();
        let ended = self.ended_tx.clone();
        let task_name = name.clone();
        let monitor = tokio::spawn(async move {
            let error = match inner.await {
                Ok(Ok(())) => "returned".to_owned(),
                Ok(Err(error)) => error,
                Err(join) if join.is_panic() => {
                    format!("panicked: {}", panic_message(join.into_panic().as_ref()))
                }
                Err(_) => "aborted".to_owned(),
            };
            let _ = ended.send(TaskEnded {
                task: task_name,
                error,
            });
        });
        self.tasks.push(TaskSlot {
            name,
            abort,
            monitor,
        });
    }

    /// The stream of task endings; taken once, by whoever watches the
    /// running runtime.
    pub fn take_ended(&mut self) -> Option<mpsc::UnboundedReceiver<TaskEnded>> {
        self.ended_rx.take()
    }

    /// Cancel the shutdown token, give the tasks `grace` to finish, then abort
    /// the rest. Returns the names of the tasks that had to be aborted.
    pub async fn shutdown_tasks(&mut self, grace: Duration) -> Vec<String> {
        self.shutdown.cancel();
        let deadline = tokio::time::Instant::now() + grace;
        let mut aborted = Vec::new();
        for slot in self.tasks.drain(..) {
            let TaskSlot {
                name,
                abort,
                mut monitor,
            } = slot;
            if tokio::time::timeout_at(deadline, &mut monitor)
                .await
                .is_err()
            {
                abort.abort();
                let _ = monitor.await;
                aborted.push(name);
            }
        }
        aborted
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for slot in &self.tasks {
            slot.abort.abort();
        }
    }
}

/// Run `work` in a task of its own; when it ends, call `ended` with its
/// panic message if it panicked. How the Boot and Drain actors keep a step or
/// a destroy off their mailbox and still learn of its panic.
pub fn spawn_watched<F>(work: F, ended: impl FnOnce(Option<String>) + Send + 'static)
where
    F: Future<Output = ()> + Send + 'static,
{
    let task = tokio::spawn(work);
    tokio::spawn(async move {
        let panic = match task.await {
            Err(join) if join.is_panic() => Some(panic_message(join.into_panic().as_ref())),
            _ => None,
        };
        ended(panic);
    });
}

/// A panic payload, rendered.
#[must_use]
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// A booted runtime and the checkpoints of the steps that built it: what the
/// supervisor holds while running and hands to the drain.
#[derive(Debug)]
pub struct LiveRuntime {
    /// Which boot built it.
    pub attempt: u32,
    /// The live objects and tasks.
    pub runtime: Runtime,
    /// The completed steps, in plan order.
    pub checkpoints: Vec<Checkpoint>,
}

/// A running step's deadline, which the step extends by reporting
/// progress (DESIGN.md: "a slow boot is not a dead boot").
#[derive(Debug)]
pub struct StepProgress {
    /// When the step fails unless it reports progress first.
    deadline: std::sync::Mutex<tokio::time::Instant>,
    /// How far a report (and the start) puts the deadline.
    extend_by: Duration,
}

impl StepProgress {
    /// A deadline `extend_by` from now.
    #[must_use]
    pub fn new(extend_by: Duration) -> Self {
        Self {
            deadline: std::sync::Mutex::new(tokio::time::Instant::now() + extend_by),
            extend_by,
        }
    }

    /// The step is making progress: its deadline moves to `extend_by` from
    /// now.
    pub fn report(&self) {
        let next = tokio::time::Instant::now() + self.extend_by;
        *self
            .deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
    }

    /// The current deadline.
    #[must_use]
    pub fn deadline(&self) -> tokio::time::Instant {
        *self
            .deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How far each report extends the deadline.
    #[must_use]
    pub const fn extends_by(&self) -> Duration {
        self.extend_by
    }

    /// Resolves once the deadline has passed without a report moving it.
    pub async fn expired(&self) {
        loop {
            let deadline = self.deadline();
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn typed_items_round_trip() {
        let mut runtime = Runtime::new();
        assert!(runtime.insert(5u32).is_none());
        assert_eq!(runtime.insert(7u32), Some(5));
        assert_eq!(runtime.get::<u32>(), Some(&7));
        *runtime.get_mut::<u32>().expect("kept") += 1;
        assert_eq!(runtime.remove::<u32>(), Some(8));
        assert!(runtime.get::<u32>().is_none());
    }

    #[tokio::test]
    async fn a_task_that_returns_or_panics_is_reported() {
        let mut runtime = Runtime::new();
        let mut ended = runtime.take_ended().expect("first take");
        runtime.spawn("ok", async { Ok(()) });
        runtime.spawn("boom", async { panic!("kaboom") });
        let mut seen = [
            ended.recv().await.expect("one"),
            ended.recv().await.expect("two"),
        ];
        seen.sort_by(|a, b| a.task.cmp(&b.task));
        assert_eq!(seen[0].task, "boom");
        assert_eq!(seen[0].error, "panicked: kaboom");
        assert_eq!(seen[1].error, "returned");
    }

    #[tokio::test]
    async fn shutdown_cancels_then_aborts_the_stragglers() {
        let mut runtime = Runtime::new();
        let token = runtime.shutdown_token();
        runtime.spawn("polite", async move {
            token.cancelled().await;
            Ok(())
        });
        runtime.spawn("stubborn", async {
            std::future::pending::<()>().await;
            Ok(())
        });
        let aborted = runtime.shutdown_tasks(Duration::from_millis(50)).await;
        assert_eq!(aborted, vec!["stubborn".to_owned()]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_deadline_moves_only_when_progress_is_reported() {
        let progress = StepProgress::new(Duration::from_secs(10));
        let first = progress.deadline();
        tokio::time::advance(Duration::from_secs(6)).await;
        progress.report();
        assert_eq!(progress.deadline(), first + Duration::from_secs(6));
        // Unreported, it expires 10 s after the last report, not before.
        let expired = tokio::time::timeout(Duration::from_secs(9), progress.expired()).await;
        assert!(expired.is_err(), "expired 9 s after a report");
        tokio::time::timeout(Duration::from_secs(2), progress.expired())
            .await
            .expect("expired 10 s after the last report");
    }

    #[tokio::test]
    async fn dropping_a_runtime_stops_its_tasks() {
        let stopped = Arc::new(AtomicBool::new(false));
        let mut runtime = Runtime::new();
        let mut ended = runtime.take_ended().expect("first take");
        let flag = Arc::clone(&stopped);
        let token = runtime.shutdown_token();
        runtime.spawn("server", async move {
            token.cancelled().await;
            flag.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
            Ok(())
        });
        drop(runtime);
        let end = ended.recv().await.expect("the task's end is reported");
        assert_eq!(end.error, "aborted");
    }
}
