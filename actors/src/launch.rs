//! The launch timeline: when each step from the daemon's `main` to its
//! first published settled state happened, said at debug on the target
//! `steadfast::launch` (`RUST_LOG=info,steadfast::launch=debug`).
//!
//! The marks (the runtime built, the data directory locked, the journal
//! open, the control socket bound, each boot step's end, the first
//! journal record made durable, the first settled state published) are
//! kept in memory while the process launches: most of them come before a
//! log subscriber is installed. [`publish`] (the daemon calls it at its
//! first settled state) closes the list and says each mark as one event,
//! with the microseconds since the first mark (`at_us`), since the mark
//! before (`delta_us`), and the wall clock (`unix_us`, to set beside the
//! time the process was started). The list is the process's: a process
//! that runs several supervisors gets the marks of all of them, in order,
//! until the first one settles. After [`publish`] a mark costs one atomic
//! load.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The target of the timeline's events.
pub const TARGET: &str = "steadfast::launch";

/// At most this many marks are kept (a launch has about a dozen).
const MAX_MARKS: usize = 64;

struct Mark {
    step: Cow<'static, str>,
    at: Instant,
    wall: SystemTime,
}

/// A list of marks, closed once published.
struct Timeline {
    closed: AtomicBool,
    marks: Mutex<Vec<Mark>>,
}

/// The process's timeline.
static TIMELINE: Timeline = Timeline::new();

impl Timeline {
    const fn new() -> Self {
        Self {
            closed: AtomicBool::new(false),
            marks: Mutex::new(Vec::new()),
        }
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Vec<Mark>> {
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mark(&self, step: Cow<'static, str>) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let (at, wall) = (Instant::now(), SystemTime::now());
        let mut marks = self.marks();
        if marks.len() < MAX_MARKS {
            marks.push(Mark { step, at, wall });
        }
    }

    fn mark_first(&self, step: &'static str) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let seen = self.marks().iter().any(|mark| mark.step == step);
        if !seen {
            self.mark(step.into());
        }
    }

    fn publish(&self, step: Cow<'static, str>) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        self.mark(step);
        if self.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        let marks = std::mem::take(&mut *self.marks());
        let Some(first) = marks.first().map(|mark| mark.at) else {
            return;
        };
        let mut before = first;
        for mark in &marks {
            let unix_us = mark
                .wall
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_micros());
            tracing::debug!(
                target: TARGET,
                step = %mark.step,
                at_us = mark.at.duration_since(first).as_micros(),
                delta_us = mark.at.duration_since(before).as_micros(),
                unix_us,
                "launch"
            );
            before = mark.at;
        }
    }
}

/// Mark `step` as done now.
pub fn mark(step: impl Into<Cow<'static, str>>) {
    TIMELINE.mark(step.into());
}

/// Mark `step` unless a mark of that name was made already (the first of
/// something that happens many times: a durable journal record).
pub fn mark_first(step: &'static str) {
    TIMELINE.mark_first(step);
}

/// Mark `step` (the first settled state, published), close the timeline
/// and say every mark at debug on [`TARGET`]. Only the first call says
/// anything.
pub fn publish(step: impl Into<Cow<'static, str>>) {
    TIMELINE.publish(step.into());
}

/// Whether the timeline is still open (nothing published yet).
#[must_use]
pub fn open() -> bool {
    !TIMELINE.closed.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// Records the `step` of every event on [`TARGET`].
    #[derive(Default, Clone)]
    struct Steps(Arc<Mutex<Vec<String>>>);

    impl Visit for Steps {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "step" {
                self.0.lock().unwrap().push(format!("{value:?}"));
            }
        }
    }

    impl Subscriber for Steps {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target() == TARGET
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            event.record(&mut self.clone());
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    /// Every mark is said once, in order, at the first publish; a repeated
    /// `mark_first` and anything after the publish are not.
    #[test]
    fn publish_says_each_mark_once_in_order() {
        let timeline = Timeline::new();
        timeline.mark("runtime built".into());
        timeline.mark_first("first journal record durable");
        timeline.mark("step serve executed".into());
        timeline.mark_first("first journal record durable");
        let steps = Steps::default();
        tracing::subscriber::with_default(steps.clone(), || {
            timeline.publish("published: running (attempt 1)".into());
            timeline.mark("after".into());
            timeline.publish("published again".into());
        });
        assert_eq!(
            *steps.0.lock().unwrap(),
            [
                "runtime built",
                "first journal record durable",
                "step serve executed",
                "published: running (attempt 1)",
            ]
        );
        assert!(timeline.marks().is_empty(), "nothing kept once published");
    }

    /// At most [`MAX_MARKS`] are kept: a process that launches supervisors
    /// for ever does not grow the list.
    #[test]
    fn the_list_is_bounded() {
        let timeline = Timeline::new();
        for _ in 0..MAX_MARKS * 2 {
            timeline.mark("a step".into());
        }
        assert_eq!(timeline.marks().len(), MAX_MARKS);
    }
}
