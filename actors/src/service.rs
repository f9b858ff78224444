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
//! confirms each destruction with [`Step::observe`], never by the absence of
//! an error.
//!
//! A step is one type implementing [`Step`] (with plain `async fn`s): it
//! owns its [`Step::NAME`] (the phase and the journaled checkpoint's name),
//! its `execute`, and the `observe` and `destroy` of the record it made; the
//! supervisor erases it behind [`AnyStep`] (and a service behind
//! [`AnyService`]), so no step is ever dispatched by a string. What a step's
//! `execute` returns as its output is kept in the [`Runtime`] under the
//! step's own type, so two outputs of one type never collide. Checked by
//! `service::tests::outputs_are_kept_per_step_not_per_type` and
//! `service::tests::a_plan_that_names_a_step_twice_is_refused`.
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
use std::sync::Arc;
use std::time::Duration;

use steadfast_protocol::journal::ResourceRecord;
use steadfast_protocol::lifecycle::FailureClass;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
pub use tokio_util::sync::CancellationToken;

/// A boxed, sendable future: how the supervisor holds a step's or a
/// service's work once it has erased the type (a user never writes one).
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

impl From<bool> for Observation {
    /// `true` is [`Observation::Present`].
    fn from(present: bool) -> Self {
        if present { Self::Present } else { Self::Gone }
    }
}

/// A completed step and the record of what it created, as the journal keeps
/// it (the step's name is what the checkpoint carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The step's name ([`Step::NAME`]).
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
    /// The live runtime the earlier steps built: ask it for an earlier
    /// step's output with [`Runtime::get`]`::<ThatStep>()`.
    pub runtime: &'a mut Runtime,
    /// The checkpoints of the earlier steps of this boot.
    pub prior: &'a [Checkpoint],
    /// The step's deadline: [`StepProgress::report`] pushes it back by
    /// `Timings::step_deadline`; a step that passes it fails with class
    /// backoff.
    pub progress: &'a StepProgress,
}

/// What a step made: the record the journal keeps (handed back to the same
/// step's [`Step::observe`] and [`Step::destroy`]) and the live value the
/// runtime keeps under the step's type.
#[derive(Debug)]
pub struct Made<T> {
    /// The durable record of what was created.
    pub record: ResourceRecord,
    /// The live value, kept in the [`Runtime`] under the step's type.
    pub output: T,
}

impl<T> Made<T> {
    /// A record of `kind` and `id` (no payload) and the live `output`.
    pub fn new(kind: impl Into<String>, id: impl Into<String>, output: T) -> Self {
        Self {
            record: ResourceRecord {
                kind: kind.into(),
                id: id.into(),
                payload: Vec::new(),
            },
            output,
        }
    }
}

/// One step of a plan: one type that owns its name, how it runs, how its
/// resource is observed and how it is destroyed. Implemented with plain
/// `async fn`s.
///
/// The runtime keeps what [`Step::execute`] returns as [`Made::output`]
/// under the step's own type: a later step asks for it with
/// [`Runtime::get`]`::<ThisStep>()`, so two steps never collide on one type.
/// By default a step's resource is present while the runtime holds its
/// output, and destroying it drops the output.
///
/// ```no_run
/// use steadfast_actors::service::{Made, Plan, Service, Step, StepContext, StepError};
///
/// struct Bind;
///
/// impl Step for Bind {
///     const NAME: &'static str = "bind_listener";
///     type Output = Option<tokio::net::TcpListener>;
///
///     async fn execute(&self, cx: StepContext<'_>) -> Result<Made<Self::Output>, StepError> {
///         let addr = cx.config.get("listen_addr").and_then(|v| v.as_str());
///         let listener = tokio::net::TcpListener::bind(addr.unwrap_or("127.0.0.1:0"))
///             .await
///             .map_err(StepError::backoff)?;
///         let bound = listener.local_addr().map_err(StepError::backoff)?;
///         Ok(Made::new("listener", bound.to_string(), Some(listener)))
///     }
/// }
///
/// struct Serve;
///
/// impl Step for Serve {
///     const NAME: &'static str = "serve";
///     type Output = ();
///
///     async fn execute(&self, cx: StepContext<'_>) -> Result<Made<()>, StepError> {
///         // An earlier step's output, asked for by its step's type.
///         let listener = cx
///             .runtime
///             .get_mut::<Bind>()
///             .and_then(Option::take)
///             .ok_or_else(|| StepError::backoff("no listener"))?;
///         cx.runtime.spawn("accept", async move {
///             loop {
///                 let _ = listener.accept().await;
///             }
///         });
///         Ok(Made::new("serve", "accept", ()))
///     }
/// }
///
/// struct App;
///
/// impl Service for App {
///     fn plan(&self, _config: &toml::Table) -> Plan {
///         Plan::new().step(Bind).step(Serve)
///     }
/// }
/// ```
pub trait Step: Sized + Send + Sync + 'static {
    /// The phase operators see (`open_store`), and the name its checkpoint
    /// is journaled under: keep it stable, old journals resume by it.
    const NAME: &'static str;

    /// The live value this step leaves in the runtime (`()` for none).
    type Output: Send + Sync + 'static;

    /// Run the step; return the record of what it created and its output.
    fn execute(
        &self,
        cx: StepContext<'_>,
    ) -> impl Future<Output = Result<Made<Self::Output>, StepError>> + Send;

    /// Whether this step's resource (its own `record`) is really there.
    /// Decides both the resume (a present resource is not recreated) and the
    /// drain (a destruction counts only once this says gone). By default:
    /// while the runtime holds this step's output.
    fn observe(
        &self,
        record: &ResourceRecord,
        runtime: &Runtime,
    ) -> impl Future<Output = Observation> + Send {
        let _ = record;
        let present = runtime.get::<Self>().is_some();
        async move { Observation::from(present) }
    }

    /// Remove this step's resource. By default: drop its output.
    fn destroy(
        &self,
        record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> impl Future<Output = Result<(), StepError>> + Send {
        let _ = record;
        drop(runtime.take::<Self>());
        async { Ok(()) }
    }
}

