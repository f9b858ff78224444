//! The replacement (upgrade) transaction's ordering, as a pure machine.
//!
//! This module owns *the order* in which an application adapter is asked to
//! perform the steps of replacing a running incumbent by a candidate, what each
//! adapter answer is allowed to mean at each step, and which time budget bounds
//! each step. It performs none of the steps and reads no clock: a runner (an
//! actor in `steadfast-actors`, or a test) asks the adapter to perform
//! [`Machine::step`], feeds the answer to [`Machine::advance`], and turns a
//! failed operation or an expired budget into a [`Failure`] with
//! [`Machine::adapter_failed`] or [`Machine::deadline_expired`]. The runner
//! holds the upgrade lock for the whole transaction; this module never sees it.
//!
//! # Order
//! | mode        | steps                                                                  |
//! |-------------|------------------------------------------------------------------------|
//! | `overlap`   | recheck → prepare → start → verify → validate → commit → retire        |
//! | `exclusive` | recheck → prepare → drain → start → verify → validate → commit         |
//!
//! An answer of [`Progress::Pending`] retries the same step at `recheck`,
//! `drain` and `verify`, and ends the transaction as
//! [`Outcome::RetirementPending`] at `retire`. [`Progress::Unchanged`] is only
//! an answer to `recheck` and ends the transaction as [`Outcome::Unchanged`].
//! Any other answer that is not [`Progress::Done`] is
//! [`Reason::InvalidProgress`].
//!
//! # Budgets
//! [`Budgets::setup`] bounds the setup steps together, from the first
//! `recheck`; it starts again when an exclusive `drain` ends. Entering `drain`
//! or `retire` switches to the optional [`Budgets::drain`] ([`BudgetChange`]
//! says which, [`Budgets::deadline_after`] computes the new deadline). A
//! budget that runs out only ever *fails the transaction*: it never kills the
//! incumbent or the candidate, and after commit the failure says
//! `committed: true`, so the new selection stands. A runner checks the deadline
//! before each step and again after each answer, except after `commit`'s
//! answer ([`Step::deadline_interrupts`]): a commit that ran late is still
//! recorded.
//!
//! # A stop during a replace
//! A stop the daemon is asked for while a transaction runs (SIGTERM or
//! SIGINT to the incumbent, or `exit`) is an event of the machine,
//! [`Machine::stop`], and its [`StopDecision`] follows from the phase alone:
//!
//! | phase | decision |
//! |-------|----------|
//! | `recheck` … `validate`, not committed | [`StopDecision::Abort`]: the step in flight is abandoned and the transaction fails there, [`Reason::Stopped`], `committed: false`; it is rolled back (a started candidate is stopped and reaped) and the incumbent carries the stop out |
//! | `commit` (next or in flight) | [`StopDecision::AwaitCommit`]: commit is never interrupted; its answer decides, as [`StopDecision::once_ended`] says once the transaction ends |
//! | committed (`retire`, or ended committed) | [`StopDecision::Forward`]: the successor carries the stop out |
//!
//! Once the transaction has ended, [`StopDecision::once_ended`] decides from
//! whether it committed: forward if it did, else the incumbent (rolled back)
//! carries the stop out. So a stop is never lost: before the commit it ends
//! the incumbent and no candidate survives it; after the commit it ends the
//! successor. A stop never withdraws a selection, and nothing but
//! `commit`'s own answer decides between the two.
//!
//! # Invariants, and the tests that hold them
//! Every one is checked over *every* adapter answer sequence up to 17 answers
//! long, in both modes, by `every_overlap_answer_sequence_keeps_the_promises`
//! and `every_exclusive_answer_sequence_keeps_the_promises` in
//! `tests/it/replacement_exhaustive.rs`; the unit test named with each is the
//! readable example.
//! - Selection once committed is never withdrawn (`committed` never goes back
//!   to `false`): `commit_sets_committed_and_later_failures_say_so`.
//! - Overlap never drains the incumbent; exclusive drains it before it starts
//!   the candidate: `overlap_never_drains_and_retires_after_commit`,
//!   `exclusive_drains_before_start_and_completes_at_commit`.
//! - Commit happens only after `verify` and `validate` both answered done, and
//!   `retire` only after commit: the same two tests, and
//!   `happy_path_visits_each_step_of_its_mode_once` (exhaustive file).
//! - `Unchanged` is only the answer to `recheck`, before anything was
//!   replaced: `unchanged_ends_the_transaction_only_at_recheck`.
//! - Success ([`Outcome::Complete`], [`Outcome::RetirementPending`]) is only
//!   reported once selection is committed:
//!   `pending_retirement_is_success_after_commit`.
//! - A failure names the step it happened at and whether selection had already
//!   committed: `failures_carry_the_true_step_and_committed_flag`.
//! - A stop aborts only an uncommitted transaction away from `commit`, waits
//!   for `commit`'s answer at `commit`, and is forwarded only once committed;
//!   it never moves the machine nor withdraws a selection:
//!   `a_stop_is_decided_by_the_phase_alone`, and after every answer of every
//!   sequence by the two exhaustive tests.
//!
//! Nothing here replays application work or kills a process; those decisions
//! stay with the application and the operator.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// Whether the application lets the incumbent and the candidate run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The incumbent keeps serving until the candidate is verified and
    /// committed; only then is it retired.
    Overlap,
    /// The incumbent is drained and releases its exclusive resources before
    /// the candidate starts.
    Exclusive,
}

