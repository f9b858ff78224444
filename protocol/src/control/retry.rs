//! The `retry` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Retry a failed boot now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry;

impl Command for Retry {
    const NAME: &'static str = "retry";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
