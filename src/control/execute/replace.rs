//! Carrying out `replace` ([`steadfast_protocol::control::cmd::Replace`]).

use std::time::Duration;

use steadfast_protocol::control::CommandError;
use steadfast_protocol::control::{Answer, Execute, cmd};
use steadfast_protocol::replacement::Budgets;

use super::ControlService;

impl Execute<cmd::Replace> for ControlService {
    async fn execute(self, command: cmd::Replace) -> Answer<cmd::Replace> {
        let budgets = Budgets {
            setup: Duration::from_millis(command.setup_budget_ms),
            drain: command.drain_budget_ms.map(Duration::from_millis),
        };
        let report = crate::replace::replace_binary(
            &self.handle,
            command.binary.into(),
            command.mode,
            budgets,
        )
        .await
        .map_err(CommandError::Replace)?;
        Ok(self.replace_status(Some(report)))
    }
}
