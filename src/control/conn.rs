//! The client's connection: tarpc's frames, driven by the calls waiting on
//! them rather than by a dispatch task of their own.
//!
//! tarpc's client sends each call through a channel to a task that owns
//! the transport, and the answer comes back through a oneshot; every call
//! also registers a timer in that task's deadline queue. On a command
//! line's one thread that is two task hops and a timer registration (which
//! writes the runtime's eventfd) per call: the largest part of what a
//! `snapshot` cost beyond a raw ping-pong. Here the call itself
//! writes its frame and reads the answers; the frames are the same
//! (`ClientMessage` out, `Response` in, through the same codec), so either
//! end may be a plain tarpc peer.
//!
//! Invariants:
//! - Any number of calls may be in flight on one connection (tarpc's
//!   multiplexing): each writes its frame under the connection's lock, and
//!   whichever call is polled reads what has arrived and hands each answer
//!   to the call it is for (waking it). The transport holds the waker of
//!   the call that polled it last, the *driver*; a driver that leaves (its
//!   answer came, its deadline passed, it was dropped) while other calls
//!   wait wakes one of them, which polls and becomes the driver: no answer
//!   is left unread. `tests/it/control.rs::concurrent_calls_share_one_connection`
//!   (a `watch` long-poll and snapshots on one client at once).
//! - The server is given the call's deadline less a margin (an eighth of
//!   the time left, at most 1 s: [`for_the_server`]), so a frame that
//!   arrives after its caller gave up finds no time left there.
//!   `conn::tests::the_server_gets_the_deadline_less_a_margin`,
//!   `tests/it/control_hostile.rs::an_abandoned_exit_of_a_connected_client_is_dropped`.
//! - A call's deadline is its own: past it the call ends with
//!   [`RpcError::DeadlineExceeded`], and an answer that comes later is
//!   dropped, as tarpc's client does. The timer is kept by the connection
//!   and reset for the next call: a later deadline moves it without
//!   touching the runtime's timer wheel (`Sleep::reset`).
//! - A call dropped after its frame was written sends tarpc's `Cancel`
//!   for it (written at once if the socket has room, else by the next
//!   call), so the server stops working on it, as with tarpc's client.
//! - A call that gives up after its frame was written, on a connection the
//!   server has not served yet (its first byte unread:
//!   [`Wire::unserved_while`]), shuts the connection down instead: the
//!   frame is never read late (the server's greeting fails).
//!   `tests/it/control_hostile.rs::an_abandoned_pipelined_exit_is_never_read`.
//! - A read or write error, or the end of the stream, breaks the
//!   connection for every call on it: [`RpcError::Channel`] or
//!   [`RpcError::Shutdown`], as tarpc's dispatch ends them, and the caller
//!   dials again ([`Wire::is_broken`]). [`Wire::peer_closed`] asks the
//!   kernel before a command is sent whether the daemon already closed the
//!   connection (nothing is then sent on it).

use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures::{Sink, Stream};
use steadfast_protocol::control::{ControlRequest, ControlResponse};
use tarpc::client::RpcError;
use tarpc::{ChannelError, ClientMessage, Request, Response};
use tokio::time::Sleep;

/// A transport error as tarpc's `RpcError::Channel` carries it.
type DynError = dyn std::error::Error + Send + Sync + 'static;

/// The frames of one connection: requests out, responses in.
pub(crate) trait Frames:
    Stream<Item = io::Result<Response<ControlResponse>>>
    + Sink<ClientMessage<ControlRequest>, Error = io::Error>
    + Send
{
}

impl<T> Frames for T where
    T: Stream<Item = io::Result<Response<ControlResponse>>>
        + Sink<ClientMessage<ControlRequest>, Error = io::Error>
        + Send
{
}

/// Why a connection is broken, for every call that finds it so.
#[derive(Clone)]
enum Broken {
    /// The daemon closed it (the stream ended).
    Shutdown,
    /// A read or write failed.
    Channel(ChannelError<DynError>),
}

impl Broken {
    fn rpc(&self) -> RpcError {
        match self {
            Self::Shutdown => RpcError::Shutdown,
            Self::Channel(error) => RpcError::Channel(error.clone()),
        }
    }
}

