//! The smallest useful embedding: a daemon whose runtime is a store lock and
//! a TCP listener that greets each connection, supervised by steadfast —
//! booted in phases, restarted with backoff, held on a bad config, stopped
//! and exited on SIGTERM, reported to systemd when `NOTIFY_SOCKET` is set,
//! and driven by `steadfastctl --data-dir ./minimal-data status` over its
//! control socket.
//!
//! `cargo run --example minimal -- ./minimal-data [config.toml]`
//! (the config may set `listen_addr`; the default is `127.0.0.1:7071`).

use std::sync::Arc;

use steadfast::{
    BoxFuture, Checkpoint, Observation, ResourceRecord, Runtime, Service, StepContext, StepError,
    StoreLock, Supervisor, SupervisorConfig, TomlFileSource,
};
use tokio::io::AsyncWriteExt;

struct Hello;
struct Listening;

impl Service for Hello {
    fn plan(&self, _config: &toml::Table) -> Vec<String> {
        vec!["open_store".into(), "serve".into()]
    }

    fn execute<'a>(
        &'a self,
        step: &'a str,
        cx: StepContext<'a>,
    ) -> BoxFuture<'a, Result<ResourceRecord, StepError>> {
        Box::pin(async move {
            if step == "open_store" {
                cx.runtime
                    .insert(StoreLock::acquire(cx.data_dir).map_err(StepError::backoff)?);
                return Ok(ResourceRecord {
                    kind: "store".into(),
                    id: "store.lock".into(),
                    payload: vec![],
                });
            }
            let addr = cx
                .config
                .get("listen_addr")
                .and_then(|v| v.as_str())
                .unwrap_or("127.0.0.1:7071");
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| StepError::backoff(format!("{addr}: {e}")))?;
            let stop = cx.runtime.shutdown_token();
            cx.runtime.spawn("accept", async move {
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return Ok(()),
                        Ok((mut peer, _)) = listener.accept() => { let _ = peer.write_all(b"hello\n").await; }
                    }
                }
            });
            cx.runtime.insert(Listening);
            Ok(ResourceRecord {
                kind: "listener".into(),
                id: addr.into(),
                payload: vec![],
            })
        })
    }

    fn observe<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        runtime: &'a Runtime,
    ) -> BoxFuture<'a, Observation> {
        let present = match checkpoint.resource.kind.as_str() {
            "store" => runtime.get::<StoreLock>().is_some(),
            _ => runtime.get::<Listening>().is_some(),
        };
        Box::pin(async move {
            if present {
                Observation::Present
            } else {
                Observation::Gone
            }
        })
    }

    fn destroy<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        match checkpoint.resource.kind.as_str() {
            "store" => drop(runtime.remove::<StoreLock>()),
            _ => drop(runtime.remove::<Listening>()),
        }
        Box::pin(async { Ok(()) })
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let data_dir = args.next().unwrap_or_else(|| "minimal-data".into());
    let defaults = TomlFileSource::new().defaults_toml("listen_addr = \"127.0.0.1:7071\"");
    let declared = args.next();
    let source = match &declared {
        Some(file) => defaults.declared_file(file),
        None => defaults,
    };
    let mut config = SupervisorConfig::new(&data_dir, source.into_source(), Arc::new(Hello));
    config.declared = declared.map(Into::into);
    let (supervisor, handle) = Supervisor::new(config).unwrap_or_else(|error| {
        eprintln!("minimal: {error}");
        std::process::exit(1)
    });
    // Also serve the control socket, for `steadfastctl --data-dir <data_dir>`.
    let options = steadfast::daemon::DaemonOptions::new().control_socket(true);
    let intent = steadfast::daemon::run_with(supervisor, handle, options).await;
    std::process::exit(intent.code());
}
