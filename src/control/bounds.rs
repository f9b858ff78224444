//! Connection bounds shared by both transports: a total, and a cap per
//! peer (the uid of a Unix peer, the IP address of a TCP one), so one
//! client cannot take every slot.
//!
//! Invariant: an [`Admission`] holds one slot of the total and one of its
//! peer's for exactly as long as it lives (dropping it gives both back).
//! `bounds::tests::a_peer_cannot_take_every_slot`, and over real sockets
//! `tests/control.rs::in_flight_and_connection_bounds_hold` and
//! `tests/control_tcp.rs::connections_per_peer_are_bounded`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which bound turned a connection away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// The server's total.
    Total,
    /// This peer's share.
    Peer,
}

type Counts<K> = Arc<Mutex<HashMap<K, usize>>>;

/// The bounds of one listener.
#[derive(Debug)]
pub(crate) struct Bounds<K> {
    total: Arc<Semaphore>,
    per_peer: usize,
    peers: Counts<K>,
}

/// One admitted connection's slots.
#[derive(Debug)]
pub(crate) struct Admission<K: Hash + Eq> {
    _total: OwnedSemaphorePermit,
    peers: Counts<K>,
    key: K,
}

impl<K: Hash + Eq + Clone> Bounds<K> {
    pub(crate) fn new(total: usize, per_peer: usize) -> Self {
        Self {
            total: Arc::new(Semaphore::new(total)),
            per_peer,
            peers: Arc::default(),
        }
    }

    /// Admit a connection from `key`, or say which bound is full.
    pub(crate) fn admit(&self, key: K) -> Result<Admission<K>, Over> {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let count = peers.get(&key).copied().unwrap_or(0);
        if count >= self.per_peer {
            return Err(Over::Peer);
        }
        let permit = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Over::Total)?;
        peers.insert(key.clone(), count + 1);
        Ok(Admission {
            _total: permit,
            peers: Arc::clone(&self.peers),
            key,
        })
    }
}

impl<K: Hash + Eq> Drop for Admission<K> {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = peers.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                peers.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_cannot_take_every_slot() {
        let bounds = Bounds::new(3, 2);
        let a1 = bounds.admit("a").expect("first");
        let a2 = bounds.admit("a").expect("second");
        assert_eq!(bounds.admit("a").err(), Some(Over::Peer));
        let b1 = bounds.admit("b").expect("another peer");
        assert_eq!(bounds.admit("c").err(), Some(Over::Total));
        drop(a1);
        let a3 = bounds.admit("a").expect("a slot came back");
        drop((a2, a3, b1));
        assert!(bounds.peers.lock().expect("lock").is_empty());
        let _ = bounds.admit("c").expect("everything came back");
    }
}
