//! The boot: one attempt — `resolve_config`, then the service's plan — run
//! in a task of its own ([`start`]), reporting every phase to the Lifecycle
//! actor, which owns the task and holds its [`BootTask`] to cancel it.
//!
//! Not an actor (a temporary Boot actor under Root would cost more):
//! a boot has one caller and no mailbox of its own to serve, and an actor
//! per attempt would cost a spawn, a start-up handshake, a stop and a supervision
//! event to Root on every start: wake-ups on other threads for each
//! stop+start. Its crash isolation is kept by the task: a panic is caught
//! in the task and reported to the Lifecycle actor, which it never reaches.
//!
//! Invariants:
//! - The first phase of every boot is `resolve_config`; a config that does
//!   not resolve, or that moves the data directory, fails it with class
//!   *hold*. The declared file's fingerprint is taken *before* the source
//!   reads it (on the same blocking thread, one hop for both) and travels
//!   with the outcome, so the Lifecycle actor can settle a held failure, or
//!   a runtime that came up, against the file as it is when it lands.
//! - A plan that names one step twice fails `resolve_config` with class
//!   hold, naming the step (`service::tests::a_plan_that_names_a_step_twice_is_refused`).
//! - What is durable when (`spec/control-dir.md`, "What a boot makes
//!   durable, and when"): a step whose resource outlives the process
//!   (`Step::LIFETIME`) has its intent appended (an fsync) before it runs;
//!   every completed step's checkpoint is staged and made durable by the
//!   boot's next append (the next such intent, or the `booted`
//!   transition, before `running` is published: group commit). A boot of
//!   steps that die with the process costs one fsync, its `booted`.
//! - Resume: a step with a checkpoint to reconcile (`crate::ledger`: of a
//!   crashed process only if it outlives the process) is skipped only if
//!   its step's `Step::observe` says its resource is still present
//!   (reported `skipped`, with the observation's duration); otherwise it
//!   runs again, told whether an earlier run was interrupted after its
//!   intent. Checked by `tests/it/crash.rs`
//!   (`a_checkpointed_step_is_skipped_after_a_crash_only_if_still_present`).
//! - The step deadline is not decided here: it is the lifecycle machine's
//!   (`Timings::step_deadline`, in its policy). A step's
//!   `StepContext::progress` reports are forwarded to the Lifecycle actor
//!   (coalesced: at most one per quarter of the deadline, carrying the
//!   latest report's moment, so a forwarded report always lands before the
//!   deadline its predecessor set), which steps them as `progress`; a
//!   deadline that passes cancels the boot ([`BootTask::cancel`] with the
//!   machine's reason, which the cancelled step fails with). A failed
//!   boot's teardown is the supervisor's work, not the step's: the boot
//!   reports progress while it runs, so the deadline never replaces the
//!   step's own failure. Checked by
//!   `tests/it/timing.rs`
//!   (`a_stalled_step_fails_at_its_deadline_and_a_reporting_one_boots_on_virtual_time`)
//!   and `tests/it/durability.rs`
//!   (`a_step_past_its_deadline_fails_unless_it_reports_progress`).
//! - Every phase's start is reported (journal staged, Lifecycle actor told)
//!   before its work begins, and every failure before the probe or teardown
//!   that follows it; a phase's successful end travels with what comes next
//!   (the next phase's start, or `booted`), one message to each actor
//!   ([`BootMsg::Reports`]). The journal gets every record before
//!   the append that follows it.
//! - A boot that fails or is cancelled tears down what it built (reverse
//!   order, confirmed by observation) and reports the *probed* store outcome.
//! - The Lifecycle actor stays free while a step runs: a cancel trips the
//!   boot's cancellation token, and the step's future is dropped at once.
//! - A boot task that panics is a failed boot of class backoff with a
//!   probed store outcome, not a dead Lifecycle actor: the panic is caught
//!   in the task (the runtime it held is dropped while unwinding) and
//!   reported as [`BootMsg::Crashed`]
//!   (`supervisor::a_panicking_boot_step_is_a_failed_boot_not_a_crashed_process`,
//!   `attempts::a_boot_that_panics_ends_in_the_journal`).
//! - A running supervisor holds nothing of a boot: its task ends with its
//!   outcome (memory per supervisor), and no actor is spawned
//!   for it (`supervision::a_running_supervisor_keeps_no_idle_boot_drain_or_replacement_actor`).
//!
//! Checked by `tests/it/supervisor.rs` (`a_boot_that_cannot_bind_is_retried_until_the_port_frees`,
//! `a_panicking_boot_step_is_a_failed_boot_not_a_crashed_process`,
//! `a_change_that_lands_during_a_failing_boot_is_not_lost`).

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

