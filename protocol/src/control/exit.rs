//! The `exit` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// End the process after a drain: `halt` (exit 80) or `relaunch` (75).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// `halt` (exit 80) or `relaunch` (75).
    pub intent: crate::lifecycle::ExitIntent,
}

impl Command for Exit {
    const NAME: &'static str = "exit";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
