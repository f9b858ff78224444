//! A served connection that wakes itself is polled again in place.
//!
//! tarpc's server channel wakes its own task while it runs: answering a
//! request sends the response to the channel's own queue, and its deadline
//! queue wakes it on every insert and on becoming empty. On tokio's
//! multi-thread runtime a task woken during its own poll is rescheduled as
//! a *yield*, which wakes another (parked) worker thread to share the work;
//! that worker finds nothing and parks again — a futex wake and a context
//! switch on another core for every call, the largest part of what a call
//! costs beyond a raw ping-pong on a busy 2-core machine.
//!
//! [`RepollOnSelfWake`] gives the future it wraps its own waker: a wake that arrives
//! while the future is being polled (from itself, or from another thread in
//! that window) marks it to be polled again at once, on the same thread, as
//! tokio would have done later; any other wake goes to the task's waker as
//! usual. At most [`MAX_POLLS`] polls run in a row before it yields to the
//! scheduler like any task, so a future that keeps waking itself (tokio's
//! cooperative budget spent) cannot starve others. No wake is lost: a wake
//! is either seen by the poller after its poll, or forwarded (see
//! [`Flag::wake_by_ref`]). Checked end to end by every control test (every
//! served connection runs inside one).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Polls in a row, at most, before the task yields to the scheduler.
pub(crate) const MAX_POLLS: usize = 8;

/// What the wrapped future's waker reaches.
#[derive(Default)]
struct Flag {
    /// The wrapped future is being polled now.
    polling: AtomicBool,
    /// A wake arrived while it was.
    woken: AtomicBool,
    /// The task's own waker, for wakes outside a poll.
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
            return;
        }
        self.woken.store(true, Ordering::SeqCst);
        // The poll may have ended between the two loads, before or after
        // the poller looked at `woken`: whoever takes the mark handles it,
        // so it is handled exactly once.
        if !self.polling.load(Ordering::SeqCst) && self.woken.swap(false, Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

/// `inner`, polled again in place when it wakes itself (module docs).
pub(crate) struct RepollOnSelfWake<F> {
    /// The wrapped future.
    inner: Pin<Box<F>>,
    /// What its waker reaches.
    flag: Arc<Flag>,
    /// Its waker (one for its whole life, so `will_wake` holds).
    waker: Waker,
}

impl<F: Future> RepollOnSelfWake<F> {
    /// Wrap `inner`.
    pub(crate) fn new(inner: F) -> Self {
        let flag = Arc::new(Flag::default());
        Self {
            inner: Box::pin(inner),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
        }
    }
}

impl<F: Future> Future for RepollOnSelfWake<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.flag.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..MAX_POLLS {
            this.flag.polling.store(true, Ordering::SeqCst);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            this.flag.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.flag.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking itself: let the scheduler run others first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_self_wake_is_polled_again_in_place() {
        // Wakes itself on its first three polls, then is ready.
        let mut polls = 0;
        let counted = std::future::poll_fn(|cx| {
            polls += 1;
            if polls < 4 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(polls)
            }
        });
        let mut wrapped = RepollOnSelfWake::new(counted);
        let outer_wakes = Arc::new(Counter::default());
        let outer = Waker::from(Arc::clone(&outer_wakes));
        let mut cx = Context::from_waker(&outer);
        // One poll from the task runs all four, and the task is not woken.
        assert_eq!(Pin::new(&mut wrapped).poll(&mut cx), Poll::Ready(4));
        assert_eq!(outer_wakes.0.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_wake_after_the_poll_reaches_the_task_and_a_busy_loop_yields() {
        let stash: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let kept = Arc::clone(&stash);
        let mut wrapped = RepollOnSelfWake::new(std::future::poll_fn(move |cx| {
            *kept.lock().expect("lock") = Some(cx.waker().clone());
            Poll::<()>::Pending
        }));
        let outer_wakes = Arc::new(Counter::default());
        let outer = Waker::from(Arc::clone(&outer_wakes));
        let mut cx = Context::from_waker(&outer);
        assert!(Pin::new(&mut wrapped).poll(&mut cx).is_pending());
        assert_eq!(outer_wakes.0.load(Ordering::SeqCst), 0);
        stash.lock().expect("lock").take().expect("a waker").wake();
        assert_eq!(outer_wakes.0.load(Ordering::SeqCst), 1, "forwarded");

        // Always waking itself: MAX_POLLS polls, then one wake of the task.
        let mut polls = 0usize;
        let mut spinning = RepollOnSelfWake::new(std::future::poll_fn(|cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        }));
        assert!(Pin::new(&mut spinning).poll(&mut cx).is_pending());
        drop(spinning);
        assert_eq!(polls, MAX_POLLS);
        assert_eq!(outer_wakes.0.load(Ordering::SeqCst), 2, "yielded");
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}
