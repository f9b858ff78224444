//! Root: owns the data-dir lock and supervises the tree.
//!
//! ```text
//! Root (holds the ControlDir, so the data-dir lock, for the process's life)
//! ├── Journal        sole writer of the control dir
//! ├── Lifecycle      the machine; publishes snapshots; performs effects
//! ├── ConfigWatcher  notify on the declared file (when there is one)
//! └── Replacement    one replacement transaction at a time, under the upgrade lock
//! ```
//!
//! **A boot and a drain are not actors**: the Lifecycle actor runs each
//! attempt and each drain or wipe in a task of its own
//! (`boot::start`, `drain::start`), which reports its
//! outcome, or its panic, to it directly. No supervision event goes
//! through Root for them, and a running supervisor holds neither (memory
//! per supervisor, and the wake-ups of a spawn and a stop per
//! stop+start).
//!
//! What each child's death brings down:
//! - **Journal**: restarted over the reopened journal, at most
//!   [`RESTARTS`] times; past that, the process exits with intent
//!   `relaunch` (a fresh process reopens the control directory).
//! - **ConfigWatcher**: restarted, at most [`RESTARTS`] times; past that the
//!   daemon goes on without watching (the snapshot says so) — an operator's
//!   `retry` still works.
//! - **Replacement**: not restarted (its request channel went with it); the
//!   daemon goes on, and a `replace` is answered `unavailable`. A transaction
//!   in flight runs in its own task and settles on its own.
//! - **Lifecycle**: the machine is gone, so the process ends with intent
//!   `relaunch`; the runtime it held was dropped with it (tasks aborted,
//!   store lock released).
//!
//! When Lifecycle stops normally (an exit), Root stops the tree and the
//! supervisor's `run` returns the exit intent.
//!
//! **The data-dir lock is watched.** From one [`LOCK_CHECK_PERIOD`] after
//! the tree starts (off a launch's path), every [`LOCK_CHECK_PERIOD`] the
//! process's lock-watch thread (`lock_watch`, one for every
//! supervisor of the process) checks that Root's lock still guards the data dir
//! ([`ControlDir::check_lock`]: `lock` still names the locked file, the
//! control dir's path still names the directory it opened).
//! `rm -rf` of a running daemon's data dir would otherwise let a second
//! daemon start on the same path while this one runs on; on a loss Root logs
//! an error and escalates as for a dead journal: the process exits with
//! intent `relaunch` (exit code 75), and the relaunched daemon takes a fresh
//! lock (or is refused by the one that now holds it). The journal checks the
//! same before every append, so nothing is acknowledged in between. Checked
//! by `files::a_daemon_whose_data_dir_is_removed_exits_for_a_relaunch`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};
use steadfast_protocol::lifecycle::ExitIntent;
use steadfast_protocol::snapshot::Snapshot;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config_watcher::{ConfigWatcherActor, ConfigWatcherArgs, ConfigWatcherMsg};
use crate::context::Shared;
use crate::control_dir::{ControlDir, JournalFile};
use crate::journal::{JournalActor, JournalArgs, JournalMsg};
use crate::lifecycle::{Children, CommandRequest, LifecycleActor, LifecycleArgs, LifecycleMsg};
use crate::lock_watch::{self, LockWatch};
use crate::replacement::{
    ReplacementActor, ReplacementArgs, ReplacementChannels, ReplacementMsg, Request, StopAnswer,
};
use steadfast_protocol::replacement::ReplaceRefusal;

/// How many times Root restarts the journal or the watcher before it gives up.
pub const RESTARTS: u32 = 3;

pub use crate::lock_watch::LOCK_CHECK_PERIOD;

/// How often the data-dir lock is checked on a simulation's thread (one
/// whose device jobs run inline), in its virtual time: seldom, since days
/// of simulated idle time would cost a wake-up a virtual second; the
/// journal checks the lock before every append in between.
const SIMULATED_LOCK_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(3_600);

/// Root.
#[derive(Debug, Default)]
pub struct RootActor;

/// What Root starts the tree from.
pub struct RootArgs {
    /// The fixed context.
    pub shared: Arc<Shared>,
    /// The locked control directory.
    pub control: Arc<ControlDir>,
    /// The journal opened (and repaired) when the supervisor was built.
    pub journal: JournalFile,
    /// Where snapshots are published.
    pub snapshots: watch::Sender<Snapshot>,
    /// Commands from handles.
    pub commands: mpsc::UnboundedReceiver<CommandRequest>,
    /// Where the exit intent is left.
    pub exit: Arc<Mutex<Option<ExitIntent>>>,
    /// The Replacement actor's report channel and requests.
    pub replacement: ReplacementChannels,
}

