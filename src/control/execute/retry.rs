//! Carrying out `retry` ([`steadfast_protocol::control::cmd::Retry`]).

use steadfast_actors::lifecycle::Command as Lifecycle;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Retry> for ControlService {
    async fn execute(self, _: cmd::Retry) -> Answer<cmd::Retry> {
        self.answer(self.handle.send(Lifecycle::Retry).await)
    }
}