impl Mode {
    /// Every step this mode performs, in order, when every answer is done.
    #[must_use]
    pub const fn steps(self) -> &'static [Step] {
        use Step::{Commit, Drain, Prepare, Recheck, Retire, Start, Validate, Verify};
        match self {
            Self::Overlap => &[Recheck, Prepare, Start, Verify, Validate, Commit, Retire],
            Self::Exclusive => &[Recheck, Prepare, Drain, Start, Verify, Validate, Commit],
        }
    }
}

/// One operation the adapter is asked to perform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Read the selection again under the upgrade lock; `Unchanged` means no
    /// replacement is needed (or another updater already did it).
    Recheck,
    /// Validate the candidate's artifact and capture what the application
    /// needs to prepare.
    Prepare,
    /// Exclusive only: stop the incumbent admitting work and release its
    /// exclusive resources. `Pending` retries.
    Drain,
    /// Launch the candidate through whoever owns its process.
    Start,
    /// Obtain a live proof of the candidate's identity and readiness.
    /// `Pending` retries this step only.
    Verify,
    /// Revalidate selection and preparation after the live proof.
    Validate,
    /// Atomically select the verified candidate. From here on, selection is
    /// authoritative.
    Commit,
    /// Overlap only: begin retiring the incumbent. `Pending` means it must stay
    /// alive for obligations it still holds.
    Retire,
}

impl Step {
    /// The step's wire name, as serde spells it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Recheck => "recheck",
            Self::Prepare => "prepare",
            Self::Drain => "drain",
            Self::Start => "start",
            Self::Verify => "verify",
            Self::Validate => "validate",
            Self::Commit => "commit",
            Self::Retire => "retire",
        }
    }

    /// Whether a budget that runs out while this step is in flight fails it.
    ///
    /// False only for [`Step::Commit`]: interrupting an atomic publication
    /// would leave its result unknown, so a commit that finishes late is
    /// recorded as done. A deadline already past *before* commit starts still
    /// fails the transaction, uncommitted.
    #[must_use]
    pub const fn deadline_interrupts(self) -> bool {
        !matches!(self, Self::Commit)
    }

    /// Whether `Pending` at this step means "ask again".
    const fn retries_on_pending(self) -> bool {
        matches!(self, Self::Recheck | Self::Drain | Self::Verify)
    }

    /// The step after this one in `mode`, or `None` when this one is the last.
    const fn next_in(self, mode: Mode) -> Option<Self> {
        match (self, mode) {
            (Self::Recheck, _) => Some(Self::Prepare),
            (Self::Prepare, Mode::Exclusive) => Some(Self::Drain),
            (Self::Prepare | Self::Drain, _) => Some(Self::Start),
            (Self::Start, _) => Some(Self::Verify),
            (Self::Verify, _) => Some(Self::Validate),
            (Self::Validate, _) => Some(Self::Commit),
            (Self::Commit, Mode::Overlap) => Some(Self::Retire),
            (Self::Commit, Mode::Exclusive) | (Self::Retire, _) => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The adapter's answer to one step, when the operation itself did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// The operation completed.
    Done,
    /// Not yet: the proof or drain is not ready, or retirement is still in
    /// progress.
    Pending,
    /// `recheck` found nothing to replace.
    Unchanged,
}

/// How a transaction ended without failing. None of them implies that
/// application work is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing was replaced.
    Unchanged,
    /// The candidate is selected and the incumbent owes nothing more.
    Complete,
    /// The candidate is selected; the incumbent must stay alive until its
    /// remaining obligations are met.
    RetirementPending,
}

