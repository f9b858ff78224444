//! The runners of a replacement transaction: [`run`] (blocking) and
//! [`run_async`] (tokio), each driving the pure
//! [`steadfast_protocol::replacement::Machine`] over an application adapter
//! ([`Driver`] / [`AsyncDriver`]) and applying the time budgets.
//!
//! The machine decides the order; this module owns only the clock:
//! - **One setup budget** bounds the setup steps together, from the first
//!   `recheck`, and starts again when an exclusive `drain` ends
//!   ([`BudgetChange::RestartSetup`]).
//! - **The drain budget** (optional) bounds `drain` and `retire`. Its expiry
//!   fails the transaction; it never kills anything: the async runner drops
//!   the step's future (the adapter must keep ownership across that), the
//!   blocking runner cannot interrupt the call at all and fails after it.
//! - **Commit is never interrupted**: a deadline already past *before* commit
//!   fails the transaction uncommitted; once commit has started, its answer is
//!   recorded even if it came late.
//! - **Pre-faulting** (reading [`Driver::warmup_paths`] once) happens right
//!   after commit answered done; its errors are ignored, since publication
//!   has already happened.
//! - A step answered `Pending` is asked again after [`POLL_INTERVAL`] (or at
//!   the deadline, if that is sooner).
//! - **A stop** ([`run_stoppable`], the async runner only) is handed to the
//!   machine ([`Machine::stop`]) the moment it arrives, ahead of any answer
//!   ready at the same time: an abort drops the step in flight (as a
//!   deadline does) and fails the transaction `stopped`; at `commit` the
//!   commit runs on and its answer decides; after commit the transaction
//!   runs on and the caller forwards the stop (its
//!   [`StopDecision::once_ended`]). The runner hands the machine the first
//!   stop only; the caller keeps every one ([`StopInbox`]).
//!
//! The caller holds the upgrade lock for the whole transaction (the
//! Replacement actor does); the runners never see it.
//!
//! Checked by the scripted-driver tests in `tests/it/replace_runner.rs`: a
//! failure at every step in both modes, before and after commit
//! (`every_step_failure_reports_its_step_and_commit`), the budget rules
//! (`setup_budget_expiry_fails_uncommitted`,
//! `setup_budget_restarts_after_an_exclusive_drain`,
//! `drain_budget_expiry_fails_before_any_candidate_starts`,
//! `a_late_commit_is_recorded`, `a_deadline_past_before_commit_fails_uncommitted`)
//! and pre-faulting (`prefault_errors_are_ignored`); stops by
//! `a_stop_aborts_every_step_before_commit_and_never_interrupts_commit`.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant};

use steadfast_protocol::replacement::{
    BudgetChange, Budgets, Failure, Machine, Mode, Outcome, Progress, Step, StopDecision,
};
use tokio::sync::mpsc;

/// How long a runner waits before asking a `Pending` step again.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The most bytes pre-faulting reads from one path.
pub const PREFAULT_LIMIT: u64 = 64 << 20;

/// A boxed, sendable future, as [`AsyncDriver::perform`] returns.
pub type StepFuture<'a, E> = Pin<Box<dyn Future<Output = Result<Progress, E>> + Send + 'a>>;

/// Blocking application operations, one step at a time.
pub trait Driver {
    /// The application's error.
    type Error;

    /// Perform exactly `step`; bound any I/O by `deadline` (`None`: no
    /// deadline).
    ///
    /// # Errors
    /// The operation failed; the transaction fails at `step`.
    fn perform(&mut self, step: Step, deadline: Option<Instant>) -> Result<Progress, Self::Error>;

    /// Files to read once after commit (the new binary, say), so the first
    /// requests after the switch do not page them in. Errors are ignored.
    fn warmup_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Async application operations, one step at a time.
///
/// The future may be dropped at its deadline (never while committing): the
/// adapter must leave what it owns (a started candidate, a drained runtime)
/// in a state the next step or the failure report can account for.
pub trait AsyncDriver: Send {
    /// The application's error.
    type Error;

    /// Perform exactly `step`; `deadline` is the running budget's end.
    fn perform(&mut self, step: Step, deadline: Option<Instant>) -> StepFuture<'_, Self::Error>;

