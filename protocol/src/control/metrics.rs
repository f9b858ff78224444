//! The `metrics` method: its arguments, the role it needs and its answer.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::command::Role;

/// The supervisor's metrics, as OpenMetrics text ending `# EOF`
/// (`spec/control.md`, "Metrics").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics;

impl Command for Metrics {
    const NAME: &'static str = "metrics";
    const ROLE: Role = Role::Read;
    const REPLAYABLE: bool = true;
    type Reply = String;
}