// Tokio's clock, which a simulation pauses: a phase's duration is journaled,
// so it must be the same on every run of a seed.
use tokio::time::Instant;

use ractor::{ActorRef, DerivedActorRef};
use steadfast_protocol::journal::Record;
use steadfast_protocol::lifecycle::{FailureClass, FailureReport, Phase, StoreOutcome};
use steadfast_protocol::snapshot::PhaseOutcome;
use steadfast_protocol::time::Timestamp;
use tokio_util::sync::CancellationToken;

use crate::config::Fingerprint;
use crate::context::Shared;
use crate::drain::teardown;
use crate::journal::JournalMsg;
use crate::service::{
    Checkpoint, Completed, Lifetime, LiveRuntime, Observation, Runtime, StepEnv, StepError,
    StepProgress, spawn_watched,
};
use crate::store::StoreLock;

/// One boot running in a task of its own, as the Lifecycle actor holds it:
/// how it is cancelled.
#[derive(Debug)]
pub(crate) struct BootTask {
    cancel: Cancel,
}

/// Progress and outcome of a boot, from the boot's task (`boot::start`).
pub enum BootReport {
    /// A phase started.
    PhaseStarted {
        /// Which boot.
        attempt: NonZeroU32,
        /// Which phase.
        phase: Phase,
        /// Its position, from 1.
        index: u32,
        /// Phases in the plan (0 while unknown).
        total: u32,
        /// When.
        at: Timestamp,
    },
    /// The running step reported progress (coalesced by the boot: the
    /// latest report's moment).
    Progress {
        /// Which boot.
        attempt: NonZeroU32,
        /// When the step last reported.
        at: Timestamp,
    },
    /// A phase ended.
    PhaseEnded {
        /// Which boot.
        attempt: NonZeroU32,
        /// Which phase.
        phase: Phase,
        /// When.
        at: Timestamp,
        /// How long it took.
        duration_ms: u64,
        /// How it went.
        outcome: PhaseOutcome,
        /// The plan's phases, when the phase learned them (`resolve_config`
        /// makes the plan); 0 otherwise.
        total: u32,
    },
    /// The boot finished: the runtime is serving.
    Booted {
        /// The runtime.
        live: LiveRuntime,
        /// The config it booted with.
        config: crate::service::LiveConfig,
        /// The declared file's fingerprint before the boot read it.
        fingerprint: Option<Fingerprint>,
        /// When.
        at: Timestamp,
    },
    /// The boot failed (or was cancelled) and tore down what it built.
    Failed {
        /// Which boot.
        attempt: NonZeroU32,
        /// What, where, when.
        report: FailureReport,
        /// Whether waiting can fix it.
        class: FailureClass,
        /// The probed store outcome.
        store: StoreOutcome,
        /// The declared file's fingerprint before the boot read it.
        fingerprint: Option<Fingerprint>,
        /// Whether it ended because it was cancelled.
        cancelled: bool,
    },
}

/// What a boot's task tells its owner (the Lifecycle actor, through a
/// [`DerivedActorRef`]): its reports, one at a time or several that came
/// together, and its own panic.
pub enum BootMsg {
    /// A boot's progress or outcome.
    Report(BootReport),
    /// Reports that came together (a phase's end and the next one's start;
    /// the last step's end and `booted`), in their order.
    Reports(Vec<BootReport>),
    /// The boot's task panicked (the runtime it held was dropped).
    Crashed {
        /// The panic, rendered.
        reason: String,
    },
}

