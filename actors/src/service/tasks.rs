//! The work a [`Runtime`] owns besides its serving tasks: the tasks it
//! spawns for connections and other short jobs ([`Tracker`]), and the accept
//! loop that serves a listener through them ([`Runtime::accept_loop`]).
//!
//! Invariant: **whatever a runtime starts ends with it.** A task spawned
//! through a runtime's [`Tracker`] is cancelled (its [`Shutdown`] begins)
//! when the runtime's shutdown begins, and [`Runtime::shutdown_tasks`]
//! waits for it within the same grace as the serving tasks; one still
//! running at the end of the grace is aborted, awaited, and named among the
//! aborted tasks. Once shutdown has begun (or the runtime is dropped) the
//! tracker spawns nothing more, and a dropped runtime aborts what it
//! tracked. So after a drain no connection of the old runtime is served,
//! whatever its client does. Checked by
//! `service::tests::shutdown_waits_for_tracked_tasks_and_aborts_the_late`,
//! `service::tests::a_tracker_spawns_nothing_once_shutdown_began`,
//! `service::tests::dropping_a_runtime_aborts_its_tracked_tasks`,
//! `service::tests::an_accept_loop_owns_its_connections`, and end to end
//! (kvd, across `stop` → `reinit` → `start`) by
//! `tests/it/drain_owns.rs`.
//!
//! The accept loop never ends on an accept error (it waits with
//! [`AcceptBackoff`]: a full descriptor table pauses it), stops accepting
//! as soon as shutdown begins (its listener is closed then), and hands each
//! connection to the service's handler in a task of the tracker's.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Runtime, panic_message};
use crate::accept::AcceptBackoff;

/// Spawns tasks a [`Runtime`] owns: each is told when the runtime shuts
/// down, waited for by the drain within its grace, and aborted (and named)
/// past it. Cheap to clone; ask the runtime for it with
/// [`Runtime::tracker`]. A task that ends, either way, ends only itself:
/// unlike a [`Runtime::spawn`] serving task, it does not end the runtime.
#[derive(Clone)]
pub struct Tracker {
    inner: Arc<Inner>,
}

struct Inner {
    /// What [`Runtime::shutdown_tasks`] waits on: closed once shutdown
    /// begins, empty once every tracked future has been dropped.
    tracker: TaskTracker,
    /// The runtime's shutdown token.
    shutdown: CancellationToken,
    /// The tasks still running, by id: their names and how to abort them.
    live: Mutex<Live>,
}

#[derive(Default)]
struct Live {
    /// Set when shutdown begins or the runtime is dropped: nothing more is
    /// spawned (a task spawned after the drain's wait would outlive it).
    closed: bool,
    next: u64,
    /// Each one's name, and its abort handle once it is spawned.
    tasks: HashMap<u64, (String, Option<AbortHandle>)>,
}

impl fmt::Debug for Tracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracker")
            .field("running", &self.len())
            .finish_non_exhaustive()
    }
}

/// A [`Tracker`] refused a task: the runtime's shutdown has begun (or the
/// runtime is gone). The task was dropped without being run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the runtime is shutting down")]
pub struct ShuttingDown;

