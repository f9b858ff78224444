//! Carrying out `metrics` ([`steadfast_protocol::control::cmd::Metrics`]).

use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Metrics> for ControlService {
    async fn execute(self, _: cmd::Metrics) -> Answer<cmd::Metrics> {
        Ok(self.handle.metrics())
    }
}