/// How a boot is cancelled: the token its task watches, and the reason the
/// cancelled step fails with (set before the token is cancelled).
#[derive(Debug, Clone, Default)]
struct Cancel {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl Cancel {
    fn reason(&self) -> String {
        self.reason
            .get()
            .cloned()
            .unwrap_or_else(|| "cancelled".to_owned())
    }
}

/// Start boot number `attempt` in a task of its own. Its progress and its
/// outcome (exactly one `Booted` or `Failed`) go to `report_to`, its
/// checkpoints to `journal`; a panic is reported as
/// [`BootMsg::Crashed`], once the runtime it held is dropped.
pub(crate) fn start(
    shared: Arc<Shared>,
    attempt: NonZeroU32,
    report_to: DerivedActorRef<BootMsg>,
    journal: ActorRef<JournalMsg>,
) -> BootTask {
    let cancel = Cancel::default();
    let crashed = report_to.clone();
    spawn_watched(
        run_attempt(shared, attempt, cancel.clone(), report_to, journal),
        move |panic| {
            if let Some(panic) = panic {
                let reason = format!("boot attempt {attempt} panicked: {panic}");
                let _ = crashed.cast(BootMsg::Crashed { reason });
            }
        },
    );
    BootTask { cancel }
}

impl BootTask {
    /// Cancel the boot: it reports a failure with the probed store, and the
    /// step it was in fails with `reason` (`cancelled`, or the machine's
    /// step-deadline error). A boot that already ended ignores it.
    pub(crate) fn cancel(&self, reason: String) {
        let _ = self.cancel.reason.set(reason);
        self.cancel.token.cancel();
    }
}

/// The Lifecycle actor lets go of a boot only once it reported (the next
/// attempt's replaces it) or when the actor itself ends: a boot still
/// running then is cancelled, so it tears down what it built instead of
/// booting a runtime no one supervises.
impl Drop for BootTask {
    fn drop(&mut self) {
        self.cancel.token.cancel();
    }
}

/// Reports progress of one attempt to the Lifecycle actor.
///
/// What is reported is held back until the boot is about to wait on
/// something ([`Self::flush`]: before a phase's work, a checkpoint's
/// append, a teardown, and with the outcome), then sent as one message to
/// the journal and one to the Lifecycle actor: a phase's end and the next
/// one's start, or the last step's checkpoint, its end and `booted`, wake
/// each actor once, not two or three times (wake-ups per
/// stop+start). Nothing a watcher could see is delayed past a wait, and
/// the journal still gets every record before the append that follows it.
struct Reporter<'a> {
    shared: &'a Shared,
    attempt: NonZeroU32,
    to: DerivedActorRef<BootMsg>,
    journal: ActorRef<JournalMsg>,
    /// Held back until the next flush: records to stage, reports to send.
    pending: std::sync::Mutex<(Vec<Record>, Vec<BootReport>)>,
}

