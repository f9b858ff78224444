//! The control plane's cost, measured in one run beside a baseline.
//!
//! - `control/snapshot_unix`: one `snapshot` call through `ControlClient`,
//!   tarpc, the bincode codec and the Unix socket, answered by a real
//!   supervisor (a no-op service, running).
//! - `control/raw_pingpong_same_size`: the baseline — a raw Unix-socket
//!   ping-pong of length-prefixed frames of the same sizes (the request's
//!   and the answer's), with an echo task that does nothing else. The gap
//!   between the two is what tarpc, bincode and the JSON snapshot cost.
//! - `control/tarpc_blob_unix`: the second baseline — tarpc alone, with
//!   the control plane's codec and framing on a Unix socket, calling a
//!   service that answers a fixed blob of the answer's size (no supervisor,
//!   no connection bounds, no JSON). Between it and the raw ping-pong is
//!   tarpc's own per-call machinery; between it and `snapshot_wire_unix`
//!   is steadfast's server (bounds, the deadline guard, the lean snapshot,
//!   its JSON).
//! - `control/snapshot_wire_unix`: the same call through the raw tarpc
//!   client, stopping at the `WireSnapshot` (no JSON parse on the client):
//!   the difference to `snapshot_unix` is what turning the JSON back into a
//!   `Snapshot` costs.
//! - `control/snapshot_json_parse`, `control/snapshot_json_encode`: the
//!   client's and the server's JSON work for one snapshot, alone.
//! - `control/snapshot_tcp` and `control/raw_pingpong_tcp_same_size`: the
//!   same pair over loopback TCP (after the token handshake, which is paid
//!   once per connection and not measured).
//! - `control/snapshot_tls`: the same call over loopback TLS 1.3 (mutual
//!   TLS, a client certificate; the handshake is paid once per connection
//!   and not measured here), beside `snapshot_unix` and `snapshot_tcp`;
//!   with the cargo feature `tls` (a workspace build has it, through
//!   `steadfastctl`).
//! - `control/connect_tls` and `control/connect_unix`: a new connection and
//!   one `snapshot` on it (what one `steadfastctl` invocation pays): the TLS
//!   handshake with both certificates verified, the hello, the call.
//! - `control/16_clients`: 16 clients on their own connections, 100
//!   `snapshot` calls each, concurrently; throughput in calls/s.
//!   `control/16_clients_tcp`: the same over loopback TCP.
//!
//! The daemon side (supervisor, servers, echo tasks) runs on a 4-worker
//! runtime, as in a daemon; the single-call clients run on a
//! current-thread runtime of their own, as `steadfastctl` does, so the
//! baseline and the real client both do their I/O on the calling thread.
//!
//! The goal: `snapshot_unix` ≤ 1.5× the raw ping-pong. At the end of a run
//! the bench prints the ratios of its pairs from that run's medians
//! (`ratio control/… ÷ control/… =`). The raw side writes each frame with
//! one write and reads it with one read into a buffer with room to spare,
//! as tarpc's framing does, so it is the baseline of that framing and not
//! of a slower one.
//!
//! The groups run one after another, and on a shared machine the load
//! moves between them. So the bench also times 3,000 alternated rounds of
//! `snapshot_unix`, `snapshot_wire_unix` and the raw ping-pong, one call
//! each, and prints their medians and ratios (`ratio paired …`): the
//! figure to quote.
//!
//! Measured results, and where the time of a call goes: `benches/README.md`.
//!
//! Run: `cargo bench --bench control`.
#![allow(clippy::disallowed_methods)] // a benchmark times real work

use std::time::Duration;

use bincode::Options;
mod support;

use support::{Noop, empty_source};

