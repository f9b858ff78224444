//! Carrying out `config_set` ([`steadfast_protocol::control::cmd::ConfigSet`]).

use steadfast_actors::config::parse_value;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::ConfigSet> for ControlService {
    async fn execute(self, command: cmd::ConfigSet) -> Answer<cmd::ConfigSet> {
        let value = parse_value(&command.value);
        self.answer(self.handle.config_set(&command.leaf, value).await)
    }
}
