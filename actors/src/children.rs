//! Supervised children of a runtime: the Children actor, which carries out
//! one group's decisions, and what a step declares a group with.
//!
//! A step starts a group through its runtime
//! ([`Runtime::supervise`](crate::service::Runtime::supervise)): plain async
//! tasks and ractor actors, each made by a factory the group calls again
//! on every start, so each incarnation gets fresh arguments. The group is
//! one [`ChildrenActor`]: it holds the pure machine
//! ([`steadfast_protocol::children::Group`]), turns each child's end into
//! an event (a task's return or panic from the task's own wrapper; an
//! actor's stop or failure as ractor's supervision event, the actor being
//! spawned linked to this one and kept out of ractor's global registry),
//! and performs the decision handed back, in its order: stop (each child
//! within its own shutdown timeout, then aborted and named), start, then
//! write the restart records to the journal (no fsync of their own: they
//! are durable with its next group commit). A meltdown's record is
//! appended (durable) before the runtime is told it ended. It decides
//! nothing itself.
//!
//! What a child's handle reaches: [`Handle`] holds the current
//! incarnation's value (an actor's `ActorRef`, set by the group at each
//! start; for a task, whatever its factory sets, such as a channel's
//! sender), so a handle a step gave out before a restart reaches the new
//! incarnation.
//!
//! The group's state is published on the supervisor's [`Board`]: status,
//! metrics and the control plane's `child` command read it there.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use steadfast_protocol::Timestamp;
use steadfast_protocol::children::{
    self as machine, ChildExit, ChildKind, ChildOp, ChildSpec, ChildView, Decision, Event,
    GroupSpec, OpRefused, Plan,
};
use steadfast_protocol::journal::Record;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use steadfast_protocol::children::{
    AutoShutdown, ChildState, Intensity, Restart, SpecError, Strategy,
};

use crate::clock::Clock;
use crate::journal::JournalMsg;
use crate::panics::panic_message;

/// The shutdown timeout a child gets unless it says otherwise (OTP's
/// default for a worker).
pub const DEFAULT_SHUTDOWN: Duration = Duration::from_secs(5);

type TaskFactory = Arc<
    dyn Fn(ChildContext) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync,
>;
type ActorFactory = Arc<
    dyn Fn(ActorCell) -> Pin<Box<dyn Future<Output = Result<ActorCell, String>> + Send>>
        + Send
        + Sync,
>;

#[derive(Clone)]
enum Factory {
    Task(TaskFactory),
    Actor(ActorFactory),
}

/// What a task child's incarnation is handed.
#[derive(Debug, Clone)]
pub struct ChildContext {
    name: Arc<str>,
    incarnation: u32,
    shutdown: CancellationToken,
}

impl ChildContext {
    /// The child's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which incarnation this is, from 1.
    #[must_use]
    pub const fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Cancelled when this incarnation is to stop (its group restarts it,
    /// an operator stops it, or the runtime shuts down): finish what it is
    /// doing and return within its shutdown timeout, or be aborted.
    #[must_use]
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}

/// The current incarnation's value of a child: an actor's `ActorRef`
/// (set by its group at every start), or what a task's factory sets (a
/// channel's sender). Clones share one slot, so a handle given out before
/// a restart reaches the new incarnation.
pub struct Handle<T> {
    slot: Arc<RwLock<Option<T>>>,
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Self {
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<T> Default for Handle<T> {
    fn default() -> Self {
        Self {
            slot: Arc::new(RwLock::new(None)),
        }
    }
}

impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").finish_non_exhaustive()
    }
}

impl<T: Clone> Handle<T> {
    /// An empty handle (filled at the child's start).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Point the handle at the current incarnation's value.
    pub fn set(&self, value: T) {
        *self.slot.write().unwrap_or_else(PoisonError::into_inner) = Some(value);
    }

