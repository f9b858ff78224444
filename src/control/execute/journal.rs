//! Carrying out `journal` ([`steadfast_protocol::control::cmd::Journal`]).

use steadfast_protocol::control::{Answer, Execute, cmd};
use steadfast_protocol::control::{MAX_JOURNAL_ATTEMPTS, WireJournal};

use super::ControlService;

impl Execute<cmd::Journal> for ControlService {
    async fn execute(self, command: cmd::Journal) -> Answer<cmd::Journal> {
        let limit = command.limit.min(MAX_JOURNAL_ATTEMPTS) as usize;
        self.handle
            .journal(limit)
            .await
            .map(|attempts| WireJournal::from_attempts(&attempts))
    }
}
