//! The drain: tears a runtime down dependents-first and reports what it did
//! about the store.
//!
//! A drain cancels the runtime's shutdown token, gives its tasks — the
//! serving tasks and every task its tracker spawned, such as a connection
//! of `Runtime::accept_loop` — the grace period, aborts and names those
//! still running (`Runtime::shutdown_tasks`), destroys the checkpoints in reverse plan order and confirms each
//! destruction by observation (never by the absence of an error); whatever is
//! not confirmed gone is a survivor. The store outcome is then *probed* by
//! trying the store's lock ([`StoreLock::probe`]): released, or held with the
//! survivors named in the cause (an error waiting cures, such as `EMFILE`,
//! is waited out, never read as held: [`StoreLock::observe`]). The work runs in a task of its own
//! ([`start`]), so the Lifecycle actor is never blocked by it; a drain that
//! panics is caught in its task and reported to the Lifecycle actor as
//! [`DrainReport::Crashed`], which settles it as a probed `drained`
//! (the runtime was dropped while unwinding, which aborts its tasks):
//! `supervisor::a_panicking_drain_settles_on_a_probed_store`. The service's
//! wipe step for a confirmed re-initialization ([`start_wipe`]) is the
//! other destructive job, with the same probed outcome. Checked by
//! `tests/it/supervisor.rs`
//! (`a_drain_that_cannot_release_wedges_and_only_exit_is_accepted`).
//!
//! Not an actor (a temporary Drain actor under Root would cost more):
//! a drain has one caller and no mailbox to serve, and an actor per drain
//! would cost a spawn, a stop and a supervision event to Root on every stop.
//!
//! Each destruction is reported as progress (`destroy:<step>` started,
//! completed or failed, with index, total and duration) to the journal and
//! the snapshot; a confirmed one clears its checkpoint, a survivor's stays
//! outstanding. Checked by `tests/it/crash.rs`
//! (`a_destroy_that_reports_success_but_leaves_the_resource_is_a_survivor`).

use std::num::NonZeroU32;
use std::sync::Arc;
// Tokio's clock, which a simulation pauses: a phase's duration is journaled,
// so it must be the same on every run of a seed.
use tokio::time::Instant;

use ractor::{ActorRef, DerivedActorRef};
use steadfast_protocol::journal::Record;
use steadfast_protocol::lifecycle::{Phase, StoreOutcome};
use steadfast_protocol::snapshot::PhaseOutcome;
use steadfast_protocol::time::Timestamp;

use crate::context::Shared;
use crate::journal::JournalMsg;
use crate::service::{Completed, LiveRuntime, Observation, Runtime, spawn_watched};
use crate::store::StoreLock;

/// What a drain's task tells its owner (the Lifecycle actor, through a
/// [`DerivedActorRef`]): each destruction's progress, how the drain or the
/// wipe settled, and its own panic.
pub enum DrainReport {
    /// A destruction started.
    PhaseStarted {
        /// The boot that built the runtime.
        attempt: NonZeroU32,
        /// `destroy:<step>`.
        phase: Phase,
        /// Its position among the destructions, from 1.
        index: u32,
        /// How many destructions.
        total: u32,
        /// When.
        at: Timestamp,
    },
    /// A destruction ended: confirmed gone, or a survivor.
    PhaseEnded {
        /// The boot that built the runtime.
        attempt: NonZeroU32,
        /// `destroy:<step>`.
        phase: Phase,
        /// When.
        at: Timestamp,
        /// How long it took.
        duration_ms: u64,
        /// Confirmed gone (completed) or not (failed).
        outcome: PhaseOutcome,
    },
    /// The drain settled.
    Drained {
        /// The probed store outcome.
        store: StoreOutcome,
        /// What could not be confirmed gone.
        survivors: Vec<String>,
    },
    /// The wipe of a re-initialization finished.
    Wiped {
        /// The probed store outcome.
        store: StoreOutcome,
        /// The wipe step's error, if it failed.
        error: Option<String>,
    },
    /// The drain's (or wipe's) task panicked (the runtime it held was
    /// dropped).
    Crashed {
        /// The panic, rendered.
        reason: String,
    },
}