impl Tracker {
    pub(super) fn new(shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                tracker: TaskTracker::new(),
                shutdown,
                live: Mutex::new(Live::default()),
            }),
        }
    }

    /// Run `task` in a task the runtime owns, named `name` in what a drain
    /// reports if it has to abort it. `task` learns of the shutdown from
    /// [`Self::shutdown`] (or the [`Shutdown`] an accept loop hands it) and
    /// should then finish what it is doing and return; a panic in it is
    /// logged and ends only it.
    ///
    /// # Errors
    /// [`ShuttingDown`] once the runtime's shutdown has begun: `task` is
    /// dropped unrun.
    pub fn spawn<F>(&self, name: impl Into<String>, task: F) -> Result<(), ShuttingDown>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let id = {
            let mut live = self.lock();
            if live.closed {
                return Err(ShuttingDown);
            }
            let id = live.next;
            live.next += 1;
            live.tasks.insert(id, (name.clone(), None));
            id
        };
        let deregister = Deregister {
            inner: Arc::clone(&self.inner),
            id,
        };
        // Spawned without the lock held: a runtime that is itself shutting
        // down drops the future at once, and its deregistration locks.
        let handle = self.inner.tracker.spawn(async move {
            // Dropped however the task ends (returned, panicked, aborted).
            let _deregister = deregister;
            if let Err(payload) = crate::panics::catch_unwind(task).await {
                tracing::warn!(
                    task = %name,
                    panic = %panic_message(payload.as_ref()),
                    "a task of the runtime panicked"
                );
            }
        });
        let mut live = self.lock();
        if let Some((_, abort)) = live.tasks.get_mut(&id) {
            *abort = Some(handle.abort_handle());
        } else if live.closed {
            // Swept (and named) by an abort between the two locks.
            handle.abort();
        }
        Ok(())
    }

    /// The runtime's shutdown, as the tracked tasks see it.
    #[must_use]
    pub fn shutdown(&self) -> Shutdown {
        Shutdown(self.inner.shutdown.clone())
    }

    /// How many tracked tasks are running.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().tasks.len()
    }

    /// Whether no tracked task is running.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawn nothing more; [`Self::wait_until`] can now return.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.inner.tracker.close();
    }

    /// Wait until every tracked task has ended or `deadline` passes; abort
    /// those still running then (and wait for them to be gone). Returns the
    /// names of the aborted ones. Call after [`Self::close`].
    pub(super) async fn wait_until(&self, deadline: tokio::time::Instant) -> Vec<String> {
        if tokio::time::timeout_at(deadline, self.inner.tracker.wait())
            .await
            .is_ok()
        {
            return Vec::new();
        }
        let aborted = self.abort_all();
        if crate::planted::planted(crate::planted::Defect::DrainLeavesTasks) {
            return aborted;
        }
        // An aborted task is gone at its next await (a task inside a
        // blocking section finishes that section first): never left serving.
        self.inner.tracker.wait().await;
        aborted
    }

    /// Close, and abort every task still running; their names.
    pub(super) fn abort_all(&self) -> Vec<String> {
        let tasks: Vec<(String, Option<AbortHandle>)> = {
            let mut live = self.lock();
            live.closed = true;
            live.tasks.drain().map(|(_, task)| task).collect()
        };
        self.inner.tracker.close();
        let mut names = Vec::with_capacity(tasks.len());
        for (name, abort) in tasks {
            if let Some(abort) = abort
                && !crate::planted::planted(crate::planted::Defect::DrainLeavesTasks)
            {
                abort.abort();
            }
            names.push(name);
        }
        names.sort();
        names
    }
}

/// Removes a tracked task's entry when its future is dropped.
struct Deregister {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for Deregister {
    fn drop(&mut self) {
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tasks
            .remove(&self.id);
    }
}

/// A runtime's shutdown, as a task it owns sees it: begun when a drain
/// starts (or the runtime is dropped).
#[derive(Debug, Clone)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    /// Whether the runtime's shutdown has begun.
    #[must_use]
    pub fn has_begun(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Returns once the runtime's shutdown has begun.
    pub async fn begun(&self) {
        self.0.cancelled().await;
    }

    /// `work`'s output, or `None` if the shutdown begins first (`work` is
    /// then dropped where it waits). For the wait between two requests: a
    /// connection waiting for its next request closes at shutdown; one
    /// executing a request is not interrupted.
    pub async fn unless_begun<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            () = self.0.cancelled() => None,
            out = work => Some(out),
        }
    }
}

/// Something [`Runtime::accept_loop`] accepts connections from: a
/// `tokio::net::TcpListener` or `UnixListener`.
pub trait Listener: Send + 'static {
    /// A connection.
    type Stream: Send + 'static;
    /// Its peer's address (named in the connection's task name).
    type Addr: fmt::Debug + Send + 'static;
    /// The next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, Self::Addr)>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, Self::Addr)>> + Send {
        tokio::net::TcpListener::accept(self)
    }
}