    /// The current incarnation's value; `None` before the first start.
    #[must_use]
    pub fn get(&self) -> Option<T> {
        self.slot
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl<M: ractor::Message> Handle<ActorRef<M>> {
    /// Send `message` to the current incarnation.
    ///
    /// # Errors
    /// [`ChildGone`] when no incarnation has started, or the current one
    /// has stopped (between its end and its restart).
    pub fn cast(&self, message: M) -> Result<(), ChildGone> {
        self.get()
            .ok_or(ChildGone)?
            .cast(message)
            .map_err(|_| ChildGone)
    }
}

/// A message to a child that is not running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the child is not running")]
pub struct ChildGone;

/// One child, as a step declares it: a name, how it is made, its restart
/// type (permanent unless said), its shutdown timeout ([`DEFAULT_SHUTDOWN`]
/// unless said), and whether it is significant.
pub struct Child {
    spec: ChildSpec,
    factory: Factory,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child").field("spec", &self.spec).finish()
    }
}

impl Child {
    fn new(name: &str, kind: ChildKind, factory: Factory) -> Self {
        Self {
            spec: ChildSpec {
                name: name.to_owned(),
                kind,
                restart: Restart::Permanent,
                significant: false,
                shutdown_ms: steadfast_protocol::time::duration_ms(DEFAULT_SHUTDOWN),
            },
            factory,
        }
    }

    /// A task child: `factory` makes each incarnation's future from its
    /// [`ChildContext`]. `Ok` is a normal end, an error or a panic an
    /// abnormal one.
    pub fn task<F, Fut>(name: &str, factory: F) -> Self
    where
        F: Fn(ChildContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        Self::new(
            name,
            ChildKind::Task,
            Factory::Task(Arc::new(move |cx| Box::pin(factory(cx)))),
        )
    }

    /// An actor child: `factory` makes each incarnation's actor and its
    /// arguments; the group spawns it (unnamed in ractor's registry) linked
    /// to itself, and points `handle` at it. A stop of its own is a normal
    /// end; a panic or an error from a handler an abnormal one.
    pub fn actor<A, F>(name: &str, handle: &Handle<ActorRef<A::Msg>>, factory: F) -> Self
    where
        A: Actor,
        F: Fn() -> (A, A::Arguments) + Send + Sync + 'static,
    {
        let handle = handle.clone();
        let factory = Arc::new(factory);
        Self::new(
            name,
            ChildKind::Actor,
            Factory::Actor(Arc::new(move |supervisor| {
                let handle = handle.clone();
                let factory = Arc::clone(&factory);
                Box::pin(async move {
                    let (actor, arguments) =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory()))
                            .map_err(|p| {
                                format!("its factory panicked: {}", panic_message(p.as_ref()))
                            })?;
                    let (actor, _join) = Actor::spawn_linked(None, actor, arguments, supervisor)
                        .await
                        .map_err(|e| e.to_string())?;
                    handle.set(actor.clone());
                    Ok(actor.get_cell())
                })
            })),
        )
    }

    /// Its restart type.
    #[must_use]
    pub const fn restart(mut self, restart: Restart) -> Self {
        self.spec.restart = restart;
        self
    }

    /// How long it is given to stop before it is aborted.
    #[must_use]
    pub fn shutdown(mut self, timeout: Duration) -> Self {
        self.spec.shutdown_ms = steadfast_protocol::time::duration_ms(timeout);
        self
    }

    /// Whether its end (when it is not restarted) may end the runtime, as
    /// the group's [`AutoShutdown`] says.
    #[must_use]
    pub const fn significant(mut self, significant: bool) -> Self {
        self.spec.significant = significant;
        self
    }
}

/// A group of children as a step declares it: a strategy, an intensity
/// (OTP's default: 1 restart within 5 s), what a significant child's end
/// does (nothing by default), and the children in start order.
pub struct Children {
    strategy: Strategy,
    intensity: Intensity,
    auto_shutdown: AutoShutdown,
    children: Vec<Child>,
}

