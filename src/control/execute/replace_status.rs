//! Carrying out `replace_status` ([`steadfast_protocol::control::cmd::ReplaceStatus`]).

use std::time::Duration;

use steadfast_protocol::control::clamp_watch_timeout;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::ReplaceStatus> for ControlService {
    async fn execute(self, command: cmd::ReplaceStatus) -> Answer<cmd::ReplaceStatus> {
        let mut reports = self.handle.replace_reports();
        let newer = async {
            loop {
                if reports
                    .borrow_and_update()
                    .as_ref()
                    .is_some_and(|r| r.seq > command.after_seq)
                {
                    return;
                }
                if reports.changed().await.is_err() {
                    return;
                }
            }
        };
        let wait = Duration::from_millis(clamp_watch_timeout(command.timeout_ms));
        let _ = tokio::time::timeout(wait, newer).await;
        let report = reports.borrow().clone();
        Ok(self.replace_status(report))
    }
}