/// A [`Step`] with its type erased: what a [`Plan`] holds and the Boot and
/// Drain actors call. Implemented for every [`Step`]; not implemented by
/// hand.
pub trait AnyStep: Send + Sync + 'static {
    /// [`Step::NAME`].
    fn name(&self) -> &'static str;
    /// [`Step::execute`], keeping the output in the runtime.
    fn execute<'a>(
        &'a self,
        cx: StepContext<'a>,
    ) -> BoxFuture<'a, Result<ResourceRecord, StepError>>;
    /// [`Step::observe`].
    fn observe<'a>(
        &'a self,
        record: &'a ResourceRecord,
        runtime: &'a Runtime,
    ) -> BoxFuture<'a, Observation>;
    /// [`Step::destroy`].
    fn destroy<'a>(
        &'a self,
        record: &'a ResourceRecord,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Result<(), StepError>>;
}

impl<S: Step> AnyStep for S {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn execute<'a>(
        &'a self,
        cx: StepContext<'a>,
    ) -> BoxFuture<'a, Result<ResourceRecord, StepError>> {
        Box::pin(async move {
            let StepContext {
                attempt,
                config,
                data_dir,
                runtime,
                prior,
                progress,
            } = cx;
            let cx = StepContext {
                attempt,
                config,
                data_dir,
                runtime: &mut *runtime,
                prior,
                progress,
            };
            let made = Step::execute(self, cx).await?;
            runtime.put::<S>(made.output);
            Ok(made.record)
        })
    }

    fn observe<'a>(
        &'a self,
        record: &'a ResourceRecord,
        runtime: &'a Runtime,
    ) -> BoxFuture<'a, Observation> {
        Box::pin(Step::observe(self, record, runtime))
    }

    fn destroy<'a>(
        &'a self,
        record: &'a ResourceRecord,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(Step::destroy(self, record, runtime))
    }
}

/// The steps a boot runs after `resolve_config`, in order:
/// `Plan::new().step(OpenStore).step(Serve)`.
#[derive(Default, Clone)]
pub struct Plan {
    steps: Vec<Arc<dyn AnyStep>>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|s| s.name()))
            .finish()
    }
}

impl Plan {
    /// An empty plan.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Run `step` after the steps already in the plan.
    #[must_use]
    pub fn step(mut self, step: impl Step) -> Self {
        self.steps.push(Arc::new(step));
        self
    }

    /// The step names, in order.
    #[must_use]
    pub fn names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.name()).collect()
    }

    /// The steps, in order; a plan that names one step twice is refused
    /// (its checkpoints and outputs would be one), naming the step.
    pub fn into_steps(self) -> Result<Vec<Arc<dyn AnyStep>>, StepError> {
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = self.steps.iter().find(|s| !seen.insert(s.name())) {
            return Err(StepError::hold(format!(
                "the plan names step `{}` twice: give each step its own type",
                twice.name()
            )));
        }
        Ok(self.steps)
    }
}

