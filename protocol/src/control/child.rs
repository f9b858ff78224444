//! The `child` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::children::ChildOp;
use crate::command::Role;

/// Restart, stop or start one supervised child of the running runtime by
/// name, as the children machine decides (one child, nothing else; never
/// counted against its group's intensity). Answered once the child's stop
/// and start are done, with the child as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Child {
    /// The child's name.
    pub name: String,
    /// What to do.
    pub op: ChildOp,
}

impl Command for Child {
    const NAME: &'static str = "child";
    const ROLE: Role = Role::Operate;
    type Reply = WireChild;
}

/// A [`ChildView`](crate::children::ChildView) as it crosses the wire: its
/// JSON text (bincode cannot carry its tagged state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireChild {
    /// The child as JSON.
    pub json: String,
}
