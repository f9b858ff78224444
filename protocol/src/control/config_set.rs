//! The `config_set` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Set `leaf` of the override tier to `value`, durably, then
/// `config_changed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigSet {
    /// The dotted leaf.
    pub leaf: String,
    /// The value as TOML text (a bare word is a string).
    pub value: String,
}

impl Command for ConfigSet {
    const NAME: &'static str = "config_set";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
