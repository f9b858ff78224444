//! Carrying out `reinit` ([`steadfast_protocol::control::cmd::Reinit`]).

use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Reinit> for ControlService {
    async fn execute(self, command: cmd::Reinit) -> Answer<cmd::Reinit> {
        self.answer(self.handle.reinit(&command.token).await)
    }
}