impl Reporter<'_> {
    fn pending(&self) -> std::sync::MutexGuard<'_, (Vec<Record>, Vec<BootReport>)> {
        // Only this task takes it, never across an await: a poisoned lock
        // (a panic while held) still holds consistent vectors.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn send(&self, report: BootReport) {
        self.pending().1.push(report);
    }

    /// Progress goes to the journal (staged, in this task's order) and to
    /// the Lifecycle actor (for the snapshot).
    fn stage(&self, record: Record) {
        self.pending().0.push(record);
    }

    /// Send what is held back: the records to the journal first, so an
    /// append the Lifecycle actor makes on these reports comes after them.
    fn flush(&self) {
        let (records, mut reports) = std::mem::take(&mut *self.pending());
        if !records.is_empty() {
            let _ = self.journal.cast(JournalMsg::Stage(records));
        }
        let message = match reports.len() {
            0 => return,
            1 => reports.pop().map(BootMsg::Report),
            _ => Some(BootMsg::Reports(reports)),
        };
        if let Some(message) = message {
            let _ = self.to.cast(message);
        }
    }

    fn started(&self, phase: &Phase, index: u32, total: u32) -> Instant {
        let at = self.shared.clock.now();
        self.stage(Record::PhaseStarted {
            attempt: self.attempt,
            phase: phase.to_string(),
            index,
            total,
            at_ms: at.as_millis(),
        });
        self.send(BootReport::PhaseStarted {
            attempt: self.attempt,
            phase: phase.clone(),
            index,
            total,
            at,
        });
        // The phase's work follows: a watcher sees it begin.
        self.flush();
        Instant::now()
    }

    /// Forward `progress`'s reports as they come, at most one per
    /// `interval` (the ones in between coalesce into the latest, whose
    /// moment the forwarded report carries). Runs until dropped.
    async fn forward_progress(&self, progress: &StepProgress, interval: Duration) -> Infallible {
        loop {
            let reported = progress.next_report().await;
            self.send(BootReport::Progress {
                attempt: self.attempt,
                at: self.shared.clock.at(reported),
            });
            self.flush();
            tokio::time::sleep(interval).await;
        }
    }

    /// Run `work`, the supervisor's own bounded work inside a phase (a
    /// failed boot's teardown), reporting progress for it every `interval`
    /// so the step deadline never fires over it.
    async fn keeping_alive<T>(&self, interval: Duration, work: impl Future<Output = T>) -> T {
        tokio::select! {
            biased;
            out = work => out,
            never = self.heartbeat(interval) => match never {},
        }
    }

    async fn heartbeat(&self, interval: Duration) -> Infallible {
        loop {
            self.send(BootReport::Progress {
                attempt: self.attempt,
                at: self.shared.clock.now(),
            });
            self.flush();
            tokio::time::sleep(interval).await;
        }
    }

    fn ended(&self, phase: &Phase, started: Instant, outcome: PhaseOutcome) {
        self.ended_of(phase, started, outcome, 0);
    }

    /// [`Self::ended`] of a phase that learned the plan's `total` while it
    /// ran (`resolve_config`, which makes the plan).
    fn ended_of(&self, phase: &Phase, started: Instant, outcome: PhaseOutcome, total: u32) {
        let at = self.shared.clock.now();
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (attempt, name, at_ms) = (self.attempt, phase.to_string(), at.as_millis());
        self.stage(match &outcome {
            PhaseOutcome::Failed { error } => Record::PhaseFailed {
                attempt,
                phase: name,
                at_ms,
                duration_ms,
                error: error.clone(),
            },
            PhaseOutcome::Skipped => Record::PhaseSkipped {
                attempt,
                phase: name,
                at_ms,
                reason: "its checkpointed resource is still present".into(),
                duration_ms,
            },
            PhaseOutcome::Running | PhaseOutcome::Completed => Record::PhaseCompleted {
                attempt,
                phase: name,
                at_ms,
                duration_ms,
            },
        });
        let failed = matches!(outcome, PhaseOutcome::Failed { .. });
        self.send(BootReport::PhaseEnded {
            attempt,
            phase: phase.clone(),
            at,
            duration_ms,
            outcome,
            total,
        });
        // A failure is followed by a probe or a teardown: a watcher sees it
        // now. A success rides with what comes next (the next phase's
        // start, or `booted`).
        if failed {
            self.flush();
        }
    }

    fn failed(
        &self,
        phase: Phase,
        error: String,
        class: FailureClass,
        store: StoreOutcome,
        fingerprint: Option<Fingerprint>,
        cancelled: bool,
    ) {
        self.send(BootReport::Failed {
            attempt: self.attempt,
            report: FailureReport {
                phase,
                error,
                at: self.shared.clock.now(),
            },
            class,
            store,
            fingerprint,
            cancelled,
        });
        self.flush();
    }
}

