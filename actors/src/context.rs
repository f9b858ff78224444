//! What every actor of one supervisor shares, fixed for the life of the
//! daemon: the service, the config source, the data directory and the
//! timings. Read-only once built, so it is shared by `Arc` without a lock.
//! The timings that are lifecycle policy (backoff, stable period, restart
//! budget, step deadline) reach the pure machine through [`Timings::policy`]; the actors
//! arm only the timers the machine asks for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use steadfast_protocol::lifecycle::{BackoffPolicy, LifecyclePolicy, RestartBudget};

use crate::clock::Clock;
use crate::config::{
    ConfigError, ConfigSource, Fingerprint, Overrides, RESOLVE_DEADLINE, ResolvedConfig,
    check_data_dir,
};
use crate::service::AnyService;

/// How long the supervisor waits for things, and how it backs off.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// The backoff after failed boots of class backoff.
    pub backoff: BackoffPolicy,
    /// How long a runtime must run before the failure streak resets (the
    /// machine's policy: it asks for the timer and refuses an early one).
    pub stable_period: Duration,
    /// The restart budget (the machine's policy): at most N failed automatic
    /// boots within W, then the failure is held until an operator's retry or
    /// a config change. `None` turns it off. Default: 5 within 600 s
    /// ([`RestartBudget`] says why).
    pub budget: Option<RestartBudget>,
    /// How long serving tasks get to finish after the shutdown token is
    /// cancelled, before they are aborted.
    pub drain_grace: Duration,
    /// Quiet time after a change to the declared file before it counts.
    pub debounce: Duration,
    /// How long an actor waits for the journal's acknowledgement (an fsync).
    pub journal_timeout: Duration,
    /// How long a phase of a boot may run without ending or its step
    /// reporting progress ([`crate::service::StepContext::progress`]); past
    /// it the boot is cancelled and fails with class backoff. The machine's
    /// policy: it asks for the timer and refuses an early one.
    pub step_deadline: Duration,
    /// Group commit: how long a transition into a boot or a drain waits,
    /// written but not yet fsynced, for its effect's outcome to share its
    /// fsync. Its effect starts at once; the transition is published (and
    /// the command answered) when the next fsync lands, or when this
    /// window passes, whichever is first. `Duration::ZERO`: fsync each
    /// transition before its effect (as before group commit). 10 ms by
    /// default: a boot's first fsync is its `booted` append (its steps'
    /// checkpoints are staged), so a boot shorter than the window costs
    /// one fsync, and a longer one is published 10 ms after it began.
    pub commit_window: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            backoff: BackoffPolicy::default(),
            stable_period: Duration::from_secs(30),
            budget: Some(RestartBudget::default()),
            drain_grace: Duration::from_secs(10),
            debounce: Duration::from_millis(20),
            journal_timeout: Duration::from_secs(30),
            step_deadline: Duration::from_secs(300),
            commit_window: Duration::from_millis(10),
        }
    }
}

impl Timings {
    /// The policy the lifecycle machine is built with.
    #[must_use]
    pub fn policy(&self) -> LifecyclePolicy {
        LifecyclePolicy {
            backoff: self.backoff,
            stable_period_ms: steadfast_protocol::time::duration_ms(self.stable_period),
            budget: self.budget,
            step_deadline_ms: steadfast_protocol::time::duration_ms(self.step_deadline),
        }
    }
}

/// The fixed context of one supervisor.
pub struct Shared {
    /// The embedding application's runtime.
    pub service: Arc<dyn AnyService>,
    /// Where the effective config comes from.
    pub source: ConfigSource,
    /// The data directory; a config that moves it is refused.
    pub data_dir: PathBuf,
    /// The declared config file, watched for changes.
    pub declared: Option<PathBuf>,
    /// The supervisor's clock.
    pub clock: Clock,
    /// Timings and backoff.
    pub timings: Timings,
    /// This process's id.
    pub pid: u32,
    /// The checkpoints outstanding in the journal, which a boot reconciles
    /// against observation.
    pub ledger: crate::ledger::Ledger,
    /// The override tier operators set through the control plane: the top
    /// tier of every resolve.
    pub overrides: Overrides,
    /// Told how far from now a boot step's deadline is, each time one
    /// starts or reports progress ([`crate::service::StepProgress`]), so a
    /// daemon can extend its service manager's start timeout to match
    /// (`EXTEND_TIMEOUT_USEC`).
    pub step_deadlines: tokio::sync::watch::Sender<std::time::Duration>,
    /// This supervisor's metrics (`steadfastctl metrics`).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The status record (`.steadfast/status`), rewritten before each
    /// snapshot is published.
    pub status: crate::status_record::StatusRecord,
    /// This supervisor's handover: what it received as a candidate, what
    /// its service offers a successor, whether its store was handed over.
    pub handover: Arc<crate::handover::Handover>,
    /// The running runtime's supervised children, as status, metrics and
    /// the control plane's `child` command read them.
    pub children: Arc<crate::children::Board>,
}

