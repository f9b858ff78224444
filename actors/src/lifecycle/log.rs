//! One log line per adopted transition, and the journal's state labels.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A state's label for the journal: its name, with the drain's purpose.
/// Log one adopted transition, once, with its structured fields: `from`,
/// `event`, `state`, `attempt`, `phase`, `reason`. A failed boot is a
/// warning, a wedge an error, a move between phases of one boot (or any
/// step that stays in its state) a debug line, anything else an info line.
pub(super) fn log_transition(from: &LifecycleState, event: &LifecycleEvent, to: &LifecycleState) {
    let from_label = label(from);
    let state = label(to);
    let event = event.recorded_as();
    match to {
        LifecycleState::Booting { attempt, phase, .. }
            if matches!(from, LifecycleState::Booting { .. }) =>
        {
            tracing::debug!(event, state, attempt, %phase, "boot phase");
        }
        LifecycleState::Booting { attempt, phase, .. } => {
            tracing::info!(from = %from_label, event, state, attempt, %phase, "transition");
        }
        // A step inside one state (a drain's phases): no transition to
        // speak of at info.
        _ if from_label == state => tracing::debug!(event, state, "step"),
        LifecycleState::Running { attempt, .. } | LifecycleState::Draining { attempt, .. } => {
            tracing::info!(from = %from_label, event, state, attempt, "transition");
        }
        LifecycleState::Failed {
            attempt,
            report,
            retry,
            budget_spent,
            ..
        } => {
            let retry = match (retry, budget_spent) {
                (_, Some(spent)) => format!("held: {}", spent.reason),
                (steadfast_protocol::lifecycle::RetryClass::Hold, None) => "hold".to_owned(),
                (steadfast_protocol::lifecycle::RetryClass::Backoff { delay_ms, .. }, None) => {
                    format!("backoff {delay_ms} ms")
                }
            };
            if report.phase == steadfast_protocol::lifecycle::Phase::RUN {
                tracing::warn!(
                    from = %from_label,
                    event,
                    state,
                    attempt,
                    reason = %report.error,
                    retry,
                    "transition: the runtime failed"
                );
            } else {
                tracing::warn!(
                    from = %from_label,
                    event,
                    state,
                    attempt,
                    phase = %report.phase,
                    reason = %report.error,
                    retry,
                    "transition: the boot failed"
                );
            }
        }
        LifecycleState::Stopped { reason, .. } => {
            tracing::info!(from = %from_label, event, state, reason = reason.name(), "transition");
        }
        LifecycleState::Wedged { cause, .. } => {
            tracing::error!(from = %from_label, event, state, reason = %cause, "transition: wedged");
        }
        _ => tracing::info!(from = %from_label, event, state, "transition"),
    }
}

pub(super) fn label(state: &LifecycleState) -> String {
    match state {
        LifecycleState::Draining { then, .. } => format!("draining({})", then.name()),
        other => other.name().to_owned(),
    }
}
