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

use crate::fsx::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use steadfast_protocol::replacement::{
    Budgets, Ended, Failure, Mode, Outcome, Progress, ReplaceRefusal, Report, Step, StepEvent,
};
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::control_dir::ControlDir;
use crate::replace_runner::{AsyncDriver, Observer, run_async};

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
}

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

/// A request as it arrives from a handle: the job, and where the answer
/// (the report as it stands once started, or the refusal) goes. Boxed, so
/// the first block of 32 slots an unbounded channel allocates when it is
/// made stays small on a supervisor never asked to replace.
pub type ReplaceRequest = Box<(ReplaceJob, RpcReplyPort<Result<Report, ReplaceRefusal>>)>;

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
}

/// The actor's messages.
pub enum ReplacementMsg {
    /// Start a replacement, or refuse it.
    Replace(ReplaceJob, RpcReplyPort<Result<Report, ReplaceRefusal>>),
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
                let (job, reply) = *request;
                if forward.cast(ReplacementMsg::Replace(job, reply)).is_err() {
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
        self.running = Some(tokio::spawn(async move {
            let ReplaceJob {
                mode,
                budgets,
                mut driver,
                ..
            } = job;
            let result = run_async(mode, budgets, driver.as_mut(), &mut publisher).await;
            if let Err(failure) = &result {
                tracing::warn!(%failure, committed = failure.committed, "replacement failed");
            }
            let ended = Ended::from_result(&result);
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
        }));
        Ok(report)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
