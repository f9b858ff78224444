//! Connection bounds shared by both transports: a [`Pool`] of connection
//! slots with a total and a cap per peer (the uid of a Unix peer, the IP
//! address of a TCP one), which makes room by *evicting* before it refuses.
//!
//! A transport keeps one pool per stage: the Unix socket one (its peers'
//! uid is checked before a slot is asked for), TCP two — one for
//! connections still in their token handshake, one for authenticated ones —
//! so a connection that has not presented the token never takes an
//! authenticated client's slot.
//!
//! Invariants, and the tests that check them:
//! - A [`Slot`] holds one place of the total and one of its peer's for as
//!   long as it lives and is not evicted (dropping it gives both back).
//!   `bounds::tests::a_peer_cannot_take_every_slot`.
//! - When a bound is full, [`Pool::admit`] evicts before it refuses, under
//!   the pool's [`Evict`] rule: [`Evict::Oldest`] (the handshake stage: the
//!   connection that has had the longest to say its hello goes), or
//!   [`Evict::Idle`] (served connections: one with no request in flight,
//!   the longest idle first; then one whose only requests in flight are
//!   long-polls, `watch` and `replace_status`, the longest idle first). A
//!   connection with another request in flight, or one on which something
//!   moved within its grace (`ServerLimits::evict_grace`), is never evicted: a bound
//!   full of those refuses ([`Over`]), and the transport answers "busy".
//!   The victim is taken out of the pool at once (its slot is free for the
//!   newcomer) and its [`Slot::evicted`] token is cancelled, which closes
//!   it. `bounds::tests::idle_then_long_polls_are_evicted_never_busy_ones`,
//!   `bounds::tests::the_oldest_handshake_is_evicted`, and over real
//!   sockets `tests/control_hostile.rs`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Which bound turned a connection away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// The server's total.
    Total,
    /// This peer's share.
    Peer,
}

/// Which connection a full pool gives up to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evict {
    /// The oldest admitted (handshake stage: nothing is in flight there).
    Oldest,
    /// An idle one, then a long-polling one, the longest idle first; never
    /// one with another request in flight, nor one on which something moved
    /// within the grace given here (a client just admitted, or just
    /// answered, is about to send: evicting it would turn a burst into
    /// churn).
    Idle(std::time::Duration),
}

/// What a served connection is doing, as the pool sees it.
#[derive(Debug)]
pub(crate) struct Activity {
    /// When the pool was made; times below are milliseconds after it.
    epoch: Instant,
    /// When a byte last moved, or a request started or ended.
    last_ms: AtomicU64,
    /// Requests in flight that are not long-polls.
    busy: AtomicUsize,
    /// Long-polls in flight (`watch`, `replace_status`).
    long_polls: AtomicUsize,
    /// Cancelled when the pool evicts this connection.
    evicted: CancellationToken,
}

impl Activity {
    /// Record that something moved now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// When something last moved.
    pub(crate) fn last(&self) -> Instant {
        self.epoch + std::time::Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Count a request in flight until the guard drops.
    pub(crate) fn request(self: &Arc<Self>, long_poll: bool) -> InFlight {
        let counter = if long_poll {
            &self.long_polls
        } else {
            &self.busy
        };
        counter.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InFlight {
            activity: Arc::clone(self),
            long_poll,
        }
    }

    /// Whether it may be evicted, and how early: `Some((rank, last))`,
    /// lower ranks first. Not while a request other than a long-poll is in
    /// flight, nor within `grace` of its last move.
    fn evictable(&self, grace: std::time::Duration) -> Option<(u8, u64)> {
        if self.busy.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let grace = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(last) < grace {
            return None;
        }
        let rank = u8::from(self.long_polls.load(Ordering::SeqCst) > 0);
        Some((rank, last))
    }
}

/// One request in flight on a connection (see [`Activity::request`]).
#[derive(Debug)]
pub(crate) struct InFlight {
    activity: Arc<Activity>,
    long_poll: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let counter = if self.long_poll {
            &self.activity.long_polls
        } else {
            &self.activity.busy
        };
        counter.fetch_sub(1, Ordering::SeqCst);
        self.activity.touch();
    }
}

/// The pool's book: who holds a slot.
#[derive(Debug)]
struct Book<K> {
    next_id: u64,
    slots: HashMap<u64, (K, Arc<Activity>)>,
}

/// The slots of one stage of one listener.
#[derive(Debug)]
pub(crate) struct Pool<K> {
    total: usize,
    per_peer: usize,
    evict: Evict,
    epoch: Instant,
    book: Arc<Mutex<Book<K>>>,
}

/// One admitted connection's place in a [`Pool`].
#[derive(Debug)]
pub(crate) struct Slot<K: Hash + Eq> {
    id: u64,
    activity: Arc<Activity>,
    book: Arc<Mutex<Book<K>>>,
}

impl<K: Hash + Eq> Slot<K> {
    /// What the connection is doing (shared with the pool).
    pub(crate) fn activity(&self) -> Arc<Activity> {
        Arc::clone(&self.activity)
    }

    /// Cancelled when the pool evicted this connection: close it.
    pub(crate) fn evicted(&self) -> CancellationToken {
        self.activity.evicted.clone()
    }
}

impl<K: Hash + Eq + Clone> Pool<K> {
    pub(crate) fn new(total: usize, per_peer: usize, evict: Evict) -> Self {
        Self {
            total,
            per_peer,
            evict,
            epoch: Instant::now(),
            book: Arc::new(Mutex::new(Book {
                next_id: 0,
                slots: HashMap::new(),
            })),
        }
    }