    /// As [`Driver::warmup_paths`].
    fn warmup_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Something told about every step a runner is about to perform, and every
/// answer; the Replacement actor publishes these as the transaction's
/// progress.
pub trait Observer: Send {
    /// `step` is about to be performed (again, after a `Pending`).
    fn step_started(&mut self, step: Step);
    /// `step` answered `progress` (before the machine advanced).
    fn step_answered(&mut self, step: Step, progress: Progress);
    /// A stop arrived while `step` was next or in flight, and the machine
    /// decided `decision`. The default does nothing.
    fn stop_decided(&mut self, step: Step, decision: StopDecision) {
        let _ = (step, decision);
    }
}

/// Where an async runner hears of stops ([`run_stoppable`]): each `T` sent
/// on the channel is one stop (the caller's, with whatever it needs to
/// answer it), kept in arrival order for the caller to carry out once the
/// runner returned.
#[derive(Debug)]
pub struct StopInbox<T> {
    /// `None` once no stop can come (none was given, or every sender went).
    rx: Option<mpsc::UnboundedReceiver<T>>,
    /// The stops that arrived while the runner ran.
    received: Vec<T>,
}

impl<T> StopInbox<T> {
    /// Stops sent on `rx`'s channel.
    #[must_use]
    pub const fn new(rx: mpsc::UnboundedReceiver<T>) -> Self {
        Self {
            rx: Some(rx),
            received: Vec::new(),
        }
    }

    /// No stop ever arrives.
    #[must_use]
    pub const fn none() -> Self {
        Self {
            rx: None,
            received: Vec::new(),
        }
    }

    /// Wait for the next stop and keep it; pends forever once none can come.
    async fn arrive(&mut self) {
        if let Some(rx) = &mut self.rx {
            if let Some(stop) = rx.recv().await {
                self.received.push(stop);
                return;
            }
            self.rx = None;
        }
        std::future::pending::<()>().await;
    }

