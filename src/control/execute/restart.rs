//! Carrying out `restart` ([`steadfast_protocol::control::cmd::Restart`]).

use steadfast_actors::lifecycle::Command as Lifecycle;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Restart> for ControlService {
    async fn execute(self, command: cmd::Restart) -> Answer<cmd::Restart> {
        let force = command.force;
        self.answer(self.handle.send(Lifecycle::Restart { force }).await)
    }
}
