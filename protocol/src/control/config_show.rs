//! The `config_show` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// The override tier (or one leaf of it) and the effective value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigShow {
    /// Only this dotted leaf.
    pub leaf: Option<String>,
}

impl Command for ConfigShow {
    const NAME: &'static str = "config_show";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    type Reply = crate::snapshot::ConfigView;
}
