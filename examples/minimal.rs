//! The smallest embedding: one step binds `listen_addr` and greets each connection, kept up by
//! steadfast (backoff, held on a bad config, drained on SIGTERM, logs on stderr by `RUST_LOG`).
//! `cargo run --example minimal -- DIR [FILE]` (or `--data-dir DIR`, with every flag of
//! `steadfast::daemon::cli`), then `steadfastctl --data-dir DIR status`.
use steadfast::service::Connection;
use steadfast::{Made, Plan, Service, Step, StepContext, StepError, Supervisor};
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

/// `minimal [DATA_DIR [FILE]]` and steadfast's daemon flags (`--data-dir`,
/// `--config`, `--control-tcp`, …).
#[derive(clap::Parser)]
#[command(name = "minimal")]
struct Cli {
    #[command(flatten)]
    daemon: steadfast::daemon::cli::DaemonArgs,
    /// The data directory (as --data-dir; one or the other).
    #[arg(value_name = "DATA_DIR", conflicts_with = "data_dir")]
    dir: Option<std::path::PathBuf>,
    /// A config file, watched (a missing one holds the boot until it
    /// appears).
    #[arg(value_name = "FILE")]
    file: Option<std::path::PathBuf>,
}

fn main() {
    // The command line first, before any thread: a refused one (or `--help`)
    // exits having started none.
    let mut cli: Cli = steadfast::daemon::cli::parse(env!("CARGO_PKG_VERSION"));
    cli.daemon.data_dir = cli.daemon.data_dir.or(cli.dir);
    let launch = cli.daemon.launch("minimal").positional_config(cli.file);
    let launch = launch.defaults_toml("listen_addr = \"127.0.0.1:7071\"");
    let prepared = launch
        .prepare()
        .unwrap_or_else(|error| steadfast::daemon::cli::exit("minimal", Err(error)));
    // One step that binds a port: the whole daemon runs on this thread
    // (README "Performance": a current-thread runtime starts no workers,
    // and the launch waits on no thread being scheduled).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| {
            eprintln!("minimal: no tokio runtime: {error}");
            std::process::exit(steadfast::daemon::EXIT_START_FAILED)
        });
    let ended = runtime.block_on(async {
        // Before the supervisor is built: SIGTERM, SIGINT and SIGHUP are
        // answered by `run` (a drained exit 0), never a death after the
        // run marker was written.
        steadfast::daemon::catch_signals();
        prepared
            .start(|data_dir, config| Supervisor::builder(data_dir, Hello).config(config))?
            .run()
            .await
    });
    steadfast::daemon::cli::exit("minimal", ended)
}
