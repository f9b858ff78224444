//! The ledger of what boots left to reconcile: every step whose resource was
//! checkpointed in the journal and not yet cleared by a confirmed
//! destruction, and every step whose resource outlives the process and whose
//! intent has no checkpoint yet, across daemon processes.
//!
//! It starts as what the journal says at open
//! ([`steadfast_protocol::journal::outstanding`] and
//! [`steadfast_protocol::journal::unfinished`]), follows every intent and
//! checkpoint a boot makes and every destruction a teardown confirms, and
//! is what a boot reconciles against (seed 003, "reconcile recorded state
//! against observation"): a step with a checkpoint to reconcile is skipped
//! only if [`crate::service::Step::observe`] says its resource is still
//! present, and a step with an unfinished intent runs again told so
//! ([`crate::service::StepContext::interrupted`]).
//!
//! What is reconciled depends on the step's [`Lifetime`]: a resource that
//! outlives the process is reconciled whichever process checkpointed it;
//! one that dies with the process only when this process checkpointed it
//! (a boot that failed and could not confirm its teardown), never one a
//! dead process left, since nothing of it survived that process.
//! Checked by `tests/it/crash.rs` (`a_checkpointed_step_is_skipped_after_a_crash_only_if_still_present`)
//! and this module's tests.

use std::sync::{Mutex, PoisonError};

use steadfast_protocol::journal::{Record, outstanding, unfinished};

use crate::service::{Checkpoint, Lifetime};

/// One step's entry.
#[derive(Debug, Clone)]
struct Entry {
    step: String,
    /// Its checkpoint, or `None` for an intent no checkpoint followed.
    checkpoint: Option<Checkpoint>,
    /// Written by an earlier daemon process (read from the journal at open).
    inherited: bool,
}

/// What the boots left to reconcile, a step at most once, in the order
/// their steps last wrote an intent or a checkpoint.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Mutex<Vec<Entry>>,
}

impl Ledger {
    /// What the journal's records leave to reconcile.
    #[must_use]
    pub fn from_journal(records: &[Record]) -> Self {
        let checkpoints = outstanding(records).into_iter().map(|o| Entry {
            step: o.step.clone(),
            checkpoint: Some(Checkpoint {
                step: o.step,
                index: o.index,
                resource: o.resource,
            }),
            inherited: true,
        });
        let intents = unfinished(records).into_iter().map(|u| Entry {
            step: u.step,
            checkpoint: None,
            inherited: true,
        });
        Self {
            entries: Mutex::new(checkpoints.chain(intents).collect()),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<Entry>) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut entries)
    }

    fn put(&self, entry: Entry) {
        self.with(|e| {
            e.retain(|c| c.step != entry.step);
            e.push(entry);
        });
    }

    /// The checkpoint of `step` a boot reconciles, if any: any for a
    /// resource that outlives the process; for one that dies with it, only
    /// one this process made.
    #[must_use]
    pub fn find(&self, step: &str, lifetime: Lifetime) -> Option<Checkpoint> {
        self.with(|e| {
            e.iter()
                .find(|c| c.step == step && (lifetime == Lifetime::Outlives || !c.inherited))
                .and_then(|c| c.checkpoint.clone())
        })
    }

    /// Whether `step`'s resource outlives the process and an earlier run
    /// of it left an intent and no checkpoint.
    #[must_use]
    pub fn interrupted(&self, step: &str, lifetime: Lifetime) -> bool {
        lifetime == Lifetime::Outlives
            && self.with(|e| e.iter().any(|c| c.step == step && c.checkpoint.is_none()))
    }

    /// `step`'s intent is durable in the journal: it is about to run.
    pub fn intended(&self, step: &str) {
        self.put(Entry {
            step: step.to_owned(),
            checkpoint: None,
            inherited: false,
        });
    }

    /// `checkpoint` is in the journal (durable, or staged to become so
    /// with the boot's next append).
    pub fn recorded(&self, checkpoint: &Checkpoint) {
        self.put(Entry {
            step: checkpoint.step.clone(),
            checkpoint: Some(checkpoint.clone()),
            inherited: false,
        });
    }

    /// `step`'s resource was confirmed gone.
    pub fn cleared(&self, step: &str) {
        self.with(|e| e.retain(|c| c.step != step));
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use steadfast_protocol::journal::ResourceRecord;

    use super::*;

    fn checkpoint(step: &str) -> Record {
        Record::Checkpoint {
            attempt: NonZeroU32::MIN,
            step: step.into(),
            index: 2,
            resource: ResourceRecord {
                kind: "file".into(),
                id: step.into(),
                payload: Vec::new(),
            },
        }
    }

    /// A dead process's checkpoint is reconciled only for a resource that
    /// outlives the process; one this process makes, whatever its lifetime.
    #[test]
    fn a_process_lifetime_checkpoint_a_crash_left_is_not_reconciled() {
        let ledger = Ledger::from_journal(&[checkpoint("bind"), checkpoint("spool")]);
        assert_eq!(ledger.find("bind", Lifetime::Process), None);
        let spool = ledger.find("spool", Lifetime::Outlives).expect("outliving");
        assert_eq!(spool.resource.id, "spool");
        // This process's own checkpoint (a boot whose teardown could not
        // confirm the resource gone) is reconciled.
        ledger.recorded(&Checkpoint {
            step: "bind".into(),
            index: 2,
            resource: spool.resource,
        });
        assert!(ledger.find("bind", Lifetime::Process).is_some());
    }

    /// An intent without its checkpoint makes the next run of an outliving
    /// step an interrupted one, until its checkpoint or clear.
    #[test]
    fn an_unfinished_intent_interrupts_only_an_outliving_step() {
        let intent = Record::Intent {
            attempt: NonZeroU32::MIN,
            step: "spool".into(),
            index: 3,
        };
        let ledger = Ledger::from_journal(&[checkpoint("spool"), intent]);
        assert!(ledger.interrupted("spool", Lifetime::Outlives));
        assert!(!ledger.interrupted("spool", Lifetime::Process));
        assert_eq!(ledger.find("spool", Lifetime::Outlives), None);
        ledger.cleared("spool");
        assert!(!ledger.interrupted("spool", Lifetime::Outlives));
        ledger.intended("lease");
        assert!(ledger.interrupted("lease", Lifetime::Outlives));
    }
}
