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
//! `runtime_ended`. Whatever else the runtime starts (a task per
//! connection) goes through its [`Tracker`] ([`Runtime::tracker`]), most
//! simply through [`Runtime::accept_loop`], which serves a listener with a
//! handler per connection: a drain ends those too, within its grace (the
//! module `tasks`). A drain destroys the checkpoints in reverse order and
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
//! supervisor that ended) cancels its shutdown token and aborts its tasks,
//! serving and tracked, so nothing it spawned outlives it. Checked by
//! `service::tests::dropping_a_runtime_stops_its_tasks` and
//! `service::tests::dropping_a_runtime_aborts_its_tracked_tasks`.
//! [`Runtime::shutdown_tasks`] (what a drain runs) waits for both kinds
//! within one grace and aborts and names the late:
//! `service::tests::shutdown_cancels_then_aborts_the_stragglers`,
//! `service::tests::shutdown_waits_for_tracked_tasks_and_aborts_the_late`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use steadfast_protocol::journal::ResourceRecord;
use steadfast_protocol::lifecycle::FailureClass;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
pub use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, typed};
pub use crate::panics::panic_message;

mod tasks;

#[cfg(test)]
mod children_tests;

pub use tasks::{Connection, Listener, Shutdown, ShuttingDown, Tracker};

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

/// How long a step's resource lives, which decides what the boot makes
/// durable for it and when (`spec/control-dir.md`, "What a boot makes
/// durable, and when").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifetime {
    /// It dies with the process: an open file handle, a lock, a bound
    /// listener, a task, memory, an actor. After a crash nothing of it is
    /// left to reconcile, so its checkpoint is staged and becomes durable
    /// with the boot's `booted` record (one fsync for the whole boot), and a
    /// boot after a crash runs the step again without observing anything.
    #[default]
    Process,
    /// It outlives the process: a file or directory the step creates, a
    /// child process in a session of its own, a lease or a registration
    /// held elsewhere. Before the step runs, an intent naming it is made
    /// durable (written ahead of the resource), and after a crash the boot
    /// reconciles it: a checkpointed resource that [`Step::observe`] finds
    /// is adopted (the step is skipped); a step whose intent has no
    /// checkpoint runs again with [`StepContext::interrupted`] set, and
    /// must adopt or remove what its interrupted run may have left.
    Outlives,
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

/// What a step is handed: `C` is its service's typed config
/// ([`Service::Config`]).
pub struct StepContext<'a, C> {
    /// Which boot of this daemon.
    pub attempt: NonZeroU32,
    /// The effective config this boot resolved, as the service's type.
    pub config: &'a C,
    /// The data directory (fixed for the life of the daemon).
    pub data_dir: &'a Path,
    /// The live runtime the earlier steps built: ask it for an earlier
    /// step's output with [`Runtime::get`]`::<ThatStep>()`.
    pub runtime: &'a mut Runtime,
    /// The checkpoints of the earlier steps of this boot.
    pub prior: &'a [Checkpoint],
    /// For a step whose resource outlives the process ([`Lifetime::Outlives`]):
    /// an earlier run of this step, in a process that crashed, began
    /// (its intent is durable) and left no checkpoint, so it may have
    /// made part or all of its resource. This run adopts or removes it
    /// before making anew. Always `false` for [`Lifetime::Process`].
    pub interrupted: bool,
    /// Where the step reports progress: [`StepProgress::report`] pushes its
    /// deadline back to `Timings::step_deadline` from now; a step that passes
    /// it fails with class backoff.
    pub progress: &'a StepProgress,
    /// This supervisor's handover: take what an incumbent handed over
    /// ([`Handover::take`](crate::handover::Handover::take)), offer what a
    /// successor should get ([`Handover::share`](crate::handover::Handover::share)).
    pub handover: &'a Arc<crate::handover::Handover>,
}

/// The resource a step made, as [`Step::execute`] returns it: the record
/// the journal keeps (handed back to the same step's [`Step::observe`] and
/// [`Step::destroy`]) and the live value the runtime keeps under the step's
/// type.
#[derive(Debug)]
pub struct Resource<T> {
    /// The durable record of what was created.
    pub record: ResourceRecord,
    /// The live value, kept in the [`Runtime`] under the step's type.
    pub output: T,
}

