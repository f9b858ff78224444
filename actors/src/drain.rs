//! The Drain actor: tears a runtime down dependents-first and reports what
//! it did about the store.
//!
//! A drain cancels the runtime's shutdown token, gives its tasks the grace
//! period, destroys the checkpoints in reverse plan order and confirms each
//! destruction by observation (never by the absence of an error); whatever is
//! not confirmed gone is a survivor. The store outcome is then *probed* by
//! trying the store's lock ([`StoreLock::probe`]): released, or held with the
//! survivors named in the cause. The work runs in a task the actor owns, so
//! the actor is never blocked by it; a drain that panics fails the actor,
//! which Root turns into a probed `drained` (the runtime was dropped while
//! unwinding, which aborts its tasks). The Drain actor also runs the
//! service's wipe step for a confirmed re-initialization ([`wipe`]): the
//! other destructive job, with the same probed outcome. Checked by `tests/supervisor.rs`
//! (`a_drain_that_cannot_release_wedges_and_only_exit_is_accepted`).

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use steadfast_protocol::lifecycle::StoreOutcome;

use crate::context::Shared;
use crate::lifecycle::LifecycleMsg;
use crate::service::{Checkpoint, LiveRuntime, Observation, Runtime, Service, spawn_watched};
use crate::store::StoreLock;

/// Destroy `checkpoints` in reverse order over `runtime`, confirming each by
/// observation, then drop the runtime and probe the store. Returns the
/// probed store outcome and the survivors (`step: resource id`).
pub async fn teardown(
    shared: &Shared,
    mut runtime: Runtime,
    checkpoints: Vec<Checkpoint>,
) -> (StoreOutcome, Vec<String>) {
    let aborted = runtime.shutdown_tasks(shared.timings.drain_grace).await;
    if !aborted.is_empty() {
        tracing::warn!(
            ?aborted,
            "runtime tasks did not finish within the drain grace and were aborted"
        );
    }
    let service: &dyn Service = shared.service.as_ref();
    let mut survivors = Vec::new();
    for checkpoint in checkpoints.iter().rev() {
        let destroyed = service.destroy(checkpoint, &mut runtime).await;
        let observed = service.observe(checkpoint, &runtime).await;
        match (destroyed, observed) {
            (_, Observation::Gone) => {}
            (Err(error), Observation::Present) => {
                survivors.push(format!(
                    "{} ({}): {error}",
                    checkpoint.step, checkpoint.resource.id
                ));
            }
            (Ok(()), Observation::Present) => {
                survivors.push(format!(
                    "{} ({}): still present after destroy",
                    checkpoint.step, checkpoint.resource.id
                ));
            }
        }
    }
    drop(runtime);
    let store = match StoreLock::probe(&shared.data_dir) {
        StoreOutcome::Held { cause } if !survivors.is_empty() => StoreOutcome::Held {
            cause: format!("{cause}; survivors: {}", survivors.join(", ")),
        },
        other => other,
    };
    (store, survivors)
}

/// Run the service's wipe step with the effective config (if it resolves),
/// then probe the store. Returns the probed outcome and the wipe's error.
pub async fn wipe(shared: &Arc<Shared>) -> (StoreOutcome, Option<String>) {
    let source = shared.source.clone();
    let config = match tokio::task::spawn_blocking(move || source.resolve()).await {
        Ok(Ok(resolved)) => Some(resolved.config),
        Ok(Err(error)) => {
            tracing::warn!(%error, "the config does not resolve; wiping without it");
            None
        }
        Err(_) => None,
    };
    let error = shared
        .service
        .wipe(&shared.data_dir, config.as_ref())
        .await
        .err()
        .map(|e| e.message);
    (StoreLock::probe(&shared.data_dir), error)
}

/// The Drain actor.
#[derive(Debug, Default)]
pub struct DrainActor;

/// The Drain actor's state: the shared context.
#[derive(Debug)]
pub struct DrainState {
    shared: Arc<Shared>,
}

/// What the Drain actor is asked.
pub enum DrainMsg {
    /// Tear this runtime down and report `drained` to `report_to`.
    Run {
        /// The runtime and its checkpoints.
        live: LiveRuntime,
        /// Where the outcome goes.
        report_to: ActorRef<LifecycleMsg>,
    },
    /// Run the service's wipe step over the released store (a confirmed
    /// re-initialization) and report `wiped` to `report_to`.
    Wipe {
        /// Where the outcome goes.
        report_to: ActorRef<LifecycleMsg>,
    },
    /// The drain task ended; a panic fails the actor (a supervision event).
    TaskEnded {
        /// The panic message, if it panicked.
        panic: Option<String>,
    },
}

impl Actor for DrainActor {
    type Msg = DrainMsg;
    type State = DrainState;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        _myself: ActorRef<DrainMsg>,
        shared: Arc<Shared>,
    ) -> Result<DrainState, ActorProcessingErr> {
        Ok(DrainState { shared })
    }

    async fn handle(
        &self,
        myself: ActorRef<DrainMsg>,
        msg: DrainMsg,
        state: &mut DrainState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            DrainMsg::Run { live, report_to } => {
                let shared = Arc::clone(&state.shared);
                let LiveRuntime {
                    attempt,
                    runtime,
                    checkpoints,
                } = live;
                let work = async move {
                    let (store, survivors) = teardown(&shared, runtime, checkpoints).await;
                    let _ = report_to.cast(LifecycleMsg::Drained {
                        attempt,
                        store,
                        survivors,
                    });
                };
                spawn_watched(work, move |panic| {
                    let _ = myself.cast(DrainMsg::TaskEnded { panic });
                });
                Ok(())
            }
            DrainMsg::Wipe { report_to } => {
                let shared = Arc::clone(&state.shared);
                let work = async move {
                    let (store, error) = wipe(&shared).await;
                    let _ = report_to.cast(LifecycleMsg::Wiped { store, error });
                };
                spawn_watched(work, move |panic| {
                    let _ = myself.cast(DrainMsg::TaskEnded { panic });
                });
                Ok(())
            }
            DrainMsg::TaskEnded { panic: Some(panic) } => {
                Err(format!("drain panicked: {panic}").into())
            }
            DrainMsg::TaskEnded { panic: None } => Ok(()),
        }
    }
}