/// The embedding application's runtime, described as a plan of [`Step`]s.
/// Implemented with plain `async fn`s.
pub trait Service: Send + Sync + 'static {
    /// The steps a boot runs after `resolve_config`, in order, for this
    /// config.
    fn plan(&self, config: &toml::Table) -> Plan;

    /// Apply a changed config to the running runtime in place; return the
    /// dotted leaves it could not take (they need a restart). By default
    /// nothing is taken in place.
    fn apply_config(
        &self,
        old: &toml::Table,
        new: &toml::Table,
        runtime: &mut Runtime,
    ) -> impl Future<Output = Vec<String>> + Send {
        let _ = runtime;
        let changed = crate::config::changed_leaves(old, new);
        async move { changed }
    }

    /// Destroy the stopped runtime's data, for a confirmed re-initialization
    /// (`steadfastctl reinit`): the store is released when this runs, and
    /// the next start boots over what it leaves. `config` is the effective
    /// config, when it resolves. By default a service has no wipe step and
    /// the re-initialization fails, naming that.
    fn wipe(
        &self,
        data_dir: &Path,
        config: Option<&toml::Table>,
    ) -> impl Future<Output = Result<(), StepError>> + Send {
        let _ = (data_dir, config);
        async { Err(StepError::hold("this service has no wipe step")) }
    }
}

/// A [`Service`] with its type erased: what the supervisor holds
/// (`Arc<dyn AnyService>`). Implemented for every [`Service`]; not
/// implemented by hand.
pub trait AnyService: Send + Sync + 'static {
    /// [`Service::plan`].
    fn plan(&self, config: &toml::Table) -> Plan;
    /// [`Service::apply_config`].
    fn apply_config<'a>(
        &'a self,
        old: &'a toml::Table,
        new: &'a toml::Table,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Vec<String>>;
    /// [`Service::wipe`].
    fn wipe<'a>(
        &'a self,
        data_dir: &'a Path,
        config: Option<&'a toml::Table>,
    ) -> BoxFuture<'a, Result<(), StepError>>;
}

impl<S: Service> AnyService for S {
    fn plan(&self, config: &toml::Table) -> Plan {
        Service::plan(self, config)
    }

    fn apply_config<'a>(
        &'a self,
        old: &'a toml::Table,
        new: &'a toml::Table,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Vec<String>> {
        Box::pin(Service::apply_config(self, old, new, runtime))
    }

    fn wipe<'a>(
        &'a self,
        data_dir: &'a Path,
        config: Option<&'a toml::Table>,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(Service::wipe(self, data_dir, config))
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

/// The live runtime a boot builds: the outputs its steps made, each kept
/// under its step's type, and the tasks that serve.
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

    /// Keep step `S`'s output; returns the one it replaces.
    fn put<S: Step>(&mut self, output: S::Output) -> Option<S::Output> {
        self.items
            .insert(TypeId::of::<S>(), Box::new(output))
            .and_then(|old| old.downcast().ok().map(|b| *b))
    }

    /// The output step `S` left in the runtime.
    #[must_use]
    pub fn get<S: Step>(&self) -> Option<&S::Output> {
        self.items
            .get(&TypeId::of::<S>())
            .and_then(|b| b.downcast_ref())
    }

    /// The output step `S` left in the runtime, mutably.
    pub fn get_mut<S: Step>(&mut self) -> Option<&mut S::Output> {
        self.items
            .get_mut(&TypeId::of::<S>())
            .and_then(|b| b.downcast_mut())
    }

    /// Take step `S`'s output out (dropping it releases what it holds).
    pub fn take<S: Step>(&mut self) -> Option<S::Output> {
        self.items
            .remove(&TypeId::of::<S>())
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
    pub checkpoints: Vec<Completed>,
}

/// A step of this boot and its checkpoint: what a drain destroys (with the
/// step that made it) and confirms gone.
#[derive(Clone)]
pub struct Completed {
    /// The step that made it.
    pub step: Arc<dyn AnyStep>,
    /// Its checkpoint.
    pub checkpoint: Checkpoint,
}

impl fmt::Debug for Completed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.checkpoint.fmt(f)
    }
}

/// A running step's deadline, which the step extends by reporting
/// progress (DESIGN.md: "a slow boot is not a dead boot").
#[derive(Debug)]
pub struct StepProgress {
    /// When the step fails unless it reports progress first.
    deadline: std::sync::Mutex<tokio::time::Instant>,
    /// How far a report (and the start) puts the deadline.
    extend_by: Duration,
    /// Told `extend_by` at the start and at each report (see
    /// [`crate::context::Shared::step_deadlines`]).
    announce: Option<tokio::sync::watch::Sender<Duration>>,
}