impl<T> Resource<T> {
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

/// The old name of [`Resource`].
#[deprecated(since = "0.1.0", note = "renamed to `Resource`")]
pub type Made<T> = Resource<T>;

/// One step of a plan: one type that owns its name, how it runs, how its
/// resource is observed and how it is destroyed. Implemented with plain
/// `async fn`s.
///
/// The runtime keeps what [`Step::execute`] returns as [`Resource::output`]
/// under the step's own type: a later step asks for it with
/// [`Runtime::get`]`::<ThisStep>()`, so two steps never collide on one type.
/// By default a step's resource is present while the runtime holds its
/// output, and destroying it drops the output.
///
/// ```no_run
/// # mod steadfast { // the facade's paths, as users write them
/// #     pub use steadfast_actors::service::{Plan, Resource, Service, Step, StepContext, StepError};
/// #     pub mod service { pub use steadfast_actors::service::Connection; }
/// # }
/// use steadfast::service::Connection;
/// use steadfast::{Plan, Resource, Service, Step, StepContext, StepError};
///
/// #[derive(serde::Deserialize)]
/// struct Config {
///     listen_addr: String,
/// }
///
/// struct Bind;
///
/// impl Step for Bind {
///     const NAME: &'static str = "bind_listener";
///     type Config = Config;
///     type Output = Option<tokio::net::TcpListener>;
///
///     async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<Self::Output>, StepError> {
///         let listener = tokio::net::TcpListener::bind(&cx.config.listen_addr)
///             .await
///             .map_err(StepError::backoff)?;
///         let bound = listener.local_addr().map_err(StepError::backoff)?;
///         Ok(Resource::new("listener", bound.to_string(), Some(listener)))
///     }
/// }
///
/// struct Serve;
///
/// impl Step for Serve {
///     const NAME: &'static str = "serve";
///     type Config = Config;
///     type Output = ();
///
///     async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<()>, StepError> {
///         // An earlier step's output, asked for by its step's type.
///         let listener = cx
///             .runtime
///             .get_mut::<Bind>()
///             .and_then(Option::take)
///             .ok_or_else(|| StepError::backoff("no listener"))?;
///         // Each connection in a task the runtime owns: a drain ends it.
///         cx.runtime.accept_loop("accept", listener, |conn: Connection<tokio::net::TcpListener>| async move {
///             drop(conn.stream);
///         });
///         Ok(Resource::new("serve", "accept", ()))
///     }
/// }
///
/// struct App;
///
/// impl Service for App {
///     type Config = Config;
///
///     fn plan(&self, _config: &Config) -> Plan<Config> {
///         Plan::new().step(Bind).step(Serve)
///     }
/// }
/// ```
pub trait Step: Sized + Send + Sync + 'static {
    /// The phase operators see (`open_store`), and the name its checkpoint
    /// is journaled under: keep it stable, old journals resume by it.
    const NAME: &'static str;

    /// The typed config of the service whose plan this step is in
    /// ([`Service::Config`]).
    type Config: Send + Sync + 'static;

    /// The live value this step leaves in the runtime (`()` for none).
    type Output: Send + Sync + 'static;

    /// How long the step's resource lives: [`Lifetime::Process`] unless
    /// it outlives the process, which a step says explicitly.
    const LIFETIME: Lifetime = Lifetime::Process;

    /// Run the step; return the record of what it created and its output.
    fn execute(
        &self,
        cx: StepContext<'_, Self::Config>,
    ) -> impl Future<Output = Result<Resource<Self::Output>, StepError>> + Send;

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

/// What the boot hands an erased step's `execute`: a
/// [`StepContext`] without the config, which the erased step carries.
pub struct StepEnv<'a> {
    /// Which boot of this daemon.
    pub attempt: NonZeroU32,
    /// The data directory.
    pub data_dir: &'a Path,
    /// The live runtime the earlier steps built.
    pub runtime: &'a mut Runtime,
    /// The checkpoints of the earlier steps of this boot.
    pub prior: &'a [Checkpoint],
    /// [`StepContext::interrupted`].
    pub interrupted: bool,
    /// The step's deadline.
    pub progress: &'a StepProgress,
    /// This supervisor's handover.
    pub handover: &'a Arc<crate::handover::Handover>,
}

/// A [`Step`] with its type erased and its boot's config bound: what the
/// boot and the drain call. Made by [`AnyService::plan`]; not
/// implemented by hand.
pub trait AnyStep: Send + Sync + 'static {
    /// [`Step::NAME`].
    fn name(&self) -> &'static str;
    /// [`Step::LIFETIME`].
    fn lifetime(&self) -> Lifetime;
    /// [`Step::execute`] over the bound config, keeping the output in the
    /// runtime.
    fn execute<'a>(&'a self, env: StepEnv<'a>) -> BoxFuture<'a, Result<ResourceRecord, StepError>>;
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

/// A step of a [`Plan`] over config `C`, its own type erased.
trait PlannedStep<C>: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn bind(self: Arc<Self>, config: Arc<C>) -> Arc<dyn AnyStep>;
}

impl<S: Step> PlannedStep<S::Config> for S {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn bind(self: Arc<Self>, config: Arc<S::Config>) -> Arc<dyn AnyStep> {
        Arc::new(Bound { step: self, config })
    }
}

/// A step and the config of the boot it runs in.
struct Bound<S: Step> {
    step: Arc<S>,
    config: Arc<S::Config>,
}

