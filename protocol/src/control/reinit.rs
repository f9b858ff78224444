//! The `reinit` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Re-initialize the stopped runtime (the service's wipe step) with a
/// confirmation from `reinit_prepare`; answered once it settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reinit {
    /// The confirmation `reinit_prepare` gave.
    pub token: String,
}

impl Command for Reinit {
    const NAME: &'static str = "reinit";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