/// A transaction that stopped at `step` for `reason`.
///
/// Derives `PartialEq` when `E` does, so tests compare failures whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure<E> {
    /// The step that was being performed, or was about to be.
    pub step: Step,
    /// Whether selection had already committed: if so the candidate is
    /// authoritative despite this failure and must not be rolled back.
    pub committed: bool,
    /// Why the transaction stopped.
    pub reason: Reason<E>,
}

/// Why a replacement transaction failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason<E> {
    /// The setup budget, or the application's drain budget, ran out.
    Deadline,
    /// The adapter's operation failed with this error.
    Adapter(E),
    /// The adapter answered with a [`Progress`] that the step does not accept.
    InvalidProgress,
    /// A stop arrived before the commit ([`StopDecision::Abort`]).
    Stopped,
}

impl<E> Reason<E> {
    /// The reason without the adapter's error, for records and snapshots.
    #[must_use]
    pub const fn kind(&self) -> ReasonKind {
        match self {
            Self::Deadline => ReasonKind::Deadline,
            Self::Adapter(_) => ReasonKind::Adapter,
            Self::InvalidProgress => ReasonKind::InvalidProgress,
            Self::Stopped => ReasonKind::Stopped,
        }
    }
}

/// [`Reason`] without its payload: what a journal or a snapshot records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonKind {
    /// See [`Reason::Deadline`].
    Deadline,
    /// See [`Reason::Adapter`].
    Adapter,
    /// See [`Reason::InvalidProgress`].
    InvalidProgress,
    /// See [`Reason::Stopped`].
    Stopped,
}

impl ReasonKind {
    /// The wire name, as serde spells it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Adapter => "adapter",
            Self::InvalidProgress => "invalid_progress",
            Self::Stopped => "stopped",
        }
    }

    /// The lowercase message a [`Failure`] displays after its step.
    const fn message(self) -> &'static str {
        match self {
            Self::Deadline => "deadline expired",
            Self::Adapter => "adapter operation failed",
            Self::InvalidProgress => "invalid adapter progress",
            Self::Stopped => "stopped: a stop arrived before the commit",
        }
    }
}

// Display and Error are written by hand rather than derived with thiserror:
// the error type is generic, and `source()` must be the adapter's error itself,
// not the `Reason` wrapping it. The adapter's message is left to `source()`
// rather than repeated here, so a reporter that walks the chain prints it once.
impl<E> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replacement {} failed: {}",
            self.step,
            self.reason.kind().message()
        )
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Failure<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            Reason::Adapter(error) => Some(error),
            Reason::Deadline | Reason::InvalidProgress | Reason::Stopped => None,
        }
    }
}

/// A stop the daemon was asked for: what the incumbent or its successor
/// carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// SIGTERM or SIGINT: the service manager (or a terminal) stopped the
    /// daemon; it drains and exits 0.
    Signal,
    /// `exit` with this intent (halt 80, relaunch 75).
    Exit(crate::lifecycle::ExitIntent),
}

/// What becomes of a stop that arrives while a transaction runs; see the
/// module doc, "A stop during a replace".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopDecision {
    /// Not committed: abandon the step in flight, fail the transaction with
    /// [`Reason::Stopped`] (rolled back), and let the incumbent carry the
    /// stop out.
    Abort,
    /// At `commit`: let it finish; its answer decides
    /// ([`StopDecision::once_ended`]).
    AwaitCommit,
    /// Committed: the successor carries the stop out.
    Forward,
}

impl StopDecision {
    /// The decision for a stop once the transaction has ended, `committed`
    /// or not: forward to the successor, or (rolled back) abort so the
    /// incumbent carries it out.
    #[must_use]
    pub const fn once_ended(committed: bool) -> Self {
        if committed {
            Self::Forward
        } else {
            Self::Abort
        }
    }

    /// The wire name, as serde spells it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Abort => "abort",
            Self::AwaitCommit => "await_commit",
            Self::Forward => "forward",
        }
    }
}

/// The transaction's two time budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Shared by the setup steps, from the first `recheck`; started again when
    /// an exclusive `drain` ends, so a long drain does not starve the
    /// candidate's start.
    pub setup: Duration,
    /// Bounds `drain` and `retire`. `None` lets them take as long as the
    /// application needs. Its expiry fails the transaction and never kills the
    /// incumbent: the work it was doing is left to the application.
    pub drain: Option<Duration>,
}

