//! The Replacement actor: one replacement transaction at a time, under the
//! persistent upgrade lock, its progress published as a
//! [`Report`].
//!
//! A request carries the driver (the application's adapter, or the facade's
//! process driver), the mode and the budgets. The actor takes
//! `<data_dir>/.steadfast/upgrade.lock` (an OS file lock, `O_CLOEXEC` so a
//! candidate process never inherits it) *before* it answers, and the task
//! that runs the transaction keeps it until the transaction and the driver's
//! [`ReplaceDriver::settle`] are over. The work runs in that task, so the
//! actor stays free to refuse a second request.
//!
//! Invariants, and the tests that hold them (`tests/it/replacement_actor.rs`):
//! - **One replacement at a time.** A request while one runs is refused with
//!   [`ReplaceRefusal::InProgress`]; a request while another process holds
//!   the upgrade lock is refused with [`ReplaceRefusal::Locked`]
//!   (`a_second_replacement_is_refused_while_one_runs`,
//!   `another_process_holding_the_upgrade_lock_refuses`).
//! - **The lock is held for the whole transaction**, including the driver's
//!   settling, and released after (`the_upgrade_lock_is_held_until_the_transaction_settles`).
//! - **The report is published step by step** and ends with the runner's
//!   result, committed flag included (`the_report_follows_every_step`).
//! - **A stop is never lost** ([`ReplacementMsg::Stop`]; the rule is the
//!   machine's, `protocol/src/replacement.rs`, "A stop during a replace"):
//!   with no transaction, or one that ends uncommitted, it is answered
//!   [`StopAnswer::CarryOut`] once the transaction has settled (rolled
//!   back: a candidate stopped and reaped), so the incumbent carries it
//!   out; once committed, the driver forwards it to the successor
//!   ([`ReplaceDriver::forward`]) and it is answered
//!   [`StopAnswer::Forwarded`], for as long as this process lives
//!   (`a_stop_before_commit_aborts_and_is_carried_out_here`,
//!   `a_stop_after_commit_is_forwarded`). After a stop no transaction
//!   starts (`unavailable`).

use crate::fsx::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use steadfast_protocol::replacement::{
    Budgets, Failure, Mode, Outcome, Progress, ReplaceRefusal, Report, Step, StepEvent, Stop,
    StopDecision, TransactionEnd,
};
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::control_dir::ControlDir;
use crate::replace_runner::{AsyncDriver, Observer, StopInbox, run_stoppable};

/// The error a driver the actor runs reports: anything displayable.
pub type DriverError = Box<dyn std::error::Error + Send + Sync>;

/// The future [`ReplaceDriver::settle`] returns.
pub type SettleFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// A driver the actor can run: the steps, and what to do once the
/// transaction ended (roll back what a failure before commit left, or hand
/// the daemon over after commit).
pub trait ReplaceDriver: AsyncDriver<Error = DriverError> {
    /// Called once after the runner returned `result`, still under the
    /// upgrade lock. The default does nothing.
    fn settle<'a>(
        &'a mut self,
        result: &'a Result<Outcome, Failure<DriverError>>,
    ) -> SettleFuture<'a> {
        let _ = result;
        Box::pin(async {})
    }

    /// Called, after [`settle`](Self::settle), for each stop that arrived
    /// once selection committed (or during the transaction, which then
    /// committed): hand `stop` to the successor, which carries it out. The
    /// default does nothing (a driver with no successor process of its
    /// own).
    fn forward(&mut self, stop: Stop) -> SettleFuture<'_> {
        let _ = stop;
        Box::pin(async {})
    }
}

/// How a stop sent to the Replacement actor ([`ReplacementMsg::Stop`]) was
/// decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAnswer {
    /// No transaction was running, or it was aborted (or ended
    /// uncommitted) and is settled: the incumbent carries the stop out.
    CarryOut,
    /// Selection had committed: the stop was handed to the successor.
    Forwarded,
}

/// A stop on its way to the running transaction's task.
type StopRequest = (Stop, RpcReplyPort<StopAnswer>);

/// One replacement to run.
pub struct ReplaceJob {
    /// Overlap or exclusive.
    pub mode: Mode,
    /// The setup and drain budgets.
    pub budgets: Budgets,
    /// What replaces the incumbent, in words (a binary's path), for the report.
    pub target: String,
    /// The adapter that performs the steps.
    pub driver: Box<dyn ReplaceDriver>,
}

impl std::fmt::Debug for ReplaceJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplaceJob")
            .field("mode", &self.mode)
            .field("budgets", &self.budgets)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// A request as it arrives from a handle, with where its answer goes.
pub enum Request {
    /// Start a replacement: answered with the report as it stands once
    /// started, or the refusal.
    Replace(ReplaceJob, RpcReplyPort<Result<Report, ReplaceRefusal>>),
    /// A stop arrived ([`ReplacementMsg::Stop`]).
    Stop(Stop, RpcReplyPort<StopAnswer>),
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Replace(job, _) => f.debug_tuple("Replace").field(job).finish(),
            Self::Stop(stop, _) => f.debug_tuple("Stop").field(stop).finish(),
        }
    }
}