/// Destroy `checkpoints` in reverse order over `runtime`, confirming each by
/// observation, then drop the runtime and probe the store. Returns the
/// probed store outcome and the survivors (`step: resource id`).
///
/// Each confirmed destruction clears the step's checkpoint from the ledger
/// and stages a `CheckpointCleared` record in `journal` (durable with the
/// next acknowledged append: the drain's or the failed boot's transition).
/// A crash before then leaves the checkpoint outstanding, and the next boot
/// observes the resource gone and runs the step again.
///
/// Each destruction is also progress: `destroy:<step>` started, then
/// completed (confirmed gone) or failed (a survivor), with its index among
/// the destructions, their total and its duration. The records are staged
/// in `journal` under `attempt` (the boot that built the runtime); with
/// `report_to`, the Lifecycle actor puts them in that attempt's phases in
/// the snapshot, so `watch` shows them.
pub(crate) async fn teardown(
    shared: &Shared,
    journal: Option<&ActorRef<JournalMsg>>,
    report_to: Option<&DerivedActorRef<DrainReport>>,
    attempt: NonZeroU32,
    mut runtime: Runtime,
    checkpoints: Vec<Completed>,
) -> (StoreOutcome, Vec<String>) {
    let stage = |record: Record| {
        if let Some(journal) = journal {
            let _ = journal.cast(JournalMsg::Stage(vec![record]));
        }
    };
    let report = |report: DrainReport| {
        if let Some(to) = report_to {
            let _ = to.cast(report);
        }
    };
    let total = u32::try_from(checkpoints.len()).unwrap_or(u32::MAX);
    let aborted = runtime.shutdown_tasks(shared.timings.drain_grace).await;
    if !aborted.is_empty() {
        tracing::warn!(
            ?aborted,
            "runtime tasks (serving or tracked) did not finish within the drain grace and were aborted"
        );
    }
    let mut survivors = Vec::new();
    for (offset, Completed { step, checkpoint }) in checkpoints.iter().rev().enumerate() {
        let index = u32::try_from(offset + 1).unwrap_or(u32::MAX);
        let phase = Phase::new(format!("destroy:{}", checkpoint.step));
        let at = shared.clock.now();
        let started = Instant::now();
        stage(Record::PhaseStarted {
            attempt,
            phase: phase.to_string(),
            index,
            total,
            at_ms: at.as_millis(),
        });
        report(DrainReport::PhaseStarted {
            attempt,
            phase: phase.clone(),
            index,
            total,
            at,
        });
        let destroyed = step.destroy(&checkpoint.resource, &mut runtime).await;
        crate::failpoint::hit("drain.mid_destroy");
        let observed = step.observe(&checkpoint.resource, &runtime).await;
        let failure = match (destroyed, observed) {
            (_, Observation::Gone) => {
                shared.ledger.cleared(&checkpoint.step);
                stage(Record::CheckpointCleared {
                    step: checkpoint.step.clone(),
                });
                None
            }
            (Err(error), Observation::Present) => Some(error.to_string()),
            (Ok(()), Observation::Present) => Some("still present after destroy".to_owned()),
        };
        let at = shared.clock.now();
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let outcome = match failure {
            None => {
                stage(Record::PhaseCompleted {
                    attempt,
                    phase: phase.to_string(),
                    at_ms: at.as_millis(),
                    duration_ms,
                });
                PhaseOutcome::Completed
            }
            Some(error) => {
                tracing::warn!(
                    attempt,
                    phase = %phase,
                    resource = %checkpoint.resource.id,
                    reason = %error,
                    "a destroy step failed; the resource survives"
                );
                survivors.push(format!(
                    "{} ({}): {error}",
                    checkpoint.step, checkpoint.resource.id
                ));
                stage(Record::PhaseFailed {
                    attempt,
                    phase: phase.to_string(),
                    at_ms: at.as_millis(),
                    duration_ms,
                    error: error.clone(),
                });
                PhaseOutcome::Failed { error }
            }
        };
        report(DrainReport::PhaseEnded {
            attempt,
            phase,
            at,
            duration_ms,
            outcome,
        });
    }
    drop(runtime);
    let store = match observe_store(shared).await {
        StoreOutcome::Held { cause } if !survivors.is_empty() => StoreOutcome::Held {
            cause: format!("{cause}; survivors: {}", survivors.join(", ")),
        },
        other => other,
    };
    (store, survivors)
}