impl Shared {
    /// The effective config as a boot's `resolve_config` makes it: the
    /// source's tiers (bounded by [`RESOLVE_DEADLINE`]) with `overrides` on
    /// top, checked against the data directory and deserialized into the
    /// service's config type. `overrides` is [`Shared::overrides`], or a
    /// staged copy `config set` checks before anything is persisted. Used by
    /// the restart preflight, a change applied in place and the control
    /// plane's `config set`/`config show`; a boot gets the same outcome from
    /// [`Shared::resolve_tiers`] and the service's plan.
    ///
    /// # Errors
    /// Whatever keeps the config from resolving or from fitting the
    /// service's type (all hold failures for a boot).
    pub async fn resolve_config(
        &self,
        overrides: &Overrides,
    ) -> Result<crate::service::LiveConfig, ConfigError> {
        let resolved = self.resolve_tiers(overrides).await?;
        self.service.live_config(resolved.config)
    }

    /// [`Shared::resolve_config`] short of the config type: the tiers
    /// merged and the data directory checked. The boot takes this and lets
    /// the service's plan deserialize it (once), which fails the same way.
    ///
    /// # Errors
    /// Whatever keeps the config from resolving.
    pub async fn resolve_tiers(
        &self,
        overrides: &Overrides,
    ) -> Result<ResolvedConfig, ConfigError> {
        let resolved = self.source.resolve_within(RESOLVE_DEADLINE).await;
        self.over_tiers(resolved, overrides)
    }

    /// [`Shared::resolve_tiers`] as a boot takes it: with the declared
    /// file's fingerprint from just before the source read it
    /// ([`ConfigSource::resolve_fingerprinted_within`]), which a boot's
    /// outcome carries so a change that lands while it runs is not lost.
    pub async fn resolve_tiers_fingerprinted(
        &self,
        overrides: &Overrides,
    ) -> (Option<Fingerprint>, Result<ResolvedConfig, ConfigError>) {
        let (fingerprint, resolved) = self
            .source
            .resolve_fingerprinted_within(RESOLVE_DEADLINE)
            .await;
        (fingerprint, self.over_tiers(resolved, overrides))
    }

    /// The override tier merged over what the source resolved, and the data
    /// directory checked.
    fn over_tiers(
        &self,
        resolved: Result<ResolvedConfig, ConfigError>,
        overrides: &Overrides,
    ) -> Result<ResolvedConfig, ConfigError> {
        let mut resolved = resolved?;
        overrides.merge_over(&mut resolved.config)?;
        check_data_dir(&resolved.config, &self.data_dir)?;
        Ok(resolved)
    }

    /// What binds a re-initialization confirmation to this daemon: its data
    /// directory and its process (a relaunched daemon counts its epochs
    /// afresh, so a token from the process before must not match).
    #[must_use]
    pub fn reinit_salt(&self) -> Vec<u8> {
        reinit_salt(&self.data_dir, self.pid)
    }
}

/// See [`Shared::reinit_salt`].
#[must_use]
pub fn reinit_salt(data_dir: &std::path::Path, pid: u32) -> Vec<u8> {
    let mut salt = data_dir.as_os_str().as_encoded_bytes().to_vec();
    salt.extend_from_slice(&pid.to_le_bytes());
    salt
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("data_dir", &self.data_dir)
            .field("declared", &self.declared)
            .field("timings", &self.timings)
            .finish_non_exhaustive()
    }
}
