//! One supervisor's part in a replacement's handover: the files it received
//! as a candidate (from an incumbent, for its data dir), the files its
//! service offers to a successor, and whether it handed its store over.
//!
//! Each supervisor has its own [`Handover`] (in [`crate::context::Shared`],
//! reachable from a step as [`crate::service::StepContext::handover`]), made
//! when the supervisor is built and dropped with it: a replacement of one
//! supervisor hands over that supervisor's offers only, and a supervisor
//! built later on the same data dir (in the same process) starts with none
//! of an earlier one's offers and probes its store as anyone would.
//! The socket and the message are the facade's (`steadfast::handover`).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// The name under which the data dir's lock travels (reserved: no service
/// may offer a file under it).
pub const LOCK: &str = "steadfast:lock";

/// A handover could not be received or offered.
#[derive(Debug, thiserror::Error)]
#[error("handover: {0}")]
pub struct HandoverError(#[source] pub std::io::Error);

impl From<std::io::Error> for HandoverError {
    fn from(error: std::io::Error) -> Self {
        Self(error)
    }
}

/// One supervisor's handover state (see the module doc).
#[derive(Debug, Default)]
pub struct Handover {
    /// What the incumbent handed this supervisor, by name, until taken.
    received: Mutex<HashMap<String, OwnedFd>>,
    /// What this supervisor's service offers a successor, by name.
    offered: Mutex<HashMap<String, OwnedFd>>,
    /// A committed replacement handed the store over to the successor.
    store_handed_over: AtomicBool,
}

impl Handover {
    /// A supervisor's handover holding `received`: the files an incumbent
    /// handed over for its data dir (none when it is not a candidate).
    #[must_use]
    pub fn received(received: HashMap<String, OwnedFd>) -> Self {
        Self {
            received: Mutex::new(received),
            ..Self::default()
        }
    }

    /// The file the incumbent handed over as `name` (see [`Self::share`]),
    /// if this supervisor's process is a candidate that received one. Taken
    /// once.
    pub fn take(&self, name: &str) -> Option<OwnedFd> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
    }

    /// The listening socket the incumbent handed over as `name`, as a std
    /// listener (blocking: set it non-blocking before giving it to tokio).
    pub fn take_listener(&self, name: &str) -> Option<std::net::TcpListener> {
        self.take(name).map(std::net::TcpListener::from)
    }

    /// Offer `file` (a listening socket, a store's lock) to the candidate of
    /// an overlap replacement of this supervisor as `name`; the offer holds
    /// a duplicate of it until [`withdraw`](Self::withdraw)n (or the
    /// supervisor is dropped), and a candidate receives a duplicate of that.
    ///
    /// # Errors
    /// `name` is reserved or not one line, or the file could not be
    /// duplicated.
    pub fn share(&self, name: &str, file: &impl AsFd) -> Result<(), HandoverError> {
        if name == LOCK || name.is_empty() || name.contains('\n') {
            return Err(HandoverError(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{name:?} cannot name a handed-over file"),
            )));
        }
        let fd = file.as_fd().try_clone_to_owned()?;
        self.offered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), fd);
        Ok(())
    }

    /// Withdraw the file offered as `name` (its duplicate is closed).
    pub fn withdraw(&self, name: &str) {
        self.offered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// Duplicates of every file offered now, with their names, sorted by
    /// name.
    ///
    /// # Errors
    /// A file could not be duplicated (out of descriptors).
    pub fn offered(&self) -> Result<Vec<(String, OwnedFd)>, HandoverError> {
        let offered = self.offered.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = offered
            .iter()
            .map(|(name, fd)| Ok((name.clone(), fd.try_clone()?)))
            .collect::<Result<Vec<_>, std::io::Error>>()?;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Note that a committed replacement handed this supervisor's store over
    /// to its successor: from now on its drains read the store `Released`
    /// without a probe (its lock is the successor's now, the same open
    /// file, so a probe would read `Held` and wedge a retiring incumbent
    /// over a store it gave away on purpose). Kept for the supervisor's
    /// life: a retired incumbent never boots again.
    pub fn mark_store_handed_over(&self) {
        self.store_handed_over.store(true, Ordering::Release);
    }

    /// Whether [`Self::mark_store_handed_over`] was called.
    #[must_use]
    pub fn store_handed_over(&self) -> bool {
        self.store_handed_over.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::MetadataExt;

    fn ino(fd: &OwnedFd) -> u64 {
        File::from(fd.try_clone().expect("dup"))
            .metadata()
            .expect("stat")
            .ino()
    }

    /// Two supervisors offer files under the same name: each one's offers
    /// are its own, and one withdrawing leaves the other's in place.
    #[test]
    fn two_supervisors_offer_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file_a = File::create(dir.path().join("a")).expect("a's file");
        let file_b = File::create(dir.path().join("b")).expect("b's file");
        let (a, b) = (Handover::default(), Handover::default());
        a.share("app:store", &file_a).expect("a offers");
        b.share("app:store", &file_b).expect("b offers");
        let offered = |h: &Handover| -> Vec<(String, u64)> {
            h.offered()
                .expect("offers")
                .iter()
                .map(|(name, fd)| (name.clone(), ino(fd)))
                .collect()
        };
        let (ino_a, ino_b) = (
            file_a.metadata().expect("a").ino(),
            file_b.metadata().expect("b").ino(),
        );
        assert_eq!(offered(&a), vec![("app:store".to_owned(), ino_a)]);
        assert_eq!(offered(&b), vec![("app:store".to_owned(), ino_b)]);
        a.withdraw("app:store");
        assert_eq!(offered(&a), Vec::new());
        assert_eq!(offered(&b), vec![("app:store".to_owned(), ino_b)]);
    }

    #[test]
    fn reserved_and_multiline_names_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = File::create(dir.path().join("f")).expect("file");
        let handover = Handover::default();
        for name in [LOCK, "a\nb", ""] {
            assert!(handover.share(name, &file).is_err(), "{name:?}");
        }
        assert!(handover.offered().expect("offers").is_empty());
    }

    /// What was received is taken once, by name.
    #[test]
    fn a_received_file_is_taken_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = File::create(dir.path().join("f")).expect("file");
        let expected = file.metadata().expect("stat").ino();
        let handover = Handover::received(HashMap::from([("app:f".to_owned(), file.into())]));
        assert!(handover.take("app:other").is_none());
        assert_eq!(handover.take("app:f").as_ref().map(ino), Some(expected));
        assert!(handover.take("app:f").is_none());
    }
}