/// What happens to the running budget when the machine moves between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetChange {
    /// The current deadline still applies (same step, or the next setup step).
    Keep,
    /// Leaving `drain`: a fresh setup budget starts.
    RestartSetup,
    /// Entering `drain` or `retire`: the drain budget starts (or no deadline,
    /// if there is none).
    StartDrain,
}

impl BudgetChange {
    /// The change when the machine moves from step `from` to step `to`.
    #[must_use]
    pub fn between(from: Step, to: Step) -> Self {
        if from == to {
            Self::Keep
        } else if matches!(to, Step::Drain | Step::Retire) {
            Self::StartDrain
        } else if from == Step::Drain {
            Self::RestartSetup
        } else {
            Self::Keep
        }
    }
}

impl Budgets {
    /// The deadline of the transaction's first step, which starts at `now`.
    #[must_use]
    pub fn first_deadline(&self, now: Timestamp) -> Option<Timestamp> {
        Some(now.after(self.setup))
    }

    /// The deadline after `change`, made at `now`; `current` is the deadline
    /// that applied so far (`None`: no deadline).
    #[must_use]
    pub fn deadline_after(
        &self,
        change: BudgetChange,
        now: Timestamp,
        current: Option<Timestamp>,
    ) -> Option<Timestamp> {
        match change {
            BudgetChange::Keep => current,
            BudgetChange::RestartSetup => Some(now.after(self.setup)),
            BudgetChange::StartDrain => self.drain.map(|budget| now.after(budget)),
        }
    }
}

/// The transaction's position: which step is next, and whether selection has
/// committed.
///
/// A runner loops: perform [`step`](Self::step), then pass the answer to
/// [`advance`](Self::advance) (or build the failure with
/// [`adapter_failed`](Self::adapter_failed) /
/// [`deadline_expired`](Self::deadline_expired)), until it has an outcome or a
/// failure. The machine is single-use: once it has returned an outcome or a
/// failure, the transaction is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Fixed for the transaction; decides whether `drain` or `retire` is used.
    mode: Mode,
    /// The step the adapter is to perform next.
    step: Step,
    /// Set by `commit`'s done, never cleared: failures report it.
    committed: bool,
    /// Set by [`Machine::stop`], never cleared: the stop is decided again at
    /// the end ([`StopDecision::once_ended`]).
    stop_requested: bool,
}

impl Machine {
    /// A transaction in `mode`, about to `recheck`, not committed.
    #[must_use]
    pub const fn new(mode: Mode) -> Self {
        Self {
            mode,
            step: Step::Recheck,
            committed: false,
            stop_requested: false,
        }
    }

    /// The transaction's mode.
    #[must_use]
    pub const fn mode(&self) -> Mode {
        self.mode
    }

    /// The step the adapter is to perform next.
    #[must_use]
    pub const fn step(&self) -> Step {
        self.step
    }

    /// Whether selection has committed.
    #[must_use]
    pub const fn committed(&self) -> bool {
        self.committed
    }

    /// Whether a stop has arrived ([`Machine::stop`]).
    #[must_use]
    pub const fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    /// A stop arrived (SIGTERM or SIGINT to the incumbent, or `exit`) while
    /// the transaction runs: record it, and decide from the phase what
    /// becomes of it (module doc, "A stop during a replace"). The step and
    /// the committed flag do not move: an abort is the failure
    /// [`Machine::stopped`] builds.
    pub const fn stop(&mut self) -> StopDecision {
        self.stop_requested = true;
        if self.committed {
            StopDecision::Forward
        } else if matches!(self.step, Step::Commit) {
            StopDecision::AwaitCommit
        } else {
            StopDecision::Abort
        }
    }

    /// The failure for a stop that aborts the transaction at the current
    /// step ([`StopDecision::Abort`]).
    #[must_use]
    pub fn stopped<E>(&self) -> Failure<E> {
        self.failure(Reason::Stopped)
    }

    /// Take the adapter's answer to [`step`](Self::step).
    ///
    /// `Ok(None)`: perform [`step`](Self::step) next (the same one after a
    /// retrying `Pending`). `Ok(Some(_))`: the transaction ended. `Err(_)`:
    /// the answer is not valid for the step.
    ///
    /// # Errors
    /// [`Reason::InvalidProgress`] when `progress` is not an answer the current
    /// step accepts.
    pub fn advance<E>(&mut self, progress: Progress) -> Result<Option<Outcome>, Failure<E>> {
        match progress {
            Progress::Done => Ok(self.finish_step()),
            Progress::Pending if self.step.retries_on_pending() => Ok(None),
            Progress::Pending if self.step == Step::Retire => Ok(Some(Outcome::RetirementPending)),
            Progress::Unchanged if self.step == Step::Recheck => Ok(Some(Outcome::Unchanged)),
            Progress::Pending | Progress::Unchanged => Err(self.failure(Reason::InvalidProgress)),
        }
    }

