//! Carrying out `stop` ([`steadfast_protocol::control::cmd::Stop`]).

use steadfast_actors::lifecycle::Command as Lifecycle;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Stop> for ControlService {
    async fn execute(self, command: cmd::Stop) -> Answer<cmd::Stop> {
        self.answer(self.handle.send(Lifecycle::Stop(command.hold)).await)
    }
}