impl<S: Step> AnyStep for Bound<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn lifetime(&self) -> Lifetime {
        S::LIFETIME
    }

    fn execute<'a>(&'a self, env: StepEnv<'a>) -> BoxFuture<'a, Result<ResourceRecord, StepError>> {
        Box::pin(async move {
            let StepEnv {
                attempt,
                data_dir,
                runtime,
                prior,
                interrupted,
                progress,
                handover,
            } = env;
            let cx = StepContext {
                attempt,
                config: &*self.config,
                data_dir,
                runtime: &mut *runtime,
                prior,
                interrupted,
                progress,
                handover,
            };
            let made = Step::execute(&*self.step, cx).await?;
            runtime.put::<S>(made.output);
            Ok(made.record)
        })
    }

    fn observe<'a>(
        &'a self,
        record: &'a ResourceRecord,
        runtime: &'a Runtime,
    ) -> BoxFuture<'a, Observation> {
        Box::pin(Step::observe(&*self.step, record, runtime))
    }

    fn destroy<'a>(
        &'a self,
        record: &'a ResourceRecord,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(Step::destroy(&*self.step, record, runtime))
    }
}

/// The steps a boot runs after `resolve_config`, in order, over config `C`:
/// `Plan::new().step(OpenStore).step(Serve)`.
pub struct Plan<C: 'static> {
    steps: Vec<Arc<dyn PlannedStep<C>>>,
}

impl<C: 'static> Default for Plan<C> {
    fn default() -> Self {
        Self { steps: Vec::new() }
    }
}

impl<C: 'static> fmt::Debug for Plan<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|s| s.name()))
            .finish()
    }
}

impl<C: Send + Sync + 'static> Plan<C> {
    /// An empty plan.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Run `step` after the steps already in the plan.
    #[must_use]
    pub fn step(mut self, step: impl Step<Config = C>) -> Self {
        self.steps.push(Arc::new(step));
        self
    }

    /// The step names, in order.
    #[must_use]
    pub fn names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.name()).collect()
    }

    /// The steps, in order, bound to `config`; a plan that names one step
    /// twice is refused (its checkpoints and outputs would be one), naming
    /// the step.
    ///
    /// # Errors
    /// The step named twice, as a hold failure.
    pub fn bind(self, config: Arc<C>) -> Result<Vec<Arc<dyn AnyStep>>, StepError> {
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = self.steps.iter().find(|s| !seen.insert(s.name())) {
            return Err(StepError::hold(format!(
                "the plan names step `{}` twice: give each step its own type",
                twice.name()
            )));
        }
        Ok(self
            .steps
            .into_iter()
            .map(|step| step.bind(Arc::clone(&config)))
            .collect())
    }
}

/// A config change a running runtime is offered in place
/// ([`Service::apply_config`]).
#[derive(Debug)]
pub struct ConfigChange<'a, C> {
    /// The config the runtime runs with.
    pub old: &'a C,
    /// The config just resolved.
    pub new: &'a C,
    /// The dotted leaves that differ, sorted.
    pub changed: &'a [String],
}

/// The embedding application's runtime, described as a plan of [`Step`]s
/// over a typed config. Implemented with plain `async fn`s.
///
/// ```no_run
/// # mod steadfast { // the facade's paths, as users write them
/// #     pub use steadfast_actors::service::{Plan, Resource, Service, Step, StepContext, StepError};
/// # }
/// use steadfast::{Plan, Resource, Service, Step, StepContext, StepError};
///
/// #[derive(serde::Deserialize)]
/// struct Config {
///     greeting: String,
/// }
///
/// struct Greet;
///
/// impl Step for Greet {
///     const NAME: &'static str = "greet";
///     type Config = Config;
///     type Output = String;
///
///     async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<String>, StepError> {
///         Ok(Resource::new("greeting", "stdout", cx.config.greeting.clone()))
///     }
/// }
///
/// struct App;
///
/// impl Service for App {
///     type Config = Config;
///
///     fn plan(&self, _config: &Config) -> Plan<Config> {
///         Plan::new().step(Greet)
///     }
/// }
/// ```
pub trait Service: Send + Sync + 'static {
    /// The service's config: the effective TOML (defaults < declared file <
    /// override tier) deserialized. A config that does not deserialize
    /// fails `resolve_config` held, naming the leaf; `config set` refuses a
    /// change that would not deserialize. `toml::Table` takes any config.
    type Config: DeserializeOwned + Send + Sync + 'static;

    /// Whether leaves the config type does not know are accepted. By
    /// default they are refused, naming them (a typo in a file or in
    /// `config set` is an error, not a silent default); the supervisor's own
    /// `data_dir` leaf is always accepted.
    const ALLOW_UNKNOWN_LEAVES: bool = false;

    /// The steps a boot runs after `resolve_config`, in order, for this
    /// config.
    fn plan(&self, config: &Self::Config) -> Plan<Self::Config>;

    /// Apply a changed config to the running runtime in place; return the
    /// dotted leaves it could not take (they need a restart). By default
    /// nothing is taken in place.
    fn apply_config(
        &self,
        change: ConfigChange<'_, Self::Config>,
        runtime: &mut Runtime,
    ) -> impl Future<Output = Vec<String>> + Send {
        let _ = runtime;
        let changed = change.changed.to_vec();
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
        config: Option<&Self::Config>,
    ) -> impl Future<Output = Result<(), StepError>> + Send {
        let _ = (data_dir, config);
        async { Err(StepError::hold("this service has no wipe step")) }
    }
}

