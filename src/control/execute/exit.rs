//! Carrying out `exit` ([`steadfast_protocol::control::cmd::Exit`]): a stop
//! a running replacement decides first (`SupervisorHandle::exit`).

use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Exit> for ControlService {
    async fn execute(self, command: cmd::Exit) -> Answer<cmd::Exit> {
        self.answer(self.handle.exit(command.intent).await)
    }
}
