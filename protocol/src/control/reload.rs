//! The `reload` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Re-read the config now, as SIGHUP does (a `config_changed`: a held
/// failure is retried, a running runtime applies the change). Under
/// systemd the daemon says `RELOADING=1` before and `READY=1` after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reload;

impl Command for Reload {
    const NAME: &'static str = "reload";
    const ROLE: Role = Role::Operate;
    type Reply = super::WireSnapshot;
}
