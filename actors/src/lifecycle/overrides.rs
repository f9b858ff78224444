//! `config set` / `config unset`: stage, check in a task, persist, then
//! step `config_changed`.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A staged override change and what checking the config it makes found.
pub struct OverrideCheck {
    /// The dotted leaf.
    leaf: String,
    /// Its new value; `None` unsets it.
    value: Option<toml::Value>,
    /// The override tier's generation the check was staged from.
    generation: u64,
    /// `Err`: the would-be effective config is invalid, why.
    checked: Result<(), String>,
    /// Where the command's answer goes.
    reply: RpcReplyPort<Result<Snapshot, CommandError>>,
}

impl LifecycleActorState {
    /// Change one leaf of the override tier: stage it, then check the
    /// would-be effective config in a task (it resolves the source, which
    /// may read a file: never inline in this handler). The outcome comes
    /// back as [`LifecycleMsg::OverrideChecked`]; nothing is persisted
    /// before it says the config is valid.
    pub(super) fn set_override(
        &self,
        myself: &ActorRef<LifecycleMsg>,
        leaf: String,
        value: Option<toml::Value>,
        reply: RpcReplyPort<Result<Snapshot, CommandError>>,
    ) {
        let staged = match self.stage_override(&leaf, value.as_ref()) {
            Err(error) => {
                let _ = reply.send(Err(error));
                return;
            }
            Ok(None) => {
                let _ = reply.send(Ok(self.view.snapshot.clone()));
                return;
            }
            Ok(Some(staged)) => staged,
        };
        let shared = Arc::clone(&self.shared);
        let lifecycle = myself.clone();
        let generation = self.serving.overrides_generation;
        tokio::spawn(async move {
            let checked = shared
                .resolve_config(&staged)
                .await
                .map(drop)
                .map_err(|error| error.to_string());
            let _ = lifecycle.cast(LifecycleMsg::OverrideChecked(OverrideCheck {
                leaf,
                value,
                generation,
                checked,
                reply,
            }));
        });
    }

    /// The override tier with `leaf` set to `value` (or unset), detached
    /// from the live one; `None` when that changes nothing and the file is
    /// known to hold the live tier (after a failed write it may not: the
    /// tier is written again, the same).
    pub(super) fn stage_override(
        &self,
        leaf: &str,
        value: Option<&toml::Value>,
    ) -> Result<Option<Overrides>, CommandError> {
        let staged = self.shared.overrides.clone_detached();
        let changed = match value {
            Some(value) => staged.set(leaf, value.clone()).map(|_| true),
            None => staged.unset_checked(leaf).map(|old| old.is_some()),
        };
        match changed {
            Err(error) => Err(CommandError::Invalid(error.to_string())),
            Ok(false) if !self.serving.overrides_uncertain => Ok(None),
            Ok(_) => {
                let leaves = staged.to_text();
                crate::control_dir::overrides_fit(&leaves).map_err(CommandError::Invalid)?;
                Ok(Some(staged))
            }
        }
    }

    /// A staged override change was checked: refuse it if the config it
    /// makes is invalid; check again if the tier moved meanwhile; otherwise
    /// make the whole tier durable, adopt it, then step `config_changed` (a
    /// refusal of that step — a stopped or booting runtime — is no refusal
    /// of the change: the next boot reads the tier, and a boot in flight
    /// settles against it).
    pub(super) async fn override_checked(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        checked: OverrideCheck,
    ) {
        let OverrideCheck {
            leaf,
            value,
            generation,
            checked,
            reply,
        } = checked;
        if reply.is_closed() {
            return;
        }
        if let Err(error) = checked {
            let _ = reply.send(Err(CommandError::Invalid(error)));
            return;
        }
        if generation != self.serving.overrides_generation {
            return self.set_override(myself, leaf, value, reply);
        }
        let staged = match self.stage_override(&leaf, value.as_ref()) {
            Ok(Some(staged)) => staged,
            Ok(None) => {
                let _ = reply.send(Ok(self.view.snapshot.clone()));
                return;
            }
            Err(error) => {
                let _ = reply.send(Err(error));
                return;
            }
        };
        let overrides = self.shared.overrides.clone();
        let leaves = staged.to_text();
        if let Err(reason) = crate::control_dir::overrides_fit(&leaves) {
            let _ = reply.send(Err(CommandError::Invalid(reason)));
            return;
        }
        let timeout = self.shared.timings.journal_timeout;
        if let Err(error) = journal::ask(&self.children.journal, timeout, |r| {
            JournalMsg::WriteOverrides(leaves, r)
        })
        .await
        {
            let error = format!("the override tier could not be written: {error}");
            self.serving.overrides_uncertain = true;
            self.fail_durability(ErrorSource::Overrides, error.clone());
            self.publish();
            let _ = reply.send(Err(CommandError::Durability(error)));
            return;
        }
        overrides.replace_with(&staged);
        self.serving.overrides_uncertain = false;
        self.clear_error(ErrorSource::Overrides);
        self.serving.overrides_generation += 1;
        let at = self.shared.clock.now();
        self.view.unacknowledged = None;
        if self
            .fire(myself, LifecycleEvent::ConfigChanged { at })
            .await
            .is_err()
        {
            self.publish();
        }
        match self.view.unacknowledged.take() {
            Some(error) => {
                let _ = reply.send(Err(CommandError::Durability(error)));
            }
            // The running runtime applied it: answer with the outcome.
            None if self.serving.apply.is_some() => self.waiters.apply.push(reply),
            None => {
                let _ = reply.send(Ok(self.view.snapshot.clone()));
            }
        }
    }
}