    /// The stops that arrived while the runner ran (in order), and the
    /// channel later ones arrive on.
    #[must_use]
    pub fn into_parts(self) -> (Vec<T>, Option<mpsc::UnboundedReceiver<T>>) {
        (self.received, self.rx)
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn step_started(&mut self, _step: Step) {}
    fn step_answered(&mut self, _step: Step, _progress: Progress) {}
}

/// The deadline that applies after the machine moved from `from` to `to`.
fn next_deadline(
    budgets: &Budgets,
    from: Step,
    to: Step,
    now: Instant,
    current: Option<Instant>,
) -> Option<Instant> {
    match BudgetChange::between(from, to) {
        BudgetChange::Keep => current,
        BudgetChange::RestartSetup => Some(now + budgets.setup),
        BudgetChange::StartDrain => budgets.drain.map(|budget| now + budget),
    }
}

fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|limit| Instant::now() >= limit)
}

/// Read each path once (at most [`PREFAULT_LIMIT`] bytes), ignoring errors.
pub fn prefault(paths: &[PathBuf]) {
    use std::io::Read;
    for path in paths {
        if let Ok(file) = std::fs::File::open(path) {
            let _ = std::io::copy(&mut file.take(PREFAULT_LIMIT), &mut std::io::sink());
        }
    }
}

/// Run a replacement transaction in `mode` over a blocking driver.
///
/// # Errors
/// The [`Failure`]: the step, whether selection had committed, and why.
pub fn run<D: Driver + ?Sized>(
    mode: Mode,
    budgets: Budgets,
    driver: &mut D,
    observer: &mut dyn Observer,
) -> Result<Outcome, Failure<D::Error>> {
    let mut machine = Machine::new(mode);
    let mut deadline = Some(Instant::now() + budgets.setup);
    loop {
        let step = machine.step();
        if expired(deadline) {
            return Err(machine.deadline_expired());
        }
        observer.step_started(step);
        let progress = driver
            .perform(step, deadline)
            .map_err(|error| machine.adapter_failed(error))?;
        if step.deadline_interrupts() && expired(deadline) {
            return Err(machine.deadline_expired());
        }
        observer.step_answered(step, progress);
        let was_committed = machine.committed();
        let ended = machine.advance(progress)?;
        if machine.committed() && !was_committed {
            prefault(&driver.warmup_paths());
        }
        if let Some(outcome) = ended {
            return Ok(outcome);
        }
        let next = machine.step();
        if next == step {
            let wait = deadline.map_or(POLL_INTERVAL, |limit| {
                POLL_INTERVAL.min(limit.saturating_duration_since(Instant::now()))
            });
            std::thread::sleep(wait);
        } else {
            deadline = next_deadline(&budgets, step, next, Instant::now(), deadline);
        }
    }
}

/// Run a replacement transaction in `mode` over an async driver, on tokio's
/// clock (so paused-time tests drive the budgets). No stop arrives: see
/// [`run_stoppable`].
///
/// # Errors
/// As [`run`].
pub async fn run_async<D: AsyncDriver + ?Sized>(
    mode: Mode,
    budgets: Budgets,
    driver: &mut D,
    observer: &mut dyn Observer,
) -> Result<Outcome, Failure<D::Error>> {
    run_stoppable::<D, ()>(mode, budgets, driver, observer, &mut StopInbox::none()).await
}

/// A stop arrived during `step` (in flight, or between two asks of it):
/// the machine decides it, the observer hears the decision, and an abort
/// ends the run with the `stopped` failure.
fn decide_stop<E>(
    machine: &mut Machine,
    observer: &mut dyn Observer,
    step: Step,
) -> Result<(), Failure<E>> {
    let decision = machine.stop();
    observer.stop_decided(step, decision);
    if decision == StopDecision::Abort {
        return Err(machine.stopped());
    }
    Ok(())
}

/// [`run_async`], hearing of stops on `stops` (module doc): the first one
/// is handed to the machine, which aborts the transaction
/// ([`Reason::Stopped`](steadfast_protocol::replacement::Reason::Stopped))
/// unless commit is next, in flight or done. Every stop is kept in `stops`
/// for the caller, which decides each one by the end
/// ([`StopDecision::once_ended`]).
///
/// # Errors
/// As [`run`], and the `stopped` failure of an abort.
pub async fn run_stoppable<D: AsyncDriver + ?Sized, T: Send>(
    mode: Mode,
    budgets: Budgets,
    driver: &mut D,
    observer: &mut dyn Observer,
    stops: &mut StopInbox<T>,
) -> Result<Outcome, Failure<D::Error>> {
    use tokio::time::Instant as TokioInstant;
    let now = || TokioInstant::now().into_std();
    let late = |deadline: Option<Instant>| deadline.is_some_and(|limit| now() >= limit);
    let mut machine = Machine::new(mode);
    let mut deadline = Some(now() + budgets.setup);
    loop {
        let step = machine.step();
        if late(deadline) {
            return Err(machine.deadline_expired());
        }
        observer.step_started(step);
        // `None`: the deadline interrupted the step.
        let answer = {
            let limit = deadline.filter(|_| step.deadline_interrupts());
            let work = driver.perform(step, deadline);
            let work = async move {
                match limit {
                    Some(limit) => tokio::time::timeout_at(TokioInstant::from_std(limit), work)
                        .await
                        .ok(),
                    None => Some(work.await),
                }
            };
            tokio::pin!(work);
            loop {
                tokio::select! {
                    biased;
                    () = stops.arrive(), if !machine.stop_requested() => {
                        decide_stop(&mut machine, observer, step)?;
                    }
                    answer = &mut work => break answer,
                }
            }
        };
        let Some(answer) = answer else {
            return Err(machine.deadline_expired());
        };
        let progress = answer.map_err(|error| machine.adapter_failed(error))?;
        if step.deadline_interrupts() && late(deadline) {
            return Err(machine.deadline_expired());
        }
        observer.step_answered(step, progress);
        let was_committed = machine.committed();
        let ended = machine.advance(progress)?;
        if machine.committed() && !was_committed {
            let paths = driver.warmup_paths();
            if !paths.is_empty() {
                let _ = tokio::task::spawn_blocking(move || prefault(&paths)).await;
            }
        }
        if let Some(outcome) = ended {
            return Ok(outcome);
        }
        let next = machine.step();
        if next == step {
            let wake = now() + POLL_INTERVAL;
            let until = deadline.map_or(wake, |limit| limit.min(wake));
            let pause = tokio::time::sleep_until(TokioInstant::from_std(until));
            tokio::select! {
                biased;
                () = stops.arrive(), if !machine.stop_requested() => {
                    decide_stop(&mut machine, observer, step)?;
                }
                () = pause => {}
            }
        } else {
            deadline = next_deadline(&budgets, step, next, now(), deadline);
        }
    }
}
