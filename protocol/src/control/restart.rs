//! The `restart` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Stop the runtime and boot it again. The new config is resolved
/// first; if it does not resolve the restart is refused
/// (`config_invalid`, with the error) and the runtime keeps serving,
/// unless `force`, which drains anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restart {
    /// Drain even when the new config does not resolve.
    pub force: bool,
}

impl Command for Restart {
    const NAME: &'static str = "restart";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
