//! The embedding API: [`Supervisor`] and [`SupervisorHandle`]. A user
//! names them at the crate root, the rest (the builder, its timings) in
//! [`crate::supervisor`].
//!
//! [`Supervisor::builder`]`(..).build()` opens the data directory — takes its lock (a second
//! supervisor gets [`SupervisorError::Locked`]), opens and repairs the journal
//! (a corrupt one refuses to start, naming the file and offset), reads what
//! the previous run left, and marks this run as holding — all before anything
//! runs. `Supervisor::run` starts the actor tree and returns the exit intent
//! once the lifecycle has exited. The handle works from the moment `build`
//! returns: commands sent before `run` wait in a queue.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use steadfast_actors::clock::Clock;
use steadfast_actors::config::{ConfigSource, Overrides, TomlFileSource, value_text};
use steadfast_actors::context::Timings;
use steadfast_actors::context::{Shared, reinit_salt};
use steadfast_actors::control_dir::{self, ControlDir, ControlDirError, RunMarker};
use steadfast_actors::ledger::Ledger;
use steadfast_actors::lifecycle::Hold;
use steadfast_actors::lifecycle::{Command, CommandError, CommandRequest};
use steadfast_actors::replacement::{
    ReplaceJob, ReplaceRequest, ReplacementChannels, Request, StopAnswer,
};
use steadfast_actors::root::{RootActor, RootArgs};
use steadfast_actors::service::{AnyService, Service};
use steadfast_protocol::history::{self, JournalAttempt};
use steadfast_protocol::lifecycle::{ExitIntent, LifecycleState, PendingApply};
use steadfast_protocol::replacement::{ReplaceRefusal, Report, Stop};
use steadfast_protocol::snapshot::{ConfigView, Snapshot};
use tokio::sync::{mpsc, oneshot, watch};

/// How many attempts a compacted journal keeps unless configured.
pub const DEFAULT_JOURNAL_KEEP_ATTEMPTS: usize = 64;

/// Builds a [`Supervisor`]: the one way to make one
/// ([`Supervisor::builder`]). The config source knows the file it reads,
/// so the supervisor always watches it; the override tier `config set`
/// writes is always the supervisor's own, on top of the source.
pub struct SupervisorBuilder {
    data_dir: PathBuf,
    service: Arc<dyn AnyService>,
    source: ConfigSource,
    timings: Timings,
    journal_keep_attempts: usize,
    version: Option<String>,
}

impl SupervisorBuilder {
    /// Resolve the config from `source` (defaults < declared file; a
    /// [`TomlFileSource`] or a [`ConfigSource`] of one's own). Without one,
    /// the config is empty (plus the override tier).
    #[must_use]
    pub fn config(mut self, source: impl Into<ConfigSource>) -> Self {
        self.source = source.into();
        self
    }

    /// Keep the last `keep` attempts when the journal is compacted (it is
    /// compacted once it holds twice as many; the checkpoints a resume
    /// needs are always kept). Default [`DEFAULT_JOURNAL_KEEP_ATTEMPTS`].
    #[must_use]
    pub const fn journal_keep_attempts(mut self, keep: usize) -> Self {
        self.journal_keep_attempts = keep;
        self
    }