/// A shared service is the service: the embedding keeps an `Arc` to look
/// at it while the supervisor runs it.
impl<S: Service> Service for Arc<S> {
    type Config = S::Config;
    const ALLOW_UNKNOWN_LEAVES: bool = S::ALLOW_UNKNOWN_LEAVES;

    fn plan(&self, config: &Self::Config) -> Plan<Self::Config> {
        S::plan(self, config)
    }

    fn apply_config(
        &self,
        change: ConfigChange<'_, Self::Config>,
        runtime: &mut Runtime,
    ) -> impl Future<Output = Vec<String>> + Send {
        S::apply_config(self, change, runtime)
    }

    fn wipe(
        &self,
        data_dir: &Path,
        config: Option<&Self::Config>,
    ) -> impl Future<Output = Result<(), StepError>> + Send {
        S::wipe(self, data_dir, config)
    }
}

/// The effective config as the supervisor keeps it live: the merged TOML
/// table (for the leaves a change touches, and `config show`) and the
/// service's typed config, deserialized once, when it resolved. A boot's
/// plan, a change applied in place and a wipe take the typed value as it
/// is: nothing deserializes it again.
#[derive(Clone)]
pub struct LiveConfig {
    table: toml::Table,
    typed: Arc<dyn Any + Send + Sync>,
}

impl LiveConfig {
    /// The merged table the typed config was deserialized from.
    #[must_use]
    pub const fn table(&self) -> &toml::Table {
        &self.table
    }

    /// The typed config, if it is a `C`: always for the service that made
    /// it ([`AnyService::live_config`]).
    fn typed<C: Send + Sync + 'static>(&self) -> Result<Arc<C>, String> {
        Arc::clone(&self.typed)
            .downcast::<C>()
            .map_err(|_| "the config was resolved for another service's config type".to_owned())
    }
}

impl fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveConfig")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// A [`Service`] with its type erased: what the supervisor holds
/// (`Arc<dyn AnyService>`), over the effective config kept live
/// ([`LiveConfig`]). Implemented for every [`Service`]; not implemented by
/// hand.
pub trait AnyService: Send + Sync + 'static {
    /// `config` deserialized into [`Service::Config`] (with no leaf it does
    /// not know, unless allowed), kept beside the table.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the leaf and the reason, or
    /// [`ConfigError::UnknownLeaves`].
    fn live_config(&self, config: toml::Table) -> Result<LiveConfig, ConfigError>;
    /// [`Service::plan`] for `config`, its steps bound to the typed config.
    ///
    /// # Errors
    /// A plan that names a step twice (a hold failure).
    fn plan(&self, config: &LiveConfig) -> Result<Vec<Arc<dyn AnyStep>>, String>;
    /// [`Service::apply_config`]: the leaves `new` changes from `old`
    /// offered to the runtime; the ones it did not take are returned.
    fn apply_config<'a>(
        &'a self,
        old: &'a LiveConfig,
        new: &'a LiveConfig,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Vec<String>>;
    /// [`Service::wipe`] (`config`: the effective config, when it resolves).
    fn wipe<'a>(
        &'a self,
        data_dir: &'a Path,
        config: Option<&'a LiveConfig>,
    ) -> BoxFuture<'a, Result<(), StepError>>;
}

impl<S: Service> AnyService for S {
    fn live_config(&self, config: toml::Table) -> Result<LiveConfig, ConfigError> {
        let typed = typed::<S::Config>(&config, S::ALLOW_UNKNOWN_LEAVES)?;
        Ok(LiveConfig {
            table: config,
            typed: Arc::new(typed),
        })
    }

    fn plan(&self, config: &LiveConfig) -> Result<Vec<Arc<dyn AnyStep>>, String> {
        let typed = config.typed::<S::Config>()?;
        Service::plan(self, &typed)
            .bind(typed)
            .map_err(|error| error.message)
    }

    fn apply_config<'a>(
        &'a self,
        old: &'a LiveConfig,
        new: &'a LiveConfig,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            let changed = crate::config::changed_leaves(&old.table, &new.table);
            match (old.typed::<S::Config>(), new.typed::<S::Config>()) {
                (Ok(old), Ok(new)) => {
                    let change = ConfigChange {
                        old: &*old,
                        new: &*new,
                        changed: &changed,
                    };
                    Service::apply_config(self, change, runtime).await
                }
                _ => changed,
            }
        })
    }

    fn wipe<'a>(
        &'a self,
        data_dir: &'a Path,
        config: Option<&'a LiveConfig>,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(async move {
            let typed = config.and_then(|c| c.typed::<S::Config>().ok());
            Service::wipe(self, data_dir, typed.as_deref()).await
        })
    }
}

/// How a runtime task ended, or the group of children that ended the
/// runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnded {
    /// The task's name (a child's, when `child`).
    pub task: String,
    /// Why, rendered ("returned", its error, or its panic; a group's
    /// meltdown or a significant child's end).
    pub error: String,
    /// Whether a group of supervised children ended the runtime.
    pub child: bool,
}

