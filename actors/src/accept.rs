//! What every accept loop does when `accept` fails: it keeps accepting.
//!
//! An accept loop that ends on an error ends what it serves (a runtime's
//! listener, the control socket, the metrics endpoint), and the commonest
//! error is one a local client can cause at will: a full descriptor table
//! (`EMFILE` for the process, `ENFILE` for the system) or no buffer memory
//! (`ENOBUFS`, `ENOMEM`). Waiting fixes those as soon as a connection
//! closes; retrying at once spins a core. So [`AcceptBackoff`] pauses after
//! such an error (10 ms, doubling, at most 1 s), reset by the next
//! accepted connection; an error that concerns only the connection being
//! accepted (`ECONNABORTED`, `EINTR`, `EPROTO`, …) is retried at once; any
//! other error is paused on like an exhaustion, never returned.
//!
//! The warnings are bounded too: the first failure of a run of failures is
//! logged, then at most one line every 10 s with how many were left
//! unsaid, so an attacker who fills the table cannot also flood the log.
//!
//! Invariant: an accept loop built on [`AcceptBackoff`] never ends on an
//! accept error. Checked by `accept::tests::an_exhausted_table_pauses_and_recovers`
//! here and, over a real full descriptor table, by `tests/it/fds.rs`.

use std::io;
use std::time::Duration;

use rustix::io::Errno;
use tokio::time::Instant;

/// The first pause after an exhaustion error.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// At most one warning this often while accepts keep failing.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Whether `error` says the process or the system is out of descriptors or
/// buffer memory: the errors a flood of connections causes and waiting
/// cures.
#[must_use]
pub fn is_exhaustion(error: &io::Error) -> bool {
    error.raw_os_error().is_some_and(|code| {
        [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM]
            .iter()
            .any(|errno| errno.raw_os_error() == code)
    })
}

/// Whether `error` concerns only the one connection being accepted (it was
/// reset or aborted before `accept` returned, or the call was
/// interrupted): the next accept may succeed at once.
#[must_use]
pub fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || error
        .raw_os_error()
        .is_some_and(|code| code == Errno::PROTO.raw_os_error())
}

/// The pause and warning state of one accept loop; see the module doc.
#[derive(Debug)]
pub struct AcceptBackoff {
    /// What the loop accepts for, named in its warnings ("control socket",
    /// "metrics endpoint", a runtime task's name).
    what: String,
    /// The pause before the next try after an exhaustion error.
    pause: Duration,
    /// When the last warning was logged, while failures keep coming.
    warned_at: Option<Instant>,
    /// Failures not logged since then.
    unsaid: u64,
}

impl AcceptBackoff {
    /// The state of a loop that accepts for `what`.
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            pause: FIRST_PAUSE,
            warned_at: None,
            unsaid: 0,
        }
    }

    /// A connection was accepted: the next failure starts the pauses over.
    pub fn accepted(&mut self) {
        if self.warned_at.take().is_some() && self.unsaid > 0 {
            tracing::info!(
                what = %self.what,
                failures = self.unsaid,
                "accepting again after failed accepts"
            );
        }
        self.pause = FIRST_PAUSE;
        self.unsaid = 0;
    }

    /// `accept` failed with `error`: log it (bounded) and wait as long as
    /// the error calls for. Never fails: the caller accepts again after it.
    pub async fn failed(&mut self, error: &io::Error) {
        self.warn(error);
        if is_per_connection(error) {
            return;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
    }

    /// The pause the next exhaustion error would wait.
    #[must_use]
    pub const fn next_pause(&self) -> Duration {
        self.pause
    }

    fn warn(&mut self, error: &io::Error) {
        let now = Instant::now();
        match self.warned_at {
            Some(at) if now.duration_since(at) < WARN_EVERY => self.unsaid += 1,
            _ => {
                let hint = if is_exhaustion(error) {
                    "; out of descriptors or buffers: accepting again after a pause"
                } else {
                    ""
                };
                tracing::warn!(
                    what = %self.what,
                    %error,
                    unsaid = self.unsaid,
                    "accept failed{hint}"
                );
                self.warned_at = Some(now);
                self.unsaid = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(errno: Errno) -> io::Error {
        io::Error::from_raw_os_error(errno.raw_os_error())
    }

    #[test]
    fn exhaustion_errors_are_told_from_per_connection_ones() {
        for e in [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM] {
            assert!(is_exhaustion(&errno(e)), "{e:?}");
            assert!(!is_per_connection(&errno(e)), "{e:?}");
        }
        for e in [Errno::CONNABORTED, Errno::INTR, Errno::PROTO] {
            assert!(is_per_connection(&errno(e)), "{e:?}");
            assert!(!is_exhaustion(&errno(e)), "{e:?}");
        }
        assert!(!is_exhaustion(&io::Error::other("not an errno")));
    }

    #[tokio::test(start_paused = true)]
    async fn an_exhausted_table_pauses_and_recovers() {
        let mut backoff = AcceptBackoff::new("test");
        let start = Instant::now();
        for _ in 0..10 {
            backoff.failed(&errno(Errno::MFILE)).await;
        }
        // 10 + 20 + … doubling, capped at 1 s: 10+20+40+80+160+320+640+1000+1000+1000.
        assert_eq!(start.elapsed(), Duration::from_millis(4270));
        assert_eq!(backoff.next_pause(), MAX_PAUSE);
        backoff.accepted();
        assert_eq!(backoff.next_pause(), FIRST_PAUSE);
        let before = Instant::now();
        backoff.failed(&errno(Errno::CONNABORTED)).await;
        assert_eq!(
            before.elapsed(),
            Duration::ZERO,
            "a per-connection error is retried at once"
        );
    }
}