impl fmt::Debug for Children {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Children")
            .field("strategy", &self.strategy)
            .field("intensity", &self.intensity)
            .field("children", &self.children)
            .finish_non_exhaustive()
    }
}

impl Children {
    /// A group whose strategy is `strategy`.
    #[must_use]
    pub fn new(strategy: Strategy) -> Self {
        Self {
            strategy,
            intensity: Intensity::default(),
            auto_shutdown: AutoShutdown::Never,
            children: Vec::new(),
        }
    }

    /// A failed child is restarted alone.
    #[must_use]
    pub fn one_for_one() -> Self {
        Self::new(Strategy::OneForOne)
    }

    /// A failed child's restart stops and starts every running sibling.
    #[must_use]
    pub fn one_for_all() -> Self {
        Self::new(Strategy::OneForAll)
    }

    /// A failed child's restart takes the siblings declared after it.
    #[must_use]
    pub fn rest_for_one() -> Self {
        Self::new(Strategy::RestForOne)
    }

    /// At most `restarts` automatic restarts within `period`; one more ends
    /// the runtime.
    #[must_use]
    pub fn intensity(mut self, restarts: u32, period: Duration) -> Self {
        self.intensity = Intensity::new(restarts, period);
        self
    }

    /// What a significant child's end does.
    #[must_use]
    pub const fn auto_shutdown(mut self, auto_shutdown: AutoShutdown) -> Self {
        self.auto_shutdown = auto_shutdown;
        self
    }

    /// Add `child`, started after the ones added before it.
    #[must_use]
    pub fn child(mut self, child: Child) -> Self {
        self.children.push(child);
        self
    }

    fn split(self) -> (GroupSpec, Vec<Factory>) {
        let (specs, factories) = self
            .children
            .into_iter()
            .map(|c| (c.spec, c.factory))
            .unzip();
        (
            GroupSpec {
                strategy: self.strategy,
                intensity: self.intensity,
                auto_shutdown: self.auto_shutdown,
                children: specs,
            },
            factories,
        )
    }
}

/// A group that could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildrenError {
    /// The declaration breaks a rule.
    #[error("invalid children: {0}")]
    Spec(#[from] SpecError),
    /// The runtime is shutting down: nothing more starts.
    #[error("the runtime is shutting down")]
    ShuttingDown,
    /// The group's actor could not be spawned.
    #[error("the children's group could not start: {0}")]
    Spawn(String),
}

/// Why an operator's command about a child was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildOpError {
    /// No running runtime has a child of that name.
    #[error("no child is named {0:?} in the running runtime")]
    Unknown(String),
    /// The machine refused it.
    #[error("child {child:?} cannot {op}: {why}")]
    Refused {
        /// The child.
        child: String,
        /// The command.
        op: &'static str,
        /// Why.
        why: OpRefused,
    },
    /// The group is gone (its runtime ended meanwhile).
    #[error("child {0:?}: its runtime ended")]
    Gone(String),
}

/// Where a group sends what the runtime needs to know.
#[derive(Clone)]
pub(crate) struct GroupEnv {
    /// The runtime's attempt, on its journal records.
    pub(crate) attempt: NonZeroU32,
    /// The journal, when the runtime is a supervisor's (a bare runtime in
    /// a test has none: its records are only logged).
    pub(crate) journal: Option<ActorRef<JournalMsg>>,
    /// How long a meltdown's append may take.
    pub(crate) journal_timeout: Duration,
    /// The clock events are stamped with.
    pub(crate) clock: Clock,
    /// Where the group's state is published.
    pub(crate) board: Arc<Board>,
    /// Told when the group ends the runtime (a meltdown, a significant
    /// child's end): the reason.
    pub(crate) ended: EndRuntime,
}

/// How a group ends the runtime that holds it: called once, with the child
/// to blame and the reason (the runtime turns it into its own end).
pub(crate) type EndRuntime = Arc<dyn Fn(String, String) + Send + Sync>;

