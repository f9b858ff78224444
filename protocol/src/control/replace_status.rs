//! The `replace_status` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Long-poll: the replacement status once the report's `seq` is greater
/// than `after_seq`, or as it is after `timeout_ms`. Also the live
/// proof a replacement asks a candidate for: its pid, identity and
/// version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceStatus {
    /// The report sequence number the client has.
    pub after_seq: u64,
    /// How long to wait at most, in milliseconds (capped at [`MAX_WATCH_TIMEOUT_MS`](super::MAX_WATCH_TIMEOUT_MS)).
    pub timeout_ms: u64,
}

impl Command for ReplaceStatus {
    const NAME: &'static str = "replace_status";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    const LONG_POLL: bool = true;
    type Reply = super::ReplaceStatus;
}