impl fmt::Display for TaskEnded {
    /// The runtime's end as the lifecycle reports it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.child {
            write!(f, "the runtime ended: {}", self.error)
        } else {
            write!(
                f,
                "the runtime ended: its task {} ended: {}",
                self.task, self.error
            )
        }
    }
}

/// A runtime's supervised children: where they report, and their groups.
struct Supervised {
    env: RuntimeEnv,
    groups: Vec<crate::children::Started>,
}

/// Where a supervisor's runtime sends its children's records and state.
#[derive(Clone)]
pub(crate) struct RuntimeEnv {
    pub(crate) attempt: NonZeroU32,
    pub(crate) journal: Option<ractor::ActorRef<crate::journal::JournalMsg>>,
    pub(crate) journal_timeout: Duration,
    pub(crate) clock: crate::clock::Clock,
    pub(crate) board: Arc<crate::children::Board>,
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
    /// The tasks it owns besides its serving tasks (connections).
    tracker: Tracker,
    shutdown: CancellationToken,
    ended_tx: mpsc::UnboundedSender<TaskEnded>,
    ended_rx: Option<mpsc::UnboundedReceiver<TaskEnded>>,
    /// Where its children report (a bare runtime makes its own at its
    /// first group).
    /// Where its children report, and its groups of them in start order
    /// (boxed: most runtimes have none, and the boot's messages carry it).
    supervised: Option<Box<Supervised>>,
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
            .field("tracked", &self.tracker.len())
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
        let shutdown = CancellationToken::new();
        Self {
            items: HashMap::new(),
            tasks: Vec::new(),
            tracker: Tracker::new(shutdown.clone()),
            shutdown,
            ended_tx,
            ended_rx: Some(ended_rx),
            supervised: None,
        }
    }

    /// The runtime a supervisor's boot builds: its children journal and
    /// publish through `env`.
    pub(crate) fn with_env(env: RuntimeEnv) -> Self {
        let mut runtime = Self::new();
        runtime.supervised = Some(Box::new(Supervised {
            env,
            groups: Vec::new(),
        }));
        runtime
    }

    /// Start `children` as a group of this runtime's supervised children:
    /// each started now, in order (an actor's `pre_start` awaited), and
    /// restarted as its restart type and the group's strategy say. A
    /// group that exceeds its intensity ends the runtime (the lifecycle
    /// then drains, backs off and boots again, within its restart budget),
    /// naming the child. At shutdown, after the serving and tracked tasks,
    /// the groups stop last started first, each child last declared first
    /// within its own shutdown timeout and the drain's grace.
    ///
    /// ```no_run
    /// # mod steadfast { pub use steadfast_actors::{children, service::Runtime}; } // the facade's paths
    /// use std::time::Duration;
    /// use steadfast::children::{Child, Children, Restart};
    /// # async fn f(runtime: &mut steadfast::Runtime) -> Result<(), steadfast::children::ChildrenError> {
    /// runtime
    ///     .supervise(
    ///         Children::one_for_one()
    ///             .intensity(3, Duration::from_secs(10))
    ///             .child(Child::task("snapshot", |cx| async move {
    ///                 cx.shutdown().cancelled().await;
    ///                 Ok(())
    ///             }).restart(Restart::Transient)),
    ///     )
    ///     .await
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ChildrenError`](crate::children::ChildrenError): a declaration
    /// that breaks a rule (a name taken in this runtime, a bad name,
    /// restarts within a period of 0, …), or a runtime already shutting
    /// down.
    pub async fn supervise(
        &mut self,
        children: crate::children::Children,
    ) -> Result<(), crate::children::ChildrenError> {
        if self.shutdown.is_cancelled() {
            return Err(crate::children::ChildrenError::ShuttingDown);
        }
        let supervised = self.supervised.get_or_insert_with(|| {
            Box::new(Supervised {
                env: RuntimeEnv {
                    attempt: NonZeroU32::MIN,
                    journal: None,
                    journal_timeout: Duration::from_secs(5),
                    clock: crate::clock::Clock::start(),
                    board: Arc::default(),
                },
                groups: Vec::new(),
            })
        });
        let env = supervised.env.clone();
        let taken: Vec<String> = supervised
            .groups
            .iter()
            .flat_map(|g| g.names.clone())
            .collect();
        let started = crate::children::start(
            children,
            crate::children::GroupEnv {
                attempt: env.attempt,
                journal: env.journal,
                journal_timeout: env.journal_timeout,
                clock: env.clock,
                board: env.board,
                ended: {
                    let ended = self.ended_tx.clone();
                    let attempt = env.attempt.get();
                    std::sync::Arc::new(move |task: String, error: String| {
                        crate::observed::group_end_reported(attempt, &task, &error);
                        let _ = ended.send(TaskEnded {
                            task,
                            error,
                            child: true,
                        });
                    })
                },
            },
            &taken,
        )
        .await?;
        supervised.groups.push(started);
        Ok(())
    }

    /// The children of this runtime as status shows them (groups in start
    /// order).
    #[must_use]
    pub fn children(&self) -> Vec<steadfast_protocol::children::ChildView> {
        self.supervised
            .as_ref()
            .map(|s| s.env.board.views())
            .unwrap_or_default()
    }

    /// Carry out an operator's `op` on this runtime's child `name`.
    ///
    /// # Errors
    /// As [`crate::children::Board::operate`].
    pub async fn operate_child(
        &self,
        name: &str,
        op: steadfast_protocol::children::ChildOp,
    ) -> Result<steadfast_protocol::children::ChildView, crate::children::ChildOpError> {
        match &self.supervised {
            Some(s) => s.env.board.operate(name, op).await,
            None => Err(crate::children::ChildOpError::Unknown(name.to_owned())),
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
    /// it and finish their in-flight work. (A tracked task is handed the
    /// same as a [`Shutdown`]: [`Tracker::shutdown`].)
    #[must_use]
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Spawn a serving task. If it returns (either way) or panics while the
    /// runtime is running, the runtime has ended. A task whose end should
    /// end only itself (a connection) is spawned through
    /// [`Self::tracker`], or by [`Self::accept_loop`].
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
                child: false,
            });
        });
        self.tasks.push(TaskSlot {
            name,
            abort,
            monitor,
        });
    }

    /// Spawn a serving task that runs until it returns or the runtime shuts
    /// down, whichever comes first (at shutdown it is dropped where it
    /// waits: a [`Runtime::spawn`] that selects on
    /// [`Runtime::shutdown_token`]). For a loop with no in-flight work to
    /// finish; a loop that accepts connections to serve is
    /// [`Runtime::accept_loop`].
    pub fn serve<F>(&mut self, name: impl Into<String>, task: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        let stop = self.shutdown_token();
        self.spawn(name, async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                ended = task => ended,
            }
        });
    }

    /// The stream of task endings; taken once, by whoever watches the
    /// running runtime.
    pub fn take_ended(&mut self) -> Option<mpsc::UnboundedReceiver<TaskEnded>> {
        self.ended_rx.take()
    }

    /// Shut the runtime's work down: cancel the shutdown token (the tracker
    /// spawns nothing more), give the serving tasks and the tracked tasks
    /// `grace` (one budget for both) to finish, then abort the rest and
    /// wait until they are gone. Returns the names of the tasks that had to
    /// be aborted (serving tasks first).
    pub async fn shutdown_tasks(&mut self, grace: Duration) -> Vec<String> {
        self.shutdown.cancel();
        self.tracker.close();
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
        aborted.extend(self.tracker.wait_until(deadline).await);
        // The children last: a connection finishing its request may still
        // use a worker. Groups last started first.
        let groups = self
            .supervised
            .as_mut()
            .map(|s| std::mem::take(&mut s.groups))
            .unwrap_or_default();
        for group in groups.into_iter().rev() {
            let answer = group
                .actor
                .call(
                    |reply| crate::children::ChildrenMsg::Shutdown { deadline, reply },
                    None,
                )
                .await;
            if let Ok(ractor::rpc::CallResult::Success(late)) = answer {
                aborted.extend(late);
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
        for group in self.supervised.iter().flat_map(|s| &s.groups) {
            // Its `post_stop` aborts what still runs.
            group.actor.stop(None);
        }
        let aborted = self.tracker.abort_all();
        if !aborted.is_empty() {
            tracing::warn!(?aborted, "a dropped runtime aborted the tasks it owned");
        }
    }
}

/// Run `work` in a task of its own; when it ends, call `ended` with its
/// panic message if it panicked. How the Lifecycle actor keeps a boot or a
/// drain off its mailbox and still learns of its panic.
///
/// One task, not a task and a watcher awaiting its join handle: the panic
/// is caught around each poll of `work` (as tokio itself catches it), and
/// `ended` runs in the same task, so a boot or a drain costs no extra
/// wake-up on another thread (thread hops per stop+start). The
/// unwinding drops what `work` held (a runtime: its tasks are aborted and
/// its store released) before `ended` runs.
pub fn spawn_watched<F>(work: F, ended: impl FnOnce(Option<String>) + Send + 'static)
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let panic = crate::panics::catch_unwind(work).await.err();
        ended(panic.map(|payload| panic_message(payload.as_ref())));
    });
}

/// A booted runtime and the checkpoints of the steps that built it: what the
/// supervisor holds while running and hands to the drain.
#[derive(Debug)]
pub struct LiveRuntime {
    /// Which boot built it.
    pub attempt: NonZeroU32,
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

/// A running step's progress reports: a slow boot is not a dead boot.
/// The step's deadline is the lifecycle machine's
/// (`Timings::step_deadline`, in its policy): every report moves it to the
/// deadline after the report, and a phase that passes it fails the boot with
/// class backoff. [`StepProgress::report`] only notes the moment; the boot
/// forwards the reports to the Lifecycle actor coalesced (at most one per
/// quarter of the deadline, each carrying the latest report's moment), so a
/// step may report as often as it likes.
#[derive(Debug, Default)]
pub struct StepProgress {
    /// The latest report not yet forwarded.
    latest: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Wakes the forwarder (one permit however many reports came).
    reported: tokio::sync::Notify,
    /// Told the step deadline at the start and at each report (see
    /// [`crate::context::Shared::step_deadlines`]), with that deadline.
    announce: Option<(Duration, tokio::sync::watch::Sender<Duration>)>,
}

impl StepProgress {
    /// No report yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// [`Self::new`], telling `announce` how far the deadline (`extend_by`,
    /// the machine's step deadline) is now and at each [`Self::report`], so
    /// a daemon can extend its service manager's start timeout to match.
    #[must_use]
    pub fn announced(extend_by: Duration, announce: tokio::sync::watch::Sender<Duration>) -> Self {
        announce.send_replace(extend_by);
        Self {
            announce: Some((extend_by, announce)),
            ..Self::default()
        }
    }

    /// The step is making progress: its deadline moves to the step deadline
    /// from now. Cheap, never blocks, never fails.
    pub fn report(&self) {
        *self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tokio::time::Instant::now());
        self.reported.notify_one();
        if let Some((extend_by, announce)) = &self.announce {
            announce.send_replace(*extend_by);
        }
    }

    /// Waits for a report not yet taken and takes it: the moment of the
    /// latest one made since the last take (reports in between coalesce).
    pub async fn next_report(&self) -> tokio::time::Instant {
        loop {
            self.reported.notified().await;
            if let Some(at) = self
                .latest
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
            {
                return at;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    use crate::nz;

    /// Two steps whose outputs are both `String`s.
    struct Left;
    struct Right;

    impl Step for Left {
        const NAME: &'static str = "left";
        type Config = toml::Table;
        type Output = String;
        async fn execute(
            &self,
            _cx: StepContext<'_, toml::Table>,
        ) -> Result<Resource<String>, StepError> {
            Ok(Resource::new("side", "left", "l".to_owned()))
        }
    }

    impl Step for Right {
        const NAME: &'static str = "right";
        type Config = toml::Table;
        type Output = String;
        async fn execute(
            &self,
            cx: StepContext<'_, toml::Table>,
        ) -> Result<Resource<String>, StepError> {
            let left = cx
                .runtime
                .get::<Left>()
                .ok_or_else(|| StepError::hold("no left"))?;
            Ok(Resource::new("side", "right", format!("{left}r")))
        }
    }

    /// `step` bound to an empty config.
    fn bound<S: Step<Config = toml::Table>>(step: S) -> Arc<dyn AnyStep> {
        Arc::new(step).bind(Arc::new(toml::Table::new()))
    }

    async fn run(step: &dyn AnyStep, runtime: &mut Runtime) -> Result<ResourceRecord, StepError> {
        let progress = StepProgress::new();
        step.execute(StepEnv {
            attempt: nz(1),
            data_dir: Path::new("/nonexistent"),
            runtime,
            prior: &[],
            interrupted: false,
            progress: &progress,
            handover: &Arc::default(),
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
        let (left_step, right) = (bound(Left), bound(Right));
        let left = run(&*left_step, &mut runtime).await.expect("left runs");
        assert_eq!(left.id, "left");
        run(&*right, &mut runtime)
            .await
            .expect("right reads left's output");
        // Both outputs are `String`s, kept side by side under their steps.
        assert_eq!(runtime.get::<Left>().map(String::as_str), Some("l"));
        assert_eq!(runtime.get::<Right>().map(String::as_str), Some("lr"));
        runtime.get_mut::<Right>().expect("kept").push('!');
        // The default observation follows the output; the default destroy
        // drops it.
        assert_eq!(right.observe(&left, &runtime).await, Observation::Present);
        right.destroy(&left, &mut runtime).await.expect("destroyed");
        assert_eq!(right.observe(&left, &runtime).await, Observation::Gone);
        assert_eq!(runtime.take::<Left>().as_deref(), Some("l"));
        assert!(runtime.get::<Left>().is_none());
    }

    #[test]
    fn a_plan_that_names_a_step_twice_is_refused() {
        let error = Plan::new()
            .step(Left)
            .step(Right)
            .step(Left)
            .bind(Arc::new(toml::Table::new()))
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
    async fn progress_reports_coalesce_into_the_latest() {
        let progress = StepProgress::new();
        let none = tokio::time::timeout(Duration::from_secs(1), progress.next_report()).await;
        assert!(none.is_err(), "no report, nothing to take");
        progress.report();
        tokio::time::advance(Duration::from_secs(2)).await;
        progress.report();
        tokio::time::advance(Duration::from_secs(3)).await;
        progress.report();
        let latest = tokio::time::Instant::now();
        // Three reports, one take, carrying the moment of the last.
        assert_eq!(progress.next_report().await, latest);
        let again = tokio::time::timeout(Duration::from_secs(1), progress.next_report()).await;
        assert!(again.is_err(), "the three reports were taken as one");
    }

    /// A task the runtime tracks is told of the shutdown and waited for;
    /// one that ignores it is aborted at the end of the grace, named, and
    /// gone (not left running) when `shutdown_tasks` returns.
    #[tokio::test]
    async fn shutdown_waits_for_tracked_tasks_and_aborts_the_late() {
        let mut runtime = Runtime::new();
        let tracker = runtime.tracker();
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let shutdown = tracker.shutdown();
        tracker
            .spawn("polite", async move {
                shutdown.begun().await;
                // Work in flight at the shutdown, finished within the grace.
                tokio::time::sleep(Duration::from_millis(20)).await;
                flag.store(true, Ordering::SeqCst);
            })
            .expect("spawned");
        let (held, gone) = tokio::sync::oneshot::channel::<()>();
        tracker
            .spawn("stubborn", async move {
                let _held = held;
                std::future::pending::<()>().await;
            })
            .expect("spawned");
        assert_eq!(tracker.len(), 2);
        let aborted = runtime.shutdown_tasks(Duration::from_millis(200)).await;
        assert_eq!(aborted, vec!["stubborn".to_owned()]);
        assert!(
            finished.load(Ordering::SeqCst),
            "the polite task was awaited"
        );
        assert!(tracker.is_empty());
        // The stubborn task's future was dropped before shutdown returned.
        assert!(gone.await.is_err(), "the aborted task is gone");
    }

    #[tokio::test]
    async fn a_tracker_spawns_nothing_once_shutdown_began() {
        let mut runtime = Runtime::new();
        let tracker = runtime.tracker();
        assert!(
            runtime
                .shutdown_tasks(Duration::from_millis(10))
                .await
                .is_empty()
        );
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let refused = tracker.spawn("late", async move { flag.store(true, Ordering::SeqCst) });
        assert_eq!(refused, Err(ShuttingDown));
        tokio::task::yield_now().await;
        assert!(!ran.load(Ordering::SeqCst));
        // Nor after the runtime is gone.
        drop(runtime);
        assert_eq!(tracker.spawn("later", async {}), Err(ShuttingDown));
    }

    /// A runtime dropped without a drain (a boot that panicked, a
    /// supervisor that ended) aborts what it tracked.
    #[tokio::test]
    async fn dropping_a_runtime_aborts_its_tracked_tasks() {
        let runtime = Runtime::new();
        let (held, gone) = tokio::sync::oneshot::channel::<()>();
        runtime
            .tracker()
            .spawn("connection", async move {
                let _held = held;
                std::future::pending::<()>().await;
            })
            .expect("spawned");
        drop(runtime);
        let dropped = tokio::time::timeout(Duration::from_secs(30), gone).await;
        assert!(
            matches!(dropped, Ok(Err(_))),
            "the tracked task's future was dropped"
        );
    }

    /// `accept_loop` over a real TCP listener: a request in flight at the
    /// shutdown is answered, then the connection closes; an idle one closes
    /// at once; the listener is closed; nothing had to be aborted.
    #[tokio::test]
    async fn an_accept_loop_owns_its_connections() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        use tokio::net::{TcpListener, TcpStream};

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
        let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut runtime = Runtime::new();
        let counted = Arc::clone(&ended);
        runtime.accept_loop("echo", listener, move |conn: Connection<TcpListener>| {
            let started = started_tx.clone();
            let ended = Arc::clone(&counted);
            async move {
                struct Ended(Arc<std::sync::atomic::AtomicUsize>);
                impl Drop for Ended {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _ended = Ended(ended);
                let (read, mut write) = conn.stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Some(Ok(Some(line))) = conn.shutdown.unless_begun(lines.next_line()).await
                {
                    let _ = started.send(());
                    if line == "slow" {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    if write
                        .write_all(format!("{line}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        let idle = TcpStream::connect(addr).await.expect("connect");
        let busy = TcpStream::connect(addr).await.expect("connect");
        let (idle_read, mut idle_write) = idle.into_split();
        let (busy_read, mut busy_write) = busy.into_split();
        let (mut idle_lines, mut busy_lines) = (
            BufReader::new(idle_read).lines(),
            BufReader::new(busy_read).lines(),
        );
        idle_write.write_all(b"hi\n").await.expect("send");
        assert_eq!(
            idle_lines.next_line().await.expect("read").as_deref(),
            Some("hi")
        );
        started.recv().await.expect("idle's request");
        busy_write.write_all(b"slow\n").await.expect("send");
        started.recv().await.expect("the slow request started");
        let aborted = runtime.shutdown_tasks(Duration::from_secs(30)).await;
        assert!(aborted.is_empty(), "{aborted:?}");
        assert_eq!(
            ended.load(Ordering::SeqCst),
            2,
            "both connections ended before the shutdown returned"
        );
        // The request in flight was answered, then the connection closed.
        assert_eq!(
            busy_lines.next_line().await.expect("read").as_deref(),
            Some("slow")
        );
        assert_eq!(busy_lines.next_line().await.expect("read"), None);
        assert_eq!(idle_lines.next_line().await.expect("read"), None);
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
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