    /// Report `version` as the application's version (a replacement's live
    /// proof names it).
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Use these timings (backoff, stable period, drain grace, debounce,
    /// restart budget).
    #[must_use]
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Open the data directory and prepare the tree. Call inside a tokio
    /// runtime (the clock is anchored on tokio's).
    ///
    /// # Errors
    /// [`SupervisorError::Locked`] when another daemon holds the data
    /// directory; [`SupervisorError::ControlDir`] when the control directory
    /// cannot be opened, or its journal is corrupt (the error names the file
    /// and the offset; nothing is truncated).
    pub fn build(self) -> Result<(Supervisor, SupervisorHandle), SupervisorError> {
        Supervisor::open(self)
    }
}

impl std::fmt::Debug for SupervisorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorBuilder")
            .field("data_dir", &self.data_dir)
            .field("declared", &self.source.declared_path())
            .field("timings", &self.timings)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Why a supervisor could not start.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Another daemon holds this data directory.
    #[error("another daemon holds the data directory ({0})")]
    Locked(PathBuf),
    /// The control directory could not be opened, repaired or trusted.
    #[error("the control directory: {0}")]
    ControlDir(#[source] ControlDirError),
    /// This process was started as a replacement candidate, but the
    /// incumbent's handover could not be received.
    #[error("the replacement handover: {0}")]
    Handover(#[source] std::io::Error),
    /// The declared config file can never be watched (its directory is
    /// missing or is not one); found before the data directory is opened.
    #[error("the declared config file: {0}")]
    DeclaredFile(String),
}

impl From<crate::handover::HandoverError> for SupervisorError {
    fn from(error: crate::handover::HandoverError) -> Self {
        Self::Handover(error.0)
    }
}

impl From<crate::handover::OpenError> for SupervisorError {
    fn from(error: crate::handover::OpenError) -> Self {
        match error {
            crate::handover::OpenError::Handover(error) => error.into(),
            crate::handover::OpenError::ControlDir(error) => error.into(),
        }
    }
}

impl From<ControlDirError> for SupervisorError {
    fn from(error: ControlDirError) -> Self {
        match error {
            ControlDirError::Locked(path) => Self::Locked(path),
            other => Self::ControlDir(other),
        }
    }
}

/// A daemon's supervisor, ready to run.
pub struct Supervisor {
    args: RootArgs,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("shared", &self.args.shared)
            .finish_non_exhaustive()
    }
}

/// Drives and watches a supervisor. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SupervisorHandle {
    commands: mpsc::UnboundedSender<CommandRequest>,
    snapshots: watch::Receiver<Snapshot>,
    shared: Arc<Shared>,
    journal_path: Arc<PathBuf>,
    reinit_salt: Arc<[u8]>,
    replace: ReplaceSide,
    /// How far a boot step's deadline is, told at each step's start and
    /// progress report (`Shared::step_deadlines`).
    step_deadlines: watch::Receiver<std::time::Duration>,
    /// What else a reload re-reads besides the config (the TLS transport's
    /// certificates and tokens): run by `daemon::reload`, so SIGHUP and the
    /// `reload` method, before the config's `config_changed`.
    reload_hooks: ReloadHooks,
}

/// A hook run at each reload; weak, so a server that is gone drops out.
/// `Err` says which file was refused and why (the hook kept the old ones).
type ReloadHook = std::sync::Weak<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The handle's reload hooks (see `SupervisorHandle::reload_hooks`).
#[derive(Clone, Default)]
struct ReloadHooks(Arc<std::sync::Mutex<Vec<ReloadHook>>>);

impl std::fmt::Debug for ReloadHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReloadHooks(…)")
    }
}

/// What `reinit_prepare` answers: the confirmation to pass to
/// [`SupervisorHandle::reinit`], and the epoch it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReinitConfirmation {
    /// The token.
    pub token: String,
    /// The epoch it is valid in: any boot makes it stale.
    pub epoch: u64,
}

/// A handle's side of replacement: the Replacement actor's requests and
/// reports, and what a process driver needs of this daemon.
#[derive(Clone, Debug)]
pub(crate) struct ReplaceSide {
    pub(crate) requests: mpsc::UnboundedSender<ReplaceRequest>,
    pub(crate) reports: watch::Receiver<Option<Report>>,
    /// The control directory, while the tree holds it (weak, so a handle
    /// never keeps the data-dir lock alive).
    pub(crate) control: Weak<ControlDir>,
    pub(crate) data_dir: PathBuf,
    /// The supervisor's handover: what its service offers a successor, and
    /// whether its store was handed over.
    pub(crate) handover: Arc<steadfast_actors::handover::Handover>,
    pub(crate) version: Option<String>,
    /// Set once a committed replacement handed the daemon over: the
    /// process must end (see `daemon::run_with`).
    pub(crate) handed_over: Arc<watch::Sender<bool>>,
    /// Bumped when a replacement rolled back: a candidate that ran may have
    /// put its own control socket and status record under the names this
    /// daemon's were at (and removed them as it stopped); the control
    /// server and the record take their names back (`control::server`).
    pub(crate) reclaim: Arc<watch::Sender<u64>>,
    /// The stops the replacement is deciding, and the one it forwarded to
    /// the successor: a handed-over daemon waits for the first and ends as
    /// the second says (`daemon::run_with`).
    pub(crate) stops: Arc<watch::Sender<StopsSeen>>,
    /// Set by the process driver once the successor a stop was forwarded to
    /// has exited (and released the data dir).
    pub(crate) successor_gone: Arc<watch::Sender<bool>>,
    /// When this daemon is a replacement's candidate not yet selected: the
    /// way back to its incumbent, which decides an `exit` asked of it.
    pub(crate) incumbent: Arc<crate::handover::Incumbent>,
}

