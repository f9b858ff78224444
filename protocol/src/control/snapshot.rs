//! The `snapshot` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// The latest snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot;

impl Command for Snapshot {
    const NAME: &'static str = "snapshot";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    type Reply = super::WireSnapshot;
}
