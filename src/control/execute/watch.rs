//! Carrying out `watch` ([`steadfast_protocol::control::cmd::Watch`]).

use std::time::Duration;

use steadfast_protocol::control::{Answer, Execute, cmd};
use steadfast_protocol::control::{WireChanges, clamp_watch_timeout};

use super::ControlService;

impl Execute<cmd::Watch> for ControlService {
    async fn execute(self, command: cmd::Watch) -> Answer<cmd::Watch> {
        let mut snapshots = self.handle.watch();
        let newer = async {
            loop {
                if snapshots.borrow_and_update().version > command.after_version {
                    return;
                }
                if snapshots.changed().await.is_err() {
                    // The supervisor is gone: answer what it last published.
                    return;
                }
            }
        };
        let wait = Duration::from_millis(clamp_watch_timeout(command.timeout_ms));
        let _ = tokio::time::timeout(wait, newer).await;
        let lean = self.lean(&snapshots.borrow());
        let base = self
            .sent
            .lock()
            .ok()
            .and_then(|mut sent| sent.take())
            .filter(|sent| sent.version == command.after_version);
        let changes = WireChanges::between(base.as_ref(), &lean);
        self.remember(lean);
        Ok(changes)
    }
}