/// What became of the stops this daemon was asked for while replacing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StopsSeen {
    /// Stops the replacement has not decided yet.
    pub(crate) in_flight: usize,
    /// The first stop handed to the successor.
    pub(crate) forwarded: Option<Stop>,
}

impl Supervisor {
    /// The way to build a supervisor for `service` over `data_dir` (the
    /// store and the control directory live under it):
    /// `Supervisor::builder(dir, App).config(source).build()`.
    pub fn builder<S: Service>(data_dir: impl Into<PathBuf>, service: S) -> SupervisorBuilder {
        SupervisorBuilder {
            data_dir: data_dir.into(),
            service: Arc::new(service),
            source: TomlFileSource::new().into_source(),
            timings: Timings::default(),
            journal_keep_attempts: DEFAULT_JOURNAL_KEEP_ATTEMPTS,
            version: None,
        }
    }

    fn open(builder: SupervisorBuilder) -> Result<(Self, SupervisorHandle), SupervisorError> {
        let SupervisorBuilder {
            data_dir,
            source,
            service,
            timings,
            journal_keep_attempts,
            version,
        } = builder;
        let declared = source.declared_path().map(std::path::Path::to_path_buf);
        // Checked before the data dir is opened: a declared file whose
        // directory cannot be watched would fail the tree's start after the
        // data dir was made.
        if let Some(path) = &declared {
            steadfast_actors::config::watchable(path).map_err(SupervisorError::DeclaredFile)?;
        }
        let (control, handover, incumbent) = crate::handover::open_control_dir(&data_dir)?;
        let control = control.with_journal_keep(journal_keep_attempts);
        steadfast_actors::launch::mark("data dir locked");
        let overrides = Overrides::new();
        let leaves = control.read_overrides()?;
        overrides
            .load_text(&leaves)
            .map_err(|error| ControlDirError::BadMarker {
                path: control.overrides_path(),
                reason: error.to_string(),
            })?;
        let (journal, records, recovery) = control.open_journal()?;
        steadfast_actors::launch::mark("journal open");
        let ledger = Ledger::from_journal(&records);
        tracing::info!(?recovery, data_dir = %data_dir.display(), "opened the control directory");
        let previous_run = control.previous_run().clone();
        let hold = control.is_held()?;
        let identity = control
            .identity()
            .ok()
            .flatten()
            .map(|identity| identity.id);
        let pid = std::process::id();
        control.write_run_settling(&RunMarker::Holding { pid, attempt: 0 })?;

        let clock = Clock::start();
        let snapshot = Snapshot {
            schema: steadfast_protocol::snapshot::SCHEMA,
            now: None,
            version: 0,
            lifecycle: LifecycleState::Resolving { since: clock.now() },
            attempts: Vec::new(),
            previous_run,
            identity,
            epoch: 0,
            streak: 0,
            hold,
            pending: PendingApply::InSync,
            pid,
            error: None,
            errors: Vec::new(),
            budget: timings
                .budget
                .map(|b| steadfast_protocol::snapshot::BudgetStatus {
                    max_failures: b.max_failures.get(),
                    window_ms: b.window_ms,
                    failures: 0,
                }),
            children: Vec::new(),
        };
        // Before any control socket is bound (`daemon::run_with` binds it
        // once the supervisor is made): a client that reaches this daemon
        // finds its record, never a killed predecessor's.
        let status =
            steadfast_actors::status_record::StatusRecord::create(control.dir(), &snapshot);
        steadfast_actors::launch::mark("status record written");
        let (snapshot_tx, snapshot_rx) = watch::channel(snapshot);
        let (command_tx, command_rx) = mpsc::unbounded_channel();
        let journal_path = Arc::new(control.journal_path());
        let salt: Arc<[u8]> = reinit_salt(&data_dir, pid).into();
        let (step_deadlines, step_deadlines_rx) = watch::channel(timings.step_deadline);
        let shared = Arc::new(Shared {
            service,
            source,
            data_dir,
            declared,
            clock,
            timings,
            pid,
            ledger,
            overrides,
            step_deadlines,
            metrics: Arc::new(steadfast_actors::metrics::Metrics::new()),
            status,
            handover: Arc::new(handover),
            children: Arc::default(),
        });
        shared.metrics.count_control_dir_fsyncs(control.fsyncs());
        let control = Arc::new(control);
        let (request_tx, request_rx) = mpsc::unbounded_channel();
        let (report_tx, report_rx) = watch::channel(None);
        let replace = ReplaceSide {
            requests: request_tx,
            reports: report_rx,
            control: Arc::downgrade(&control),
            data_dir: shared.data_dir.clone(),
            handover: Arc::clone(&shared.handover),
            version,
            handed_over: Arc::new(watch::channel(false).0),
            reclaim: Arc::new(watch::channel(0).0),
            stops: Arc::new(watch::channel(StopsSeen::default()).0),
            successor_gone: Arc::new(watch::channel(false).0),
            incumbent: Arc::new(incumbent),
        };
        let handle_shared = Arc::clone(&shared);
        let supervisor = Self {
            args: RootArgs {
                shared,
                control,
                journal,
                snapshots: snapshot_tx,
                commands: command_rx,
                exit: Arc::new(Mutex::new(None)),
                replacement: ReplacementChannels {
                    reports: Arc::new(report_tx),
                    requests: request_rx,
                },
            },
        };
        let handle = SupervisorHandle {
            commands: command_tx,
            snapshots: snapshot_rx,
            shared: handle_shared,
            journal_path,
            reinit_salt: salt,
            replace,
            step_deadlines: step_deadlines_rx,
            reload_hooks: ReloadHooks::default(),
        };
        Ok((supervisor, handle))
    }

