//! A durable counter behind a TCP endpoint: each connection adds `step` to the count, fsyncs
//! it to `path` (a file in the data dir) and answers the new count. The config is typed
//! (`config set port many` is refused, naming the leaf); `step` applies in place, the rest
//! needs a restart. `cargo run --example counter -- DATA_DIR [FILE]` (or `--data-dir`, with
//! every flag of `steadfast::daemon::cli`).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use steadfast::Supervisor;
use steadfast::fs::{Access, File, open_in_data_dir};
use steadfast::service::Connection;
use steadfast::{ConfigChange, Plan, Resource, Runtime, Service, Step, StepContext, StepError};
use tokio::{io::AsyncWriteExt, net::TcpListener};

#[derive(serde::Deserialize)]
struct Config {
    port: u16,
    path: String,
    step: u64,
}

/// The count and its file, and the step (a config change moves it in place).
struct Counter {
    state: Mutex<(File, u64)>,
    step: AtomicU64,
}

impl Counter {
    /// Add the step, write the count over the old one (fixed width, one
    /// write: never a truncated file) and fsync it; only then is it answered.
    fn bump(&self) -> std::io::Result<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (file, count) = &mut *state;
        let next = *count + self.step.load(Ordering::SeqCst);
        file.write_all_at(format!("{next:020}\n").as_bytes(), 0)?;
        file.sync_data()?;
        *count = next;
        Ok(next)
    }
}

/// Opens (or creates, 0600, without following a link) the counter file.
struct OpenCounter;

impl Step for OpenCounter {
    const NAME: &'static str = "open_counter";
    type Config = Config;
    type Output = Arc<Counter>;
    async fn execute(
        &self,
        cx: StepContext<'_, Config>,
    ) -> Result<Resource<Arc<Counter>>, StepError> {
        let path = &cx.config.path;
        let file = open_in_data_dir(cx.data_dir, path, Access::ReadWriteCreate)
            .map_err(|e| StepError::hold(format!("{path}: {e}")))?;
        let text = std::io::read_to_string(&file).map_err(StepError::backoff)?;
        let digits = if text.is_empty() { "0" } else { text.trim() };
        let bad = |_| StepError::hold(format!("{path}: {text:?} is not a count"));
        let count = digits.parse().map_err(bad)?;
        let (state, step) = (Mutex::new((file, count)), AtomicU64::new(cx.config.step));
        let counter = Arc::new(Counter { state, step });
        Ok(Resource::new("file", path.clone(), counter))
    }
}

/// Binds `127.0.0.1:port`; every connection bumps the counter.
struct Serve;

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = Config;
    type Output = ();
    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<()>, StepError> {
        let counter = cx.runtime.get::<OpenCounter>().cloned();
        let counter = counter.ok_or_else(|| StepError::backoff("no counter"))?;
        let addr = format!("127.0.0.1:{}", cx.config.port);
        let listener = TcpListener::bind(&addr).await.map_err(StepError::backoff)?;
        // Each connection is a task of the runtime's: a drain ends it.
        cx.runtime.accept_loop(
            "accept",
            listener,
            move |mut conn: Connection<TcpListener>| {
                let answer = match counter.bump() {
                    Ok(count) => format!("{count}\n"),
                    Err(error) => format!("ERR {error}\n"),
                };
                async move {
                    let _ = conn.stream.write_all(answer.as_bytes()).await;
                }
            },
        );
        Ok(Resource::new("listener", addr, ()))
    }
}

struct App;

impl Service for App {
    type Config = Config;
    fn plan(&self, _config: &Config) -> Plan<Config> {
        Plan::new().step(OpenCounter).step(Serve)
    }

    async fn apply_config(
        &self,
        change: ConfigChange<'_, Config>,
        runtime: &mut Runtime,
    ) -> Vec<String> {
        if let Some(counter) = runtime.get::<OpenCounter>() {
            counter.step.store(change.new.step, Ordering::SeqCst);
        }
        let mut restart = change.changed.to_vec();
        restart.retain(|leaf| leaf != "step");
        restart
    }
}

fn main() {
    // The command line (`counter [DATA_DIR [FILE]]`: the operands, --data-dir, --config, the
    // control and log flags), then a runtime, the signals, the supervisor: a refused flag starts
    // no thread, a SIGTERM is a drained exit. A FILE operand that is missing holds the boot.
    steadfast::daemon::cli::launch("counter", env!("CARGO_PKG_VERSION"))
        .defaults_toml("port = 7072\npath = \"count\"\nstep = 1")
        .main(|data_dir, config| Supervisor::builder(data_dir, App).config(config))
}
