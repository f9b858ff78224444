//! The smallest embedding: one step binds `listen_addr` and greets each connection, kept up by
//! steadfast (backoff, held on a bad config, drained on SIGTERM, logs on stderr by `RUST_LOG`).
//! `cargo run --example minimal -- DIR [FILE]`, then `steadfastctl --data-dir DIR status`.
use steadfast::service::Connection;
use steadfast::{Made, Plan, Service, Step, StepContext, StepError, Supervisor, TomlFileSource};
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
    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Made<()>, StepError> {
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
        Ok(Made::new("listener", addr.clone(), ()))
    }
}

struct Hello;

impl Service for Hello {
    type Config = Config;
    fn plan(&self, _config: &Config) -> Plan<Config> {
        Plan::new().step(Greet)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First: SIGTERM, SIGINT and SIGHUP are caught from here on, so one
    // that arrives while the supervisor is built is answered by `run` (a
    // drained exit 0), never a death after the run marker was written.
    steadfast::daemon::catch_signals();
    let mut args = std::env::args().skip(1);
    let Some(data_dir) = args.next() else {
        // A bad command line: a restart would only repeat it.
        eprintln!("usage: minimal DATA_DIR [FILE]");
        std::process::exit(steadfast::daemon::EXIT_NEVER_WORKS);
    };
    let mut config = TomlFileSource::new().defaults_toml("listen_addr = \"127.0.0.1:7071\"");
    if let Some(file) = args.next() {
        config = config.declared_file(file);
    }
    let builder = Supervisor::builder(data_dir, Hello).config(config);
    // Each way of not starting exits with the code that tells a service
    // manager whether a restart can help (`spec/exit-codes.md`).
    let (supervisor, handle) = builder.build().unwrap_or_else(|error| {
        eprintln!("minimal: {error}");
        std::process::exit(error.exit_code())
    });
    match steadfast::daemon::run(supervisor, handle).await {
        Ok(ended) => std::process::exit(ended.code()),
        Err(error) => {
            eprintln!("minimal: {error}");
            std::process::exit(error.exit_code())
        }
    }
}