    /// Run the tree until the lifecycle exits; return how the process should
    /// end. If the tree cannot start, or the lifecycle dies, the intent is
    /// `relaunch` (a fresh process starts over).
    pub async fn run(self) -> ExitIntent {
        let exit = Arc::clone(&self.args.exit);
        match ractor::Actor::spawn(None, RootActor, self.args).await {
            Ok((_root, join)) => {
                let _ = join.await;
            }
            Err(error) => {
                tracing::error!(%error, "the supervision tree could not start");
            }
        }
        let intent = exit.lock().ok().and_then(|intent| *intent);
        intent.unwrap_or(ExitIntent::Relaunch)
    }
}

impl Supervisor {
    /// Where this supervisor's control socket goes:
    /// `<data_dir>/.steadfast/control.sock` (see [`crate::control`]).
    #[must_use]
    pub fn control_socket_path(&self) -> PathBuf {
        self.args.control.socket_path()
    }
}

impl SupervisorHandle {
    /// The supervisor's clock now: the one every timestamp of its
    /// snapshots is read from (what the control server stamps as a
    /// snapshot's `now`).
    #[must_use]
    pub fn now(&self) -> steadfast_protocol::Timestamp {
        self.shared.clock.now()
    }

    /// Remove the status record (a clean exit; not a handover, whose
    /// successor keeps its own).
    pub(crate) fn remove_status_record(&self) {
        self.shared.status.remove();
    }

    /// The control socket `(st_dev, st_ino)` is served: the status record
    /// names it, if it is the one beside the record
    /// (`StatusRecord::set_socket`).
    pub(crate) fn set_status_socket(&self, socket: (u64, u64)) {
        self.shared.status.set_socket(socket);
    }

    /// The control socket `(st_dev, st_ino)` is no longer served: the
    /// status record names it no more (`StatusRecord::clear_socket`).
    pub(crate) fn clear_status_socket(&self, socket: (u64, u64)) {
        self.shared.status.clear_socket(socket);
    }

    /// The status record is made again under its name if a replacement's
    /// candidate took the name (`StatusRecord::reclaim`).
    pub(crate) fn reclaim_status_record(&self) {
        self.shared.status.reclaim();
    }

    /// This supervisor's metrics as OpenMetrics text (ending `# EOF`): what
    /// `steadfastctl metrics` and the daemon's HTTP endpoint serve
    /// (`spec/control.md`, "Metrics").
    #[must_use]
    pub fn metrics(&self) -> String {
        self.shared.metrics.render(self.shared.clock.now())
    }

    /// Run `hook` at each reload (SIGHUP, the `reload` method) for as long
    /// as it lives (the TLS transport's files: with the cargo feature
    /// `tls`).
    #[cfg(feature = "tls")]
    pub(crate) fn on_reload(&self, hook: ReloadHook) {
        let mut hooks = self
            .reload_hooks
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        hooks.retain(|hook| hook.strong_count() > 0);
        hooks.push(hook);
    }