/// One attempt, start to end. Always ends with exactly one `Booted` or
/// `Failed` report (unless it panics: see [`start`]).
async fn run_attempt(
    shared: Arc<Shared>,
    attempt: NonZeroU32,
    cancellation: Cancel,
    report_to: DerivedActorRef<BootMsg>,
    journal: ActorRef<JournalMsg>,
) {
    let cancel = &cancellation.token;
    let reporter = Reporter {
        shared: &shared,
        attempt,
        to: report_to,
        journal: journal.clone(),
        pending: std::sync::Mutex::default(),
    };

    // ── resolve_config ──────────────────────────────────────────────────
    let phase = Phase::RESOLVE_CONFIG;
    let started = reporter.started(&phase, 1, 0);
    let (fingerprint, resolved) = shared.resolve_tiers_fingerprinted(&shared.overrides).await;
    let resolved = resolved
        .map_err(|error| error.to_string())
        // The plan deserializes the config into the service's type (a value
        // that does not fit is held here, naming the leaf), and one that
        // names a step twice is held here too.
        .and_then(|resolved| {
            let config = shared
                .service
                .live_config(resolved.config)
                .map_err(|error| error.to_string())?;
            let plan = shared.service.plan(&config)?;
            Ok((config, plan))
        });
    let (config, plan) = match resolved {
        Ok(resolved) => resolved,
        Err(error) => {
            reporter.ended(
                &phase,
                started,
                PhaseOutcome::Failed {
                    error: error.clone(),
                },
            );
            let store = StoreLock::observe(&shared.data_dir).await;
            reporter.failed(
                phase,
                error,
                FailureClass::Hold,
                store,
                fingerprint,
                cancel.is_cancelled(),
            );
            return;
        }
    };
    // resolve_config counts in the plan's total, known now.
    let total = u32::try_from(plan.len() + 1).unwrap_or(u32::MAX);
    reporter.ended_of(&phase, started, PhaseOutcome::Completed, total);
    crate::launch::mark("config resolved");

    // ── the service's plan ──────────────────────────────────────────────
    // At most one forwarded progress report per quarter of the deadline
    // (and never more than one a millisecond, whatever the deadline); the
    // teardown of a failed boot reports at that pace too.
    let interval = (shared.timings.step_deadline / 4).max(Duration::from_millis(1));
    let mut runtime = Runtime::with_env(crate::service::RuntimeEnv {
        attempt,
        journal: Some(journal.clone()),
        journal_timeout: shared.timings.journal_timeout,
        clock: shared.clock,
        board: Arc::clone(&shared.children),
    });
    let mut checkpoints: Vec<Completed> = Vec::with_capacity(plan.len());
    for (offset, step_impl) in plan.iter().enumerate() {
        let step = step_impl.name();
        let index = u32::try_from(offset + 2).unwrap_or(u32::MAX);
        let phase = Phase::new(step);
        let started = reporter.started(&phase, index, total);
        // Resume: a step checkpointed by an earlier boot and not cleared
        // (of a crashed process only if its resource outlives the process)
        // is skipped only if observation says its resource is still there;
        // otherwise it runs again.
        let lifetime = step_impl.lifetime();
        if let Some(prior) = shared.ledger.find(step, lifetime).filter(|_| {
            !crate::planted::planted(crate::planted::Defect::ReconcileForgetsCheckpoints)
        }) {
            let observed = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                observed = step_impl.observe(&prior.resource, &runtime) => Some(observed),
            };
            if observed == Some(Observation::Present) {
                checkpoints.push(Completed {
                    step: Arc::clone(step_impl),
                    checkpoint: Checkpoint { index, ..prior },
                });
                reporter.ended(&phase, started, PhaseOutcome::Skipped);
                continue;
            }
        }
        let progress =
            StepProgress::announced(shared.timings.step_deadline, shared.step_deadlines.clone());
        let interrupted = shared.ledger.interrupted(step, lifetime);
        // Intent ahead: a resource that outlives the process is named in
        // the journal, durably, before the step makes any of it, so a crash
        // part way through leaves the next process knowing. The append
        // also makes what this boot staged so far durable (group commit).
        let intent = match lifetime {
            Lifetime::Process => Ok(()),
            Lifetime::Outlives => {
                let record = Record::Intent {
                    attempt,
                    step: step.to_owned(),
                    index,
                };
                let written = if crate::planted::planted(crate::planted::Defect::IntentNotAhead) {
                    reporter.stage(record);
                    Ok(())
                } else {
                    reporter.flush();
                    let timeout = shared.timings.journal_timeout;
                    crate::journal::append(&journal, vec![record], None, timeout).await
                };
                match written {
                    Ok(()) => {
                        shared.ledger.intended(step);
                        crate::failpoint::hit("boot.after_intent");
                        Ok(())
                    }
                    Err(error) => Err(StepError::backoff(format!(
                        "the intent to run it is not durable: {error}"
                    ))),
                }
            }
        };
        let prior: Vec<Checkpoint> = checkpoints.iter().map(|c| c.checkpoint.clone()).collect();
        let cx = StepEnv {
            attempt,
            data_dir: &shared.data_dir,
            runtime: &mut runtime,
            prior: &prior,
            interrupted,
            progress: &progress,
            handover: &shared.handover,
        };
        // A cancel before or during the step (an operator's, or the
        // machine's when the step passed its deadline) drops the step's
        // future at once. Its progress goes to the machine, which owns the
        // deadline; a quarter of the deadline between forwarded reports
        // keeps each one ahead of the deadline the one before it set.
        let result = match intent {
            Err(error) => Err(error),
            Ok(()) => tokio::select! {
                biased;
                () = cancel.cancelled() => Err(StepError::backoff(cancellation.reason())),
                result = step_impl.execute(cx) => result,
                never = reporter.forward_progress(&progress, interval) => match never {},
            },
        };
        let failure = match result {
            Err(error) => Some(error),
            Ok(resource) => {
                crate::launch::mark(format!("step {step} executed"));
                crate::failpoint::hit("boot.before_checkpoint");
                let checkpoint = Checkpoint {
                    step: step.to_owned(),
                    index,
                    resource,
                };
                // Staged: no later step waits on it. It is made durable by
                // the boot's next append (the next outliving step's intent,
                // or the `booted` transition, fsynced before `running` is
                // published: group commit). A crash before then loses it:
                // a resource that dies with the process died too, and one
                // that outlives it has its intent durable, so the next boot
                // runs the step again, told it was interrupted.
                reporter.stage(Record::Checkpoint {
                    attempt,
                    step: checkpoint.step.clone(),
                    index,
                    resource: checkpoint.resource.clone(),
                });
                shared.ledger.recorded(&checkpoint);
                checkpoints.push(Completed {
                    step: Arc::clone(step_impl),
                    checkpoint,
                });
                crate::failpoint::hit("boot.after_checkpoint");
                None
            }
        };
        if let Some(error) = failure {
            reporter.ended(
                &phase,
                started,
                PhaseOutcome::Failed {
                    error: error.message.clone(),
                },
            );
            // Journaled only: a failing boot's own phases stay what the
            // snapshot shows (the state is still booting). The teardown is
            // the supervisor's work, not the step's: the deadline must not
            // fire over it and replace the step's own failure.
            let (store, _) = reporter
                .keeping_alive(
                    interval,
                    teardown(&shared, Some(&journal), None, attempt, runtime, checkpoints),
                )
                .await;
            let cancelled = cancel.is_cancelled();
            reporter.failed(
                phase,
                error.message,
                error.class,
                store,
                fingerprint,
                cancelled,
            );
            return;
        }
        reporter.ended(&phase, started, PhaseOutcome::Completed);
    }
    reporter.send(BootReport::Booted {
        live: LiveRuntime {
            attempt,
            runtime,
            checkpoints,
        },
        config,
        fingerprint,
        at: shared.clock.now(),
    });
    reporter.flush();
}
