//! A config change applied in place, off the actor's handler: a task holds
//! the runtime while the service applies, and hands it back.

#[allow(clippy::wildcard_imports)]
use super::*;

/// How a config apply's task ended ([`LifecycleMsg::ApplyEnded`]).
pub struct ApplyEnded {
    /// The runtime it held; `None` once a panic dropped it.
    live: Option<LiveRuntime>,
    /// The config the runtime now runs with (the new one if applied).
    config: Option<LiveConfig>,
    /// What happened.
    outcome: ApplyOutcome,
}

/// What a config apply did.
pub(super) enum ApplyOutcome {
    /// The runtime took the change, but for these leaves (they need a
    /// restart).
    Applied(Vec<String>),
    /// The config did not resolve: nothing was offered to the runtime.
    NotResolved(String),
    /// A drain cancelled it before it finished.
    Cancelled,
    /// The service's `apply_config` panicked (the runtime was dropped).
    Panicked(String),
}

/// Resolve the config again and offer it to the runtime: what an apply's
/// task does. `config` becomes the new config once the runtime took it.
pub(super) async fn apply(
    shared: &Shared,
    live: &mut Option<LiveRuntime>,
    config: &mut Option<LiveConfig>,
) -> ApplyOutcome {
    let new = match resolve_checked(shared).await {
        Ok(resolved) => resolved,
        Err(error) => return ApplyOutcome::NotResolved(error.to_string()),
    };
    let (Some(live), Some(old)) = (live.as_mut(), config.as_ref()) else {
        return ApplyOutcome::Applied(Vec::new());
    };
    let leaves = shared
        .service
        .apply_config(old, &new, &mut live.runtime)
        .await;
    *config = Some(new);
    ApplyOutcome::Applied(leaves)
}

impl LifecycleActorState {
    /// Resolve the config again and offer it to the running runtime, in a
    /// task that holds the runtime until it reports
    /// ([`LifecycleMsg::ApplyEnded`]): a slow resolve or a service's slow
    /// `apply_config` never blocks this actor's handler, so `stop`, `exit`
    /// and `status` are answered meanwhile. The machine decides what
    /// happens to commands while it runs (a drain cancels it first).
    pub(super) fn start_apply(&mut self, myself: &ActorRef<LifecycleMsg>) {
        let token = CancellationToken::new();
        self.serving.apply = Some(token.clone());
        let (live, old) = (self.serving.runtime.take(), self.serving.config.take());
        let shared = Arc::clone(&self.shared);
        let lifecycle = myself.clone();
        let on_panic = myself.clone();
        crate::service::spawn_watched(
            async move {
                let (mut live, mut config) = (live, old);
                let outcome = tokio::select! {
                    biased;
                    () = token.cancelled() => ApplyOutcome::Cancelled,
                    outcome = apply(&shared, &mut live, &mut config) => outcome,
                };
                let _ = lifecycle.cast(LifecycleMsg::ApplyEnded(Box::new(ApplyEnded {
                    live,
                    config,
                    outcome,
                })));
            },
            move |panic| {
                if let Some(reason) = panic {
                    let _ = on_panic.cast(LifecycleMsg::ApplyEnded(Box::new(ApplyEnded {
                        live: None,
                        config: None,
                        outcome: ApplyOutcome::Panicked(reason),
                    })));
                }
            },
        );
    }

    /// The apply's task ended: take the runtime back, step its outcome as
    /// `config_applied` (the machine starts a drain that waited for it, or
    /// applies a change that arrived meanwhile), and answer the commands
    /// that waited for the outcome once no apply is in flight.
    ///
    /// # Errors
    /// A panic in the service's `apply_config` ends this actor, as one in a
    /// handler would: the machine is gone and Root ends the process for a
    /// relaunch (the runtime was dropped while unwinding).
    pub(super) async fn apply_ended(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        ended: ApplyEnded,
    ) -> Result<(), ActorProcessingErr> {
        self.serving.apply = None;
        let ApplyEnded {
            live,
            config,
            outcome,
        } = ended;
        self.serving.runtime = live;
        if config.is_some() {
            self.serving.config = config;
        }
        let mut leaves = match &self.view.snapshot.pending {
            PendingApply::RestartNeeded { leaves } => leaves.clone(),
            PendingApply::InSync => Vec::new(),
        };
        match outcome {
            ApplyOutcome::Panicked(reason) => {
                return Err(format!("the service's apply_config panicked: {reason}").into());
            }
            ApplyOutcome::Applied(taken) => {
                self.clear_error(ErrorSource::ConfigApply);
                // Leaves a restart needs accumulate until the restart,
                // whatever later changes apply in place: the runtime still
                // runs with what it booted with for them.
                leaves.extend(taken);
                leaves.sort();
                leaves.dedup();
            }
            ApplyOutcome::NotResolved(error) => {
                self.set_error(
                    ErrorSource::ConfigApply,
                    format!("a config change was not applied: {error}"),
                );
            }
            ApplyOutcome::Cancelled => {}
        }
        let pending = if leaves.is_empty() {
            PendingApply::InSync
        } else {
            PendingApply::RestartNeeded { leaves }
        };
        if self
            .fire(myself, LifecycleEvent::ConfigApplied { pending })
            .await
            .is_err()
        {
            self.publish();
        }
        if self.serving.apply.is_none() {
            for waiter in self.waiters.apply.drain(..) {
                let _ = waiter.send(Ok(self.view.snapshot.clone()));
            }
        }
        Ok(())
    }
}