    /// Run the live reload hooks (each logs its own failure): `Err` names
    /// every file refused, one a line.
    fn run_reload_hooks(&self) -> Result<(), String> {
        let hooks: Vec<_> = self
            .reload_hooks
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        let refused: Vec<String> = hooks.iter().filter_map(|hook| hook().err()).collect();
        if refused.is_empty() {
            Ok(())
        } else {
            Err(refused.join("\n"))
        }
    }

    /// Count a control-plane connection accepted on `transport`.
    pub(crate) fn count_connection(&self, transport: &str) {
        self.shared.metrics.control_connection(transport);
    }

    /// The latest snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        self.snapshots.borrow().clone()
    }

    /// What a command answered from the snapshot alone answers now, in
    /// process (e.g. `handle.read(&cmd::Ping)`): the same answer the
    /// control plane gives a peer.
    #[must_use]
    pub fn read<C: steadfast_protocol::control::Reads>(&self, command: &C) -> C::Reply {
        command.read(&self.snapshots.borrow())
    }

    /// A receiver of every published snapshot.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Snapshot> {
        self.snapshots.clone()
    }

    /// Hand `command` to the Lifecycle actor and wait for its answer (a
    /// refusal is logged and counted): what each control command that
    /// is a lifecycle event becomes (`control::execute`).
    pub(crate) async fn send(&self, command: Command) -> Result<Snapshot, CommandError> {
        let name = command.name();
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Box::new((command, tx.into())))
            .map_err(|_| CommandError::Unavailable)?;
        let answer = rx.await.map_err(|_| CommandError::Unavailable)?;
        if let Err(error) = &answer {
            log_refusal(name, error);
            self.shared.metrics.refusal(name, error.reason());
        }
        answer
    }

    /// Boot a stopped runtime (clears a hold).
    ///
    /// # Errors
    /// The lifecycle's refusal, unchanged ([`CommandError::Refused`]), or a
    /// durability failure.
    pub async fn start(&self) -> Result<Snapshot, CommandError> {
        self.send(Command::Start).await
    }

    /// Stop the runtime; answered once the drain has settled.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn stop(&self, hold: Hold) -> Result<Snapshot, CommandError> {
        self.send(Command::Stop(hold)).await
    }

    /// Stop the runtime and boot it again. The new config is resolved
    /// first: if it does not resolve the restart is refused
    /// (`config_invalid`, the error in the refusal's `detail`) and the
    /// runtime keeps serving.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn restart(&self) -> Result<Snapshot, CommandError> {
        self.send(Command::Restart { force: false }).await
    }

    /// [`Self::restart`] without the config preflight (`restart --force`):
    /// drains even when the new config does not resolve, so the next boot
    /// fails held in `resolve_config`.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn restart_forced(&self) -> Result<Snapshot, CommandError> {
        self.send(Command::Restart { force: true }).await
    }

    /// Retry a failed boot now.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn retry(&self) -> Result<Snapshot, CommandError> {
        self.send(Command::Retry).await
    }

    /// Restart, stop or start the running runtime's supervised child
    /// `name` (one child, nothing else; never counted against its group's
    /// intensity); answered once its stop and start are done.
    ///
    /// # Errors
    /// [`ChildOpError`](steadfast_actors::children::ChildOpError): no child
    /// of that name runs, or it is in the wrong state for `op`.
    pub async fn child(
        &self,
        name: &str,
        op: steadfast_protocol::children::ChildOp,
    ) -> Result<steadfast_protocol::children::ChildView, steadfast_actors::children::ChildOpError>
    {
        self.shared.children.operate(name, op).await
    }

    /// The running runtime's supervised children, as status shows them.
    #[must_use]
    pub fn children(&self) -> Vec<steadfast_protocol::children::ChildView> {
        self.shared.children.views()
    }

    /// Re-read the config now (what SIGHUP does): retries a failed boot, or
    /// applies the change to a running runtime; first, the files the
    /// control planes read are read again (the TLS port's certificate,
    /// key, client CA and tokens, on a blocking thread).
    ///
    /// # Errors
    /// As [`Self::start`]; [`CommandError::Failed`] naming each file and
    /// why when a control plane refused one (it keeps serving the old
    /// ones): the snapshot's `error` says so until a reload whose files
    /// are all taken, and `steadfast_reload_failures_total` counts it.
    pub async fn reload(&self) -> Result<Snapshot, CommandError> {
        let hooks = self.clone();
        let files = steadfast_actors::device::blocking(move || hooks.run_reload_hooks())
            .await
            .unwrap_or_else(|_| Err("re-reading the control planes' files panicked".to_owned()));
        self.send(Command::Reload { files }).await
    }

    /// A round trip through the Lifecycle actor: answered with the snapshot
    /// once the actor has taken this from its mailbox, so an answer proves
    /// the actor handles messages (what a watchdog ping should prove).
    ///
    /// # Errors
    /// [`CommandError::Unavailable`] when the supervisor is not running.
    pub async fn ping(&self) -> Result<Snapshot, CommandError> {
        self.send(Command::Ping).await
    }

    /// Told how far from now a boot step's deadline is, each time a step
    /// starts or reports progress.
    #[must_use]
    pub fn step_deadlines(&self) -> watch::Receiver<std::time::Duration> {
        self.step_deadlines.clone()
    }

    /// Run a replacement transaction over `job`'s driver, under the upgrade
    /// lock. Answered as soon as it started, with the report as it stands;
    /// follow it with [`Self::replace_reports`].
    ///
    /// # Errors
    /// [`ReplaceRefusal`]: one is already running, another process holds
    /// the upgrade lock, the request is invalid, or the supervisor is gone.
    pub async fn replace(&self, job: ReplaceJob) -> Result<Report, ReplaceRefusal> {
        let (tx, rx) = oneshot::channel();
        self.replace
            .requests
            .send(Box::new(Request::Replace(job, tx.into())))
            .map_err(|_| ReplaceRefusal::Unavailable)?;
        let answer = rx.await.map_err(|_| ReplaceRefusal::Unavailable)?;
        if let Err(refusal) = &answer {
            let error = CommandError::Replace(refusal.clone());
            log_refusal("replace", &error);
            self.shared.metrics.refusal("replace", error.reason());
        }
        answer
    }

    /// A receiver of the latest replacement report (`None` before the first
    /// replacement).
    #[must_use]
    pub fn replace_reports(&self) -> watch::Receiver<Option<Report>> {
        self.replace.reports.clone()
    }

    /// The application's version, as configured.
    #[must_use]
    pub fn version(&self) -> Option<&str> {
        self.replace.version.as_deref()
    }

    /// Whether a committed replacement handed this daemon over to its
    /// successor: the process must end now without touching the data dir.
    #[must_use]
    pub fn handed_over(&self) -> watch::Receiver<bool> {
        self.replace.handed_over.subscribe()
    }

    pub(crate) const fn replace_side(&self) -> &ReplaceSide {
        &self.replace
    }

    /// End the process after a drain.
    ///
    /// While a replacement runs, the exit is a stop the replacement decides
    /// first (`spec/control.md`, "A stop during a replace"): before the
    /// commit the replacement is aborted and rolled back, then this daemon
    /// exits; once committed the successor carries it out, and this
    /// process ends as it does (answered with the snapshot as it is).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn exit(&self, intent: ExitIntent) -> Result<Snapshot, CommandError> {
        self.exit_by(Stop::Exit(intent)).await
    }

    /// [`Self::exit`] for `stop`: a signal's (SIGTERM, SIGINT), exiting
    /// halt, or an `exit`'s.
    pub(crate) async fn exit_by(&self, stop: Stop) -> Result<Snapshot, CommandError> {
        let intent = match stop {
            Stop::Signal => ExitIntent::Halt,
            Stop::Exit(intent) => intent,
        };
        // A candidate not yet selected hands an `exit` back to its
        // incumbent, whose replacement decides it (`crate::handover`).
        if matches!(stop, Stop::Exit(_)) && self.replace.incumbent.is_open() {
            let incumbent = Arc::clone(&self.replace.incumbent);
            let taken = tokio::task::spawn_blocking(move || incumbent.hand_back(stop))
                .await
                .unwrap_or(false);
            if taken {
                return Ok(self.snapshot());
            }
        }
        match self.stop_replacing(stop).await {
            StopAnswer::Forwarded => Ok(self.snapshot()),
            StopAnswer::CarryOut => self.send(Command::Exit(intent)).await,
        }
    }

    /// Tell the replacement a stop arrived, and wait for its decision
    /// (`protocol/src/replacement.rs`, "A stop during a replace"):
    /// [`StopAnswer::CarryOut`] when none runs or it was aborted and has
    /// settled (its candidate stopped and reaped), so this daemon carries
    /// the stop out; [`StopAnswer::Forwarded`] when selection had
    /// committed and the successor was handed the stop. While it waits
    /// (and after a forward), the handed-over daemon does not end before
    /// its successor has: see `daemon::run_with`.
    pub(crate) async fn stop_replacing(&self, stop: Stop) -> StopAnswer {
        /// Counts the stop as undecided until dropped, even when the caller
        /// is (a control connection that went away).
        struct Undecided<'a>(&'a watch::Sender<StopsSeen>);
        impl Drop for Undecided<'_> {
            fn drop(&mut self) {
                self.0.send_modify(|s| s.in_flight -= 1);
            }
        }
        let stops = &self.replace.stops;
        stops.send_modify(|s| s.in_flight += 1);
        let undecided = Undecided(stops);
        let (tx, rx) = oneshot::channel();
        let answer = match self
            .replace
            .requests
            .send(Box::new(Request::Stop(stop, tx.into())))
        {
            // A Replacement that is gone (or dropped the answer) has nothing
            // to abort or forward.
            Ok(()) => rx.await.unwrap_or(StopAnswer::CarryOut),
            Err(_) => StopAnswer::CarryOut,
        };
        if answer == StopAnswer::Forwarded {
            stops.send_modify(|s| {
                s.forwarded.get_or_insert(stop);
            });
        }
        drop(undecided);
        answer
    }

    /// Set `leaf` (dotted) of the override tier to `value`: made durable in
    /// the control directory, then a `config_changed` (a running runtime
    /// applies it in place or reports `restart_needed`; a held failure is
    /// retried; a stopped runtime reads it at its next boot).
    ///
    /// # Errors
    /// [`CommandError::Invalid`] for a malformed leaf or when the source has
    /// no override tier; [`CommandError::Durability`] when it could not be
    /// made durable (nothing changed).
    pub async fn config_set(
        &self,
        leaf: &str,
        value: toml::Value,
    ) -> Result<Snapshot, CommandError> {
        self.send(Command::ConfigSet {
            leaf: leaf.to_owned(),
            value,
        })
        .await
    }

    /// Remove `leaf` from the override tier (durably), then a
    /// `config_changed`. Removing a leaf that is not set changes nothing.
    ///
    /// # Errors
    /// As [`Self::config_set`].
    pub async fn config_unset(&self, leaf: &str) -> Result<Snapshot, CommandError> {
        self.send(Command::ConfigUnset {
            leaf: leaf.to_owned(),
        })
        .await
    }

    /// The override tier (or its `leaf`) and the effective value (of `leaf`,
    /// or the whole config) as it resolves now. A config that does not
    /// resolve (or does not fit the service's config type) is no error of
    /// the call: the view's `error` says why.
    ///
    /// # Errors
    /// None today; the `Result` is the control plane's shape.
    pub async fn config_show(&self, leaf: Option<&str>) -> Result<ConfigView, CommandError> {
        let mut view = ConfigView {
            overrides: self
                .shared
                .overrides
                .to_text()
                .into_iter()
                .filter(|(l, _)| leaf.is_none_or(|leaf| l == leaf))
                .collect(),
            ..ConfigView::default()
        };
        match self.shared.resolve_config(&self.shared.overrides).await {
            Ok(resolved) => {
                view.effective = match leaf {
                    None => toml::to_string(resolved.table()).ok(),
                    Some(leaf) => lookup(resolved.table(), leaf).map(value_text),
                };
            }
            Err(error) => view.error = Some(error.to_string()),
        }
        Ok(view)
    }

    /// The last `limit` attempts the journal records, with their phases,
    /// across the runs (processes) it still holds, oldest first.
    ///
    /// # Errors
    /// [`CommandError::Failed`] when the journal cannot be read (the error
    /// names the file).
    pub async fn journal(&self, limit: usize) -> Result<Vec<JournalAttempt>, CommandError> {
        let path = Arc::clone(&self.journal_path);
        let records = steadfast_actors::device::blocking(move || control_dir::read_journal(&path))
            .await
            .map_err(|_| CommandError::Failed("reading the journal panicked".into()))?
            .map_err(|error| CommandError::Failed(error.to_string()))?;
        Ok(history::attempts(&records, limit))
    }

    /// Prepare a destructive re-initialization: the confirmation to pass to
    /// [`Self::reinit`], bound to the current epoch (any boot makes it
    /// stale) and to this process.
    ///
    /// # Errors
    /// The refusal a re-initialization would get now (only a stopped
    /// runtime is re-initialized: `runtime_not_stopped`, `lifecycle_busy`…).
    pub async fn reinit_prepare(&self) -> Result<ReinitConfirmation, CommandError> {
        let snapshot = self.send(Command::ReinitPrepare).await?;
        Ok(ReinitConfirmation {
            token: history::reinit_token(snapshot.epoch, &self.reinit_salt),
            epoch: snapshot.epoch,
        })
    }

    /// Re-initialize the stopped runtime: the service's wipe step runs over
    /// the released store; answered once it settled, in
    /// `stopped{reinit_complete}`.
    ///
    /// # Errors
    /// [`CommandError::Refused`] with `stale_confirmation` for a token of
    /// another epoch or process, or the state's refusal;
    /// [`CommandError::Failed`] when the wipe step failed (the state is then
    /// `stopped{reinit_failed}`, or `wedged` if the store stayed held).
    pub async fn reinit(&self, token: &str) -> Result<Snapshot, CommandError> {
        self.send(Command::Reinit {
            token: token.to_owned(),
        })
        .await
    }
}