/// Root's state: its children and their restart counts.
pub struct RootState {
    shared: Arc<Shared>,
    control: Arc<ControlDir>,
    exit: Arc<Mutex<Option<ExitIntent>>>,
    lifecycle: ActorRef<LifecycleMsg>,
    journal: ActorRef<JournalMsg>,
    watcher: Option<ActorRef<ConfigWatcherMsg>>,
    /// The task that starts the Replacement actor at the first request
    /// (aborted when the tree comes down before one came).
    replacement: JoinHandle<()>,
    journal_restarts: u32,
    watcher_restarts: u32,
    /// Set once the tree is coming down: children's deaths are expected.
    stopping: bool,
    /// Every child's join handle: Root's own stop waits for them, so
    /// `Supervisor::run` returns only once every child (and whatever state it
    /// held, such as a runtime) is gone.
    joins: Vec<JoinHandle<()>>,
    /// The journal's join handle, apart: a restart waits for the dead
    /// journal to be gone (its writer dropped) before reopening the file.
    journal_join: Option<JoinHandle<()>>,
    /// The data-dir lock's watch (once [`RootMsg::WatchLock`] started it),
    /// every [`LOCK_CHECK_PERIOD`] until
    /// dropped (a failed check casts [`RootMsg::LockLost`]).
    lock_watch: Option<LockWatch>,
}

/// Root's own message; otherwise it acts on supervision events.
pub enum RootMsg {
    /// Start watching the data-dir lock.
    WatchLock,
    /// The data-dir lock was lost (the reason): escalate.
    LockLost(String),
}

