//! Serving the frameworks through a runtime (`steadfast::serve::http`,
//! features `axum` and `tonic`): an axum `Router` over HTTP/1 and HTTP/2,
//! and a tonic server (a hand-written unary service: no protoc), each on
//! real loopback TCP under a real in-process supervisor.
//!
//! The drain's promise, for each: a request in flight when the drain
//! begins is answered if it finishes within the grace (and the drain
//! waits for it even when the grace is an hour, while idle keep-alive
//! and HTTP/2 connections close at once, or `stop` would never return);
//! one still running past the grace is cut (its client sees the
//! connection end, never an answer) and its handler is dropped before
//! `stopped` is reported, so its side effect never happens after it.
//!
//! No timing is asserted: the handler waits on a gate the test opens, and
//! "past the grace" is a 1 s grace with a gate opened only after `stopped`.

use crate::support::common::{PATIENCE, until};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http_body_util::{BodyExt, Full};
use hyper::http::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::supervisor::Timings;
use steadfast::{Hold, Plan, Resource, Runtime, Service, Step, StepContext, StepError, Supervisor};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

/// What a request's handler does: says it has begun, waits for the gate,
/// then makes its side effect and answers. A handler dropped before the
/// gate opens (aborted by the drain) says so.
struct Probe {
    entered: Notify,
    gate: Semaphore,
    answered: AtomicBool,
    dropped: AtomicBool,
}

impl Default for Probe {
    fn default() -> Self {
        Self {
            entered: Notify::new(),
            gate: Semaphore::new(0),
            answered: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
        }
    }
}

impl Probe {
    async fn handle(&self) -> &'static str {
        struct Dropped<'a>(&'a AtomicBool, bool);
        impl Drop for Dropped<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
        }
        let mut guard = Dropped(&self.dropped, false);
        self.entered.notify_one();
        let _permit = self.gate.acquire().await.expect("the gate is never closed");
        self.answered.store(true, Ordering::SeqCst);
        guard.1 = true;
        "noted"
    }

    fn open(&self) {
        self.gate.add_permits(1);
    }
}

type Serve = Arc<dyn Fn(&mut Runtime, TcpListener, Arc<Probe>) + Send + Sync>;

/// One step: bind 127.0.0.1:0, say the address, serve it with `serve`.
struct Bind {
    serve: Serve,
    probe: Arc<Probe>,
    addr: Arc<Mutex<Option<SocketAddr>>>,
}

impl Step for Bind {
    const NAME: &'static str = "serve";
    type Config = toml::Table;
    type Output = ();
    async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(StepError::backoff)?;
        let addr = listener.local_addr().map_err(StepError::backoff)?;
        *self.addr.lock().unwrap_or_else(PoisonError::into_inner) = Some(addr);
        (self.serve)(cx.runtime, listener, Arc::clone(&self.probe));
        Ok(Resource::new("listener", addr.to_string(), ()))
    }
}

struct App {
    serve: Serve,
    probe: Arc<Probe>,
    addr: Arc<Mutex<Option<SocketAddr>>>,
}

impl Service for App {
    type Config = toml::Table;
    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Bind {
            serve: Arc::clone(&self.serve),
            probe: Arc::clone(&self.probe),
            addr: Arc::clone(&self.addr),
        })
    }
}

/// A running supervisor serving with `serve`, its drain grace `grace`.
struct Daemon {
    _dir: tempfile::TempDir,
    handle: steadfast::SupervisorHandle,
    probe: Arc<Probe>,
    addr: SocketAddr,
}

async fn daemon(grace: Duration, serve: Serve) -> Daemon {
    let dir = tempfile::tempdir().expect("a temp dir");
    let probe = Arc::new(Probe::default());
    let addr = Arc::new(Mutex::new(None));
    let app = App {
        serve,
        probe: Arc::clone(&probe),
        addr: Arc::clone(&addr),
    };
    let (supervisor, handle) = Supervisor::builder(dir.path(), Arc::new(app))
        .timings(Timings {
            drain_grace: grace,
            ..Timings::default()
        })
        .build()
        .expect("the supervisor starts");
    tokio::spawn(supervisor.run());
    until(&handle, "running", |s| {
        matches!(s.lifecycle, LifecycleState::Running { .. })
    })
    .await;
    let addr = addr
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .expect("bound");
    Daemon {
        _dir: dir,
        handle,
        probe,
        addr,
    }
}