/// One call in flight.
struct InFlight {
    id: u64,
    /// Its frame is in the transport (so a drop sends `Cancel`).
    sent: bool,
    /// Whom to wake when its answer comes (or the connection breaks).
    waker: Option<Waker>,
    /// Its answer, read by another call.
    answer: Option<Result<ControlResponse, RpcError>>,
}

/// What the lock guards.
struct State {
    frames: Pin<Box<dyn Frames>>,
    next_id: u64,
    /// The calls in flight, oldest first (a handful at most, usually one).
    calls: Vec<InFlight>,
    /// Set once, for good.
    broken: Option<Broken>,
    /// The call whose waker the transport holds (the last to poll it).
    driver: Option<u64>,
    /// Timers of calls that ended, for the next ones.
    timers: Vec<Pin<Box<Sleep>>>,
}

/// Whether the server has not served the connection yet (its first byte
/// not read).
type Unserved = Box<dyn Fn() -> bool + Send + Sync>;

/// One connection's frames, shared by the calls on it.
pub(crate) struct Wire {
    state: Mutex<State>,
    /// A duplicate of the socket, to ask the kernel whether the peer has
    /// closed it without reading from the stream.
    probe: Option<OwnedFd>,
    /// Whether the server has yet to serve it (see [`Self::unserved_while`]).
    unserved: Option<Unserved>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").finish_non_exhaustive()
    }
}

impl Wire {
    /// The connection over `frames`; `probe`: a duplicate of its socket.
    pub(crate) fn new(frames: impl Frames + 'static, probe: Option<OwnedFd>) -> Self {
        Self {
            state: Mutex::new(State {
                frames: Box::pin(frames),
                next_id: 0,
                calls: Vec::new(),
                broken: None,
                driver: None,
                timers: Vec::new(),
            }),
            probe,
            unserved: None,
        }
    }

    /// While `unserved` says the server has not served this connection
    /// (its first byte not read), a call that gives up after its frame was
    /// written shuts the connection down instead of leaving the frame to
    /// be read late: the server's greeting then fails, and the frame is
    /// never read.
    pub(crate) fn unserved_while(
        mut self,
        unserved: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        self.unserved = Some(Box::new(unserved));
        self
    }

    /// A call whose frame was written gives up: before the server served
    /// the connection, shut it down (every call on it ends broken).
    fn abandoned(&self, state: &mut State) {
        if !self.unserved.as_ref().is_some_and(|unserved| unserved()) {
            return;
        }
        if let Some(probe) = &self.probe {
            let _ = rustix::net::shutdown(probe, rustix::net::Shutdown::Both);
        }
        state.break_with(Broken::Shutdown);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call on it has found it broken (dial again).
    pub(crate) fn is_broken(&self) -> bool {
        self.lock().broken.is_some()
    }

    /// Whether the kernel says the peer closed the socket (or reset it):
    /// nothing sent on it now would be read. `false` when it cannot tell.
    pub(crate) fn peer_closed(&self) -> bool {
        let Some(probe) = &self.probe else {
            return false;
        };
        let mut byte = [0u8; 1];
        match rustix::net::recv(
            probe,
            &mut byte,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        ) {
            Ok((0, _)) => true,
            Ok(_) => false,
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => false,
            Err(_) => true,
        }
    }

    /// Read what has arrived while no call is in flight (a Unix server's
    /// first byte, taken by the stream under the frames): ready once
    /// something was read, the stream ended or the connection broke.
    pub(crate) fn poll_idle(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        if state.broken.is_some() {
            return Poll::Ready(());
        }
        match state.frames.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(response))) => {
                let _ = state.deliver(response, u64::MAX);
            }
            Poll::Ready(Some(Err(error))) => {
                state.break_with(Broken::Channel(ChannelError::Read(Arc::new(error))));
            }
            Poll::Ready(None) => state.break_with(Broken::Shutdown),
            Poll::Pending => return Poll::Pending,
        }
        Poll::Ready(())
    }

    /// Send `message` with the deadline `deadline` and wait for its answer.
    pub(crate) fn call(&self, message: ControlRequest, deadline: Instant) -> Call<'_> {
        Call {
            wire: self,
            message: Some(message),
            deadline,
            id: None,
            timer: None,
        }
    }
}