/// A [`Request`], boxed, so the first block of 32 slots an unbounded
/// channel allocates when it is made stays small on a supervisor never
/// asked to replace.
pub type ReplaceRequest = Box<Request>;

/// The path of the upgrade lock under `data_dir`.
#[must_use]
pub fn upgrade_lock_path(data_dir: &Path) -> PathBuf {
    ControlDir::under(data_dir).join("upgrade.lock")
}

/// Take the upgrade lock without waiting.
///
/// # Errors
/// [`ReplaceRefusal::Locked`] when another holder has it,
/// [`ReplaceRefusal::Io`] when it cannot be opened.
pub fn try_upgrade_lock(data_dir: &Path) -> Result<File, ReplaceRefusal> {
    let path = upgrade_lock_path(data_dir);
    // Through the trusted control dir, without following a link (`crate::fsx`).
    let file = crate::fsx::open_control_dir(data_dir, crate::control_dir::CONTROL_DIR_NAME)
        .and_then(|dir| dir.open("upgrade.lock", crate::fsx::Access::ReadWriteCreate))
        .map_err(|e| ReplaceRefusal::Io(e.to_string()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(ReplaceRefusal::Locked(path.display().to_string()))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(ReplaceRefusal::Io(format!("{}: {e}", path.display())))
        }
    }
}

/// The Replacement actor.
#[derive(Debug, Default)]
pub struct ReplacementActor;

/// The two ends a supervisor keeps for its Replacement actor: where reports
/// are published, and the requests handles send.
pub struct ReplacementChannels {
    /// Where reports are published (the facade keeps receivers).
    pub reports: Arc<watch::Sender<Option<Report>>>,
    /// Requests from handles.
    pub requests: mpsc::UnboundedReceiver<ReplaceRequest>,
}

impl std::fmt::Debug for ReplacementChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplacementChannels")
            .finish_non_exhaustive()
    }
}

