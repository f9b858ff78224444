//! The ledger of outstanding checkpoints: every step whose resource was
//! checkpointed in the journal and not yet cleared by a confirmed
//! destruction, across daemon processes.
//!
//! It starts as what the journal says at open
//! ([`steadfast_protocol::journal::outstanding`]), follows every checkpoint a
//! boot makes durable and every destruction a teardown confirms, and is what a
//! boot reconciles against: a step with an outstanding checkpoint is skipped
//! only if [`crate::service::Step::observe`] says its resource is still
//! present (seed 003, "reconcile recorded state against observation").
//! Checked by `tests/it/crash.rs` (`a_checkpointed_step_is_skipped_after_a_crash_only_if_still_present`).

use std::sync::{Mutex, PoisonError};

use steadfast_protocol::journal::{Record, outstanding};

use crate::service::Checkpoint;

/// The outstanding checkpoints, in the order their steps were checkpointed.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Mutex<Vec<Checkpoint>>,
}

impl Ledger {
    /// What the journal's records leave outstanding.
    #[must_use]
    pub fn from_journal(records: &[Record]) -> Self {
        let entries = outstanding(records)
            .into_iter()
            .map(|o| Checkpoint {
                step: o.step,
                index: o.index,
                resource: o.resource,
            })
            .collect();
        Self {
            entries: Mutex::new(entries),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<Checkpoint>) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut entries)
    }

    /// The outstanding checkpoint of `step`, if any.
    #[must_use]
    pub fn find(&self, step: &str) -> Option<Checkpoint> {
        self.with(|e| e.iter().find(|c| c.step == step).cloned())
    }

    /// `checkpoint` is durable in the journal.
    pub fn recorded(&self, checkpoint: &Checkpoint) {
        self.with(|e| {
            e.retain(|c| c.step != checkpoint.step);
            e.push(checkpoint.clone());
        });
    }

    /// `step`'s resource was confirmed gone.
    pub fn cleared(&self, step: &str) {
        self.with(|e| e.retain(|c| c.step != step));
    }

    /// Every outstanding checkpoint.
    #[must_use]
    pub fn all(&self) -> Vec<Checkpoint> {
        self.with(|e| e.clone())
    }
}
