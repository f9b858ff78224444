//! The control plane's cost, measured in one run beside a baseline.
//!
//! - `control/snapshot_unix`: one `snapshot` call through `ControlClient`,
//!   tarpc, the bincode codec and the Unix socket, answered by a real
//!   supervisor (a no-op service, running).
//! - `control/raw_pingpong_same_size`: the baseline — a raw Unix-socket
//!   ping-pong of length-prefixed frames of the same sizes (the request's
//!   and the answer's), with an echo task that does nothing else. The gap
//!   between the two is what tarpc, bincode and the JSON snapshot cost.
//! - `control/16_clients`: 16 clients on their own connections, 100
//!   `snapshot` calls each, concurrently; throughput in calls/s.
//!
//! Run: `cargo bench --bench control`.

use std::sync::Arc;
use std::time::Duration;

use bincode::Options;
mod support;

use support::{Noop, empty_source};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use steadfast::control::codec::options;
use steadfast::control::{ControlClient, serve_unix};
use steadfast::protocol::control::{ControlRefusal, WireSnapshot};
use steadfast::{ControlDir, LifecycleState, Supervisor, SupervisorConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// Echo server: read a frame, answer `answer_len` bytes.
async fn echo(listener: UnixListener, answer_len: usize) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let answer = vec![7u8; answer_len];
            let mut prefix = [0u8; 4];
            let mut buf = Vec::new();
            loop {
                if stream.read_exact(&mut prefix).await.is_err() {
                    return;
                }
                buf.resize(u32::from_be_bytes(prefix) as usize, 0);
                if stream.read_exact(&mut buf).await.is_err() {
                    return;
                }
                let len = u32::try_from(answer.len()).unwrap_or(u32::MAX);
                if stream.write_all(&len.to_be_bytes()).await.is_err()
                    || stream.write_all(&answer).await.is_err()
                {
                    return;
                }
            }
        });
    }
}

async fn ping(stream: &mut UnixStream, request: &[u8], answer: &mut Vec<u8>) {
    let len = u32::try_from(request.len()).unwrap_or(u32::MAX);
    stream.write_all(&len.to_be_bytes()).await.expect("write");
    stream.write_all(request).await.expect("write");
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.expect("read");
    answer.resize(u32::from_be_bytes(prefix) as usize, 0);
    stream.read_exact(answer).await.expect("read");
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (handle, _server, socket) = rt.block_on(async {
        let config = SupervisorConfig::new(tmp.path(), empty_source(), Arc::new(Noop));
        let (supervisor, handle) = Supervisor::new(config).expect("supervisor");
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
    let answer: Result<WireSnapshot, ControlRefusal> =
        Ok(WireSnapshot::from_snapshot(&handle.snapshot()));
    let answer_len = options().serialize(&answer).expect("encodes").len() + 16;
    let request = vec![0u8; 48];
    eprintln!("snapshot answer frame ≈ {answer_len} bytes");

    let raw_path = ControlDir::under(tmp.path()).join("raw.sock");
    let mut raw = rt.block_on(async {
        let listener = UnixListener::bind(&raw_path).expect("raw bind");
        tokio::spawn(echo(listener, answer_len));
        UnixStream::connect(&raw_path).await.expect("raw connect")
    });
    let client = rt
        .block_on(ControlClient::connect_unix(&socket))
        .expect("connects");

    let mut group = c.benchmark_group("control");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("snapshot_unix", |b| {
        b.iter(|| rt.block_on(client.snapshot()).expect("answered"));
    });
    let mut buf = Vec::new();
    group.bench_function("raw_pingpong_same_size", |b| {
        b.iter(|| rt.block_on(ping(&mut raw, &request, &mut buf)));
    });

    const CLIENTS: usize = 16;
    const CALLS: usize = 100;
    let clients: Vec<ControlClient> = rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(
                ControlClient::connect_unix(&socket)
                    .await
                    .expect("connects"),
            );
        }
        clients
    });
    group.throughput(Throughput::Elements((CLIENTS * CALLS) as u64));
    group.bench_function("16_clients", |b| {
        b.iter(|| {
            rt.block_on(async {
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
            });
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
