//! Carrying out `exit` ([`steadfast_protocol::control::cmd::Exit`]).

use steadfast_actors::lifecycle::Command as Lifecycle;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Exit> for ControlService {
    async fn execute(self, command: cmd::Exit) -> Answer<cmd::Exit> {
        self.answer(self.handle.send(Lifecycle::Exit(command.intent)).await)
    }
}
