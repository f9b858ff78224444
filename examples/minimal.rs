//! The smallest useful embedding: a daemon whose runtime is one TCP listener
//! that greets each connection, supervised by steadfast (booted, retried with
//! backoff, held on a bad config, drained on SIGTERM, reported to systemd) and
//! driven by `steadfastctl --data-dir ./minimal-data status`.
//!
//! `cargo run --example minimal -- ./minimal-data [config.toml]`
//! (the config may set `listen_addr`; the default is `127.0.0.1:7071`).

use std::sync::Arc;

use steadfast::daemon::{DaemonOptions, run_with};
use steadfast::{Made, Plan, Service, Step, StepContext, StepError};
use steadfast::{Supervisor, SupervisorConfig, TomlFileSource};
use tokio::io::AsyncWriteExt;

/// The one step: bind `listen_addr` and greet whoever connects.
struct Greet;

impl Step for Greet {
    const NAME: &'static str = "serve";
    /// The bound address: present while the runtime holds it.
    type Output = std::net::SocketAddr;

    async fn execute(&self, cx: StepContext<'_>) -> Result<Made<Self::Output>, StepError> {
        let addr = cx.config.get("listen_addr").and_then(|v| v.as_str());
        let addr = addr.unwrap_or("127.0.0.1:7071");
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| StepError::backoff(format!("{addr}: {e}")))?;
        let bound = listener.local_addr().map_err(StepError::backoff)?;
        let stop = cx.runtime.shutdown_token();
        cx.runtime.spawn("accept", async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    Ok((mut peer, _)) = listener.accept() => { let _ = peer.write_all(b"hello\n").await; }
                }
            }
        });
        Ok(Made::new("listener", addr, bound))
    }
}

struct Hello;

impl Service for Hello {
    fn plan(&self, _config: &toml::Table) -> Plan {
        Plan::new().step(Greet)
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let data_dir = args.next().unwrap_or_else(|| "minimal-data".into());
    let declared = args.next();
    let mut source = TomlFileSource::new().defaults_toml("listen_addr = \"127.0.0.1:7071\"");
    if let Some(file) = &declared {
        source = source.declared_file(file);
    }
    let mut config = SupervisorConfig::new(&data_dir, source.into_source(), Arc::new(Hello));
    config.declared = declared.map(Into::into);
    let (supervisor, handle) = Supervisor::new(config).unwrap_or_else(|error| {
        eprintln!("minimal: {error}"); // another daemon holds the data dir, or its journal is corrupt
        std::process::exit(1)
    });
    let intent = run_with(
        supervisor,
        handle,
        DaemonOptions::new().control_socket(true),
    )
    .await
    .unwrap_or_else(|error| {
        eprintln!("minimal: {error}");
        std::process::exit(1)
    });
    std::process::exit(intent.code());
}