/// The children of a supervisor's running runtime, as status, metrics and
/// the control plane read them. One a supervisor ([`crate::context::Shared`]).
#[derive(Default)]
pub struct Board {
    groups: Mutex<Vec<Posted>>,
    next: AtomicU64,
    /// Set when a view changed and the listener has not read it yet (one
    /// nudge per batch of changes).
    dirty: AtomicBool,
    listener: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

struct Posted {
    id: u64,
    actor: ActorRef<ChildrenMsg>,
    names: Vec<String>,
    views: Vec<ChildView>,
}

impl fmt::Debug for Board {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Board")
            .field("children", &self.views().len())
            .finish_non_exhaustive()
    }
}

impl Board {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Posted>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every child of every group, groups in start order.
    #[must_use]
    pub fn views(&self) -> Vec<ChildView> {
        self.lock()
            .iter()
            .flat_map(|g| g.views.iter().cloned())
            .collect()
    }

    /// [`Self::views`], for the one who publishes them: a change after
    /// this nudges the listener again.
    #[must_use]
    pub fn publish(&self) -> Vec<ChildView> {
        self.dirty.store(false, Ordering::Release);
        self.lock()
            .iter()
            .flat_map(|g| g.views.iter().cloned())
            .collect()
    }

    /// Call `listener` (once per batch) when a view changes; the
    /// Lifecycle actor republishes its snapshot then.
    pub fn listen(&self, listener: impl Fn() + Send + Sync + 'static) {
        *self.listener.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(listener));
    }

    fn changed(&self) {
        if !self.dirty.swap(true, Ordering::AcqRel)
            && let Some(listener) = self
                .listener
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
        {
            listener();
        }
    }

    /// Whether a name is taken by a posted group.
    fn taken(&self, names: &[String]) -> Option<String> {
        let groups = self.lock();
        names
            .iter()
            .find(|n| groups.iter().any(|g| g.names.contains(n)))
            .cloned()
    }

    fn post(&self, actor: ActorRef<ChildrenMsg>, names: Vec<String>, views: Vec<ChildView>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push(Posted {
            id,
            actor,
            names,
            views,
        });
        self.changed();
        id
    }

    fn update(&self, id: u64, views: Vec<ChildView>) {
        if let Some(g) = self.lock().iter_mut().find(|g| g.id == id) {
            g.views = views;
        }
        self.changed();
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().retain(|g| g.id != id);
        self.changed();
    }

    /// Carry out an operator's `op` on the child named `name`; answered
    /// once the child's stop and start are done.
    ///
    /// # Errors
    /// [`ChildOpError`]: no such child, the machine refused, or the group
    /// ended meanwhile.
    pub async fn operate(&self, name: &str, op: ChildOp) -> Result<ChildView, ChildOpError> {
        let actor = self
            .lock()
            .iter()
            .find(|g| g.names.iter().any(|n| n == name))
            .map(|g| g.actor.clone())
            .ok_or_else(|| ChildOpError::Unknown(name.to_owned()))?;
        let name = name.to_owned();
        let answer = actor
            .call(
                |reply| ChildrenMsg::Operator {
                    name: name.clone(),
                    op,
                    reply,
                },
                None,
            )
            .await;
        match answer {
            Ok(ractor::rpc::CallResult::Success(answer)) => answer,
            _ => Err(ChildOpError::Gone(name)),
        }
    }
}

/// The live part of one child's current incarnation.
enum Live {
    Task {
        shutdown: CancellationToken,
        join: JoinHandle<()>,
    },
    Actor(ActorCell),
}

