//! Serving the HTTP and RPC frameworks through a runtime (cargo feature
//! `hyper`, or its names `axum` and `tonic`): an axum `Router`, tonic's
//! `Routes`, or any tower `Service` over hyper, each connection a task of
//! the runtime's.
//!
//! `axum::serve`, hyper's and tonic's own servers spawn each connection
//! with `tokio::spawn`: the drain neither waits for those nor stops them,
//! so a request in flight at a drain is answered after `stopped` (README
//! "Draining"). [`http`] serves the same service through
//! [`Runtime::accept_loop`] instead, so the drain owns every connection:
//!
//! - at shutdown each connection is told to close gracefully (hyper's
//!   `graceful_shutdown`): an idle keep-alive connection closes at once,
//!   one serving a request finishes it (its answer included) and then
//!   closes, an HTTP/2 connection sends GOAWAY and finishes its open
//!   streams;
//! - what is still running at the end of the drain's grace (a connection,
//!   or one of its HTTP/2 streams, each a task of the runtime's too) is
//!   aborted, so nothing is answered after `stopped`.
//!
//! ```no_run
//! use steadfast::{Resource, Step, StepContext, StepError};
//! use tokio::net::TcpListener;
//!
//! struct Http;
//!
//! impl Step for Http {
//!     const NAME: &'static str = "http";
//!     type Config = toml::Table;
//!     type Output = ();
//!
//!     async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
//!         let listener = TcpListener::bind("127.0.0.1:8080").await.map_err(StepError::backoff)?;
//!         let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//!         // Not `axum::serve(listener, router)`: its connections escape the drain.
//!         steadfast::serve::http(cx.runtime, "http", listener, router);
//!         Ok(Resource::new("listener", "127.0.0.1:8080", ()))
//!     }
//! }
//! ```

use std::error::Error as StdError;
use std::pin::pin;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::Runtime;
use crate::service::{Connection, Listener, Tracker};

/// An error a served service or body may return.
type BoxError = Box<dyn StdError + Send + Sync>;

/// Serve `service` (an axum `Router`, tonic's `Routes`, any tower service
/// over hyper's request body) on `listener`, HTTP/1 or HTTP/2 as each
/// client speaks, through [`Runtime::accept_loop`] named `name`: each
/// connection, and each HTTP/2 stream, is a task of the runtime's, so the
/// drain closes idle connections at once, lets requests in flight finish
/// within its grace, and aborts the rest (module doc).
///
/// Instead of `axum::serve(listener, router).with_graceful_shutdown(..)`
/// or tonic's `Server::serve`, whose connections the drain never sees.
pub fn http<L, S, B>(runtime: &mut Runtime, name: impl Into<String>, listener: L, service: S)
where
    L: Listener,
    L::Stream: AsyncRead + AsyncWrite + Unpin,
    S: tower_service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let name = name.into();
    let streams = Streams {
        tracker: runtime.tracker(),
        name: format!("{name} stream"),
    };
    runtime.accept_loop(name, listener, move |conn: Connection<L>| {
        serve_connection(conn, service.clone(), streams.clone())
    });
}

/// Serve one connection until it ends; once the runtime's shutdown
/// begins, close it gracefully (the drain aborts it past its grace).
async fn serve_connection<L, S, B>(conn: Connection<L>, service: S, streams: Streams)
where
    L: Listener,
    L::Stream: AsyncRead + AsyncWrite + Unpin,
    S: tower_service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut builder = auto::Builder::new(streams);
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let io = TokioIo::new(conn.stream);
    let mut connection = pin!(builder.serve_connection(io, TowerToHyperService::new(service)));
    tokio::select! {
        _ = connection.as_mut() => return,
        () = conn.shutdown.begun() => {}
    }
    // HTTP/1: an idle connection closes now, a request being served is
    // answered first. HTTP/2: GOAWAY, then the open streams finish.
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// hyper's executor for a connection's HTTP/2 streams: each a task of the
/// runtime's tracker, never a plain `tokio::spawn`, so a stream in flight
/// is the drain's too. Once shutdown has begun a new stream is dropped
/// unserved (its client has been sent GOAWAY).
#[derive(Clone)]
struct Streams {
    tracker: Tracker,
    name: String,
}

impl<F> hyper::rt::Executor<F> for Streams
where
    F: std::future::Future + Send + 'static,
{
    fn execute(&self, future: F) {
        let _ = self.tracker.spawn(self.name.clone(), async move {
            future.await;
        });
    }
}