fn axum_router(probe: Arc<Probe>) -> axum::Router {
    axum::Router::new()
        .route(
            "/slow",
            axum::routing::post(move || async move { (StatusCode::CREATED, probe.handle().await) }),
        )
        .route("/fast", axum::routing::get(|| async { "fast" }))
}

fn serve_axum() -> Serve {
    Arc::new(|runtime, listener, probe| {
        steadfast::serve::http(runtime, "http", listener, axum_router(probe));
    })
}

fn serve_tonic() -> Serve {
    Arc::new(|runtime, listener, probe| {
        let routes = tonic::service::Routes::new(SlowGrpc(probe));
        steadfast::serve::http(runtime, "grpc", listener, routes);
    })
}

/// A client connection, HTTP/1 or HTTP/2 (prior knowledge, as gRPC).
enum Client {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Client {
    async fn connect(addr: SocketAddr, h2: bool) -> Self {
        let io = TokioIo::new(TcpStream::connect(addr).await.expect("connects"));
        if h2 {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("an HTTP/2 handshake");
            tokio::spawn(conn);
            Self::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("an HTTP/1 handshake");
            tokio::spawn(conn);
            Self::H1(send)
        }
    }

    /// The answer's status, trailers' `grpc-status` (if any) and body, or
    /// the error that ended the request (a cut connection).
    async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Option<String>, Bytes), String> {
        let response = match self {
            Self::H1(send) => send.send_request(request).await,
            Self::H2(send) => send.send_request(request).await,
        }
        .map_err(|error| error.to_string())?;
        let status = response.status();
        let collected = response
            .into_body()
            .collect()
            .await
            .map_err(|error| error.to_string())?;
        let grpc = collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .map(|v| v.to_str().unwrap_or("?").to_owned());
        Ok((status, grpc, collected.to_bytes()))
    }
}

fn slow_http() -> Request<Full<Bytes>> {
    Request::post("http://localhost/slow")
        .body(Full::new(Bytes::new()))
        .expect("a request")
}

fn fast_http() -> Request<Full<Bytes>> {
    Request::get("http://localhost/fast")
        .body(Full::new(Bytes::new()))
        .expect("a request")
}

/// A unary gRPC call of `test.Slow/Call` with an empty message.
fn slow_grpc() -> Request<Full<Bytes>> {
    Request::post("http://localhost/test.Slow/Call")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .expect("a request")
}

/// Stop while a request is in flight; the gate opens once the drain has
/// begun (within the grace, which is an hour). Returns the request's
/// answer. `idle` connections were opened and used before: they must
/// close at once for `stop` to return.
async fn answered_within_the_grace(
    d: &Daemon,
    mut client: Client,
    request: Request<Full<Bytes>>,
    idle: Vec<Client>,
) -> (StatusCode, Option<String>, Bytes) {
    let in_flight = tokio::spawn(async move { client.send(request).await });
    tokio::time::timeout(PATIENCE, d.probe.entered.notified())
        .await
        .expect("the handler is entered");
    let handle = d.handle.clone();
    let stop = tokio::spawn(async move { handle.stop(Hold::None).await });
    until(&d.handle, "the drain", |s| {
        !matches!(s.lifecycle, LifecycleState::Running { .. })
    })
    .await;
    d.probe.open();
    let answer = tokio::time::timeout(PATIENCE, in_flight)
        .await
        .expect("answered")
        .expect("the client task")
        .expect("an answer, not a cut connection");
    let stopped = tokio::time::timeout(PATIENCE, stop)
        .await
        .expect("stop returns: idle connections closed at once, in-flight finished")
        .expect("the stop task")
        .expect("stop accepted");
    assert!(
        matches!(stopped.lifecycle, LifecycleState::Stopped { .. }),
        "{:?}",
        stopped.lifecycle
    );
    assert!(d.probe.answered.load(Ordering::SeqCst));
    drop(idle);
    answer
}

