//! Time as data: the core never reads a clock.
//!
//! A [`Timestamp`] is milliseconds since the Unix epoch, read by whoever
//! sends the event (an actor, a test) and carried on it. Arithmetic
//! saturates, so no input can make the core panic on overflow.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A moment, in milliseconds since the Unix epoch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The moment `ms` milliseconds after the epoch.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The moment `delay` after this one (saturating).
    #[must_use]
    pub fn after(self, delay: Duration) -> Self {
        Self(self.0.saturating_add(duration_ms(delay)))
    }

    /// How long after `earlier` this moment is (zero if it is not later).
    #[must_use]
    pub fn since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
#[must_use]
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        assert_eq!(
            Timestamp(u64::MAX).after(Duration::from_secs(1)),
            Timestamp(u64::MAX)
        );
        assert_eq!(Timestamp(5).since(Timestamp(10)), Duration::ZERO);
        assert_eq!(
            Timestamp(1_500).since(Timestamp(500)),
            Duration::from_secs(1)
        );
        assert_eq!(duration_ms(Duration::MAX), u64::MAX);
    }
}