impl StepProgress {
    /// A deadline `extend_by` from now.
    #[must_use]
    pub fn new(extend_by: Duration) -> Self {
        Self {
            deadline: std::sync::Mutex::new(tokio::time::Instant::now() + extend_by),
            extend_by,
            announce: None,
        }
    }

    /// [`Self::new`], telling `announce` how far the deadline is now and
    /// at each [`Self::report`].
    #[must_use]
    pub fn announced(extend_by: Duration, announce: tokio::sync::watch::Sender<Duration>) -> Self {
        announce.send_replace(extend_by);
        Self {
            announce: Some(announce),
            ..Self::new(extend_by)
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
        if let Some(announce) = &self.announce {
            announce.send_replace(self.extend_by);
        }
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

    /// Two steps whose outputs are both `String`s.
    struct Left;
    struct Right;

    impl Step for Left {
        const NAME: &'static str = "left";
        type Output = String;
        async fn execute(&self, _cx: StepContext<'_>) -> Result<Made<String>, StepError> {
            Ok(Made::new("side", "left", "l".to_owned()))
        }
    }

    impl Step for Right {
        const NAME: &'static str = "right";
        type Output = String;
        async fn execute(&self, cx: StepContext<'_>) -> Result<Made<String>, StepError> {
            let left = cx
                .runtime
                .get::<Left>()
                .ok_or_else(|| StepError::hold("no left"))?;
            Ok(Made::new("side", "right", format!("{left}r")))
        }
    }

    async fn run(step: &dyn AnyStep, runtime: &mut Runtime) -> Result<ResourceRecord, StepError> {
        let config = toml::Table::new();
        let progress = StepProgress::new(Duration::from_secs(10));
        step.execute(StepContext {
            attempt: 1,
            config: &config,
            data_dir: Path::new("/nonexistent"),
            runtime,
            prior: &[],
            progress: &progress,
        })
        .await
    }

    /// An announced deadline tells its watcher at the start and at each
    /// progress report (what `EXTEND_TIMEOUT_USEC` follows); a plain one
    /// has nobody to tell.
    #[tokio::test]
    async fn an_announced_step_deadline_is_told_at_start_and_each_report() {
        let (tx, mut rx) = tokio::sync::watch::channel(Duration::ZERO);
        let progress = StepProgress::announced(Duration::from_secs(7), tx);
        assert!(rx.has_changed().expect("open"), "told at the start");
        assert_eq!(*rx.borrow_and_update(), Duration::from_secs(7));
        progress.report();
        assert!(rx.has_changed().expect("open"), "told at a report");
        assert_eq!(*rx.borrow_and_update(), Duration::from_secs(7));
        assert!(!rx.has_changed().expect("open"));
    }

    #[tokio::test]
    async fn outputs_are_kept_per_step_not_per_type() {
        let mut runtime = Runtime::new();
        let left = run(&Left, &mut runtime).await.expect("left runs");
        assert_eq!(left.id, "left");
        run(&Right, &mut runtime)
            .await
            .expect("right reads left's output");
        // Both outputs are `String`s, kept side by side under their steps.
        assert_eq!(runtime.get::<Left>().map(String::as_str), Some("l"));
        assert_eq!(runtime.get::<Right>().map(String::as_str), Some("lr"));
        runtime.get_mut::<Right>().expect("kept").push('!');
        // The default observation follows the output; the default destroy
        // drops it.
        assert_eq!(
            AnyStep::observe(&Right, &left, &runtime).await,
            Observation::Present
        );
        AnyStep::destroy(&Right, &left, &mut runtime)
            .await
            .expect("destroyed");
        assert_eq!(
            AnyStep::observe(&Right, &left, &runtime).await,
            Observation::Gone
        );
        assert_eq!(runtime.take::<Left>().as_deref(), Some("l"));
        assert!(runtime.get::<Left>().is_none());
    }

    #[test]
    fn a_plan_that_names_a_step_twice_is_refused() {
        let error = Plan::new()
            .step(Left)
            .step(Right)
            .step(Left)
            .into_steps()
            .err()
            .expect("refused");
        assert_eq!(error.class, FailureClass::Hold);
        assert!(error.message.contains("`left` twice"), "{error}");
        assert_eq!(
            Plan::new().step(Left).step(Right).names(),
            ["left", "right"]
        );
    }

    #[test]
    fn an_observation_is_a_bool() {
        assert_eq!(Observation::from(true), Observation::Present);
        assert_eq!(Observation::from(false), Observation::Gone);
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
