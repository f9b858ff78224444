//! The smallest embedding: one step binds `listen_addr` and greets each connection, kept up by
//! steadfast (backoff, held on a bad config, drained on SIGTERM, logs on stderr by `RUST_LOG`).
//! `cargo run --example minimal -- --data-dir DIR [--config FILE]` (every flag of
//! `steadfast::daemon::cli`), then `steadfastctl --data-dir DIR status`.
use steadfast::service::Connection;
use steadfast::{Plan, Resource, Service, Step, StepContext, StepError, Supervisor};
use tokio::{io::AsyncWriteExt, net::TcpListener};

#[derive(serde::Deserialize)]
struct Config {
    listen_addr: String,
}

struct Greet;

impl Step for Greet {
    const NAME: &'static str = "serve";
    type Config = Config;
    type Output = ();
    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<()>, StepError> {
        let addr = &cx.config.listen_addr;
        let listener = TcpListener::bind(addr).await.map_err(StepError::backoff)?;
        // Each connection is a task of the runtime's: a drain ends it.
        cx.runtime.accept_loop(
            "accept",
            listener,
            |mut conn: Connection<TcpListener>| async move {
                let _ = conn.stream.write_all(b"hello\n").await;
            },
        );
        Ok(Resource::new("listener", addr.clone(), ()))
    }
}

struct Hello;

impl Service for Hello {
    type Config = Config;
    fn plan(&self, _config: &Config) -> Plan<Config> {
        Plan::new().step(Greet)
    }
}

fn main() {
    // The command line (--data-dir, --config, the control and log flags), then a runtime,
    // the signals, the supervisor: a refused flag starts no thread, a SIGTERM is a drained exit.
    steadfast::daemon::cli::launch("minimal", env!("CARGO_PKG_VERSION"))
        .defaults_toml("listen_addr = \"127.0.0.1:7071\"")
        .current_thread() // one step binding a port: no worker threads to start
        .main(|data_dir, config| Supervisor::builder(data_dir, Hello).config(config))
}