impl Listener for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    type Addr = tokio::net::unix::SocketAddr;
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, Self::Addr)>> + Send {
        tokio::net::UnixListener::accept(self)
    }
}

/// A connection [`Runtime::accept_loop`] hands its handler.
#[derive(Debug)]
pub struct Connection<L: Listener> {
    /// The accepted stream.
    pub stream: L::Stream,
    /// Who connected.
    pub peer: L::Addr,
    /// The runtime's shutdown: once it begins, finish the request in hand
    /// (its answer included), then return; wait for nothing new
    /// ([`Shutdown::unless_begun`]).
    pub shutdown: Shutdown,
}

impl Runtime {
    /// The tracker of the tasks this runtime owns besides its serving
    /// tasks (connections, short jobs): see [`Tracker`].
    #[must_use]
    pub fn tracker(&self) -> Tracker {
        self.tracker.clone()
    }

    /// Serve `listener`: a serving task named `name` accepts connections
    /// and runs `handle` on each in a task of [`Self::tracker`]'s, so a
    /// drain ends every connection with the runtime.
    ///
    /// - An accept error never ends the loop: it waits as
    ///   [`AcceptBackoff`] says (a full descriptor table pauses it, a
    ///   connection reset before it was accepted is skipped).
    /// - At shutdown the loop stops accepting and drops `listener`; each
    ///   connection's [`Connection::shutdown`] begins, and the drain waits
    ///   for the handlers within its grace, then aborts those still
    ///   running (named `<name> <peer>`).
    /// - A handler's end (or panic) ends only its connection.
    ///
    /// ```no_run
    /// # mod steadfast { // the facade's paths, as users write them
    /// #     pub use steadfast_actors::service::{Resource, Step, StepContext, StepError};
    /// #     pub mod service { pub use steadfast_actors::service::Connection; }
    /// # }
    /// use steadfast::service::Connection;
    /// use steadfast::{Resource, Step, StepContext, StepError};
    /// use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    /// use tokio::net::TcpListener;
    ///
    /// struct Echo;
    ///
    /// impl Step for Echo {
    ///     const NAME: &'static str = "serve";
    ///     type Config = toml::Table;
    ///     type Output = ();
    ///
    ///     async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
    ///         let listener = TcpListener::bind("127.0.0.1:7070").await.map_err(StepError::backoff)?;
    ///         cx.runtime.accept_loop("echo", listener, |conn: Connection<TcpListener>| async move {
    ///             let (read, mut write) = conn.stream.into_split();
    ///             let mut lines = BufReader::new(read).lines();
    ///             // Between requests, shutdown closes the connection; a
    ///             // request already read is answered first.
    ///             while let Some(Ok(Some(line))) = conn.shutdown.unless_begun(lines.next_line()).await {
    ///                 if write.write_all(format!("{line}\n").as_bytes()).await.is_err() {
    ///                     return;
    ///                 }
    ///             }
    ///         });
    ///         Ok(Resource::new("listener", "127.0.0.1:7070", ()))
    ///     }
    /// }
    /// ```
    pub fn accept_loop<L, H, F>(&mut self, name: impl Into<String>, mut listener: L, mut handle: H)
    where
        L: Listener,
        H: FnMut(Connection<L>) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let tracker = self.tracker();
        let what = name.clone();
        self.spawn(name, async move {
            let shutdown = tracker.shutdown();
            let mut backoff = AcceptBackoff::new(what.clone());
            loop {
                let Some(accepted) = shutdown.unless_begun(listener.accept()).await else {
                    return Ok(());
                };
                match accepted {
                    Ok((stream, peer)) => {
                        backoff.accepted();
                        let task = format!("{what} {peer:?}");
                        let connection = Connection {
                            stream,
                            peer,
                            shutdown: shutdown.clone(),
                        };
                        if tracker.spawn(task, handle(connection)).is_err() {
                            return Ok(());
                        }
                    }
                    Err(error) => {
                        if shutdown
                            .unless_begun(backoff.failed(&error))
                            .await
                            .is_none()
                        {
                            return Ok(());
                        }
                    }
                }
            }
        });
    }
}
