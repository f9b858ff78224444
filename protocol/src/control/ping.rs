//! The `ping` method: whether the daemon answers, and who it is — its pid
//! and its lifecycle state. Answered from the snapshot alone (the
//! registry's `reads` form): this file is all of it, the command line
//! included.

use serde::{Deserialize, Serialize};

use super::{Command, Reads};
use crate::command::Role;
use crate::snapshot::Snapshot;

/// Print the daemon's pid and lifecycle state: the cheapest question that
/// proves it answers.
//
// It proves the control plane answers, from the latest snapshot; that the
// Lifecycle actor still handles its mailbox is the watchdog's round trip
// (`SupervisorHandle::ping`), not this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct Ping;

/// What `ping` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The daemon's pid.
    pub pid: u32,
    /// Its lifecycle state's wire name (`running`, `failed`, …).
    pub state: String,
}

impl std::fmt::Display for Pong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}: {}", self.pid, self.state)
    }
}

impl Command for Ping {
    const NAME: &'static str = "ping";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    type Reply = Pong;
}

impl Reads for Ping {
    fn read(&self, snapshot: &Snapshot) -> Pong {
        Pong {
            pid: snapshot.pid,
            state: snapshot.lifecycle.name().to_owned(),
        }
    }
}
