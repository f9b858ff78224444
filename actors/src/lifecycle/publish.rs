//! The snapshot: the error slots it shows, and publishing it (then answering
//! the commands an fsync settled).

#[allow(clippy::wildcard_imports)]
use super::*;

impl LifecycleActorState {
    pub(super) fn fail_durability(&mut self, source: ErrorSource, error: String) {
        tracing::error!(%error, "durability failure");
        self.view.unacknowledged = Some(error.clone());
        self.set_error(source, error);
    }

    /// `source` failed with `error`: the snapshot's `error` shows it (from
    /// the next publish) until `source` next succeeds.
    pub(super) fn set_error(&mut self, source: ErrorSource, error: String) {
        if self.view.errors.set(source, error) {
            self.show_errors();
        }
    }

    /// `source` succeeded: its error goes (and only its). Whether one went.
    pub(super) fn clear_error(&mut self, source: ErrorSource) -> bool {
        let cleared = self.view.errors.clear(source);
        if cleared {
            self.show_errors();
        }
        cleared
    }

    /// The snapshot's `error` and `errors` as the slots are now.
    fn show_errors(&mut self) {
        self.view.snapshot.error = self.view.errors.render();
        self.view.snapshot.errors = self.view.errors.slots();
    }

    pub(super) fn answer_stop_waiters(&mut self) {
        if self.durability.deferred.is_some() {
            // Answered by the publish that follows the fsync.
            return;
        }
        for waiter in self.waiters.stop.drain(..) {
            let _ = waiter.send(Ok(self.view.snapshot.clone()));
        }
    }

    /// Publish the current state as a new snapshot version, then answer
    /// the commands whose deferred transitions an fsync settled. Nothing is
    /// published while a transition waits for its fsync: watchers and
    /// readers see only what is durable.
    pub(super) fn publish(&mut self) {
        if self.durability.deferred.is_some() {
            return;
        }
        self.view.snapshot.version += 1;
        self.view.snapshot.lifecycle = self.machine.state.clone();
        self.view.snapshot.epoch = self.machine.epoch();
        self.view.snapshot.streak = self.machine.streak();
        self.view.snapshot.budget = self.machine.policy().budget.map(|b| BudgetStatus {
            max_failures: b.max_failures.get(),
            window_ms: b.window_ms,
            failures: self.machine.budget_used(),
        });
        self.view.snapshot.pending = self.machine.state.pending();
        self.view.snapshot.children = self.shared.children.publish();
        // The record first: whoever sees this version published finds it
        // (or a later one) in the status record.
        self.shared.status.write(&self.view.snapshot);
        self.shared
            .metrics
            .publish(&self.view.snapshot, self.shared.clock.now());
        self.view.snapshots.send_replace(self.view.snapshot.clone());
        if let Some(settled) = self.durability.settled.take() {
            for reply in settled.replies {
                let answer = match &settled.error {
                    None => Ok(self.view.snapshot.clone()),
                    Some(error) => Err(CommandError::Durability(error.clone())),
                };
                let _ = reply.send(answer);
            }
            // A stop whose drain settled but whose record did not become
            // durable is not acknowledged.
            if let Some(error) = &settled.error
                && self.machine.state.settles_stops()
            {
                for waiter in self.waiters.stop.drain(..) {
                    let _ = waiter.send(Err(CommandError::Durability(error.clone())));
                }
            }
        }
    }
}
