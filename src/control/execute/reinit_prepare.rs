//! Carrying out `reinit_prepare` ([`steadfast_protocol::control::cmd::ReinitPrepare`]).

use steadfast_protocol::control::ReinitPrepared;
use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::ReinitPrepare> for ControlService {
    async fn execute(self, _: cmd::ReinitPrepare) -> Answer<cmd::ReinitPrepare> {
        self.handle.reinit_prepare().await.map(|c| ReinitPrepared {
            token: c.token,
            epoch: c.epoch,
        })
    }
}
