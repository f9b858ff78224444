//! Carrying out `reload` ([`steadfast_protocol::control::cmd::Reload`]).

use steadfast_protocol::control::{Answer, Execute, cmd};

use super::ControlService;

impl Execute<cmd::Reload> for ControlService {
    async fn execute(self, _: cmd::Reload) -> Answer<cmd::Reload> {
        // Through the daemon's systemd side, so `steadfastctl reload` and
        // SIGHUP say the same `RELOADING=1` … `READY=1`.
        self.answer(crate::daemon::reload(&self.handle).await)
    }
}
