//! Carrying out `child` ([`steadfast_protocol::control::cmd::Child`]).

use steadfast_protocol::command::CommandError;
use steadfast_protocol::control::{Answer, Execute, WireChild, cmd};

use super::ControlService;

impl Execute<cmd::Child> for ControlService {
    async fn execute(self, command: cmd::Child) -> Answer<cmd::Child> {
        let view = self
            .handle
            .child(&command.name, command.op)
            .await
            .map_err(|e| CommandError::Child(e.to_string()))?;
        serde_json::to_string(&view)
            .map(|json| WireChild { json })
            .map_err(|e| CommandError::Failed(e.to_string()))
    }
}
