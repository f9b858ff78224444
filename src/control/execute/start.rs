//! Carrying out `start` ([`steadfast_protocol::control::cmd::Start`]).

use steadfast_actors::lifecycle::Command as Lifecycle;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Start> for ControlService {
    async fn execute(self, _: cmd::Start) -> Answer<cmd::Start> {
        self.answer(self.handle.send(Lifecycle::Start).await)
    }
}