use criterion::{Criterion, Throughput, criterion_group};
use steadfast::Supervisor;
use steadfast::control::auth::Token;
use steadfast::control::codec::options;
use steadfast::control::serve_tcp_with;
use steadfast::control::{ControlClient, serve_unix};
#[cfg(feature = "tls")]
use steadfast::control::{Endpoint, Role, TlsClient, TlsServerConfig, serve_tls};
use steadfast::protocol::command::CommandError;
use steadfast::protocol::control::WireSnapshot;
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast_actors::control_dir::ControlDir;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The tarpc-only baseline's service: one method answering a fixed blob.
#[tarpc::service]
trait Blob {
    /// The blob.
    async fn get() -> Vec<u8>;
}

/// Answers the same bytes every call.
#[derive(Clone)]
struct BlobServer(std::sync::Arc<Vec<u8>>);

impl Blob for BlobServer {
    async fn get(self, _: tarpc::context::Context) -> Vec<u8> {
        self.0.as_ref().clone()
    }
}

/// Serve [`Blob`] on every connection, with the control plane's codec.
async fn serve_blob(listener: UnixListener, blob: Vec<u8>) {
    use futures::StreamExt;
    use tarpc::server::{BaseChannel, Channel};
    let blob = std::sync::Arc::new(blob);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let transport = tarpc::serde_transport::new(
            steadfast::control::codec::framed(stream),
            steadfast::control::codec::Bincode1::server(),
        );
        let server = BlobServer(std::sync::Arc::clone(&blob));
        tokio::spawn(
            BaseChannel::with_defaults(transport)
                .execute(server.serve())
                .for_each_concurrent(None, |answer| answer),
        );
    }
}

/// Echo server: read a frame, answer `answer_len` bytes.
async fn echo(listener: UnixListener, answer_len: usize) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(echo_stream(stream, answer_len));
    }
}

/// The same over TCP.
async fn echo_tcp(listener: TcpListener, answer_len: usize) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(echo_stream(stream, answer_len));
    }
}