impl Actor for RootActor {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        args: RootArgs,
    ) -> Result<RootState, ActorProcessingErr> {
        let RootArgs {
            shared,
            control,
            journal,
            snapshots,
            commands,
            exit,
            replacement,
        } = args;
        let cell = myself.get_cell();
        let (journal, journal_join) = Actor::spawn_linked(
            Some(child_name(&shared.data_dir, "journal", 0)),
            JournalActor,
            JournalArgs {
                control: Arc::clone(&control),
                file: Some(journal),
                metrics: Arc::clone(&shared.metrics),
            },
            cell.clone(),
        )
        .await?;
        let children = Children {
            journal: journal.clone(),
        };
        let (lifecycle, lifecycle_join) = Actor::spawn_linked(
            Some(child_name(&shared.data_dir, "lifecycle", 0)),
            LifecycleActor,
            LifecycleArgs {
                shared: Arc::clone(&shared),
                children,
                snapshots,
                commands,
                exit: Arc::clone(&exit),
            },
            cell.clone(),
        )
        .await?;
        let mut joins = vec![lifecycle_join];
        let watcher = match &shared.declared {
            Some(path) => {
                let (watcher, join) =
                    spawn_watcher(path.clone(), &shared, &lifecycle, cell.clone(), 0).await?;
                joins.push(join);
                Some(watcher)
            }
            None => None,
        };
        let replacement = tokio::spawn(replacement_on_demand(
            ReplacementArgs {
                data_dir: shared.data_dir.clone(),
                clock: shared.clock,
                reports: replacement.reports,
                requests: replacement.requests,
                metrics: Arc::clone(&shared.metrics),
            },
            cell.clone(),
        ));
        lifecycle.cast(LifecycleMsg::Begin)?;
        // Not on the launch's path (the watch may start the process's
        // lock-watch thread): the first check comes a period later anyway,
        // and the journal checks the lock before every append meanwhile.
        myself.send_after(LOCK_CHECK_PERIOD, || RootMsg::WatchLock);
        Ok(RootState {
            shared,
            control,
            exit,
            lifecycle,
            journal,
            watcher,
            replacement,
            journal_restarts: 0,
            watcher_restarts: 0,
            stopping: false,
            joins,
            journal_join: Some(journal_join),
            lock_watch: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<RootMsg>,
        message: RootMsg,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RootMsg::WatchLock if crate::device::runs_inline() => {
                // A simulation's thread: the lock is checked here, on its
                // virtual clock, so the seed decides when a removed lock is
                // noticed (the process's watch thread would notice at a
                // moment of its own).
                if !state.stopping {
                    match state.control.check_lock() {
                        Ok(()) => drop(
                            myself.send_after(SIMULATED_LOCK_CHECK_PERIOD, || RootMsg::WatchLock),
                        ),
                        Err(error) => {
                            let _ = myself.cast(RootMsg::LockLost(error.to_string()));
                        }
                    }
                }
            }
            RootMsg::WatchLock => {
                if !state.stopping && state.lock_watch.is_none() {
                    let root = myself.clone();
                    state.lock_watch = Some(lock_watch::watch(&state.control, move |reason| {
                        let _ = root.cast(RootMsg::LockLost(reason));
                    }));
                }
            }
            RootMsg::LockLost(reason) => {
                if !state.stopping {
                    tracing::error!(%reason, "the data-dir lock was lost; ending the process for a relaunch");
                    state.give_up(&myself);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        event: SupervisionEvent,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        let (who, failure, panicked) = match event {
            SupervisionEvent::ActorFailed(who, error) => (who, Some(error.to_string()), true),
            SupervisionEvent::ActorTerminated(who, last_state, reason) => {
                // A stopped actor hands back its last state; drop it now, so
                // whatever it held (the journal's writer) is gone before a
                // successor reopens it.
                drop(last_state);
                (who, reason, false)
            }
            _ => return Ok(()),
        };
        if state.stopping {
            return Ok(());
        }
        let id = who.get_id();
        let cell = myself.get_cell();
        if id == state.lifecycle.get_id() {
            // An exit leaves its intent, then stops the actor with a reason
            // (`exit(halt)`): that is its normal end, not a death.
            let exited = !panicked && state.exit.lock().is_ok_and(|exit| exit.is_some());
            match failure {
                Some(reason) if exited => {
                    tracing::debug!(%reason, "the lifecycle actor ended");
                }
                Some(error) => {
                    tracing::error!(%error, "the lifecycle actor died; ending the process for a relaunch");
                    state.set_exit(ExitIntent::Relaunch);
                }
                None => {}
            }
            state.stop_children();
            state.stopping = true;
            myself.stop(None);
        } else if id == state.journal.get_id() {
            tracing::error!(error = ?failure, restarts = state.journal_restarts, "the journal actor died");
            if let Some(dead) = state.journal_join.take() {
                let _ = tokio::time::timeout(Duration::from_secs(5), dead).await;
            }
            // A successor that cannot start counts as another death.
            loop {
                state.journal_restarts += 1;
                if state.journal_restarts > RESTARTS {
                    state.give_up(&myself);
                    return Ok(());
                }
                let args = JournalArgs {
                    control: Arc::clone(&state.control),
                    file: None,
                    metrics: Arc::clone(&state.shared.metrics),
                };
                let name = child_name(&state.shared.data_dir, "journal", state.journal_restarts);
                match Actor::spawn_linked(Some(name), JournalActor, args, cell.clone()).await {
                    Ok((journal, join)) => {
                        state.journal_join = Some(join);
                        state.journal = journal;
                        state.tell_children();
                        break;
                    }
                    Err(error) => tracing::error!(%error, "the journal could not be reopened"),
                }
            }
        } else if who.is_message_type_of::<ReplacementMsg>() == Some(true) {
            // Not restarted: the request channel went with it.
            tracing::error!(error = ?failure, "the replacement actor died; replacements are unavailable");
        } else if state.watcher.as_ref().is_some_and(|w| w.get_id() == id) {
            state.watcher_restarts += 1;
            tracing::error!(error = ?failure, restarts = state.watcher_restarts, "the config watcher died");
            state.watcher = None;
            if state.watcher_restarts <= RESTARTS
                && let Some(path) = state.shared.declared.clone()
            {
                match spawn_watcher(
                    path,
                    &state.shared,
                    &state.lifecycle,
                    cell,
                    state.watcher_restarts,
                )
                .await
                {
                    Ok((watcher, join)) => {
                        state.joins.push(join);
                        state.watcher = Some(watcher);
                    }
                    Err(error) => {
                        tracing::error!(%error, "the config watcher could not be restarted")
                    }
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<RootMsg>,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        state.lock_watch = None;
        state.stop_children();
        // The child started on demand (the Replacement actor, once a
        // replacement was asked for) has no join handle here: stop it and
        // wait for it the same way.
        let temporary: Vec<ActorCell> = myself
            .get_children()
            .into_iter()
            .filter(|child| child.is_message_type_of::<ReplacementMsg>() == Some(true))
            .collect();
        for child in &temporary {
            child.stop(None);
        }
        let grace = state.shared.timings.drain_grace + Duration::from_secs(5);
        let journal = state.journal_join.take();
        for join in state.joins.drain(..).chain(journal) {
            if tokio::time::timeout(grace, join).await.is_err() {
                tracing::error!("a child actor did not stop within {grace:?}");
            }
        }
        for child in temporary {
            if child.wait(Some(grace)).await.is_err() {
                tracing::error!("a child actor did not stop within {grace:?}");
            }
        }
        Ok(())
    }
}

impl RootState {
    fn tell_children(&self) {
        let _ = self.lifecycle.cast(LifecycleMsg::SetChildren(Children {
            journal: self.journal.clone(),
        }));
    }

    fn set_exit(&self, intent: ExitIntent) {
        if let Ok(mut exit) = self.exit.lock() {
            exit.get_or_insert(intent);
        }
    }

    /// Escalate: end the process with intent relaunch. The Lifecycle actor
    /// is stopped with the rest; its runtime is dropped, which aborts the
    /// runtime's tasks and releases what they held.
    fn give_up(&mut self, myself: &ActorRef<RootMsg>) {
        self.stopping = true;
        self.set_exit(ExitIntent::Relaunch);
        self.stop_children();
        myself.stop(Some("escalated".into()));
    }

    fn stop_children(&self) {
        self.lifecycle.stop(None);
        self.journal.stop(None);
        if let Some(watcher) = &self.watcher {
            watcher.stop(None);
        }
        self.replacement.abort();
    }
}

/// The registered name of one of a supervisor's children: `role` is
/// `journal`, `lifecycle`, `config_watcher` or `replacement`, and
/// `generation` counts Root's restarts of that child (0 for the first). One
/// daemon per data dir makes the names unique in a process; operators and
/// tests find a child with `ractor::registry::where_is`.
#[must_use]
pub fn child_name(data_dir: &std::path::Path, role: &str, generation: u32) -> String {
    format!("steadfast:{}:{role}:{generation}", data_dir.display())
}

/// Start the Replacement actor under Root (`root`) when the first
/// replacement is asked for, and hand it that request; it takes the request
/// channel over from there (and lives on: its serial counts every
/// transaction). A supervisor that is never asked holds no Replacement
/// actor, only this waiting task (memory per supervisor). An
/// actor that cannot be started drops the request (answered `unavailable`)
/// and the channel with it, as a dead one does.
async fn replacement_on_demand(mut args: ReplacementArgs, root: ActorCell) {
    // A stop before any replacement has nothing to abort or forward: the
    // daemon carries it out, and no replacement starts after it.
    let mut stopped = false;
    let (job, reply) = loop {
        let Some(request) = args.requests.recv().await else {
            return;
        };
        match *request {
            Request::Stop(_, reply) => {
                stopped = true;
                let _ = reply.send(StopAnswer::CarryOut);
            }
            Request::Replace(_, reply) if stopped => {
                let _ = reply.send(Err(ReplaceRefusal::Unavailable));
            }
            Request::Replace(job, reply) => break (job, reply),
        }
    };
    let name = child_name(&args.data_dir, "replacement", 0);
    match Actor::spawn_linked(Some(name), ReplacementActor, args, root).await {
        Ok((replacement, _join)) => {
            let _ = replacement.cast(ReplacementMsg::Replace(job, reply));
        }
        Err(error) => {
            tracing::error!(%error, "the replacement actor could not be started; replacements are unavailable");
        }
    }
}

async fn spawn_watcher(
    path: PathBuf,
    shared: &Shared,
    lifecycle: &ActorRef<LifecycleMsg>,
    supervisor: ActorCell,
    generation: u32,
) -> Result<(ActorRef<ConfigWatcherMsg>, JoinHandle<()>), ActorProcessingErr> {
    let target = lifecycle.clone();
    let watching = lifecycle.clone();
    let args = ConfigWatcherArgs {
        path,
        debounce: shared.timings.debounce,
        on_change: Arc::new(move || {
            let _ = target.cast(LifecycleMsg::ConfigChanged);
        }),
        on_watching: Arc::new(move || {
            let _ = watching.cast(LifecycleMsg::Watching);
        }),
    };
    let name = child_name(&shared.data_dir, "config_watcher", generation);
    Ok(Actor::spawn_linked(Some(name), ConfigWatcherActor, args, supervisor).await?)
}