/// What the Children actor is told.
pub enum ChildrenMsg {
    /// Start the children (the group's first plan) and post on the board
    /// under `board_id`; answered once every start was tried.
    Begin {
        /// Where the group is posted.
        board_id: u64,
        /// The first starts.
        plan: Plan,
        /// Answered once done.
        reply: RpcReplyPort<()>,
    },
    /// A task child's incarnation ended.
    TaskEnded {
        /// Its index.
        child: usize,
        /// Which incarnation.
        incarnation: u32,
        /// How.
        exit: ChildExit,
    },
    /// A start failed (reported through the mailbox, so a factory that
    /// always fails is paced by the machine, never a loop in one turn).
    StartFailed {
        /// Its index.
        child: usize,
        /// Which incarnation.
        incarnation: u32,
        /// Why.
        error: String,
    },
    /// An operator's command.
    Operator {
        /// The child's name.
        name: String,
        /// What to do.
        op: ChildOp,
        /// Answered once done.
        reply: RpcReplyPort<Result<ChildView, ChildOpError>>,
    },
    /// The runtime shuts down: stop every child by `deadline`, last
    /// declared first; answered with the names of those aborted.
    Shutdown {
        /// Nothing waits past this.
        deadline: tokio::time::Instant,
        /// The aborted children.
        reply: RpcReplyPort<Vec<String>>,
    },
}

impl fmt::Debug for ChildrenMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TaskEnded {
                child,
                incarnation,
                exit,
            } => f
                .debug_struct("TaskEnded")
                .field("child", child)
                .field("incarnation", incarnation)
                .field("exit", exit)
                .finish(),
            Self::StartFailed { child, error, .. } => f
                .debug_struct("StartFailed")
                .field("child", child)
                .field("error", error)
                .finish(),
            Self::Operator { name, op, .. } => f
                .debug_struct("Operator")
                .field("name", name)
                .field("op", op)
                .finish(),
            Self::Shutdown { .. } => f.write_str("Shutdown"),
            Self::Begin { plan, .. } => f.debug_struct("Begin").field("plan", plan).finish(),
        }
    }
}

/// The Children actor: one group's executor.
pub struct ChildrenActor;

/// What it starts from.
pub struct ChildrenArgs {
    group: machine::Group,
    factories: Vec<Factory>,
    env: GroupEnv,
}

/// Its state.
pub struct ChildrenState {
    group: machine::Group,
    factories: Vec<Factory>,
    live: Vec<Option<Live>>,
    env: GroupEnv,
    board_id: Option<u64>,
    /// Set once the runtime has been told the group ended it.
    ended: bool,
}

impl Actor for ChildrenActor {
    type Msg = ChildrenMsg;
    type State = ChildrenState;
    type Arguments = ChildrenArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ChildrenArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let live = args.factories.iter().map(|_| None).collect();
        Ok(ChildrenState {
            group: args.group,
            factories: args.factories,
            live,
            env: args.env,
            board_id: None,
            ended: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ChildrenMsg::Begin {
                board_id,
                plan,
                reply,
            } => {
                state.board_id = Some(board_id);
                for (child, incarnation) in plan.start {
                    state.start(&myself, child, incarnation).await;
                }
                state.publish();
                let _ = reply.send(());
            }
            ChildrenMsg::TaskEnded {
                child,
                incarnation,
                exit,
            } => state.exited(&myself, child, incarnation, exit).await,
            ChildrenMsg::StartFailed {
                child,
                incarnation,
                error,
            } => {
                state
                    .exited(&myself, child, incarnation, ChildExit::StartFailed(error))
                    .await;
            }
            ChildrenMsg::Operator { name, op, reply } => {
                let answer = state.operator(&myself, &name, op).await;
                let _ = reply.send(answer);
            }
            ChildrenMsg::Shutdown { deadline, reply } => {
                let decision = state.group.on(&Event::Shutdown);
                let aborted = match decision {
                    Decision::Shutdown { .. }
                        if crate::planted::planted(
                            crate::planted::Defect::ChildrenOutliveShutdown,
                        ) =>
                    {
                        Vec::new()
                    }
                    Decision::Shutdown { stop } => state.stop_all(&stop, Some(deadline)).await,
                    _ => Vec::new(),
                };
                state.publish();
                let _ = reply.send(aborted);
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, exit) = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, ChildExit::Normal),
            SupervisionEvent::ActorFailed(cell, error) => {
                (cell, ChildExit::Panicked(error.to_string()))
            }
            _ => return Ok(()),
        };
        let id = cell.get_id();
        let found = state
            .live
            .iter()
            .position(|l| matches!(l, Some(Live::Actor(c)) if c.get_id() == id));
        if let Some(child) = found {
            let incarnation = state.group.state(child).map_or(0, |(_, n)| n);
            state.live[child] = None;
            state.exited(&myself, child, incarnation, exit).await;
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Whatever still runs (the group stopped without a shutdown: the
        // runtime was dropped) goes with it.
        if crate::planted::planted(crate::planted::Defect::ChildrenOutliveShutdown) {
            // Detached, not stopped: a dropped join handle leaves its task.
            state.live.clear();
        }
        for live in state.live.iter_mut().filter_map(Option::take) {
            match live {
                Live::Task { shutdown, join } => {
                    shutdown.cancel();
                    join.abort();
                }
                Live::Actor(cell) => cell.kill(),
            }
        }
        if let Some(id) = state.board_id.take() {
            state.env.board.remove(id);
        }
        Ok(())
    }
}

impl ChildrenState {
    fn now(&self) -> Timestamp {
        self.env.clock.now()
    }