    /// The failure for the current step's operation failing with `error`.
    #[must_use]
    pub fn adapter_failed<E>(&self, error: E) -> Failure<E> {
        self.failure(Reason::Adapter(error))
    }

    /// The failure for the running budget having run out at the current step.
    #[must_use]
    pub fn deadline_expired<E>(&self) -> Failure<E> {
        self.failure(Reason::Deadline)
    }

    /// The current step answered done: move on, or end when it was the last.
    fn finish_step(&mut self) -> Option<Outcome> {
        if self.step == Step::Commit {
            self.committed = true;
        }
        match self.step.next_in(self.mode) {
            Some(next) => {
                self.step = next;
                None
            }
            None => Some(Outcome::Complete),
        }
    }

    fn failure<E>(&self, reason: Reason<E>) -> Failure<E> {
        Failure {
            step: self.step,
            committed: self.committed,
            reason,
        }
    }
}

/// One thing that happened in a transaction: a step was asked (`answer`
/// `None`), or answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepEvent {
    /// The step.
    pub step: Step,
    /// Its answer, once it came.
    pub answer: Option<Progress>,
    /// When it happened.
    pub at: Timestamp,
}

/// How a transaction ended, for a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionEnd {
    /// It ended without failing.
    Outcome(Outcome),
    /// It failed: where, whether selection had committed, why.
    Failed {
        /// The step it failed at.
        step: Step,
        /// Whether the candidate is selected despite the failure.
        committed: bool,
        /// The kind of reason.
        reason: ReasonKind,
        /// The reason in words (the adapter's error, when it is one).
        message: String,
    },
}

impl TransactionEnd {
    /// The report's end for a runner's result.
    #[must_use]
    pub fn from_result<E: fmt::Display>(result: &Result<Outcome, Failure<E>>) -> Self {
        match result {
            Ok(outcome) => Self::Outcome(*outcome),
            Err(failure) => Self::Failed {
                step: failure.step,
                committed: failure.committed,
                reason: failure.reason.kind(),
                message: match &failure.reason {
                    Reason::Adapter(error) => error.to_string(),
                    other => other.kind().message().to_owned(),
                },
            },
        }
    }

    /// Whether selection committed (the candidate is authoritative).
    #[must_use]
    pub const fn committed(&self) -> bool {
        match self {
            Self::Outcome(outcome) => !matches!(outcome, Outcome::Unchanged),
            Self::Failed { committed, .. } => *committed,
        }
    }
}

/// The old name of [`TransactionEnd`].
#[deprecated(since = "0.1.0", note = "renamed to `TransactionEnd`")]
pub type Ended = TransactionEnd;

/// The progress of one replacement transaction, as a daemon publishes it
/// while the transaction runs and after it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// One higher on every change of any report in this process, so a
    /// watcher can ask for the first report newer than one it saw.
    pub seq: u64,
    /// The transaction's number in this process, from 1.
    pub serial: u64,
    /// The mode.
    pub mode: Mode,
    /// What replaces the incumbent (for the process driver, the binary).
    pub target: String,
    /// The budgets, in milliseconds (`drain_ms` `None`: unbounded).
    pub setup_ms: u64,
    /// See [`Report::setup_ms`].
    pub drain_ms: Option<u64>,
    /// Every step asked and answered, in order.
    pub events: Vec<StepEvent>,
    /// How it ended; `None` while it runs.
    pub ended: Option<TransactionEnd>,
}

/// Why a replacement was not started. Wire names are snake_case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum ReplaceRefusal {
    /// A replacement is already running in this daemon.
    #[error("a replacement is already in progress")]
    InProgress,
    /// Another process holds the upgrade lock.
    #[error("another process holds the upgrade lock {0}")]
    Locked(String),
    /// The request cannot be carried out as asked.
    #[error("invalid replacement request: {0}")]
    Invalid(String),
    /// The upgrade lock could not be taken.
    #[error("the upgrade lock: {0}")]
    Io(String),
    /// The supervisor (or its Replacement actor) is not running.
    #[error("replacement is unavailable")]
    Unavailable,
    /// The daemon runs under a service manager that tracks its pid
    /// (runit, supervisord, PID 1 of a container): a successor would run
    /// unmanaged, or the incumbent's exit would end the container. Names
    /// the manager and how it was told.
    #[error(
        "replace is refused under {0}: the manager tracks this process's pid, so a successor would run unmanaged (relaunch into the new binary through the manager instead)"
    )]
    ManagerTracksPid(String),
}

