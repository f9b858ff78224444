//! The supervisor's one clock: wall-clock milliseconds that advance with
//! tokio's time.
//!
//! The pure core never reads a clock; the actors stamp events with
//! [`Clock::now`]. It is the wall-clock time when the supervisor started plus
//! the tokio [`Instant`] elapsed since, so timestamps
//! and timers agree, and under tokio's paused time (the deterministic tests)
//! a backoff's `retry_due` arrives exactly when the machine expects it.
//! Checked by `clock::tests::paused_time_moves_the_clock`. A wall clock
//! that jumps therefore reaches a supervisor only at its start: a
//! simulation sets what the next start on its thread reads
//! ([`anchor_wall_clock_on_this_thread`]) to relaunch after a jump.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use steadfast_protocol::Timestamp;
use tokio::time::Instant;

/// Wall-clock time anchored once, advanced by tokio's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    origin_ms: u64,
}

impl Clock {
    /// A clock anchored now. Must be called inside a tokio runtime.
    #[must_use]
    pub fn start() -> Self {
        let origin_ms = WALL_ANCHOR.with(Cell::get).unwrap_or_else(|| {
            #[allow(clippy::disallowed_methods)]
            // the seam: the one read of the system's wall clock
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        });
        Self {
            origin: Instant::now(),
            origin_ms,
        }
    }

    /// Now.
    #[must_use]
    pub fn now(&self) -> Timestamp {
        Timestamp(self.origin_ms).after(self.origin.elapsed())
    }

    /// The moment tokio's `instant` was (the clock's origin if earlier).
    #[must_use]
    pub fn at(&self, instant: Instant) -> Timestamp {
        Timestamp(self.origin_ms).after(instant.saturating_duration_since(self.origin))
    }

    /// How long until `at` (zero if it has passed).
    #[must_use]
    pub fn until(&self, at: Timestamp) -> Duration {
        at.since(self.now())
    }
}

thread_local! {
    /// The wall-clock time (ms since the epoch) a clock started on this
    /// thread reads instead of the system's; `None` (always, in a daemon):
    /// the system's.
    static WALL_ANCHOR: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Make every [`Clock::start`] on this thread read `ms` (milliseconds since
/// the epoch) as the wall-clock time, or the system's again (`None`): a
/// simulation's relaunch after the wall clock jumped, one seed deciding
/// where to.
pub fn anchor_wall_clock_on_this_thread(ms: Option<u64>) {
    WALL_ANCHOR.with(|anchor| anchor.set(ms));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_time_moves_the_clock() {
        let clock = Clock::start();
        let before = clock.now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(clock.now().since(before), Duration::from_secs(3));
        assert_eq!(clock.at(Instant::now()), clock.now());
        assert_eq!(
            clock.until(before.after(Duration::from_secs(5))),
            Duration::from_secs(2)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_started_on_an_anchored_thread_reads_the_anchor() {
        anchor_wall_clock_on_this_thread(Some(1_000));
        let anchored = Clock::start();
        anchor_wall_clock_on_this_thread(None);
        assert_eq!(anchored.now(), Timestamp(1_000));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(anchored.now(), Timestamp(3_000));
        assert!(
            Clock::start().now() > Timestamp(1_000_000),
            "the system's again"
        );
    }
}
