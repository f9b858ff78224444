//! The `config_unset` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Remove `leaf` from the override tier, durably, then
/// `config_changed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigUnset {
    /// The dotted leaf.
    pub leaf: String,
}

impl Command for ConfigUnset {
    const NAME: &'static str = "config_unset";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
