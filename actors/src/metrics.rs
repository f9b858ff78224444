//! One supervisor's metrics, in OpenMetrics text (`prometheus-client`):
//! what `steadfastctl metrics` and the daemon helper's HTTP endpoint show.
//!
//! Each supervisor owns its [`Metrics`] (in `Shared`): no process-wide
//! registry, so many supervisors in one process keep apart. They are fed
//! where the thing happens, once:
//! - the Lifecycle actor's adoption of a transition ([`Metrics::transition`]:
//!   boots, failures by phase and class, drains by what follows, phase
//!   durations) and its publication of a snapshot ([`Metrics::publish`]:
//!   the state gauge, attempt, streak, epoch, next retry, time in state);
//! - the Journal actor's appends ([`Metrics::journal_append`]: bytes,
//!   records, the fsync latency);
//! - the control plane's connections and every refused command (by
//!   reason), and the replacement reports (outcomes, generation).
//!
//! - every reload whose files (the TLS control port's) were refused
//!   ([`Metrics::reload_failed`]: `steadfast_reload_failures_total`).
//!
//! - the control directory's own fsync count (`ControlDir::fsyncs`), read
//!   at each render.
//!
//! Invariant: a counter moves only with a transition the machine adopted
//! (a refused event or an unadopted command changes nothing), except the
//! control directory's fsync count, a count of the disk work, and the
//! reload failures, a count of files refused.
//! `tests/it/metrics.rs::the_metrics_follow_a_stop_start_fail_sequence`
//! parses the text with Python's `prometheus_client` OpenMetrics parser.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use steadfast_protocol::Timestamp;
use steadfast_protocol::lifecycle::{LifecycleState, RetryClass};
use steadfast_protocol::replacement::{Outcome, Report, TransactionEnd};
use steadfast_protocol::snapshot::Snapshot;