impl ReplaceRefusal {
    /// The wire name, as serde spells it.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::InProgress => "in_progress",
            Self::Locked(_) => "locked",
            Self::Invalid(_) => "invalid",
            Self::Io(_) => "io",
            Self::Unavailable => "unavailable",
            Self::ManagerTracksPid(_) => "manager_tracks_pid",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Answer = Result<Option<Outcome>, Failure<()>>;

    /// Feed `answers` in order; return the last result and the steps visited.
    fn drive(mode: Mode, answers: &[Progress]) -> (Machine, Vec<Step>, Answer) {
        let mut machine = Machine::new(mode);
        let mut visited = vec![machine.step()];
        let mut last = Ok(None);
        for &progress in answers {
            last = machine.advance(progress);
            if visited.last() != Some(&machine.step()) {
                visited.push(machine.step());
            }
        }
        (machine, visited, last)
    }

    #[derive(Debug, PartialEq)]
    struct SpawnError;

    impl fmt::Display for SpawnError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("failed to spawn")
        }
    }

    impl std::error::Error for SpawnError {}

    use Progress::{Done, Pending, Unchanged};

    #[test]
    fn mode_steps_follow_the_machines_order() {
        for mode in [Mode::Overlap, Mode::Exclusive] {
            let steps = mode.steps();
            assert_eq!(steps[0], Step::Recheck);
            for pair in steps.windows(2) {
                assert_eq!(pair[0].next_in(mode), Some(pair[1]), "{mode:?}");
            }
            assert_eq!(steps[steps.len() - 1].next_in(mode), None);
        }
    }

    #[test]
    fn overlap_never_drains_and_retires_after_commit() {
        let (machine, visited, last) = drive(Mode::Overlap, &[Done; 6]);
        assert_eq!(visited, Mode::Overlap.steps());
        assert!(!visited.contains(&Step::Drain));
        assert_eq!(machine.step(), Step::Retire);
        assert!(machine.committed(), "retire is reached only after commit");
        assert_eq!(last, Ok(None));
        let mut machine = machine;
        assert_eq!(machine.advance::<()>(Done), Ok(Some(Outcome::Complete)));
    }

    #[test]
    fn exclusive_drains_before_start_and_completes_at_commit() {
        let (machine, visited, last) = drive(Mode::Exclusive, &[Done; 7]);
        assert_eq!(visited, Mode::Exclusive.steps());
        let drain = visited.iter().position(|&s| s == Step::Drain).unwrap();
        let start = visited.iter().position(|&s| s == Step::Start).unwrap();
        assert!(drain < start);
        assert!(!visited.contains(&Step::Retire));
        assert!(machine.committed());
        assert_eq!(last, Ok(Some(Outcome::Complete)));
    }

    #[test]
    fn pending_retries_only_recheck_drain_and_verify() {
        for mode in [Mode::Overlap, Mode::Exclusive] {
            for &step in mode.steps() {
                let mut machine = Machine::new(mode);
                while machine.step() != step {
                    assert_eq!(machine.advance::<()>(Done), Ok(None));
                }
                let before = machine.clone();
                let answer = machine.advance::<()>(Pending);
                match step {
                    Step::Recheck | Step::Drain | Step::Verify => {
                        assert_eq!(answer, Ok(None));
                        assert_eq!(machine, before, "pending stays on {step}");
                    }
                    Step::Retire => assert_eq!(answer, Ok(Some(Outcome::RetirementPending))),
                    _ => assert_eq!(answer, Err(before.failure(Reason::InvalidProgress))),
                }
            }
        }
    }

    #[test]
    fn pending_retirement_is_success_after_commit() {
        let (machine, _, last) = drive(
            Mode::Overlap,
            &[Done, Done, Done, Done, Done, Done, Pending],
        );
        assert_eq!(last, Ok(Some(Outcome::RetirementPending)));
        assert!(machine.committed());
    }

    #[test]
    fn unchanged_ends_the_transaction_only_at_recheck() {
        for mode in [Mode::Overlap, Mode::Exclusive] {
            let (machine, _, last) = drive(mode, &[Pending, Unchanged]);
            assert_eq!(last, Ok(Some(Outcome::Unchanged)));
            assert!(!machine.committed());
            for &step in &mode.steps()[1..] {
                let mut machine = Machine::new(mode);
                while machine.step() != step {
                    assert_eq!(machine.advance::<()>(Done), Ok(None));
                }
                let expected = machine.failure(Reason::InvalidProgress);
                assert_eq!(machine.advance::<()>(Unchanged), Err(expected), "{step}");
            }
        }
    }

    #[test]
    fn commit_sets_committed_and_later_failures_say_so() {
        let (mut machine, _, _) = drive(Mode::Overlap, &[Done; 5]);
        assert_eq!(machine.step(), Step::Commit);
        assert!(!machine.committed());
        assert_eq!(machine.advance::<()>(Done), Ok(None));
        assert!(machine.committed());
        let failure = machine.advance::<()>(Unchanged).unwrap_err();
        assert_eq!(failure.step, Step::Retire);
        assert!(failure.committed);
        assert!(machine.committed(), "a failure does not withdraw selection");
    }

    #[test]
    fn failures_carry_the_true_step_and_committed_flag() {
        let (machine, _, _) = drive(Mode::Exclusive, &[Done, Done, Pending]);
        assert_eq!(
            machine.adapter_failed(SpawnError),
            Failure {
                step: Step::Drain,
                committed: false,
                reason: Reason::Adapter(SpawnError)
            }
        );
        assert_eq!(
            machine.deadline_expired::<()>(),
            Failure {
                step: Step::Drain,
                committed: false,
                reason: Reason::Deadline
            }
        );
        let (machine, _, _) = drive(Mode::Overlap, &[Done; 6]);
        assert_eq!(
            machine.deadline_expired::<()>(),
            Failure {
                step: Step::Retire,
                committed: true,
                reason: Reason::Deadline
            }
        );
    }

    #[test]
    fn failure_display_names_the_step_in_lowercase() {
        let machine = drive(Mode::Overlap, &[Done, Done]).0;
        assert_eq!(
            machine.adapter_failed(SpawnError).to_string(),
            "replacement start failed: adapter operation failed"
        );
        assert_eq!(
            machine.deadline_expired::<()>().to_string(),
            "replacement start failed: deadline expired"
        );
        let invalid: Failure<()> = Machine::new(Mode::Exclusive).failure(Reason::InvalidProgress);
        assert_eq!(
            invalid.to_string(),
            "replacement recheck failed: invalid adapter progress"
        );
    }

    #[test]
    fn failure_source_is_the_adapter_error_only() {
        use std::error::Error as _;
        let machine = Machine::new(Mode::Overlap);
        let failure = machine.adapter_failed(SpawnError);
        assert_eq!(
            failure.source().map(ToString::to_string).as_deref(),
            Some("failed to spawn")
        );
        assert_eq!(failure.reason.kind(), ReasonKind::Adapter);
        assert!(machine.deadline_expired::<SpawnError>().source().is_none());
        assert!(
            machine
                .failure::<SpawnError>(Reason::InvalidProgress)
                .source()
                .is_none()
        );
    }

    /// Module doc, "A stop during a replace": the decision is the phase's,
    /// at every step of both modes, before and after commit; a stop moves
    /// nothing but its own flag, and an abort is the uncommitted failure
    /// `stopped` at the step it arrived at.
    #[test]
    fn a_stop_is_decided_by_the_phase_alone() {
        for mode in [Mode::Overlap, Mode::Exclusive] {
            let mut machine = Machine::new(mode);
            loop {
                let step = machine.step();
                let mut stopped = machine.clone();
                let decision = stopped.stop();
                let expected = if machine.committed() {
                    StopDecision::Forward
                } else if step == Step::Commit {
                    StopDecision::AwaitCommit
                } else {
                    StopDecision::Abort
                };
                assert_eq!(decision, expected, "{mode:?} at {step}");
                assert!(stopped.stop_requested());
                assert_eq!(stopped.step(), step, "a stop does not move the machine");
                assert_eq!(stopped.committed(), machine.committed());
                if decision == StopDecision::Abort {
                    assert_eq!(
                        stopped.stopped::<()>(),
                        Failure {
                            step,
                            committed: false,
                            reason: Reason::Stopped
                        }
                    );
                }
                if decision == StopDecision::AwaitCommit {
                    // Commit's answer decides: done forwards, a failure aborts.
                    let mut done = stopped.clone();
                    let ended = done.advance::<()>(Done).map(|o| o.is_some());
                    assert!(ended.is_ok());
                    assert_eq!(
                        StopDecision::once_ended(done.committed()),
                        StopDecision::Forward
                    );
                    assert_eq!(done.stop(), StopDecision::Forward);
                    let failed = stopped.adapter_failed(SpawnError);
                    assert_eq!(
                        StopDecision::once_ended(failed.committed),
                        StopDecision::Abort
                    );
                }
                match machine.advance::<()>(Done) {
                    Ok(None) => {}
                    Ok(Some(_)) => break,
                    Err(failure) => panic!("{mode:?}: {failure}"),
                }
            }
            assert_eq!(StopDecision::once_ended(true), StopDecision::Forward);
            let mut ended = machine.clone();
            assert_eq!(ended.stop(), StopDecision::Forward, "{mode:?} ended");
        }
    }

    #[test]
    fn commit_is_the_only_step_a_deadline_does_not_interrupt() {
        for &step in Mode::Overlap.steps().iter().chain([Step::Drain].iter()) {
            assert_eq!(step.deadline_interrupts(), step != Step::Commit, "{step}");
        }
    }

    #[test]
    fn budget_changes_at_drain_and_retire_only() {
        use BudgetChange::{Keep, RestartSetup, StartDrain};
        assert_eq!(
            BudgetChange::between(Step::Prepare, Step::Drain),
            StartDrain
        );
        assert_eq!(BudgetChange::between(Step::Drain, Step::Drain), Keep);
        assert_eq!(
            BudgetChange::between(Step::Drain, Step::Start),
            RestartSetup
        );
        assert_eq!(
            BudgetChange::between(Step::Commit, Step::Retire),
            StartDrain
        );
        assert_eq!(BudgetChange::between(Step::Retire, Step::Retire), Keep);
        for mode in [Mode::Overlap, Mode::Exclusive] {
            for pair in mode.steps().windows(2) {
                let change = BudgetChange::between(pair[0], pair[1]);
                let expected = match (pair[0], pair[1]) {
                    (_, Step::Drain | Step::Retire) => StartDrain,
                    (Step::Drain, _) => RestartSetup,
                    _ => Keep,
                };
                assert_eq!(change, expected, "{} -> {}", pair[0], pair[1]);
            }
        }
    }

    #[test]
    fn budgets_turn_changes_into_deadlines() {
        let now = Timestamp::from_millis(10_000);
        let current = Some(Timestamp::from_millis(12_000));
        let bounded = Budgets {
            setup: Duration::from_secs(5),
            drain: Some(Duration::from_secs(60)),
        };
        let unbounded = Budgets {
            drain: None,
            ..bounded
        };
        assert_eq!(
            bounded.first_deadline(now),
            Some(Timestamp::from_millis(15_000))
        );
        assert_eq!(
            bounded.deadline_after(BudgetChange::Keep, now, current),
            current
        );
        assert_eq!(
            bounded.deadline_after(BudgetChange::RestartSetup, now, None),
            Some(Timestamp::from_millis(15_000))
        );
        assert_eq!(
            bounded.deadline_after(BudgetChange::StartDrain, now, current),
            Some(Timestamp::from_millis(70_000))
        );
        assert_eq!(
            unbounded.deadline_after(BudgetChange::StartDrain, now, current),
            None
        );
    }

    #[test]
    fn wire_names_match_serde() {
        for mode in [Mode::Overlap, Mode::Exclusive] {
            for &step in mode.steps() {
                assert_eq!(
                    serde_json::to_string(&step).unwrap(),
                    format!("\"{}\"", step.name())
                );
                assert_eq!(step.to_string(), step.name());
            }
        }
        for kind in [
            ReasonKind::Deadline,
            ReasonKind::Adapter,
            ReasonKind::InvalidProgress,
            ReasonKind::Stopped,
        ] {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.name())
            );
        }
        for decision in [
            StopDecision::Abort,
            StopDecision::AwaitCommit,
            StopDecision::Forward,
        ] {
            assert_eq!(
                serde_json::to_string(&decision).unwrap(),
                format!("\"{}\"", decision.name())
            );
        }
        assert_eq!(
            serde_json::to_string(&Stop::Exit(crate::lifecycle::ExitIntent::Relaunch)).unwrap(),
            "{\"exit\":\"relaunch\"}"
        );
        assert_eq!(
            serde_json::to_string(&Outcome::RetirementPending).unwrap(),
            "\"retirement_pending\""
        );
        assert_eq!(
            serde_json::to_string(&Mode::Exclusive).unwrap(),
            "\"exclusive\""
        );
        assert_eq!(
            serde_json::from_str::<Progress>("\"unchanged\"").unwrap(),
            Progress::Unchanged
        );
    }
}
