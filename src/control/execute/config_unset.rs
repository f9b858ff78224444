//! Carrying out `config_unset` ([`steadfast_protocol::control::cmd::ConfigUnset`]).

use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::ConfigUnset> for ControlService {
    async fn execute(self, command: cmd::ConfigUnset) -> Answer<cmd::ConfigUnset> {
        self.answer(self.handle.config_unset(&command.leaf).await)
    }
}
