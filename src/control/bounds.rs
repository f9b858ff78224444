//! Connection bounds shared by both transports: a [`Pool`] of connection
//! slots with a total and a cap per peer (the uid of a Unix peer, the IP
//! address of a TCP one), part of each kept for the `operate` role, which
//! makes room by *evicting* before it refuses.
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
//! - Slots go by role: `read` connections hold at most the total less the
//!   pool's operate reserve, and at most the per-peer cap less it from one
//!   peer, so a `read` peer never takes the last slots an `operate` caller
//!   needs; an `operate` connection may take any slot. A `read` newcomer
//!   over its role's share evicts only a `read` connection.
//!   `bounds::tests::read_peers_never_take_the_operate_reserve`, and over
//!   TLS `tests/it/control_tls.rs::read_peers_cannot_take_the_operate_slots`.
//! - When a bound is full, [`Pool::admit`] evicts before it refuses, under
//!   the pool's [`Evict`] rule: [`Evict::Oldest`] (the handshake stage: the
//!   connection that has had the longest to say its hello goes), or
//!   [`Evict::Idle`] (served connections: one with no request in flight,
//!   the longest idle first; then one whose only requests in flight are
//!   long-polls, `watch` and `replace_status`, the longest idle first).
//!   Idle means *holding nothing*: only admission and a request's start
//!   and end count as activity ([`Activity::touch`]), never a byte, so a
//!   peer that trickles bytes of a frame it never finishes is as idle as a
//!   silent one. A connection with another request in flight, or one
//!   admitted or answered within its grace (`ServerLimits::evict_grace`),
//!   is never evicted: a bound full of those refuses ([`Over`]), and the
//!   transport answers "busy".
//!   The victim is taken out of the pool at once (its slot is free for the
//!   newcomer) and its [`Slot::evicted`] token is cancelled, which closes
//!   it. `bounds::tests::idle_then_long_polls_are_evicted_never_busy_ones`,
//!   `bounds::tests::the_oldest_handshake_is_evicted`, and over real
//!   sockets `tests/it/control_hostile.rs`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use steadfast_protocol::command::Role;
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
    /// When the connection was admitted, or a request started or ended.
    last_ms: AtomicU64,
    /// When the frame being received began (its first byte), plus one;
    /// 0 while no frame is partly received.
    frame_since_ms: AtomicU64,
    /// Told when a frame begins (for the frame deadline's watch).
    frame_began: tokio::sync::Notify,
    /// Requests in flight that are not long-polls.
    busy: AtomicUsize,
    /// Long-polls in flight (`watch`, `replace_status`).
    long_polls: AtomicUsize,
    /// Cancelled when the pool evicts this connection.
    evicted: CancellationToken,
}

impl Activity {
    fn new(epoch: Instant) -> Self {
        let activity = Self {
            epoch,
            last_ms: AtomicU64::new(0),
            frame_since_ms: AtomicU64::new(0),
            frame_began: tokio::sync::Notify::new(),
            busy: AtomicUsize::new(0),
            long_polls: AtomicUsize::new(0),
            evicted: CancellationToken::new(),
        };
        activity.touch();
        activity
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Record activity now: admission, a request's start or end. Bytes do
    /// not count (a trickled frame is not a request).
    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A frame's first byte arrived now.
    pub(crate) fn frame_begins(&self) {
        let since = self.now_ms().saturating_add(1);
        self.frame_since_ms.store(since, Ordering::Relaxed);
        self.frame_began.notify_one();
    }

    /// The frame being received is whole.
    pub(crate) fn frame_ends(&self) {
        self.frame_since_ms.store(0, Ordering::Relaxed);
    }

    /// When the frame being received began; `None` between frames.
    pub(crate) fn frame_since(&self) -> Option<Instant> {
        match self.frame_since_ms.load(Ordering::Relaxed) {
            0 => None,
            since => Some(self.epoch + std::time::Duration::from_millis(since - 1)),
        }
    }

    /// Resolves when a frame begins (at once if one began since the last
    /// call).
    pub(crate) async fn frame_began(&self) {
        self.frame_began.notified().await;
    }

    /// Whether a request (a long-poll included) is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.busy.load(Ordering::SeqCst) > 0 || self.long_polls.load(Ordering::SeqCst) > 0
    }

    /// When it was admitted, or a request last started or ended.
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
        let now = self.now_ms();
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
    slots: HashMap<u64, Held<K>>,
}

/// One slot in the book: whose, in what role, doing what.
#[derive(Debug)]
struct Held<K> {
    key: K,
    role: Role,
    activity: Arc<Activity>,
}