    /// How many connections hold a slot.
    pub(crate) fn len(&self) -> usize {
        self.book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slots
            .len()
    }

    /// Admit a connection from `key`, evicting under the pool's rule when a
    /// bound is full; or say which bound is full of connections that may
    /// not be evicted.
    pub(crate) fn admit(&self, key: K) -> Result<Slot<K>, Over> {
        let mut book = self.book.lock().unwrap_or_else(PoisonError::into_inner);
        let of_peer = book.slots.values().filter(|(k, _)| *k == key).count();
        let full = if of_peer >= self.per_peer {
            Some(Over::Peer)
        } else if book.slots.len() >= self.total {
            Some(Over::Total)
        } else {
            None
        };
        if let Some(over) = full {
            let victim = book
                .slots
                .iter()
                .filter(|(_, (k, _))| over == Over::Total || *k == key)
                .filter_map(|(id, (_, activity))| {
                    let order = match self.evict {
                        Evict::Oldest => (0, *id),
                        Evict::Idle(grace) => activity.evictable(grace)?,
                    };
                    Some((order, *id))
                })
                .min()
                .map(|(_, id)| id)
                .ok_or(over)?;
            if let Some((_, activity)) = book.slots.remove(&victim) {
                activity.evicted.cancel();
            }
        }
        let id = book.next_id;
        book.next_id += 1;
        let activity = Arc::new(Activity {
            epoch: self.epoch,
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            long_polls: AtomicUsize::new(0),
            evicted: CancellationToken::new(),
        });
        activity.touch();
        book.slots.insert(id, (key, Arc::clone(&activity)));
        Ok(Slot {
            id,
            activity,
            book: Arc::clone(&self.book),
        })
    }
}

impl<K: Hash + Eq> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut book = self.book.lock().unwrap_or_else(PoisonError::into_inner);
        book.slots.remove(&self.id);
    }
}

/// How every transport's guard shuts down: stop accepting and wait until the
/// accept loop `task` is gone (the socket or port is closed), let the
/// connections `served` holds finish their calls for up to `grace` (the
/// answer to the `exit` that ended the daemon is written), then `cancel`
/// the rest.
pub(crate) async fn stop_serving<K: Hash + Eq + Clone>(
    task: &mut tokio::task::JoinHandle<()>,
    served: &Pool<K>,
    cancel: &CancellationToken,
    grace: std::time::Duration,
) {
    task.abort();
    let _ = task.await;
    let deadline = Instant::now() + grace;
    while served.len() > 0 && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cancel.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: std::time::Duration = std::time::Duration::from_millis(500);

    #[tokio::test]
    async fn a_peer_cannot_take_every_slot() {
        let pool = Pool::new(3, 2, Evict::Idle(GRACE));
        let a1 = pool.admit("a").expect("first");
        let a2 = pool.admit("a").expect("second");
        let _busy = (a1.activity().request(false), a2.activity().request(false));
        assert_eq!(pool.admit("a").err(), Some(Over::Peer));
        let b1 = pool.admit("b").expect("another peer");
        let _b_busy = b1.activity().request(false);
        assert_eq!(pool.admit("c").err(), Some(Over::Total));
        drop(_busy);
        drop(a1);
        let a3 = pool.admit("a").expect("a slot came back");
        drop((a2, a3, b1));
        assert_eq!(pool.len(), 0);
        let _ = pool.admit("c").expect("everything came back");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_then_long_polls_are_evicted_never_busy_ones() {
        let pool = Pool::new(3, 3, Evict::Idle(GRACE));
        let busy = pool.admit("u").expect("busy");
        let _b = busy.activity().request(false);
        let polling = pool.admit("u").expect("polling");
        let _p = polling.activity().request(true);
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        let idle = pool.admit("u").expect("idle");
        // Within its grace, the idle one is spared: the long-poll goes.
        tokio::time::advance(GRACE / 2).await;
        let early = pool.admit("u").expect("room made");
        assert!(polling.evicted().is_cancelled());
        assert!(!idle.evicted().is_cancelled());
        drop(early);
        let polling = pool.admit("u").expect("polling again");
        let _p = polling.activity().request(true);
        tokio::time::advance(GRACE * 2).await;
        // Past their grace, the idle one goes first although the long-poll
        // has waited as long.
        let newcomer = pool.admit("u").expect("room made");
        assert!(idle.evicted().is_cancelled());
        assert!(!polling.evicted().is_cancelled());
        // Then the long-poll; never the busy one.
        let _n = newcomer.activity().request(false);
        let _second = pool.admit("u").expect("room made again");
        assert!(polling.evicted().is_cancelled());
        assert!(!busy.evicted().is_cancelled());
        let _s = _second.activity().request(false);
        assert_eq!(pool.admit("u").err(), Some(Over::Peer));
        assert_eq!(pool.len(), 3);
    }

    #[tokio::test]
    async fn the_oldest_handshake_is_evicted() {
        let pool = Pool::new(2, 2, Evict::Oldest);
        let first = pool.admit("ip").expect("first");
        let second = pool.admit("ip").expect("second");
        let _third = pool.admit("ip").expect("third evicts");
        assert!(first.evicted().is_cancelled());
        assert!(!second.evicted().is_cancelled());
        drop(first);
        assert_eq!(pool.len(), 2);
    }
}