/// Every state the machine has, so the state gauge shows each (0 or 1).
const STATES: [&str; 9] = [
    "resolving",
    "booting",
    "running",
    "draining",
    "stopped",
    "failed",
    "wedged",
    "exiting",
    "reinitializing",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    phase: String,
    /// `backoff`, `hold`, or `budget` (held because the budget is spent).
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChildLabels {
    child: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChildStateLabels {
    child: String,
    /// `running`, `ended`, `failed`, `stopped`, `not_started`.
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DrainLabels {
    /// What follows the drain: `stop`, `restart`, `exit`, `fail`.
    then: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    /// `unix` or `tcp`.
    transport: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    command: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn phase_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// One supervisor's metrics (see the module doc).
///
/// The metrics are kept, not their registry: the registry (each family's
/// name, help and unit, and a handle on it) is made when the text is
/// rendered (`Metrics::registry`), so an idle supervisor does not hold
/// one (memory per supervisor).
#[derive(Debug)]
pub struct Metrics {
    state: Family<StateLabels, Gauge>,
    attempt: Gauge,
    streak: Gauge,
    epoch: Gauge,
    next_retry: FloatGauge,
    in_state: FloatGauge,
    boots: Counter,
    failures: Family<FailureLabels, Counter>,
    /// Runtimes that booted and then ended, by the retry class.
    runtime_failures: Family<FailureLabels, Counter>,
    /// The running runtime's children: restarts since its boot, state.
    child_restarts: Family<ChildLabels, Gauge>,
    child_state: Family<ChildStateLabels, Gauge>,
    drains: Family<DrainLabels, Counter>,
    phase_seconds: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    journal_bytes: Gauge,
    journal_records: Counter,
    journal_failed: Counter,
    /// Reloads whose files were refused (the old ones kept).
    reload_failures: Counter,
    fsync_seconds: Histogram,
    /// The control directory's fsyncs outside journal appends, read from
    /// its own count ([`Metrics::count_control_dir_fsyncs`]) at render.
    control_dir_fsyncs: Counter,
    control_dir_fsync_source: OnceLock<Arc<AtomicU64>>,
    connections: Family<TransportLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
    replacements: Family<OutcomeLabels, Counter>,
    generation: Gauge,
    /// The state published last and when it was entered (ms), for the time
    /// in state; the replacement report counted last (its `seq`).
    last: Mutex<Last>,
}

#[derive(Debug, Default)]
struct Last {
    state: &'static str,
    since_ms: u64,
    replacement_seq: Option<u64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Empty metrics, registered under the `steadfast_` prefix.
    #[must_use]
    pub fn new() -> Self {
        let state = Family::<StateLabels, Gauge>::default();
        for name in STATES {
            state
                .get_or_create(&StateLabels { state: name.into() })
                .set(0);
        }
        Self {
            state,
            attempt: Gauge::default(),
            streak: Gauge::default(),
            epoch: Gauge::default(),
            next_retry: FloatGauge::default(),
            in_state: FloatGauge::default(),
            boots: Counter::default(),
            failures: Family::default(),
            runtime_failures: Family::default(),
            child_restarts: Family::default(),
            child_state: Family::default(),
            drains: Family::default(),
            phase_seconds: Family::new_with_constructor(phase_histogram),
            journal_bytes: Gauge::default(),
            journal_records: Counter::default(),
            journal_failed: Counter::default(),
            reload_failures: Counter::default(),
            fsync_seconds: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            control_dir_fsyncs: Counter::default(),
            control_dir_fsync_source: OnceLock::new(),
            connections: Family::default(),
            refusals: Family::default(),
            replacements: Family::default(),
            generation: Gauge::default(),
            last: Mutex::new(Last::default()),
        }
    }

    /// The registry over these metrics (handles on the same counters), under
    /// the `steadfast_` prefix: made for each rendering.
    fn registry(&self) -> Registry {
        let metrics = self;
        let mut registry = Registry::with_prefix("steadfast");
        registry.register(
            "state",
            "The lifecycle state: 1 for the current one, 0 for the others",
            metrics.state.clone(),
        );
        registry.register(
            "attempt",
            "The boot attempt the runtime is on (0 before the first)",
            metrics.attempt.clone(),
        );
        registry.register("streak", "Consecutive failed boots", metrics.streak.clone());
        registry.register(
            "epoch",
            "The epoch: times this daemon has released the store",
            metrics.epoch.clone(),
        );
        registry.register_with_unit(
            "next_retry_timestamp",
            "When a failed boot is retried (Unix time; 0: no retry scheduled)",
            Unit::Seconds,
            metrics.next_retry.clone(),
        );
        registry.register_with_unit(
            "time_in_state",
            "How long the supervisor has been in its current state",
            Unit::Seconds,
            metrics.in_state.clone(),
        );
        registry.register("boots", "Boots started", metrics.boots.clone());
        registry.register(
            "boot_failures",
            "Failed boots, by the phase that failed and the retry class (deprecated for \
             phase=\"run\": a runtime that booted and then ended is \
             steadfast_runtime_failures_total; kept one release)",
            metrics.failures.clone(),
        );
        registry.register(
            "runtime_failures",
            "Runtimes that booted and then ended on their own (a serving task's end, a \
             group of children's meltdown), by the retry class",
            metrics.runtime_failures.clone(),
        );
        registry.register(
            "child_restarts",
            "Restarts of each supervised child of the running runtime since its boot",
            metrics.child_restarts.clone(),
        );
        registry.register(
            "child_state",
            "Each supervised child of the running runtime: 1 for its state",
            metrics.child_state.clone(),
        );
        registry.register(
            "drains",
            "Drains started, by what follows them",
            metrics.drains.clone(),
        );
        registry.register_with_unit(
            "phase_duration",
            "How long each boot phase took, observed when it ended (done, failed or cancelled)",
            Unit::Seconds,
            metrics.phase_seconds.clone(),
        );
        registry.register_with_unit(
            "journal_size",
            "The journal file's durable length",
            Unit::Bytes,
            metrics.journal_bytes.clone(),
        );
        registry.register(
            "journal_records",
            "Records appended to the journal (acknowledged after their fsync)",
            metrics.journal_records.clone(),
        );
        registry.register(
            "journal_append_failures",
            "Journal appends that failed (not acknowledged)",
            metrics.journal_failed.clone(),
        );
        registry.register(
            "reload_failures",
            "Reloads (SIGHUP, the reload method) that refused a file the control plane \
             re-reads (TLS certificate, key, client CA, token); the old ones stay in use",
            metrics.reload_failures.clone(),
        );
        registry.register_with_unit(
            "journal_fsync_duration",
            "How long a journal append took to write and fsync",
            Unit::Seconds,
            metrics.fsync_seconds.clone(),
        );
        registry.register(
            "control_dir_fsyncs",
            "fsyncs of the control directory, its markers and a journal repair or compaction \
             (journal appends are counted by journal_fsync_duration)",
            metrics.control_dir_fsyncs.clone(),
        );
        registry.register(
            "control_connections",
            "Control-plane connections accepted, by transport",
            metrics.connections.clone(),
        );
        registry.register(
            "refusals",
            "Commands refused, by command and reason",
            metrics.refusals.clone(),
        );
        registry.register(
            "replacements",
            "Replacements ended, by outcome",
            metrics.replacements.clone(),
        );
        registry.register(
            "replacement_generation",
            "The serial of the latest replacement (0: none yet)",
            metrics.generation.clone(),
        );
        registry
    }

    /// An adopted transition from `from` to `to` at `at`: the counters and
    /// the phase histogram.
    pub fn transition(&self, from: &LifecycleState, to: &LifecycleState, at: Timestamp) {
        if let LifecycleState::Booting { phase, since, .. } = from {
            let left = match to {
                LifecycleState::Booting { phase: next, .. } => next != phase,
                _ => true,
            };
            if left {
                let ms = at.as_millis().saturating_sub(since.as_millis());
                #[allow(clippy::cast_precision_loss)]
                self.phase_seconds
                    .get_or_create(&PhaseLabels {
                        phase: phase.to_string(),
                    })
                    .observe(ms as f64 / 1000.0);
            }
        }
        let entered = std::mem::discriminant(from) != std::mem::discriminant(to);
        if !entered {
            return;
        }
        match to {
            LifecycleState::Booting { .. } => {
                self.boots.inc();
            }
            LifecycleState::Failed {
                report,
                retry,
                budget_spent,
                ..
            } => {
                let class = match (retry, budget_spent) {
                    (_, Some(_)) => "budget",
                    (RetryClass::Hold, None) => "hold",
                    (RetryClass::Backoff { .. }, None) => "backoff",
                };
                let labels = FailureLabels {
                    phase: report.phase.to_string(),
                    class: class.into(),
                };
                if report.phase == steadfast_protocol::lifecycle::Phase::RUN {
                    self.runtime_failures.get_or_create(&labels).inc();
                }
                self.failures.get_or_create(&labels).inc();
            }
            LifecycleState::Draining { then, .. } => {
                self.drains
                    .get_or_create(&DrainLabels {
                        then: then.name().into(),
                    })
                    .inc();
            }
            _ => {}
        }
    }

    /// A published snapshot, at `now`: the gauges.
    pub fn publish(&self, snapshot: &Snapshot, now: Timestamp) {
        let state = snapshot.lifecycle.name();
        {
            let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            if last.state != state {
                if !last.state.is_empty() {
                    self.state
                        .get_or_create(&StateLabels {
                            state: last.state.into(),
                        })
                        .set(0);
                }
                last.state = state;
                last.since_ms = now.as_millis();
            }
        }
        self.state
            .get_or_create(&StateLabels {
                state: state.into(),
            })
            .set(1);
        let attempt = match &snapshot.lifecycle {
            LifecycleState::Booting { attempt, .. }
            | LifecycleState::Running { attempt, .. }
            | LifecycleState::Draining { attempt, .. }
            | LifecycleState::Failed { attempt, .. } => Some(attempt.get()),
            _ => None,
        };
        if let Some(attempt) = attempt {
            self.attempt.set(i64::from(attempt));
        }
        self.streak.set(i64::from(snapshot.streak));
        self.epoch
            .set(i64::try_from(snapshot.epoch).unwrap_or(i64::MAX));
        #[allow(clippy::cast_precision_loss)]
        let next = match &snapshot.lifecycle {
            LifecycleState::Failed {
                retry: RetryClass::Backoff { next_retry_at, .. },
                budget_spent: None,
                ..
            } => next_retry_at.as_millis() as f64 / 1000.0,
            _ => 0.0,
        };
        self.next_retry.set(next);
        // The children as they stand: a child of an earlier runtime is gone.
        self.child_restarts.clear();
        self.child_state.clear();
        for child in &snapshot.children {
            self.child_restarts
                .get_or_create(&ChildLabels {
                    child: child.name.clone(),
                })
                .set(i64::try_from(child.restarts_total).unwrap_or(i64::MAX));
            self.child_state
                .get_or_create(&ChildStateLabels {
                    child: child.name.clone(),
                    state: child.state.as_str().into(),
                })
                .set(1);
        }
    }

    /// A journal append of `records` records: `len` is the file's durable
    /// length after it, `took` the write and fsync; `ok: false` for one
    /// that failed.
    pub fn journal_append(&self, records: usize, len: u64, took: Duration, ok: bool) {
        if ok {
            self.journal_records
                .inc_by(u64::try_from(records).unwrap_or(u64::MAX));
            self.journal_bytes
                .set(i64::try_from(len).unwrap_or(i64::MAX));
        } else {
            self.journal_failed.inc();
        }
        self.fsync_seconds.observe(took.as_secs_f64());
    }

    /// A reload refused a file the control plane re-reads.
    pub fn reload_failed(&self) {
        self.reload_failures.inc();
    }

    /// A journal write of `records` records that waits for a later fsync
    /// (counted as records; its fsync is observed when it comes).
    pub fn journal_written(&self, records: usize, ok: bool) {
        if ok {
            self.journal_records
                .inc_by(u64::try_from(records).unwrap_or(u64::MAX));
        } else {
            self.journal_failed.inc();
        }
    }

    /// Count the control directory's fsyncs from `source`
    /// (`ControlDir::fsyncs`), read at each render; only the first source
    /// given is kept.
    pub fn count_control_dir_fsyncs(&self, source: Arc<AtomicU64>) {
        let _ = self.control_dir_fsync_source.set(source);
    }

    /// A control-plane connection accepted on `transport` (`unix`, `tcp`).
    pub fn control_connection(&self, transport: &str) {
        self.connections
            .get_or_create(&TransportLabels {
                transport: transport.into(),
            })
            .inc();
    }

    /// A command refused (`CommandError::reason`).
    pub fn refusal(&self, command: &str, reason: &str) {
        self.refusals
            .get_or_create(&RefusalLabels {
                command: command.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A replacement report: its serial is the generation; an ended one is
    /// counted once (by its `seq`).
    pub fn replacement(&self, report: &Report) {
        self.generation
            .set(i64::try_from(report.serial).unwrap_or(i64::MAX));
        let Some(ended) = &report.ended else {
            return;
        };
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.replacement_seq.is_some_and(|seq| seq >= report.seq) {
            return;
        }
        last.replacement_seq = Some(report.seq);
        let outcome = match ended {
            TransactionEnd::Outcome(Outcome::Unchanged) => "unchanged".to_owned(),
            TransactionEnd::Outcome(Outcome::Complete) => "complete".to_owned(),
            TransactionEnd::Outcome(Outcome::RetirementPending) => "retirement_pending".to_owned(),
            TransactionEnd::Failed { reason, .. } => format!("failed_{}", reason.name()),
        };
        self.replacements
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The metrics as OpenMetrics text (ending `# EOF`), at `now`.
    #[must_use]
    pub fn render(&self, now: Timestamp) -> String {
        {
            let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            #[allow(clippy::cast_precision_loss)]
            self.in_state
                .set(now.as_millis().saturating_sub(last.since_ms) as f64 / 1000.0);
        }
        if let Some(source) = self.control_dir_fsync_source.get() {
            let seen = source.load(Ordering::Relaxed);
            self.control_dir_fsyncs
                .inc_by(seen.saturating_sub(self.control_dir_fsyncs.get()));
        }
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry());
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_supervisors_keep_their_metrics_apart() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.refusal("start", "runtime_running");
        let (a, b) = (a.render(Timestamp(0)), b.render(Timestamp(0)));
        assert!(
            a.contains("steadfast_refusals_total{command=\"start\",reason=\"runtime_running\"} 1"),
            "{a}"
        );
        assert!(!b.contains("runtime_running"), "{b}");
        assert!(a.ends_with("# EOF\n"), "{a}");
    }
}