impl State {
    fn position(&self, id: u64) -> Option<usize> {
        self.calls.iter().position(|call| call.id == id)
    }

    /// Break the connection: every call in flight is woken to find it so.
    fn break_with(&mut self, broken: Broken) {
        if self.broken.is_none() {
            self.broken = Some(broken);
        }
        for call in &mut self.calls {
            if let Some(waker) = call.waker.take() {
                waker.wake();
            }
        }
    }

    /// Hand `response` to its call: `me`'s answer is returned, another's
    /// is kept for it (and it is woken). An answer for no call in flight
    /// (one that ended: deadline, drop) is dropped.
    fn deliver(
        &mut self,
        response: Response<ControlResponse>,
        me: u64,
    ) -> Option<Result<ControlResponse, RpcError>> {
        let answer = response.message.map_err(RpcError::Server);
        if response.request_id == me {
            return Some(answer);
        }
        if let Some(at) = self.position(response.request_id) {
            let call = &mut self.calls[at];
            call.answer = Some(answer);
            if let Some(waker) = call.waker.take() {
                waker.wake();
            }
        }
        None
    }

    /// `id` leaves: forget it, and if it held the transport's waker while
    /// others wait, wake one of them to take over.
    fn leave(&mut self, id: u64, timer: Option<Pin<Box<Sleep>>>) -> Option<InFlight> {
        let left = self.position(id).map(|at| self.calls.remove(at));
        if let Some(timer) = timer {
            self.timers.push(timer);
        }
        if self.driver == Some(id) {
            self.driver = None;
            if let Some(next) = self.calls.iter_mut().find(|call| call.answer.is_none())
                && let Some(waker) = next.waker.take()
            {
                waker.wake();
            }
        }
        left
    }
}

/// The most a call keeps back from the deadline it sends (see
/// [`for_the_server`]).
const MAX_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The deadline a call gives the server: its own, less an eighth of the
/// time left (at most [`MAX_MARGIN`]). The server measures the time left
/// from a frame's arrival, less how much longer the frame took than the
/// connection's quickest one (`codec`); that quickest delivery is not
/// zero, so a frame that arrives just after its caller gave up could look
/// as if it had a little time left. The margin covers that: such a frame
/// finds nothing left, and is never run.
fn for_the_server(deadline: Instant, now: Instant) -> Instant {
    let left = deadline.saturating_duration_since(now);
    deadline - (left / 8).min(MAX_MARGIN)
}

/// A call in flight on a [`Wire`] (see the module's invariants).
pub(crate) struct Call<'a> {
    wire: &'a Wire,
    /// The request, until its frame is written.
    message: Option<ControlRequest>,
    deadline: Instant,
    /// Its id, once polled.
    id: Option<u64>,
    /// Its deadline's timer, once it waited.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Call<'_> {
    /// Finish with `result`: leave the connection's books.
    fn end<T>(&mut self, state: &mut State, result: T) -> Poll<T> {
        if let Some(id) = self.id.take() {
            state.leave(id, self.timer.take());
        }
        Poll::Ready(result)
    }

    /// Write this call's frame, once the transport takes one.
    fn send(
        &mut self,
        state: &mut State,
        id: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), RpcError>> {
        match state.frames.as_mut().poll_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(error)) => {
                let broken = Broken::Channel(ChannelError::Ready(Arc::new(error)));
                state.break_with(broken.clone());
                return Poll::Ready(Err(broken.rpc()));
            }
            Poll::Pending => return Poll::Pending,
        }
        let Some(message) = self.message.take() else {
            return Poll::Ready(Ok(()));
        };
        let mut context = tarpc::context::current();
        context.deadline = for_the_server(self.deadline, Instant::now());
        let frame = ClientMessage::Request(Request {
            context,
            id,
            message,
        });
        if let Err(error) = state.frames.as_mut().start_send(frame) {
            // tarpc's dispatch fails that one request; a frame that does
            // not encode leaves the stream as it was.
            return Poll::Ready(Err(RpcError::Send(Box::new(error))));
        }
        if let Some(at) = state.position(id) {
            state.calls[at].sent = true;
        }
        Poll::Ready(Ok(()))
    }
}