/// The slots of one stage of one listener.
#[derive(Debug)]
pub(crate) struct Pool<K> {
    total: usize,
    per_peer: usize,
    /// Slots of the total, and of each peer's cap, that `read`
    /// connections may not hold.
    operate_reserve: usize,
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
            operate_reserve: 0,
            evict,
            epoch: Instant::now(),
            book: Arc::new(Mutex::new(Book {
                next_id: 0,
                slots: HashMap::new(),
            })),
        }
    }

    /// Keep `reserve` slots of the total, and of each peer's cap, for
    /// `operate` connections (the TLS transport's pools: with the cargo
    /// feature `tls`).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) const fn with_operate_reserve(mut self, reserve: usize) -> Self {
        self.operate_reserve = reserve;
        self
    }

    /// How many connections hold a slot.
    pub(crate) fn len(&self) -> usize {
        self.book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slots
            .len()
    }

    /// Admit an `operate` connection from `key` (see [`Self::admit_as`]).
    pub(crate) fn admit(&self, key: K) -> Result<Slot<K>, Over> {
        self.admit_as(key, Role::Operate)
    }

    /// Admit a connection from `key` in `role`, evicting under the pool's
    /// rule when a bound is full; or say which bound is full of
    /// connections that may not be evicted. The bounds: the total, the
    /// peer's cap, and for `read` both less the operate reserve. A victim
    /// must free a place in every bound the newcomer is over (a `read`
    /// newcomer over its role's share evicts a `read` connection).
    pub(crate) fn admit_as(&self, key: K, role: Role) -> Result<Slot<K>, Over> {
        let mut book = self.book.lock().unwrap_or_else(PoisonError::into_inner);
        let read = role == Role::Read;
        let count = |of_peer: bool, of_read: bool| {
            book.slots
                .values()
                .filter(|h| (!of_peer || h.key == key) && (!of_read || h.role == Role::Read))
                .count()
        };
        let over_peer = count(true, false) >= self.per_peer;
        let over_total = book.slots.len() >= self.total;
        let over_read_peer =
            read && count(true, true) >= self.per_peer.saturating_sub(self.operate_reserve);
        let over_read_total =
            read && count(false, true) >= self.total.saturating_sub(self.operate_reserve);
        if over_peer || over_total || over_read_peer || over_read_total {
            let over = if over_peer || over_read_peer {
                Over::Peer
            } else {
                Over::Total
            };
            let victim = book
                .slots
                .iter()
                .filter(|(_, h)| !(over_peer || over_read_peer) || h.key == key)
                .filter(|(_, h)| !(over_read_peer || over_read_total) || h.role == Role::Read)
                .filter_map(|(id, h)| {
                    let order = match self.evict {
                        Evict::Oldest => (0, *id),
                        Evict::Idle(grace) => h.activity.evictable(grace)?,
                    };
                    Some((order, *id))
                })
                .min()
                .map(|(_, id)| id)
                .ok_or(over)?;
            if let Some(held) = book.slots.remove(&victim) {
                held.activity.evicted.cancel();
            }
        }
        let id = book.next_id;
        book.next_id += 1;
        let activity = Arc::new(Activity::new(self.epoch));
        book.slots.insert(
            id,
            Held {
                key,
                role,
                activity: Arc::clone(&activity),
            },
        );
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

    #[tokio::test(start_paused = true)]
    async fn read_peers_never_take_the_operate_reserve() {
        // The total's reserve: read connections hold at most 3 of 4.
        let pool = Pool::new(4, 4, Evict::Idle(GRACE)).with_operate_reserve(1);
        let r1 = pool.admit_as("a", Role::Read).expect("read");
        let r2 = pool.admit_as("a", Role::Read).expect("read");
        let r3 = pool.admit_as("b", Role::Read).expect("read");
        let busy = (r1.activity().request(false), r2.activity().request(false));
        let r3_busy = r3.activity().request(false);
        assert_eq!(pool.admit_as("c", Role::Read).err(), Some(Over::Total));
        let o1 = pool.admit("c").expect("operate takes the reserved slot");
        let o1_busy = o1.activity().request(false);
        assert_eq!(pool.admit("c").err(), Some(Over::Total));
        // An idle read connection is evicted for a read newcomer; an idle
        // operate one is not.
        drop((r3_busy, o1_busy));
        tokio::time::advance(GRACE * 2).await;
        let r4 = pool
            .admit_as("c", Role::Read)
            .expect("evicts the idle read");
        assert!(r3.evicted().is_cancelled());
        assert!(!o1.evicted().is_cancelled());
        drop((busy, r4));

        // The peer's reserve: a peer's read connections hold at most 1 of 2.
        let pool = Pool::new(10, 2, Evict::Idle(GRACE)).with_operate_reserve(1);
        let r = pool.admit_as("a", Role::Read).expect("read");
        let _r_busy = r.activity().request(false);
        assert_eq!(pool.admit_as("a", Role::Read).err(), Some(Over::Peer));
        let _o = pool
            .admit("a")
            .expect("operate takes the peer's reserved slot");
        let _other = pool.admit_as("b", Role::Read).expect("another peer reads");
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