    fn name(&self, child: usize) -> String {
        self.group
            .spec(child)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    fn publish(&self) {
        if let Some(id) = self.board_id {
            self.env.board.update(id, self.group.view(self.now()));
        }
    }

    async fn exited(
        &mut self,
        myself: &ActorRef<ChildrenMsg>,
        child: usize,
        incarnation: u32,
        exit: ChildExit,
    ) {
        if let Some((_, current)) = self.group.state(child)
            && current == incarnation
        {
            self.live[child] = None;
        }
        let at = self.now();
        let decision = self.group.on(&Event::Exited {
            child,
            incarnation,
            exit: exit.clone(),
            at,
        });
        match &decision {
            Decision::Ignore => {}
            Decision::Ended => {
                tracing::info!(child = %self.name(child), incarnation, end = %exit, "a child ended and is not restarted");
            }
            _ => {
                tracing::warn!(child = %self.name(child), incarnation, end = %exit, "a child ended");
            }
        }
        let ended_for_good = matches!(decision, Decision::Ended);
        self.carry_out(myself, decision).await;
        if ended_for_good
            && crate::planted::planted(crate::planted::Defect::ChildrenRestartTemporary)
            && self
                .group
                .spec(child)
                .is_some_and(|s| s.restart == machine::Restart::Temporary)
        {
            // The machine let it end; the executor starts it again anyway.
            self.start(myself, child, incarnation.saturating_add(1))
                .await;
        }
        self.publish();
    }

    async fn operator(
        &mut self,
        myself: &ActorRef<ChildrenMsg>,
        name: &str,
        op: ChildOp,
    ) -> Result<ChildView, ChildOpError> {
        let child = self
            .group
            .index_of(name)
            .ok_or_else(|| ChildOpError::Unknown(name.to_owned()))?;
        let decision = self.group.on(&Event::Operator {
            child,
            op,
            at: self.now(),
        });
        if let Decision::Refused(why) = decision {
            return Err(ChildOpError::Refused {
                child: name.to_owned(),
                op: op.as_str(),
                why,
            });
        }
        tracing::info!(child = %name, op = op.as_str(), "an operator's command about a child");
        self.carry_out(myself, decision).await;
        self.publish();
        let view = self.group.view(self.now());
        view.into_iter()
            .nth(child)
            .ok_or_else(|| ChildOpError::Unknown(name.to_owned()))
    }

    async fn carry_out(&mut self, myself: &ActorRef<ChildrenMsg>, decision: Decision) {
        match decision {
            Decision::Ignore | Decision::Ended | Decision::Refused(_) => {}
            Decision::Restart(plan) => self.restart(myself, plan).await,
            Decision::Meltdown { meltdown, stop } => {
                self.stop_all(&stop, None).await;
                tracing::error!(%meltdown, "a group of children exceeded its restart intensity: the runtime ends");
                let record = Record::ChildrenMeltdown {
                    attempt: self.env.attempt,
                    child: meltdown.child.clone(),
                    restarts: meltdown.restarts,
                    period_ms: meltdown.period_ms,
                    reason: meltdown.reason.clone(),
                    at_ms: self.now().as_millis(),
                };
                // Durable before the lifecycle acts on it: after a crash
                // the journal still says which child flapped.
                if let Some(journal) = &self.env.journal
                    && let Err(error) = crate::journal::append(
                        journal,
                        vec![record],
                        None,
                        self.env.journal_timeout,
                    )
                    .await
                {
                    tracing::error!(%error, "the meltdown's record could not be made durable");
                }
                if !crate::planted::planted(crate::planted::Defect::ChildrenMeltdownUnreported) {
                    self.end_runtime(meltdown.child.clone(), meltdown.to_string());
                }
            }
            Decision::SignificantEnded { child, exit, stop } => {
                self.stop_all(&stop, None).await;
                let reason = format!("significant child {child} ended ({exit})");
                tracing::warn!(%reason, "the runtime ends");
                self.end_runtime(child, reason);
            }
            Decision::Shutdown { stop } => {
                self.stop_all(&stop, None).await;
            }
        }
    }

    fn end_runtime(&mut self, child: String, reason: String) {
        if self.ended {
            return;
        }
        self.ended = true;
        (self.env.ended)(child, reason);
    }

    async fn restart(&mut self, myself: &ActorRef<ChildrenMsg>, plan: Plan) {
        for child in &plan.stop {
            let name = self.name(*child);
            tracing::info!(child = %name, "stopping a child");
        }
        self.stop_all(&plan.stop, None).await;
        for (child, incarnation) in &plan.start {
            self.start(myself, *child, *incarnation).await;
        }
        if !plan.restarted.is_empty() {
            let at_ms = self.now().as_millis();
            let records: Vec<Record> = plan
                .restarted
                .into_iter()
                .map(|r| {
                    tracing::info!(child = %r.child, incarnation = r.incarnation, reason = %r.reason, "a child restarted");
                    Record::ChildRestarted {
                        attempt: self.env.attempt,
                        child: r.child,
                        incarnation: r.incarnation,
                        reason: r.reason,
                        at_ms,
                    }
                })
                .collect();
            // Written now without an fsync (so `steadfastctl journal`
            // shows them at once), durable with the next group commit: a
            // child dies with the process, its restart waits for no fsync.
            if let Some(journal) = &self.env.journal {
                let (reply, _unread) = ractor::concurrency::oneshot();
                let _ = journal.cast(JournalMsg::Write(records, reply.into()));
            }
        }
    }

    /// Start incarnation `incarnation` of `child`. A failed start is
    /// reported through the mailbox.
    async fn start(&mut self, myself: &ActorRef<ChildrenMsg>, child: usize, incarnation: u32) {
        let Some(factory) = self.factories.get(child).cloned() else {
            return;
        };
        match factory {
            Factory::Task(factory) => {
                let shutdown = CancellationToken::new();
                let cx = ChildContext {
                    name: self.name(child).into(),
                    incarnation,
                    shutdown: shutdown.clone(),
                };
                let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory(cx)));
                let future = match made {
                    Ok(future) => future,
                    Err(panic) => {
                        let error =
                            format!("its factory panicked: {}", panic_message(panic.as_ref()));
                        let _ = myself.cast(ChildrenMsg::StartFailed {
                            child,
                            incarnation,
                            error,
                        });
                        return;
                    }
                };
                let report = myself.clone();
                let join = tokio::spawn(async move {
                    let exit = match crate::panics::catch_unwind(future).await {
                        Ok(Ok(())) => ChildExit::Normal,
                        Ok(Err(error)) => ChildExit::Error(error),
                        Err(panic) => ChildExit::Panicked(panic_message(panic.as_ref())),
                    };
                    let _ = report.cast(ChildrenMsg::TaskEnded {
                        child,
                        incarnation,
                        exit,
                    });
                });
                self.live[child] = Some(Live::Task { shutdown, join });
            }
            Factory::Actor(factory) => match factory(myself.get_cell()).await {
                Ok(cell) => self.live[child] = Some(Live::Actor(cell)),
                Err(error) => {
                    let _ = myself.cast(ChildrenMsg::StartFailed {
                        child,
                        incarnation,
                        error,
                    });
                }
            },
        }
    }

