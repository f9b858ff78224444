//! Carrying out `config_show` ([`steadfast_protocol::control::cmd::ConfigShow`]).

use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::ConfigShow> for ControlService {
    async fn execute(self, command: cmd::ConfigShow) -> Answer<cmd::ConfigShow> {
        self.handle.config_show(command.leaf.as_deref()).await
    }
}