/// Stop while a request is in flight and never let it finish within the
/// 1 s grace: its client sees the connection cut, and its handler is
/// gone (dropped, its side effect never made) when `stopped` is
/// reported; opening the gate after `stopped` changes nothing.
async fn cut_past_the_grace(d: &Daemon, mut client: Client, request: Request<Full<Bytes>>) {
    let in_flight = tokio::spawn(async move { client.send(request).await });
    tokio::time::timeout(PATIENCE, d.probe.entered.notified())
        .await
        .expect("the handler is entered");
    let stopped = tokio::time::timeout(PATIENCE, d.handle.stop(Hold::None))
        .await
        .expect("stop returns")
        .expect("stop accepted");
    assert!(
        matches!(stopped.lifecycle, LifecycleState::Stopped { .. }),
        "{:?}",
        stopped.lifecycle
    );
    assert!(
        d.probe.dropped.load(Ordering::SeqCst),
        "the handler was aborted before stopped"
    );
    d.probe.open();
    let seen = tokio::time::timeout(PATIENCE, in_flight)
        .await
        .expect("the client learns the end")
        .expect("the client task");
    assert!(
        seen.is_err(),
        "a request past the grace was answered: {seen:?}"
    );
    assert!(!d.probe.answered.load(Ordering::SeqCst));
    // Nothing serves the old runtime's address any more.
    assert!(TcpStream::connect(d.addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_http1_answers_within_the_grace_and_idle_connections_close_at_once() {
    let d = daemon(Duration::from_secs(3600), serve_axum()).await;
    let mut idle = Client::connect(d.addr, false).await;
    let (status, _, body) = idle.send(fast_http()).await.expect("answered");
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"fast"[..]));
    let client = Client::connect(d.addr, false).await;
    let (status, _, body) = answered_within_the_grace(&d, client, slow_http(), vec![idle]).await;
    assert_eq!((status, &body[..]), (StatusCode::CREATED, &b"noted"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_http2_answers_within_the_grace_and_idle_connections_get_goaway() {
    let d = daemon(Duration::from_secs(3600), serve_axum()).await;
    let mut idle = Client::connect(d.addr, true).await;
    let (status, _, _) = idle.send(fast_http()).await.expect("answered");
    assert_eq!(status, StatusCode::OK);
    let client = Client::connect(d.addr, true).await;
    let (status, _, body) = answered_within_the_grace(&d, client, slow_http(), vec![idle]).await;
    assert_eq!((status, &body[..]), (StatusCode::CREATED, &b"noted"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_request_past_the_grace_is_cut_and_never_answered_after_stopped() {
    for h2 in [false, true] {
        let d = daemon(Duration::from_secs(1), serve_axum()).await;
        let client = Client::connect(d.addr, h2).await;
        cut_past_the_grace(&d, client, slow_http()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_answers_within_the_grace() {
    let d = daemon(Duration::from_secs(3600), serve_tonic()).await;
    let client = Client::connect(d.addr, true).await;
    let (status, grpc, body) = answered_within_the_grace(&d, client, slow_grpc(), vec![]).await;
    assert_eq!((status, grpc.as_deref()), (StatusCode::OK, Some("0")));
    assert_eq!(&body[5..], b"noted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_call_past_the_grace_is_cut_and_never_answered_after_stopped() {
    let d = daemon(Duration::from_secs(1), serve_tonic()).await;
    let client = Client::connect(d.addr, true).await;
    cut_past_the_grace(&d, client, slow_grpc()).await;
}

/// A gRPC service written by hand over `tonic::server::Grpc` (what
/// tonic's generated code does), with a codec of raw bytes: `test.Slow`,
/// whose `Call` answers `noted` once the probe's gate opens.
#[derive(Clone)]
struct SlowGrpc(Arc<Probe>);

impl tonic::server::NamedService for SlowGrpc {
    const NAME: &'static str = "test.Slow";
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl tower_service::Service<Request<tonic::body::Body>> for SlowGrpc {
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
        let call = Call(Arc::clone(&self.0));
        Box::pin(async move {
            if request.uri().path() != "/test.Slow/Call" {
                let unimplemented = tonic::Status::unimplemented("no such method");
                return Ok(unimplemented.into_http());
            }
            Ok(tonic::server::Grpc::new(RawCodec)
                .unary(call, request)
                .await)
        })
    }
}

struct Call(Arc<Probe>);

impl tonic::server::UnaryService<Bytes> for Call {
    type Response = Bytes;
    type Future = BoxFuture<Result<tonic::Response<Bytes>, tonic::Status>>;

    fn call(&mut self, _request: tonic::Request<Bytes>) -> Self::Future {
        let probe = Arc::clone(&self.0);
        Box::pin(async move {
            let said = probe.handle().await;
            Ok(tonic::Response::new(Bytes::from_static(said.as_bytes())))
        })
    }
}

/// Messages as raw bytes (no protobuf).
#[derive(Default, Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