/// Run the service's wipe step with the effective config (if it resolves),
/// then probe the store. Returns the probed outcome and the wipe's error.
pub(crate) async fn wipe(shared: &Arc<Shared>) -> (StoreOutcome, Option<String>) {
    let config = match shared
        .source
        .resolve_within(crate::config::RESOLVE_DEADLINE)
        .await
    {
        Ok(resolved) => match shared.service.live_config(resolved.config) {
            Ok(config) => Some(config),
            Err(error) => {
                tracing::warn!(%error, "the config does not fit the service; wiping without it");
                None
            }
        },
        Err(error) => {
            tracing::warn!(%error, "the config does not resolve; wiping without it");
            None
        }
    };
    let error = shared
        .service
        .wipe(&shared.data_dir, config.as_ref())
        .await
        .err()
        .map(|e| e.message);
    (observe_store(shared).await, error)
}

/// The store outcome a drain settles with: observed by trying its lock,
/// or `Released` without a probe once this supervisor handed the store
/// over to a successor
/// ([`Handover::mark_store_handed_over`](crate::handover::Handover::mark_store_handed_over)).
async fn observe_store(shared: &Shared) -> StoreOutcome {
    if shared.handover.store_handed_over() {
        tracing::info!(
            data_dir = %shared.data_dir.display(),
            "the store was handed over to the successor: released by this supervisor"
        );
        return StoreOutcome::Released;
    }
    StoreLock::observe(&shared.data_dir).await
}

/// Tear `live` down in a task of its own and report
/// [`DrainReport::Drained`] to `report_to`; each confirmed destruction's
/// `CheckpointCleared` is staged in `journal`. A panic is reported as
/// [`DrainReport::Crashed`], once the runtime it held is dropped.
pub(crate) fn start(
    shared: Arc<Shared>,
    live: LiveRuntime,
    report_to: DerivedActorRef<DrainReport>,
    journal: ActorRef<JournalMsg>,
) {
    let LiveRuntime {
        attempt,
        runtime,
        checkpoints,
    } = live;
    let crashed = report_to.clone();
    let work = async move {
        let (store, survivors) = teardown(
            &shared,
            Some(&journal),
            Some(&report_to),
            attempt,
            runtime,
            checkpoints,
        )
        .await;
        let _ = report_to.cast(DrainReport::Drained { store, survivors });
    };
    spawn_watched(work, move |panic| report_crash(&crashed, panic));
}

/// Run the service's wipe step over the released store (a confirmed
/// re-initialization) in a task of its own and report
/// [`DrainReport::Wiped`] to `report_to`; a panic is reported as
/// [`DrainReport::Crashed`].
pub(crate) fn start_wipe(shared: Arc<Shared>, report_to: DerivedActorRef<DrainReport>) {
    let crashed = report_to.clone();
    let work = async move {
        let (store, error) = wipe(&shared).await;
        let _ = report_to.cast(DrainReport::Wiped { store, error });
    };
    spawn_watched(work, move |panic| report_crash(&crashed, panic));
}

fn report_crash(to: &DerivedActorRef<DrainReport>, panic: Option<String>) {
    if let Some(panic) = panic {
        let reason = format!("drain panicked: {panic}");
        let _ = to.cast(DrainReport::Crashed { reason });
    }
}
