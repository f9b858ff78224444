//! The `journal` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// The last `limit` attempts the journal records, with their phases,
/// oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// How many of the latest attempts (capped at [`MAX_JOURNAL_ATTEMPTS`](super::MAX_JOURNAL_ATTEMPTS)).
    pub limit: u32,
}

impl Command for Journal {
    const NAME: &'static str = "journal";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    type Reply = super::WireJournal;
}
