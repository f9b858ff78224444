//! The `replace` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::{Command, ReplaceStatus};
use crate::command::Role;
use crate::replacement::Mode;

/// Replace this daemon's binary by `binary`, in `mode`. Answered as soon
/// as the transaction started (or was refused), with its report; follow it
/// with `replace_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replace {
    /// The candidate binary, as a path on the daemon's machine.
    pub binary: String,
    /// Overlap or exclusive.
    pub mode: Mode,
    /// The setup budget in milliseconds (must not be 0).
    pub setup_budget_ms: u64,
    /// The drain budget in milliseconds; `None`: unbounded.
    pub drain_budget_ms: Option<u64>,
}

/// The name the request has always had on the API.
pub type ReplaceRequest = Replace;

impl Command for Replace {
    const NAME: &'static str = "replace";
    const ROLE: Role = Role::Operate;
    type Reply = ReplaceStatus;
}
