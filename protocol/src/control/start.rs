//! The `start` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Boot a stopped runtime (clears a hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start;

impl Command for Start {
    const NAME: &'static str = "start";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