/// What the actor starts from.
pub struct ReplacementArgs {
    /// The data directory (the lock lives in its control directory).
    pub data_dir: PathBuf,
    /// The supervisor's clock, for the report's timestamps.
    pub clock: Clock,
    /// Where reports are published.
    pub reports: Arc<watch::Sender<Option<Report>>>,
    /// Requests from handles, from before the tree existed.
    pub requests: mpsc::UnboundedReceiver<ReplaceRequest>,
    /// Where the generation and outcomes are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for ReplacementArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplacementArgs")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// The actor's state.
pub struct ReplacementState {
    data_dir: PathBuf,
    clock: Clock,
    reports: Arc<watch::Sender<Option<Report>>>,
    /// Where the generation and outcomes are counted.
    metrics: Arc<crate::metrics::Metrics>,
    /// Transactions started so far; the next report's serial is one more.
    serial: u64,
    /// The running transaction's task, if one runs.
    running: Option<tokio::task::JoinHandle<()>>,
    /// Where stops go to the running transaction's task; after a committed
    /// one, to the task that forwards them for the rest of the process.
    stops: Option<mpsc::UnboundedSender<StopRequest>>,
    /// A stop arrived: no transaction starts any more.
    stopping: bool,
}

/// The actor's messages.
pub enum ReplacementMsg {
    /// Start a replacement, or refuse it.
    Replace(ReplaceJob, RpcReplyPort<Result<Report, ReplaceRefusal>>),
    /// A stop arrived (SIGTERM or SIGINT, or `exit`): answered once it is
    /// decided and, for an abort, once the transaction settled.
    Stop(Stop, RpcReplyPort<StopAnswer>),
    /// The running transaction's task finished.
    Finished,
}

/// Publishes every step into the report.
struct Publisher {
    clock: Clock,
    reports: Arc<watch::Sender<Option<Report>>>,
}

impl Publisher {
    fn push(&self, step: Step, answer: Option<Progress>) {
        let at = self.clock.now();
        self.reports.send_modify(|report| {
            if let Some(report) = report {
                report.events.push(StepEvent { step, answer, at });
                report.seq += 1;
            }
        });
    }
}

impl Observer for Publisher {
    fn step_started(&mut self, step: Step) {
        self.push(step, None);
    }
    fn step_answered(&mut self, step: Step, progress: Progress) {
        self.push(step, Some(progress));
    }
    fn stop_decided(&mut self, step: Step, decision: StopDecision) {
        tracing::info!(%step, decision = decision.name(), "replacement: a stop arrived");
    }
}

impl Actor for ReplacementActor {
    type Msg = ReplacementMsg;
    type State = ReplacementState;
    type Arguments = ReplacementArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ReplacementMsg>,
        args: ReplacementArgs,
    ) -> Result<ReplacementState, ActorProcessingErr> {
        let ReplacementArgs {
            data_dir,
            clock,
            reports,
            mut requests,
            metrics,
        } = args;
        let forward = myself.clone();
        tokio::spawn(async move {
            while let Some(request) = requests.recv().await {
                let message = match *request {
                    Request::Replace(job, reply) => ReplacementMsg::Replace(job, reply),
                    Request::Stop(stop, reply) => ReplacementMsg::Stop(stop, reply),
                };
                if forward.cast(message).is_err() {
                    break;
                }
            }
        });
        Ok(ReplacementState {
            data_dir,
            clock,
            reports,
            metrics,
            serial: 0,
            running: None,
            stops: None,
            stopping: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ReplacementMsg>,
        message: ReplacementMsg,
        state: &mut ReplacementState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ReplacementMsg::Finished => state.running = None,
            ReplacementMsg::Replace(job, reply) => {
                let answer = state.begin(job, &myself);
                let _ = reply.send(answer);
            }
            ReplacementMsg::Stop(stop, reply) => {
                state.stopping = true;
                // The task answers; with none (or one that is gone), the
                // incumbent carries the stop out.
                let unsent = match &state.stops {
                    Some(stops) => stops.send((stop, reply)).err().map(|e| e.0.1),
                    None => Some(reply),
                };
                if let Some(reply) = unsent {
                    let _ = reply.send(StopAnswer::CarryOut);
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ReplacementMsg>,
        state: &mut ReplacementState,
    ) -> Result<(), ActorProcessingErr> {
        // A transaction in flight is not abandoned mid-step by the tree
        // coming down: its task keeps the lock and settles on its own (the
        // process exit ends it otherwise). Give it a moment.
        if let Some(task) = state.running.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        Ok(())
    }
}

impl ReplacementState {
    fn begin(
        &mut self,
        job: ReplaceJob,
        myself: &ActorRef<ReplacementMsg>,
    ) -> Result<Report, ReplaceRefusal> {
        if self
            .running
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return Err(ReplaceRefusal::InProgress);
        }
        if self.stopping {
            return Err(ReplaceRefusal::Unavailable);
        }
        if job.budgets.setup.is_zero() {
            return Err(ReplaceRefusal::Invalid("the setup budget is zero".into()));
        }
        let lock = try_upgrade_lock(&self.data_dir)?;
        self.serial += 1;
        let seq = self.reports.borrow().as_ref().map_or(0, |r| r.seq) + 1;
        let report = Report {
            seq,
            serial: self.serial,
            mode: job.mode,
            target: job.target.clone(),
            setup_ms: duration_ms(job.budgets.setup),
            drain_ms: job.budgets.drain.map(duration_ms),
            events: Vec::new(),
            ended: None,
        };
        self.reports.send_replace(Some(report.clone()));
        self.metrics.replacement(&report);
        let mut publisher = Publisher {
            clock: self.clock,
            reports: Arc::clone(&self.reports),
        };
        let reports = Arc::clone(&self.reports);
        let metrics = Arc::clone(&self.metrics);
        let done = myself.clone();
        let (stops_tx, stops_rx) = mpsc::unbounded_channel();
        self.stops = Some(stops_tx);
        self.running = Some(tokio::spawn(async move {
            let ReplaceJob {
                mode,
                budgets,
                mut driver,
                ..
            } = job;
            let mut inbox = StopInbox::new(stops_rx);
            let result =
                run_stoppable(mode, budgets, driver.as_mut(), &mut publisher, &mut inbox).await;
            if let Err(failure) = &result {
                tracing::warn!(%failure, committed = failure.committed, "replacement failed");
            }
            let ended = TransactionEnd::from_result(&result);
            let decision = StopDecision::once_ended(ended.committed());
            // Settle first (roll back, or hand over), then publish the end:
            // a watcher that sees the outcome sees a settled daemon.
            driver.settle(&result).await;
            reports.send_modify(|report| {
                if let Some(report) = report {
                    report.ended = Some(ended);
                    report.seq += 1;
                    metrics.replacement(report);
                }
            });
            drop(lock);
            let _ = done.cast(ReplacementMsg::Finished);
            let (received, later) = inbox.into_parts();
            match decision {
                StopDecision::Forward => {
                    // The successor carries out every stop from here on,
                    // for the rest of this process.
                    for (stop, reply) in received {
                        driver.forward(stop).await;
                        let _ = reply.send(StopAnswer::Forwarded);
                    }
                    if let Some(mut later) = later {
                        while let Some((stop, reply)) = later.recv().await {
                            driver.forward(stop).await;
                            let _ = reply.send(StopAnswer::Forwarded);
                        }
                    }
                }
                StopDecision::Abort | StopDecision::AwaitCommit => {
                    // Rolled back and settled: the incumbent carries out
                    // the stops that came, and any that come now.
                    for (_, reply) in received {
                        let _ = reply.send(StopAnswer::CarryOut);
                    }
                    if let Some(mut later) = later {
                        later.close();
                        while let Some((_, reply)) = later.recv().await {
                            let _ = reply.send(StopAnswer::CarryOut);
                        }
                    }
                }
            }
        }));
        Ok(report)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
