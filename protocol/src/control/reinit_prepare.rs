//! The `reinit_prepare` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// Prepare a re-initialization: a confirmation bound to the current
/// epoch. Refused unless the runtime is stopped. It changes nothing, so
/// it is sent again on a new connection like a read; it needs
/// `operate` as the first half of a command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReinitPrepare;

impl Command for ReinitPrepare {
    const NAME: &'static str = "reinit_prepare";
    const ROLE: Role = Role::Operate;
    const REPLAYABLE: bool = true;
    type Reply = super::ReinitPrepared;
}
