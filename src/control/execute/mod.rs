//! The control plane's half of each command that runs it: one file per
//! command, each an [`Execute`](steadfast_protocol::control::Execute) impl
//! of [`ControlService`] (its pure half — name, role, arguments, answer —
//! is `steadfast_protocol::control::cmd`). The server hands every request
//! to [`steadfast_protocol::control::dispatch`], which picks the impl.
//!
//! Two commands are carried out where what they run lives, since the
//! control plane sits below it: `reload` in `crate::daemon` (the daemon's
//! systemd framing of a reload) and `replace` in `crate::replace` (the
//! process driver). Their impls are of the same trait, so `dispatch` finds
//! them all the same.
//!
//! A command answered from the snapshot alone (the registry's `reads`
//! form, e.g. `ping`) has no file here: the [`Snapshots`] impl below
//! carries every such command out.

use std::sync::Arc;

use steadfast_protocol::command::CommandError;
use steadfast_protocol::control::{
    Answer, ControlAnswer, Registered, ReplaceStatus, Snapshots, WireSnapshot, dispatch,
};
use steadfast_protocol::replacement::Report;
use steadfast_protocol::snapshot::Snapshot;

use crate::embedding::SupervisorHandle;

mod child;
mod config_set;
mod config_show;
mod config_unset;
mod exit;
mod journal;
mod metrics;
mod reinit;
mod reinit_prepare;
mod replace_status;
mod restart;
mod retry;
mod snapshot;
mod start;
mod stop;
mod watch;

/// Every command, in process: what [`ControlClient::call`](crate::control::ControlClient::call)
/// is to a peer.
impl SupervisorHandle {
    /// Carry out `command` on this supervisor as the control plane carries
    /// out a peer's (the same [`Execute`](steadfast_protocol::control::Execute)
    /// impl, the same answer; in process, so no role is checked): e.g.
    /// `handle.call(cmd::Restart { force: false })`, or
    /// `handle.call(cmd::Journal { limit: 5 })`. A command's own type is
    /// all it takes, as for the client.
    ///
    /// # Errors
    /// The command's refusal, as a peer would read it.
    pub async fn call<C: Registered>(&self, command: C) -> Answer<C> {
        let service = ControlService::new(self.clone());
        let response = dispatch(service, command.into_request()).await;
        C::answer(response).unwrap_or_else(|other| {
            Err(CommandError::Failed(format!(
                "`{}` was answered as `{}`",
                C::NAME,
                other.method()
            )))
        })
    }
}

/// The commands answered from the snapshot alone (the registry's `reads`
/// form, `ping` among them) are carried out by this, with no file here.
impl Snapshots for ControlService {
    fn latest(&self) -> Snapshot {
        self.handle.snapshot()
    }
}

/// The control service over one supervisor, for one connection.
#[derive(Clone)]
pub(crate) struct ControlService {
    /// The supervisor the commands go to.
    pub(crate) handle: SupervisorHandle,
    /// The snapshot last answered on this connection, as sent: what a
    /// `watch` after its version is diffed against.
    pub(super) sent: Arc<std::sync::Mutex<Option<Snapshot>>>,
}

impl ControlService {
    /// The service for one new connection to `handle`.
    pub(crate) fn new(handle: SupervisorHandle) -> Self {
        Self {
            handle,
            sent: Arc::default(),
        }
    }

    /// `snapshot` as this connection sends it: lean (the current attempt
    /// only), stamped with the daemon's clock.
    fn lean(&self, snapshot: &Snapshot) -> Snapshot {
        let mut lean = snapshot.lean();
        lean.now = Some(self.handle.now());
        lean
    }

    /// Remember `lean` as the snapshot last sent, for `watch`.
    fn remember(&self, lean: Snapshot) {
        if let Ok(mut sent) = self.sent.lock() {
            *sent = Some(lean);
        }
    }

    /// `snapshot` on the wire (see [`Self::lean`]), remembered for `watch`.
    fn send(&self, snapshot: &Snapshot) -> WireSnapshot {
        let lean = self.lean(snapshot);
        let wire = WireSnapshot::from_snapshot(&lean);
        self.remember(lean);
        wire
    }

    /// A command's answer on the wire: the snapshot after it, or why not.
    pub(crate) fn answer(&self, result: Result<Snapshot, CommandError>) -> ControlAnswer {
        result.map(|snapshot| self.send(&snapshot))
    }

    /// Who answers, and `report`.
    pub(crate) fn replace_status(&self, report: Option<Report>) -> ReplaceStatus {
        let snapshot = self.handle.snapshot();
        ReplaceStatus {
            pid: snapshot.pid,
            identity: snapshot.identity,
            version: self.handle.version().map(str::to_owned),
            report,
        }
    }
}
