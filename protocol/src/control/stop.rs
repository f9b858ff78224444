//! The `stop` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Stop the runtime; `hold` keeps it stopped across a relaunch.
/// Answered once the drain has settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// Whether the stop survives a relaunch.
    pub hold: crate::command::Hold,
}

impl Command for Stop {
    const NAME: &'static str = "stop";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