    /// Stop `stop` one after another (the order given: last declared
    /// first), each within its shutdown timeout and by `deadline`; abort
    /// the late ones. Their names.
    async fn stop_all(
        &mut self,
        stop: &[usize],
        deadline: Option<tokio::time::Instant>,
    ) -> Vec<String> {
        let mut aborted = Vec::new();
        for &child in stop {
            let Some(live) = self.live.get_mut(child).and_then(Option::take) else {
                continue;
            };
            let timeout =
                Duration::from_millis(self.group.spec(child).map_or(0, |s| s.shutdown_ms));
            let until = match deadline {
                Some(deadline) => deadline.min(tokio::time::Instant::now() + timeout),
                None => tokio::time::Instant::now() + timeout,
            };
            let in_time = match live {
                Live::Task { shutdown, mut join } => {
                    shutdown.cancel();
                    if tokio::time::timeout_at(until, &mut join).await.is_ok() {
                        true
                    } else {
                        join.abort();
                        let _ = join.await;
                        false
                    }
                }
                Live::Actor(cell) => {
                    cell.stop(Some("stopped by its group".to_owned()));
                    if tokio::time::timeout_at(until, cell.wait(None))
                        .await
                        .is_ok()
                    {
                        true
                    } else {
                        cell.kill();
                        let _ = cell.wait(Some(Duration::from_secs(1))).await;
                        false
                    }
                }
            };
            if !in_time {
                let name = self.name(child);
                tracing::warn!(child = %name, "a child ignored its shutdown and was aborted at its timeout");
                aborted.push(name);
            }
        }
        aborted
    }
}

