//! Carrying out `snapshot` ([`steadfast_protocol::control::cmd::Snapshot`]).

use steadfast_protocol::control::WireSnapshot;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Snapshot> for ControlService {
    async fn execute(self, _: cmd::Snapshot) -> Answer<cmd::Snapshot> {
        // Straight from the latest published snapshot (the handle's watch
        // channel; no round trip to the Lifecycle actor), cloning only what
        // the lean form keeps.
        let lean = self.lean(&self.handle.watch().borrow());
        let wire = WireSnapshot::from_snapshot(&lean);
        self.remember(lean);
        Ok(wire)
    }
}