async fn echo_stream<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, answer_len: usize) {
    // The answer as one frame, written with one write (as tarpc's framing
    // writes a frame): two writes would wake the reader twice.
    let answer = frame(&vec![7u8; answer_len]);
    let mut buf = Vec::new();
    loop {
        if read_frame(&mut stream, &mut buf).await.is_err() {
            return;
        }
        if stream.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// Read one length-prefixed frame into `buf` as tarpc's framing does: into
/// a buffer with room to spare, one read for a frame that has arrived
/// whole. (Reading the prefix and then the body with `read_exact` took
/// two or three reads a frame, one of them answered "would block": a raw
/// side slower than the framing it is the baseline of.)
async fn read_frame<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    buf.clear();
    buf.reserve(8 * 1024);
    loop {
        if let Some(prefix) = buf.first_chunk::<4>() {
            let len = u32::from_be_bytes(*prefix) as usize;
            if buf.len() >= 4 + len {
                return Ok(());
            }
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// `body` behind its 4-byte big-endian length.
fn frame(body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// One round trip: the request frame (one write), then the answer frame.
/// The control service's bare tarpc channel (no reconnects, no checks).
type WireClient = tarpc::client::Channel<
    steadfast::protocol::control::ControlRequest,
    steadfast::protocol::control::ControlResponse,
>;

/// `snapshot` over the bare channel: the call, and its answer.
async fn wire_snapshot(
    client: &WireClient,
) -> Result<steadfast::protocol::control::ControlAnswer, tarpc::client::RpcError> {
    use steadfast::protocol::control::{ControlRequest, ControlResponse};
    match client
        .call(tarpc::context::current(), ControlRequest::Snapshot {})
        .await?
    {
        ControlResponse::Snapshot(answer) => Ok(answer),
        other => panic!("the daemon answered another method: {other:?}"),
    }
}

async fn ping<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
    answer: &mut Vec<u8>,
) {
    stream.write_all(request).await.expect("write");
    read_frame(stream, answer).await.expect("read");
}

/// Rounds of the alternated measurement ([`paired`]).
const PAIRS: usize = 3_000;

/// What one step of the alternated measurement calls.
#[derive(Clone, Copy)]
enum Paired {
    /// `ControlClient::snapshot` (`snapshot_unix`).
    Snapshot,
    /// The plain tarpc client's `snapshot` (`snapshot_wire_unix`): tarpc's
    /// dispatch task, no JSON parse.
    Wire,
    /// The raw ping-pong (`raw_pingpong_same_size`).
    Raw,
}

/// `rounds` rounds of one call of each kind, alternated (the order turns
/// every round), each call timed alone; prints each kind's median and the
/// ratios. A shared machine's load then weighs on each kind alike, which
/// criterion's groups one after another cannot give.
fn paired(rounds: usize, mut call: impl FnMut(Paired)) {
    let kinds = [Paired::Snapshot, Paired::Wire, Paired::Raw];
    let mut times: [Vec<f64>; 3] = Default::default();
    for kind in kinds {
        call(kind);
    }
    for round in 0..rounds {
        for step in 0..kinds.len() {
            let at = (round + step) % kinds.len();
            let started = std::time::Instant::now();
            call(kinds[at]);
            times[at].push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    let median = |samples: &mut Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    let [snapshot, wire, raw] = times.map(|mut t| median(&mut t));
    eprintln!(
        "paired ({rounds} alternated rounds, medians): snapshot_unix {snapshot:.1} µs, \
         snapshot_wire_unix {wire:.1} µs, raw_pingpong_same_size {raw:.1} µs"
    );
    eprintln!(
        "ratio paired snapshot_unix ÷ raw_pingpong_same_size = {:.2}x",
        snapshot / raw
    );
    eprintln!(
        "ratio paired snapshot_wire_unix ÷ raw_pingpong_same_size = {:.2}x",
        wire / raw
    );
    eprintln!(
        "ratio paired snapshot_unix ÷ snapshot_wire_unix = {:.2}x",
        snapshot / wire
    );
}

const CLIENTS: usize = 16;
const CALLS: usize = 100;

/// Each client makes `CALLS` snapshot calls, all clients at once.
async fn many_calls(clients: &[ControlClient]) {
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|client| {
            tokio::spawn(async move {
                for _ in 0..CALLS {
                    client.snapshot().await.expect("answered");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate in
/// `dir`: the server's configuration and a client's.
#[cfg(feature = "tls")]
fn pki(dir: &std::path::Path) -> (TlsServerConfig, TlsClient) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
        KeyPair, KeyUsagePurpose, SanType,
    };
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let private = |path: &std::path::Path, text: &str| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .expect("create");
        file.write_all(text.as_bytes()).expect("write");
    };
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("ca");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    for (name, server) in [("server", true), ("client", false)] {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        if server {
            params.subject_alt_names = vec![SanType::IpAddress(std::net::IpAddr::V4(
                std::net::Ipv4Addr::LOCALHOST,
            ))];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        } else {
            params.subject_alt_names = vec![SanType::DnsName("bench".try_into().expect("name"))];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca).expect("signed");
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).expect("write");
        private(&dir.join(format!("{name}.key")), &key.serialize_pem());
    }
    let server = TlsServerConfig::new(dir.join("server.pem"), dir.join("server.key"))
        .client_ca(dir.join("ca.pem"), Role::Operate);
    let client = TlsClient::from_files(
        &dir.join("ca.pem"),
        Some((&dir.join("client.pem"), &dir.join("client.key"))),
    )
    .expect("a client");
    (server, client)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tempdir");
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let (handle, _server, socket) = rt.block_on(async {
        let (supervisor, handle) = Supervisor::builder(tmp.path(), Noop)
            .config(empty_source())
            .build()
            .expect("supervisor");
        let socket = supervisor.control_socket_path();
        tokio::spawn(supervisor.run());
        let server = serve_unix(handle.clone(), &socket).expect("serves");
        let mut rx = handle.watch();
        while !matches!(
            rx.borrow_and_update().lifecycle,
            LifecycleState::Running { .. }
        ) {
            rx.changed().await.expect("alive");
        }
        (handle, server, socket)
    });

    // The sizes of the real frames, for the baseline.
    let answer: Result<WireSnapshot, CommandError> =
        Ok(WireSnapshot::from_snapshot(&handle.snapshot()));
    let answer_len = options().serialize(&answer).expect("encodes").len() + 16;
    let request = frame(&[0u8; 48]);
    eprintln!("snapshot answer frame ≈ {answer_len} bytes");

    let raw_path = ControlDir::under(tmp.path()).join("raw.sock");
    let blob_path = ControlDir::under(tmp.path()).join("blob.sock");
    let token = Token::generate().expect("a token");
    let tcp_token = token.clone();
    let (tcp_server, raw_tcp_addr) = rt.block_on(async {
        let listener = UnixListener::bind(&raw_path).expect("raw bind");
        tokio::spawn(echo(listener, answer_len));
        // A blob whose bincode frame is the answer's length: Ok(..)'s tag
        // and the Vec's length prefix take the place of the snapshot's.
        let listener = UnixListener::bind(&blob_path).expect("blob bind");
        tokio::spawn(serve_blob(listener, vec![7u8; answer_len - 16]));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("raw tcp bind");
        let raw_tcp_addr = listener.local_addr().expect("addr");
        tokio::spawn(echo_tcp(listener, answer_len));
        let tcp_server = serve_tcp_with(
            handle.clone(),
            "127.0.0.1:0".parse().expect("addr"),
            token.clone(),
            steadfast::control::ServerLimits::default(),
        )
        .expect("serves tcp");
        (tcp_server, raw_tcp_addr)
    });
    #[cfg(feature = "tls")]
    let pki_dir = tempfile::tempdir().expect("tempdir");
    #[cfg(feature = "tls")]
    let (tls_config, tls_client_config) = pki(pki_dir.path());
    #[cfg(feature = "tls")]
    let tls_server = rt.block_on(async {
        serve_tls(
            handle.clone(),
            "127.0.0.1:0".parse().expect("addr"),
            tls_config,
        )
        .expect("serves tls")
    });
    #[cfg(feature = "tls")]
    let tls_endpoint = Endpoint::tls(tls_server.local_addr(), tls_client_config, None);
    #[cfg(feature = "tls")]
    let tls_client = client_rt
        .block_on(ControlClient::connect(tls_endpoint.clone()))
        .expect("connects over tls");
    let (client, wire_client, tcp_client, blob_client, mut raw, mut raw_tcp) =
        client_rt.block_on(async {
            let client = ControlClient::connect_unix(&socket)
                .await
                .expect("connects");
            let mut stream = UnixStream::connect(&socket).await.expect("connects");
            // The server's first byte (spec/control.md): served, or busy.
            let mut first = [0u8; 1];
            stream
                .read_exact(&mut first)
                .await
                .expect("the server's first byte");
            assert_eq!(
                first[0],
                steadfast::control::auth::ANSWER_ACCEPTED,
                "served"
            );
            let transport = tarpc::serde_transport::new(
                steadfast::control::codec::framed(stream),
                steadfast::control::codec::Bincode1::client(),
            );
            // The bare tarpc channel of the control service's wire enums.
            let wire_client: WireClient =
                tarpc::client::new(tarpc::client::Config::default(), transport).spawn();
            let tcp_client = ControlClient::connect_tcp(tcp_server.local_addr(), token.clone())
                .await
                .expect("connects over tcp");
            let blob_client = BlobClient::new(
                tarpc::client::Config::default(),
                tarpc::serde_transport::new(
                    steadfast::control::codec::framed(
                        UnixStream::connect(&blob_path).await.expect("blob connect"),
                    ),
                    steadfast::control::codec::Bincode1::client(),
                ),
            )
            .spawn();
            let raw = UnixStream::connect(&raw_path).await.expect("raw connect");
            let raw_tcp = TcpStream::connect(raw_tcp_addr).await.expect("raw tcp");
            raw_tcp.set_nodelay(true).expect("nodelay");
            (client, wire_client, tcp_client, blob_client, raw, raw_tcp)
        });

    let mut group = c.benchmark_group("control");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("snapshot_unix", |b| {
        b.iter(|| client_rt.block_on(client.snapshot()).expect("answered"));
    });
    let mut buf = Vec::new();
    group.bench_function("raw_pingpong_same_size", |b| {
        b.iter(|| client_rt.block_on(ping(&mut raw, &request, &mut buf)));
    });
    group.bench_function("tarpc_blob_unix", |b| {
        b.iter(|| {
            client_rt
                .block_on(blob_client.get(tarpc::context::current()))
                .expect("answered")
        });
    });
    group.bench_function("snapshot_wire_unix", |b| {
        b.iter(|| {
            client_rt
                .block_on(wire_snapshot(&wire_client))
                .expect("answered")
                .expect("a snapshot")
        });
    });
    let wire = WireSnapshot::from_snapshot(&handle.snapshot());
    group.bench_function("snapshot_json_parse", |b| {
        b.iter(|| wire.into_snapshot().expect("parses"));
    });
    group.bench_function("snapshot_json_encode", |b| {
        let snapshot = handle.snapshot();
        b.iter(|| WireSnapshot::from_snapshot(&snapshot));
    });
    group.bench_function("snapshot_tcp", |b| {
        b.iter(|| client_rt.block_on(tcp_client.snapshot()).expect("answered"));
    });
    group.bench_function("raw_pingpong_tcp_same_size", |b| {
        b.iter(|| client_rt.block_on(ping(&mut raw_tcp, &request, &mut buf)));
    });
    #[cfg(feature = "tls")]
    group.bench_function("snapshot_tls", |b| {
        b.iter(|| client_rt.block_on(tls_client.snapshot()).expect("answered"));
    });
    group.bench_function("connect_unix", |b| {
        b.iter(|| {
            client_rt.block_on(async {
                let client = ControlClient::connect_unix(&socket)
                    .await
                    .expect("connects");
                client.snapshot().await.expect("answered")
            })
        });
    });
    #[cfg(feature = "tls")]
    group.bench_function("connect_tls", |b| {
        b.iter(|| {
            client_rt.block_on(async {
                let client = ControlClient::connect(tls_endpoint.clone())
                    .await
                    .expect("connects");
                client.snapshot().await.expect("answered")
            })
        });
    });

    paired(PAIRS, |kind| match kind {
        Paired::Snapshot => {
            client_rt.block_on(client.snapshot()).expect("answered");
        }
        Paired::Wire => {
            client_rt
                .block_on(wire_snapshot(&wire_client))
                .expect("answered")
                .expect("a snapshot");
        }
        Paired::Raw => client_rt.block_on(ping(&mut raw, &request, &mut buf)),
    });

    let tcp_addr = tcp_server.local_addr();
    let (clients, tcp_clients) = rt.block_on(async {
        let mut clients = Vec::new();
        let mut tcp_clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(
                ControlClient::connect_unix(&socket)
                    .await
                    .expect("connects"),
            );
            tcp_clients.push(
                ControlClient::connect_tcp(tcp_addr, tcp_token.clone())
                    .await
                    .expect("connects over tcp"),
            );
        }
        (clients, tcp_clients)
    });
    group.throughput(Throughput::Elements((CLIENTS * CALLS) as u64));
    group.bench_function("16_clients", |b| {
        b.iter(|| rt.block_on(many_calls(&clients)));
    });
    group.bench_function("16_clients_tcp", |b| {
        b.iter(|| rt.block_on(many_calls(&tcp_clients)));
    });
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    support::mark_start();
    benches();
    Criterion::default().configure_from_args().final_summary();
    support::print_ratios(
        "control",
        &[
            ("snapshot_unix", "raw_pingpong_same_size"),
            ("tarpc_blob_unix", "raw_pingpong_same_size"),
            ("snapshot_wire_unix", "tarpc_blob_unix"),
            ("snapshot_unix", "snapshot_wire_unix"),
            ("snapshot_tcp", "raw_pingpong_tcp_same_size"),
        ],
    );
}
