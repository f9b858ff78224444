//! The `watch` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Long-poll: what changed up to the first snapshot whose version is
/// greater than `after_version`, or up to the current one once
/// `timeout_ms` has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    /// The version the client has.
    pub after_version: u64,
    /// How long to wait at most, in milliseconds (capped at [`MAX_WATCH_TIMEOUT_MS`](super::MAX_WATCH_TIMEOUT_MS)).
    pub timeout_ms: u64,
}

impl Command for Watch {
    const NAME: &'static str = "watch";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    const LONG_POLL: bool = true;
    type Reply = super::WireChanges;
}