/// A started group, as its runtime keeps it.
pub(crate) struct Started {
    pub(crate) actor: ActorRef<ChildrenMsg>,
    pub(crate) names: Vec<String>,
}

/// Start `children` as a group: check the declaration (names unique in
/// the runtime too: `taken` are the names its other groups hold), spawn
/// its actor, post it on the board, start every child in order.
pub(crate) async fn start(
    children: Children,
    env: GroupEnv,
    taken: &[String],
) -> Result<Started, ChildrenError> {
    let (spec, factories) = children.split();
    let mut group = machine::Group::new(spec)?;
    let names: Vec<String> = (0..group.len())
        .filter_map(|i| group.spec(i).map(|s| s.name.clone()))
        .collect();
    if let Some(dup) = names
        .iter()
        .find(|n| taken.contains(n))
        .cloned()
        .or_else(|| env.board.taken(&names))
    {
        return Err(SpecError::DuplicateName(dup).into());
    }
    let plan = group.start();
    let board = Arc::clone(&env.board);
    let (actor, _) = Actor::spawn(
        None,
        ChildrenActor,
        ChildrenArgs {
            group,
            factories,
            env,
        },
    )
    .await
    .map_err(|e| ChildrenError::Spawn(e.to_string()))?;
    let board_id = board.post(actor.clone(), names.clone(), Vec::new());
    let begun = actor
        .call(
            |reply| ChildrenMsg::Begin {
                board_id,
                plan,
                reply,
            },
            None,
        )
        .await;
    if !matches!(begun, Ok(ractor::rpc::CallResult::Success(()))) {
        board.remove(board_id);
        actor.kill();
        return Err(ChildrenError::Spawn(
            "the group stopped while starting".to_owned(),
        ));
    }
    Ok(Started { actor, names })
}