/// The value at dotted `leaf` in `config`.
fn lookup<'a>(config: &'a toml::Table, leaf: &str) -> Option<&'a toml::Value> {
    let mut segments = leaf.split('.');
    let mut value = config.get(segments.next()?)?;
    for key in segments {
        value = value.as_table()?.get(key)?;
    }
    Some(value)
}

/// Log a command's refusal once, with its reason (a durability error as an
/// error, anything else as a notice the operator caused).
fn log_refusal(command: &str, error: &CommandError) {
    let state = error.refused().map(|r| r.state.as_ref()).unwrap_or("");
    if matches!(error, CommandError::Durability(_)) {
        tracing::error!(command, reason = error.reason(), %error, "command not durable");
    } else {
        tracing::info!(command, state, reason = error.reason(), %error, "command refused");
    }
}

/// A supervisor's handover across its life: what its service offers is its
/// own, not the process's.
#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::path::Path;

    use steadfast_actors::service::{Plan, Resource, Service, Step, StepContext, StepError};
    use steadfast_protocol::lifecycle::{ExitIntent, LifecycleState};

    use super::Supervisor;

    /// A step that offers a file of its data dir as `app:store` through its
    /// supervisor's handover, and never withdraws it.
    struct OfferStore;

    impl Step for OfferStore {
        const NAME: &'static str = "offer_store";
        type Config = toml::Table;
        type Output = File;

        async fn execute(
            &self,
            cx: StepContext<'_, toml::Table>,
        ) -> Result<Resource<File>, StepError> {
            let file = File::create(cx.data_dir.join("store")).map_err(StepError::backoff)?;
            cx.handover
                .share("app:store", &file)
                .map_err(StepError::backoff)?;
            Ok(Resource::new("store", "app:store", file))
        }
    }

    /// Offers the store, or (`false`) nothing at all.
    struct Offering(bool);

    impl Service for Offering {
        type Config = toml::Table;
        fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
            if self.0 {
                Plan::new().step(OfferStore)
            } else {
                Plan::new()
            }
        }
    }

    /// Run a supervisor of `service` over `dir` until running; what a
    /// replacement of it would offer then; and exit it.
    async fn offered_once_running(dir: &Path, service: Offering) -> Vec<String> {
        let (supervisor, handle) = Supervisor::builder(dir, service)
            .build()
            .expect("the supervisor builds");
        let run = tokio::spawn(supervisor.run());
        let mut snapshots = handle.watch();
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            snapshots.wait_for(|s| matches!(s.lifecycle, LifecycleState::Running { .. })),
        )
        .await
        .expect("running within a minute")
        .expect("the supervisor publishes");
        let offered = handle
            .replace_side()
            .handover
            .offered()
            .expect("the offers")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        handle.exit(ExitIntent::Halt).await.expect("exit");
        run.await.expect("run");
        offered
    }

    /// A supervisor whose service offered a file and never withdrew it
    /// exits; a later supervisor of the same data dir, in the same process,
    /// whose service offers nothing, would hand over nothing: the offers
    /// were the first supervisor's, and went with it (they were once the
    /// process's, by data dir, and a later replacement handed the stale
    /// file over).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_later_supervisor_of_the_same_data_dir_offers_nothing_of_an_earlier_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            offered_once_running(dir.path(), Offering(true)).await,
            vec!["app:store".to_owned()],
            "the first supervisor offers its store"
        );
        assert_eq!(
            offered_once_running(dir.path(), Offering(false)).await,
            Vec::<String>::new(),
            "the second offers none of the first's"
        );
    }
}