impl Future for Call<'_> {
    type Output = Result<ControlResponse, RpcError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut guard = this.wire.lock();
        let state = &mut *guard;
        let id = match this.id {
            Some(id) => id,
            None => {
                if let Some(broken) = &state.broken {
                    return Poll::Ready(Err(broken.rpc()));
                }
                let id = state.next_id;
                state.next_id += 1;
                state.calls.push(InFlight {
                    id,
                    sent: false,
                    waker: None,
                    answer: None,
                });
                this.id = Some(id);
                id
            }
        };
        let Some(at) = state.position(id) else {
            return this.end(state, Err(RpcError::Shutdown));
        };
        if let Some(answer) = state.calls[at].answer.take() {
            return this.end(state, answer);
        }
        if let Some(broken) = &state.broken {
            let error = broken.rpc();
            return this.end(state, Err(error));
        }
        if this.message.is_some()
            && let Poll::Ready(Err(error)) = this.send(state, id, cx)
        {
            return this.end(state, Err(error));
        }
        if let Poll::Ready(Err(error)) = state.frames.as_mut().poll_flush(cx) {
            let broken = Broken::Channel(ChannelError::Flush(Arc::new(error)));
            state.break_with(broken.clone());
            return this.end(state, Err(broken.rpc()));
        }
        loop {
            match state.frames.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(response))) => {
                    if let Some(answer) = state.deliver(response, id) {
                        return this.end(state, answer);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    let broken = Broken::Channel(ChannelError::Read(Arc::new(error)));
                    state.break_with(broken.clone());
                    return this.end(state, Err(broken.rpc()));
                }
                Poll::Ready(None) => {
                    state.break_with(Broken::Shutdown);
                    return this.end(state, Err(RpcError::Shutdown));
                }
                Poll::Pending => break,
            }
        }
        // Waiting: for the answer, the socket, or the deadline.
        let deadline = this.deadline;
        let timer = this.timer.get_or_insert_with(|| match state.timers.pop() {
            Some(mut timer) => {
                timer.as_mut().reset(deadline.into());
                timer
            }
            None => Box::pin(tokio::time::sleep_until(deadline.into())),
        });
        if timer.as_mut().poll(cx).is_ready() {
            if state.position(id).is_some_and(|at| state.calls[at].sent) {
                this.wire.abandoned(state);
            }
            return this.end(state, Err(RpcError::DeadlineExceeded));
        }
        state.driver = Some(id);
        if let Some(at) = state.position(id) {
            let call = &mut state.calls[at];
            if !call.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                call.waker = Some(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let mut guard = self.wire.lock();
        let state = &mut *guard;
        let was_driver = state.driver == Some(id);
        let left = state.leave(id, self.timer.take());
        // Dropped while its answer was awaited: tell the server, as tarpc's
        // client does, without waiting (a full socket keeps the frame for
        // the next call to flush).
        let abandoned = left.is_some_and(|call| call.sent && call.answer.is_none());
        if abandoned && state.broken.is_none() {
            self.wire.abandoned(state);
        }
        if abandoned && state.broken.is_none() {
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(Ok(())) = state.frames.as_mut().poll_ready(&mut cx) {
                let cancel = ClientMessage::Cancel {
                    trace_context: tarpc::context::current().trace_context,
                    request_id: id,
                };
                if state.frames.as_mut().start_send(cancel).is_ok() {
                    let _ = state.frames.as_mut().poll_flush(&mut cx);
                }
            }
            // The transport may hold the noop waker now: another call
            // waiting takes over.
            if !was_driver
                && let Some(next) = state.calls.iter_mut().find(|call| call.answer.is_none())
                && let Some(waker) = next.waker.take()
            {
                waker.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_server_gets_the_deadline_less_a_margin() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        assert_eq!(for_the_server(now + secs(8), now), now + secs(7));
        assert_eq!(
            for_the_server(now + Duration::from_millis(800), now),
            now + Duration::from_millis(700)
        );
        // At most 1 s kept back.
        assert_eq!(for_the_server(now + secs(80), now), now + secs(79));
        // A deadline already passed stays as it is.
        assert_eq!(for_the_server(now, now + secs(1)), now);
    }
}
